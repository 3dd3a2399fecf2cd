//! What the user asked for: sizes with QEMU-style suffixes, `--nvdimm` specs
//! and the validated [`VmConfig`] every other module works from.

use std::path::PathBuf;

use crate::layout;

/// Errors in command-line values. Each message names the value and what is accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A size string without digits, with a bad suffix, zero, or too large.
    #[error("size '{value}' is not valid: {why}; use a number with an optional K, M, G or T suffix (e.g. 512M, 16G)")]
    Size {
        /// The text the user gave.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A size that must be a multiple of some alignment.
    #[error("{what} '{value}' is not a multiple of {align}")]
    Alignment {
        /// Which size.
        what: &'static str,
        /// The text the user gave.
        value: String,
        /// Human-readable alignment.
        align: &'static str,
    },
    /// An `--nvdimm` option this version does not know.
    #[error("--nvdimm option '{0}' is not known; accepted: SIZE[,file=PATH][,readonly][,label-size=SIZE][,prealloc]")]
    NvdimmOption(String),
    /// An `--nvdimm` option given twice.
    #[error("--nvdimm option '{0}' is given more than once")]
    NvdimmDuplicate(String),
    /// An `--nvdimm` `file=` with an empty path.
    #[error("--nvdimm file= needs a path, got an empty one")]
    EmptyPath,
    /// A label area that does not fit or is misaligned.
    #[error("--nvdimm label-size={value} is not valid: {why}")]
    LabelSize {
        /// The text the user gave.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A DIMM too small to hold a 2 MiB-aligned range after its label area.
    #[error("--nvdimm size {size} leaves no 2 MiB-aligned persistent-memory range after its {label}-byte label area; use a larger size or label-size=0")]
    NvdimmTooSmall {
        /// The size text.
        size: String,
        /// Label bytes.
        label: u64,
    },
}

/// Parses a size such as `512M`, `16G`, `4096` (bytes) or `1.5G`-free integer
/// forms with K/M/G/T suffixes (powers of 1024; a trailing `B`/`iB` is accepted).
pub fn parse_size(text: &str) -> Result<u64, ConfigError> {
    let err = |why| ConfigError::Size {
        value: text.to_string(),
        why,
    };
    let t = text.trim();
    if t.is_empty() {
        return Err(err("it is empty"));
    }
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits_end == 0 {
        return Err(err("it does not start with a number"));
    }
    let number: u64 = t[..digits_end]
        .parse()
        .map_err(|_| err("the number is too large"))?;
    let suffix = t[digits_end..].to_ascii_uppercase();
    let shift = match suffix.trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(err("the suffix is not one of K, M, G, T")),
    };
    if shift == 0 && !suffix.is_empty() && suffix != "B" {
        return Err(err("the suffix is not one of K, M, G, T"));
    }
    let bytes = number
        .checked_mul(1u64 << shift)
        .ok_or(err("it is too large"))?;
    if bytes == 0 {
        return Err(err("it is zero"));
    }
    Ok(bytes)
}

/// One `--nvdimm` as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvdimmSpec {
    /// Size of the backing file in bytes (label area included).
    pub size: u64,
    /// The size text, for messages.
    pub size_text: String,
    /// Backing file; `None` → a temporary file removed at exit.
    pub file: Option<PathBuf>,
    /// Map read-only (the region is "not armed" for the guest).
    pub readonly: bool,
    /// Bytes of label storage at the end of the file (0 = label-less).
    pub label_size: u64,
    /// Allocate the whole file up front (fallocate).
    pub prealloc: bool,
}

impl NvdimmSpec {
    /// Length of the persistent-memory range the guest sees: the file size
    /// minus the label area, rounded down to 2 MiB.
    pub fn spa_size(&self) -> u64 {
        (self.size - self.label_size) & !(layout::NVDIMM_SIZE_ALIGN - 1)
    }

    /// Offset of the label area in the backing file.
    pub fn label_offset(&self) -> u64 {
        self.size - self.label_size
    }
}

impl std::str::FromStr for NvdimmSpec {
    type Err = ConfigError;

