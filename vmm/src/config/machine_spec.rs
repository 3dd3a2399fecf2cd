//! The one description of a machine that every layer passes on: what the
//! guest sees (vCPUs, RAM and the pages behind it, NVDIMMs, virtio disks,
//! legacy persistent memory) and where the host places it ([`MachineSpec`]),
//! and what it boots as the user asked for it ([`BootFiles`]). The command
//! line builds them once; the lab's requests embed them, a bench's child
//! process and the nested L1 receive them serialized, and [`VmConfig`]
//! (`super::VmConfig`) is made of a `MachineSpec` and the resolved boot files.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{CxlPmemSpec, DiskSpec, LegacyPmemSpec, NvdimmSpec, RamPages};
use crate::memory::hugepages::MemorySpec;
use crate::memory::placement::Placement;

/// The machine: vCPUs, RAM, devices and host placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineSpec {
    /// vCPUs.
    pub cpus: u8,
    /// Guest RAM in bytes.
    pub memory: u64,
    /// Which pages back guest RAM (`--memory SIZE,hugepages|thp`).
    #[serde(default)]
    pub ram_pages: RamPages,
    /// vCPU pinning and host NUMA binding (`--pin`, `--host-node`).
    #[serde(default)]
    pub placement: Placement,
    /// NVDIMMs in order.
    #[serde(default)]
    pub nvdimms: Vec<NvdimmSpec>,
    /// virtio disks in order (`/dev/vda`, `/dev/vdb`, ...).
    #[serde(default)]
    pub disks: Vec<DiskSpec>,
    /// Legacy persistent-memory ranges (E820 type 12, `--pmem-legacy`), in order.
    #[serde(default)]
    pub legacy_pmem: Vec<LegacyPmemSpec>,
    /// NVDIMM slots (`--nvdimm-slots`): the DIMMs given plus empty slots a
    /// DIMM can be hot-added into while the guest runs (`pmemvm ctl SOCKET
    /// nvdimm add`); 0: as many as `nvdimms`.
    #[serde(default)]
    pub nvdimm_slots: usize,
    /// CXL persistent-memory devices (`--cxl-pmem`), in order.
    #[serde(default)]
    pub cxl_pmem: Vec<CxlPmemSpec>,
}

impl Default for MachineSpec {
    fn default() -> Self {
        Self {
            cpus: 1,
            memory: super::DEFAULT_MEMORY,
            ram_pages: RamPages::Default,
            placement: Placement::default(),
            nvdimms: Vec::new(),
            disks: Vec::new(),
            legacy_pmem: Vec::new(),
            nvdimm_slots: 0,
            cxl_pmem: Vec::new(),
        }
    }
}

impl MachineSpec {
    /// RAM as `--memory` gives it: size and pages.
    pub fn memory_spec(&self) -> MemorySpec {
        MemorySpec {
            size: self.memory,
            pages: self.ram_pages,
        }
    }

    /// NVDIMM slots in all: `nvdimm_slots`, at least one per DIMM given.
    pub fn slots(&self) -> usize {
        self.nvdimm_slots.max(self.nvdimms.len())
    }

    /// The command-line words that describe this machine to `pmemvm boot`
    /// and `pmemvm run` (`--cpus`, `--memory`, `--pin`, `--host-node`, one
    /// `--nvdimm`, `--disk` and `--pmem-legacy` each), every value printed by
    /// its spec type's `Display`, which parses back to the same spec.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--cpus".to_string(),
            self.cpus.to_string(),
            "--memory".to_string(),
            self.memory_spec().to_string(),
        ];
        if !self.placement.pin_text.is_empty() {
            args.extend(["--pin".to_string(), self.placement.pin_text.clone()]);
        }
        if let Some(node) = self.placement.host_node {
            args.extend(["--host-node".to_string(), node.to_string()]);
        }
        let each = |flag: &str, values: Vec<String>| {
            values
                .into_iter()
                .flat_map(|v| [flag.to_string(), v])
                .collect::<Vec<_>>()
        };
        args.extend(each(
            "--nvdimm",
            self.nvdimms.iter().map(ToString::to_string).collect(),
        ));
        args.extend(each(
            "--disk",
            self.disks.iter().map(ToString::to_string).collect(),
        ));
        args.extend(each(
            "--pmem-legacy",
            self.legacy_pmem.iter().map(ToString::to_string).collect(),
        ));
        if self.nvdimm_slots > 0 {
            args.extend(["--nvdimm-slots".to_string(), self.nvdimm_slots.to_string()]);
        }
        args.extend(each(
            "--cxl-pmem",
            self.cxl_pmem.iter().map(ToString::to_string).collect(),
        ));
        args
    }
}

