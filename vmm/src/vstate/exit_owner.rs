//! Names the device behind an exit's port or address, with the host file its
//! handler works on, so a vCPU stuck in pmemvm is described as "NVDIMM 1's
//! flush hint: fdatasync of /data/pmem1.img" rather than a bare address.

use crate::layout;
use crate::vstate::vcpu_status::Exit;

/// Port and MMIO ranges of the machine's devices, each with a sentence.
#[derive(Debug, Default, Clone)]
pub struct ExitOwners {
    ports: Vec<(u64, u64, String)>,
    mmio: Vec<(u64, u64, String)>,
}

impl ExitOwners {
    /// The owners of a machine with these NVDIMM files (in NFIT order) and
    /// virtio disk files (in attach order).
    pub fn new(dimm_files: &[String], disk_files: &[String]) -> Self {
        let mut ports = vec![
            (
                u64::from(layout::COM1_PORT),
                u64::from(layout::SERIAL_PORT_SIZE),
                "the console's serial port (COM1)".to_owned(),
            ),
            (
                u64::from(layout::COM2_PORT),
                u64::from(layout::SERIAL_PORT_SIZE),
                "the data channel's serial port (COM2)".to_owned(),
            ),
            (
                u64::from(layout::GUEST_EXIT_PORT),
                1,
                "the guest-exit port".to_owned(),
            ),
        ];
        if !dimm_files.is_empty() {
            ports.push((
                u64::from(layout::NVDIMM_DSM_PORT),
                4,
                format!(
                    "the NVDIMM _DSM doorbell: a label area read or write, or a health call, \
                     on one of {}",
                    dimm_files.join(", ")
                ),
            ));
            ports.push((
                u64::from(layout::PLATFORM_EVENT_PORT),
                4,
                "the platform event register: the guest's ACPI reads which notification the \
                 control socket sent (media errors, a DIMM's health)"
                    .to_owned(),
            ));
        }
        let mut mmio = Vec::new();
        for (i, file) in (0u64..).zip(dimm_files) {
            mmio.push((
                layout::NVDIMM_FLUSH_HINT_START.0 + i * layout::NVDIMM_FLUSH_HINT_SIZE,
                layout::NVDIMM_FLUSH_HINT_SIZE,
                format!("NVDIMM {i}'s flush hint: fdatasync of {file}"),
            ));
        }
        for (i, file) in (0u64..).zip(disk_files) {
            mmio.push((
                layout::VIRTIO_MMIO_START.0 + i * 0x1000,
                0x1000,
                format!("virtio disk {i}: a request (read, write or fdatasync) on {file}"),
            ));
        }
        Self { ports, mmio }
    }

    /// The sentence for an exit at `addr`, if a device owns it.
    pub fn name(&self, exit: Exit, addr: u64) -> Option<String> {
        let ranges = match exit {
            Exit::PortIn | Exit::PortOut => &self.ports,
            Exit::MmioRead | Exit::MmioWrite => &self.mmio,
            Exit::Other | Exit::Parked => return None,
        };
        ranges
            .iter()
            .find(|(base, len, _)| addr >= *base && addr - base < *len)
            .map(|(_, _, text)| text.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_hints_disks_and_ports_name_their_files() {
        let o = ExitOwners::new(
            &["/d/a.img".into(), "/d/b.img".into()],
            &["/d/root.img".into()],
        );
        let hint1 = layout::NVDIMM_FLUSH_HINT_START.0 + layout::NVDIMM_FLUSH_HINT_SIZE + 8;
        assert_eq!(
            o.name(Exit::MmioWrite, hint1).as_deref(),
            Some("NVDIMM 1's flush hint: fdatasync of /d/b.img")
        );
        // Past the last DIMM's page: nobody's.
        let hint2 = layout::NVDIMM_FLUSH_HINT_START.0 + 2 * layout::NVDIMM_FLUSH_HINT_SIZE;
        assert_eq!(o.name(Exit::MmioWrite, hint2), None);
        assert!(o
            .name(Exit::MmioWrite, layout::VIRTIO_MMIO_START.0 + 0x50)
            .is_some_and(|s| s.contains("virtio disk 0") && s.contains("/d/root.img")));
        assert_eq!(
            o.name(Exit::MmioWrite, layout::VIRTIO_MMIO_START.0 + 0x1000),
            None
        );
        assert!(o
            .name(Exit::PortOut, u64::from(layout::NVDIMM_DSM_PORT))
            .is_some_and(|s| s.contains("_DSM") && s.contains("/d/a.img, /d/b.img")));
        // A port number is not an MMIO address.
        assert_eq!(
            o.name(Exit::MmioWrite, u64::from(layout::NVDIMM_DSM_PORT)),
            None
        );
        assert!(o
            .name(Exit::PortIn, u64::from(layout::COM1_PORT) + 5)
            .is_some_and(|s| s.contains("COM1")));
        assert_eq!(o.name(Exit::Other, 0), None);
    }

    #[test]
    fn without_dimms_there_is_no_doorbell() {
        let o = ExitOwners::new(&[], &[]);
        assert_eq!(
            o.name(Exit::PortOut, u64::from(layout::NVDIMM_DSM_PORT)),
            None
        );
    }
}