    fn from_str(spec: &str) -> Result<Self, ConfigError> {
        let mut parts = spec.split(',');
        let size_text = parts.next().unwrap_or_default().to_string();
        let size = parse_size(&size_text)?;
        if size % layout::NVDIMM_SIZE_ALIGN != 0 {
            return Err(ConfigError::Alignment {
                what: "--nvdimm size",
                value: size_text,
                align: "2 MiB (2M)",
            });
        }
        let mut out = NvdimmSpec {
            size,
            size_text,
            file: None,
            readonly: false,
            label_size: layout::NVDIMM_DEFAULT_LABEL_SIZE,
            prealloc: false,
        };
        let mut seen: Vec<&str> = Vec::new();
        for part in parts {
            let (key, value) = match part.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (part, None),
            };
            if seen.contains(&key) {
                return Err(ConfigError::NvdimmDuplicate(key.to_string()));
            }
            seen.push(key);
            match (key, value) {
                ("file", Some("")) => return Err(ConfigError::EmptyPath),
                ("file", Some(v)) => out.file = Some(PathBuf::from(v)),
                ("readonly", None) => out.readonly = true,
                ("prealloc", None) => out.prealloc = true,
                ("label-size", Some(v)) => out.label_size = parse_label_size(v, size)?,
                _ => return Err(ConfigError::NvdimmOption(part.to_string())),
            }
        }
        if out.label_size >= out.size || out.spa_size() == 0 {
            return Err(ConfigError::NvdimmTooSmall {
                size: out.size_text.clone(),
                label: out.label_size,
            });
        }
        Ok(out)
    }
}

fn parse_label_size(text: &str, dimm_size: u64) -> Result<u64, ConfigError> {
    let bad = |why: String| ConfigError::LabelSize {
        value: text.to_string(),
        why,
    };
    if text.trim() == "0" {
        return Ok(0);
    }
    let n = parse_size(text).map_err(|e| bad(e.to_string()))?;
    if n % 4096 != 0 {
        return Err(bad("it must be a multiple of 4 KiB (4K)".into()));
    }
    if n < 128 << 10 {
        return Err(bad(
            "Linux needs at least 128 KiB of labels (use 0 for label-less)".into(),
        ));
    }
    if n > u64::from(u32::MAX) || n >= dimm_size {
        return Err(bad(
            "it must be smaller than the DIMM and below 4 GiB".into()
        ));
    }
    Ok(n)
}

/// Where guest console output goes and where guest input comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

/// A validated description of the VM to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmConfig {
    /// Kernel image (ELF vmlinux or bzImage).
    pub kernel: PathBuf,
    /// Optional initrd.
    pub initrd: Option<PathBuf>,
    /// Extra initrd bytes appended after the initrd (e.g. a job archive).
    pub initrd_append: Vec<u8>,
    /// Kernel command line.
    pub cmdline: String,
    /// Number of vCPUs.
    pub cpus: u8,
    /// Guest RAM in bytes.
    pub memory: u64,
    /// NVDIMMs in order.
    pub nvdimms: Vec<NvdimmSpec>,
    /// Console (COM1).
    pub console: ConsoleMode,
    /// Where COM2 output goes (`None` → discarded).
    pub channel: Option<PathBuf>,
}

/// Default kernel command line for `pmemvm boot`.
pub const DEFAULT_CMDLINE: &str = "console=ttyS0 reboot=acpi panic=-1";
/// Default RAM size.
pub const DEFAULT_MEMORY: u64 = 512 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("16g"), Ok(16 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("2GB"), Ok(2 << 30));
        for bad in [
            "",
            "G",
            "0",
            "0G",
            "12X",
            "1.5G",
            "-1G",
            "99999999999999999999",
            "16777216T",
            " ",
            "1GG",
            "1 G",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("'{bad}'")), "{e}");
        }
    }

    #[test]
    fn nvdimm_specs() {
        let s: NvdimmSpec = "1G".parse().unwrap();
        assert_eq!(s.size, 1 << 30);
        assert_eq!(s.label_size, 128 << 10);
        assert_eq!(s.spa_size(), (1 << 30) - (2 << 20));
        assert_eq!(s.label_offset(), (1 << 30) - (128 << 10));
        let s: NvdimmSpec = "64M,file=/tmp/x,readonly,label-size=0,prealloc"
            .parse()
            .unwrap();
        assert_eq!(s.file, Some(PathBuf::from("/tmp/x")));
        assert!(s.readonly && s.prealloc);
        assert_eq!(s.spa_size(), 64 << 20);
        let s: NvdimmSpec = "64M,label-size=256K".parse().unwrap();
        assert_eq!(s.label_size, 256 << 10);
        for bad in [
            "1M",
            "3M",
            "0",
            "1G,file=",
            "1G,bogus",
            "1G,readonly,readonly",
            "1G,label-size=5K",
            "1G,label-size=4K",
            "2M,label-size=128K",
            "1G,label-size=2G",
            "1G,file",
            "1G,readonly=yes",
        ] {
            assert!(bad.parse::<NvdimmSpec>().is_err(), "{bad}");
        }
    }
}