/// What a machine boots, as the user gave it: files not yet resolved
/// (`None` kernel or initrd: the guest image's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootFiles {
    /// Kernel (ELF vmlinux or bzImage); `None`: the guest image's.
    pub kernel: Option<PathBuf>,
    /// Initrd; `None`: the guest image's (when the kernel is too).
    pub initrd: Option<PathBuf>,
    /// The kernel's modules (`--modules DIR`), packed into the initrd.
    #[serde(default)]
    pub modules: Option<PathBuf>,
    /// The whole command line (`--cmdline`); `None`: the default.
    pub cmdline: Option<String>,
    /// Words appended to the command line (`--append`), in order.
    #[serde(default)]
    pub append: Vec<String>,
}

impl BootFiles {
    /// Whether it boots Linux: the guest image's (no kernel), or a kernel
    /// file that looks like one (ELF vmlinux or bzImage; a tiny test
    /// payload does not).
    pub fn boots_linux(&self) -> bool {
        self.kernel
            .as_deref()
            .is_none_or(crate::boot::looks_like_linux)
    }

    /// The kernel command line: `cmdline` or `default`, then the appended words.
    pub fn cmdline_or(&self, default: &str) -> String {
        super::join_cmdline(self.cmdline.as_deref().unwrap_or(default), &self.append)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> MachineSpec {
        MachineSpec {
            cpus: 4,
            memory: 3 << 30,
            ram_pages: RamPages::Hugetlb,
            placement: Placement::parse(Some("2-5"), Some(1)).unwrap(),
            nvdimms: vec![
                "4G,file=/tmp/a b.img,label-size=0".parse().unwrap(),
                "1G,badblocks=4096+512".parse().unwrap(),
            ],
            disks: vec!["/tmp/root.img,readonly".parse().unwrap()],
            legacy_pmem: vec!["256M,file=/tmp/legacy.img".parse().unwrap()],
            nvdimm_slots: 4,
            cxl_pmem: vec!["512M,file=/tmp/c.img,label-size=256K".parse().unwrap()],
        }
    }

    /// Parses the words `to_args` gave back the way the command line does.
    fn parse_args(args: &[String]) -> MachineSpec {
        let mut m = MachineSpec {
            cpus: 0,
            ..MachineSpec::default()
        };
        let (mut pin, mut node) = (None, None);
        for pair in args.chunks(2) {
            let (flag, value) = (pair[0].as_str(), pair[1].as_str());
            match flag {
                "--cpus" => m.cpus = value.parse().unwrap(),
                "--memory" => {
                    let s: MemorySpec = value.parse().unwrap();
                    (m.memory, m.ram_pages) = (s.size, s.pages);
                }
                "--pin" => pin = Some(value.to_string()),
                "--host-node" => node = Some(value.parse().unwrap()),
                "--nvdimm" => m.nvdimms.push(value.parse().unwrap()),
                "--disk" => m.disks.push(value.parse().unwrap()),
                "--pmem-legacy" => m.legacy_pmem.push(value.parse().unwrap()),
                "--nvdimm-slots" => m.nvdimm_slots = value.parse().unwrap(),
                "--cxl-pmem" => m.cxl_pmem.push(value.parse().unwrap()),
                other => panic!("unexpected flag {other}"),
            }
        }
        m.placement = Placement::parse(pin.as_deref(), node).unwrap();
        m
    }

    #[test]
    fn the_machines_words_parse_back_to_the_same_machine() {
        let m = machine();
        let args = m.to_args();
        assert_eq!(parse_args(&args), m, "{args:?}");
        let plain = MachineSpec::default();
        assert_eq!(plain.to_args(), ["--cpus", "1", "--memory", "536870912"]);
        assert_eq!(parse_args(&plain.to_args()), plain);
    }

    #[test]
    fn the_machine_survives_serialisation() {
        let m = machine();
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<MachineSpec>(&json).unwrap(), m);
        // Only cpus and memory are needed; the rest defaults.
        let bare: MachineSpec = serde_json::from_str(r#"{"cpus":2,"memory":1024}"#).unwrap();
        assert_eq!((bare.cpus, bare.nvdimms.len()), (2, 0));
    }

    #[test]
    fn the_guest_images_kernel_is_linux_and_a_payload_is_not() {
        assert!(BootFiles::default().boots_linux());
        let payload =
            std::env::temp_dir().join(format!("pmemvm-payload-{}.bin", std::process::id()));
        std::fs::write(&payload, b"not a kernel").unwrap();
        let b = BootFiles {
            kernel: Some(payload.clone()),
            ..BootFiles::default()
        };
        assert!(!b.boots_linux());
        std::fs::remove_file(&payload).unwrap();
    }

    #[test]
    fn boot_files_join_the_command_line() {
        let b = BootFiles {
            append: vec!["nd_pmem.nowait=0".into(), " ".into()],
            ..BootFiles::default()
        };
        assert_eq!(
            b.cmdline_or("console=ttyS0"),
            "console=ttyS0 nd_pmem.nowait=0"
        );
        let b = BootFiles {
            cmdline: Some("quiet".into()),
            ..b
        };
        assert_eq!(b.cmdline_or("console=ttyS0"), "quiet nd_pmem.nowait=0");
    }
}
