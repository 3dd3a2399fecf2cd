//! The validated machine every other module builds from ([`VmConfig`]):
//! its console, RAM pages and command line defaults.

use std::path::PathBuf;

use super::MachineSpec;

/// Where guest console output goes and where guest input comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ConsoleMode {
    /// The terminal: stdout and stdin.
    #[default]
    Stdio,
    /// A file (input disabled).
    File(PathBuf),
    /// The terminal, and a copy of the output in a file.
    StdioAndFile(PathBuf),
    /// Discarded.
    Null,
}

impl ConsoleMode {
    /// The mode for "show it on the terminal" and "keep it in this file".
    pub fn from_choice(terminal: bool, file: Option<PathBuf>) -> Self {
        match (terminal, file) {
            (true, None) => Self::Stdio,
            (true, Some(p)) => Self::StdioAndFile(p),
            (false, Some(p)) => Self::File(p),
            (false, None) => Self::Null,
        }
    }

    /// True when guest input comes from the terminal.
    pub fn uses_terminal(&self) -> bool {
        matches!(self, Self::Stdio | Self::StdioAndFile(_))
    }

    /// The file the output is written to, if any.
    pub fn file(&self) -> Option<&PathBuf> {
        match self {
            Self::File(p) | Self::StdioAndFile(p) => Some(p),
            Self::Stdio | Self::Null => None,
        }
    }
}

/// A validated description of the VM to build: the machine and what it boots.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VmConfig {
    /// vCPUs, RAM, devices and host placement.
    pub machine: MachineSpec,
    /// Kernel image (ELF vmlinux or bzImage).
    pub kernel: PathBuf,
    /// Optional initrd.
    pub initrd: Option<PathBuf>,
    /// Extra initrd bytes appended after the initrd (e.g. a job archive).
    /// Not in the JSON form: megabytes of modules would be a number per byte
    /// (`vmm::launch` carries them raw, beside the JSON).
    #[serde(skip)]
    pub initrd_append: Vec<u8>,
    /// Kernel command line.
    pub cmdline: String,
    /// Console (COM1).
    pub console: ConsoleMode,
    /// Where COM2 output goes (`None` → discarded).
    pub channel: Option<PathBuf>,
}

/// Default kernel command line for `pmemvm boot`. `swiotlb=noforce`: the
/// SRAT names memory above 4 GiB (the NVDIMMs), so Linux would reserve and
/// zero a 64 MiB bounce buffer that no device of pmemvm's needs (virtio
/// devices and NVDIMMs address all memory) — 12 % of a 512 MiB guest, and
/// minutes of early boot where guest kernel code is emulated (PVM).
pub const DEFAULT_CMDLINE: &str = "console=ttyS0 reboot=acpi panic=-1 swiotlb=noforce";
/// Default RAM size.
pub const DEFAULT_MEMORY: u64 = 512 << 20;

/// A command line with `--append` words added, one space apart.
pub fn join_cmdline(base: &str, append: &[String]) -> String {
    let mut line = base.to_string();
    for extra in append.iter().map(|a| a.trim()).filter(|a| !a.is_empty()) {
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(extra);
    }
    line
}

/// Which pages back guest RAM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RamPages {
    /// Anonymous memory, the kernel's THP default.
    #[default]
    Default,
    /// Anonymous memory with `MADV_HUGEPAGE`.
    Thp,
    /// hugetlb pages (`MAP_HUGETLB`), reserved when mapped.
    Hugetlb,
}
