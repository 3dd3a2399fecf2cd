//! The peer engine's CXL persistent memory: QEMU's own CXL topology for each
//! `--cxl-pmem` device, as QEMU's CXL documentation builds it — a `pxb-cxl`
//! host bridge on the q35 machine's `pcie.0` (`-machine cxl=on`), a `cxl-rp`
//! root port, a `cxl-type3` device whose persistent memory is the backing
//! file and whose label storage area is a file of its own, and a fixed
//! memory window (`cxl-fmw`) of the device's size targeting that bridge —
//! the same shape as pmemvm's (one device per bridge and window), so a region
//! is made the same way on both engines. Every access to the region is
//! QEMU's to interpret (no memory slot): what the side-by-side figures show.

use std::path::PathBuf;

use vmm::config::CxlPmemSpec;

use super::{opt_escape, QemuCommand};

/// Bus number of the first `pxb-cxl` (as pmemvm's first CXL host bridge).
const FIRST_BUS: usize = 0x0c;

/// One device and the files QEMU maps for it.
#[derive(Debug)]
pub struct QemuCxlDevice<'a> {
    /// The device as given.
    pub spec: &'a CxlPmemSpec,
    /// Its persistent memory: the backing file (QEMU maps its first SIZE bytes).
    pub memory: PathBuf,
    /// Its label storage area: a file of `label-size` bytes.
    pub lsa: PathBuf,
    /// The device serial number QEMU reports.
    pub serial: u64,
}

/// The machine type of a QEMU peer with `devices`.
pub fn machine_type(devices: &[QemuCxlDevice]) -> &'static str {
    if devices.is_empty() {
        "pc,nvdimm=on"
    } else {
        "q35,nvdimm=on,cxl=on"
    }
}

/// The root bus other PCI devices (the virtio disks) must name on a machine with
/// `devices`: without one, QEMU puts a device on the last bus made, a `pxb-cxl`, which takes
/// only bridges ("Only PCI/PCIe bridges can be plugged into pxb-cxl").
pub fn root_bus(devices: &[QemuCxlDevice]) -> Option<&'static str> {
    (!devices.is_empty()).then_some("pcie.0")
}

/// Adds each device: its memory objects, host bridge, root port, Type-3
/// device and fixed memory window.
pub fn add_devices(q: &mut QemuCommand, devices: &[QemuCxlDevice]) {
    for (i, d) in devices.iter().enumerate() {
        let bus = FIRST_BUS + 4 * i;
        q.object(&format!(
            "memory-backend-file,id=cxl-mem{i},share=on,mem-path={},size={}",
            opt_escape(&d.memory.to_string_lossy()),
            d.spec.size
        ));
        q.object(&format!(
            "memory-backend-file,id=cxl-lsa{i},share=on,mem-path={},size={}",
            opt_escape(&d.lsa.to_string_lossy()),
            d.spec.label_size
        ));
        q.device(&format!("pxb-cxl,bus_nr={bus},bus=pcie.0,id=cxl.{i}"));
        q.device(&format!(
            "cxl-rp,port=0,bus=cxl.{i},id=cxl-rp{i},chassis={i},slot={}",
            i + 2
        ));
        q.device(&format!(
            "cxl-type3,bus=cxl-rp{i},memdev=cxl-mem{i},lsa=cxl-lsa{i},id=cxl-pmem{i},sn={}",
            d.serial
        ));
        q.machine(&format!(
            "cxl-fmw.{i}.targets.0=cxl.{i},cxl-fmw.{i}.size={}",
            d.spec.size
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_device_has_its_bridge_port_memory_lsa_and_window() {
        let a: CxlPmemSpec = "256M".parse().unwrap();
        let b: CxlPmemSpec = "1G,label-size=256K".parse().unwrap();
        let devices = [
            QemuCxlDevice {
                spec: &a,
                memory: "/s/cxl0.img".into(),
                lsa: "/s/cxl0.lsa".into(),
                serial: 7,
            },
            QemuCxlDevice {
                spec: &b,
                memory: "/u/a,b.img".into(),
                lsa: "/s/cxl1.lsa".into(),
                serial: 8,
            },
        ];
        assert_eq!(machine_type(&devices), "q35,nvdimm=on,cxl=on");
        assert_eq!(machine_type(&[]), "pc,nvdimm=on");
        assert_eq!(root_bus(&devices), Some("pcie.0"));
        assert_eq!(root_bus(&[]), None);
        let mut q = QemuCommand::new(
            std::path::Path::new("qemu"),
            super::super::QemuAccel::Tcg,
            "max",
        );
        add_devices(&mut q, &devices);
        let joined: Vec<String> = q
            .into_command()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = joined.join(" ");
        for want in [
            "memory-backend-file,id=cxl-mem0,share=on,mem-path=/s/cxl0.img,size=268435456",
            "memory-backend-file,id=cxl-lsa0,share=on,mem-path=/s/cxl0.lsa,size=131072",
            "-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.0",
            "-device cxl-rp,port=0,bus=cxl.0,id=cxl-rp0,chassis=0,slot=2",
            "-device cxl-type3,bus=cxl-rp0,memdev=cxl-mem0,lsa=cxl-lsa0,id=cxl-pmem0,sn=7",
            "-machine cxl-fmw.0.targets.0=cxl.0,cxl-fmw.0.size=268435456",
            "mem-path=/u/a,,b.img,size=1073741824",
            "id=cxl-lsa1,share=on,mem-path=/s/cxl1.lsa,size=262144",
            "-device pxb-cxl,bus_nr=16,bus=pcie.0,id=cxl.1",
            "-machine cxl-fmw.1.targets.0=cxl.1,cxl-fmw.1.size=1073741824",
        ] {
            assert!(joined.contains(want), "{want} not in {joined}");
        }
    }
}
