//! What the user asked for: sizes with QEMU-style suffixes, `--nvdimm` specs
//! and the validated [`VmConfig`] every other module works from.

pub mod badblocks;
pub mod cxl_pmem;
pub use cxl_pmem::{CxlPmemError, CxlPmemSpec};
pub mod disk;

pub use disk::{DiskSpec, DiskSpecError};
pub mod legacy_pmem;

pub use legacy_pmem::{LegacyPmemError, LegacyPmemSpec};
mod machine;
mod machine_spec;
mod spec_text;
pub use machine::{join_cmdline, ConsoleMode, RamPages, VmConfig, DEFAULT_CMDLINE, DEFAULT_MEMORY};
pub use machine_spec::{BootFiles, MachineSpec};

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
    /// An `--nvdimm` size that is not a multiple of 16 MiB.
    #[error("--nvdimm size '{value}' is not a multiple of 16 MiB (the guest's persistent-memory region is exactly SIZE, and Linux aligns regions to 16 MiB); {nearest}")]
    RegionSize {
        /// The text the user gave.
        value: String,
        /// "the nearest valid sizes are 992M and 1008M".
        nearest: String,
    },
    /// An `--nvdimm` option this version does not know.
    #[error("--nvdimm option '{0}' is not known; accepted: SIZE[,file=PATH][,readonly][,label-size=SIZE][,prealloc][,hugepages][,node=N][,badblocks=OFFSET+LEN[:OFFSET+LEN...]][,record=DIR][,mce=on|off]")]
    NvdimmOption(String),
    /// An `--nvdimm` option given twice.
    #[error("--nvdimm option '{0}' is given more than once")]
    NvdimmDuplicate(String),
    /// An `--nvdimm` `file=` with an empty path.
    #[error("--nvdimm file= needs a path, got an empty one")]
    EmptyPath,
    /// An `--nvdimm` `record=` with an empty path.
    #[error("--nvdimm record= needs a directory, got an empty path")]
    EmptyRecord,
    /// `record=` on a read-only DIMM.
    #[error("--nvdimm record= needs a writable DIMM: with readonly the guest can store nothing to record; drop one of them")]
    RecordReadOnly,
    /// A label area that does not fit or is misaligned.
    #[error("--nvdimm label-size={value} is not valid: {why}")]
    LabelSize {
        /// The text the user gave.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A `node=` that is not a number in range.
    #[error("--nvdimm node={0} is not valid; use a guest NUMA node number from 0 to {MAX_NODE}")]
    Node(String),
    /// Guest NUMA nodes with a gap (Linux numbers nodes densely in SRAT order).
    #[error("--nvdimm node={used} leaves guest NUMA node {missing} without CPUs or NVDIMMs; nodes must be numbered without gaps, so use node numbers from 0 to {max_ok}")]
    NodeGap {
        /// The highest node named.
        used: u32,
        /// The first node number nobody uses.
        missing: u32,
        /// The highest node number that keeps the numbering dense.
        max_ok: u32,
    },
    /// A `badblocks=` list that cannot be parsed or does not fit the region.
    #[error("--nvdimm badblocks={value} is not valid: {why}; use OFFSET+LEN[:OFFSET+LEN...] in bytes from the start of the region, each a multiple of 512 with an optional K, M, G suffix (e.g. badblocks=1M+4K:8M+512)")]
    BadBlocks {
        /// The text the user gave.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// `mce=` with a value other than on/off.
    #[error("--nvdimm mce={0} is not valid; use mce=on (a load from a bad range is a machine check in the guest) or mce=off")]
    Mce(String),
    /// `mce=on` with an option it cannot work with.
    #[error("--nvdimm mce=on cannot be combined with {0}: {why}; drop one of them", why = mce_conflict_why(.0))]
    MceWith(&'static str),
    /// `hugepages` together with `file=`.
    #[error("--nvdimm hugepages makes a temporary DIMM in hugetlb pages and cannot be combined with file=; for a named file with 2 MiB pages put it on a tmpfs mounted with -o huge=always")]
    HugepagesWithFile,
    /// More DIMMs without `node=` than node numbers left.
    #[error("the --nvdimm options need more than {MAX_NODE} guest NUMA nodes; give some DIMMs a shared node=N")]
    TooManyNodes,
}

/// Highest guest NUMA node (proximity domain) a DIMM can be placed in:
/// Linux maps at most 256 proximity domains (`MAX_PXM_DOMAINS`).
pub const MAX_NODE: u32 = 255;

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
///
/// Geometry (see docs/nvdimm.md): the guest's persistent-memory region is
/// exactly `size` bytes (a multiple of [`layout::NVDIMM_REGION_ALIGN`]);
/// the backing file holds the region at offset 0, then the label area,
/// then pmemvm's identity block — `size + label_size + 4 KiB` bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NvdimmSpec {
    /// Size of the guest's persistent-memory region in bytes.
    pub size: u64,
    /// The size text, for messages.
    pub size_text: String,
    /// Backing file; `None` → a temporary file removed at exit.
    pub file: Option<PathBuf>,
    /// Map read-only (the region is "not armed" for the guest).
    pub readonly: bool,
    /// Bytes of label storage after the region (0 = label-less).
    pub label_size: u64,
    /// Allocate the whole file up front (fallocate).
    pub prealloc: bool,
    /// A temporary DIMM in hugetlb pages (`hugepages`; needs `label-size=0`).
    pub hugepages: bool,
    /// Guest NUMA node given with `node=`; `None` = the next node of its own.
    pub node: Option<u32>,
    /// Bad ranges to add with `badblocks=`: (offset from the region start, length).
    pub badblocks: Vec<(u64, u64)>,
    /// Record every guest flush into this directory (`record=`; [`crate::nvdimm::record`]).
    #[serde(default)]
    pub record: Option<PathBuf>,
    /// A guest load from a bad range is a machine check (`mce=on`; [`crate::nvdimm::mce`]).
    #[serde(default)]
    pub mce: bool,
}

impl NvdimmSpec {
    /// A temporary DIMM of `size` bytes without labels (for bench plans).
    pub fn temporary(size: u64) -> Self {
        Self {
            size,
            size_text: size.to_string(),
            file: None,
            readonly: false,
            label_size: 0,
            prealloc: false,
            hugepages: false,
            node: None,
            badblocks: Vec::new(),
            record: None,
            mce: false,
        }
    }

    /// Length of the persistent-memory range the guest sees: exactly `size`.
    pub fn spa_size(&self) -> u64 {
        self.size
    }

    /// Offset of the label area in the backing file (right after the region).
    pub fn label_offset(&self) -> u64 {
        self.size
    }

    /// Offset of pmemvm's identity block in the backing file (after the labels).
    pub fn identity_offset(&self) -> u64 {
        self.size + self.label_size
    }

    /// Length of the backing file: region + label area + identity block.
    pub fn file_len(&self) -> u64 {
        self.identity_offset() + layout::NVDIMM_IDENTITY_SIZE
    }
}

/// A size in the largest binary unit that divides it ("1008M", "2G", "4096").
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "T"), (30, "G"), (20, "M"), (10, "K")];
    for (shift, unit) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// The phrase naming the valid region sizes nearest to `bytes`.
pub(crate) fn nearest_region_sizes(bytes: u64) -> String {
    nearest_sizes(bytes, layout::NVDIMM_REGION_ALIGN)
}

/// The phrase naming the multiples of `align` nearest to `bytes` (`align` > 0).
pub(crate) fn nearest_sizes(bytes: u64, align: u64) -> String {
    let below = bytes - bytes % align;
    let above = below.checked_add(align);
    match (below, above) {
        (0, Some(a)) => format!("the smallest valid size is {}", size_text(a)),
        (b, Some(a)) => format!(
            "the nearest valid sizes are {} and {}",
            size_text(b),
            size_text(a)
        ),
        (b, None) => format!("the nearest valid size is {}", size_text(b)),
    }
}

fn mce_conflict_why(other: &str) -> &'static str {
    match other {
        "record=" => "the recorder's dirty log follows one memory slot per DIMM, and mce=on splits it around bad pages",
        _ => "pmemvm serves the good bytes of a poisoned page with write(2), which hugetlbfs does not have",
    }
}

fn parse_node(text: &str) -> Result<u32, ConfigError> {
    match text.trim().parse::<u32>() {
        Ok(n) if n <= MAX_NODE && text == text.trim() => Ok(n),
        _ => Err(ConfigError::Node(text.to_string())),
    }
}

/// The keys `--nvdimm SIZE,KEY[=VALUE],...` accepts, each with a value it
/// takes (empty: a flag) — for help texts and their test.
pub const NVDIMM_KEYS: &[(&str, &str)] = &[
    ("file", "/tmp/pmemvm-keys.img"),
    ("readonly", ""),
    ("label-size", "0"),
    ("prealloc", ""),
    ("hugepages", ""),
    ("node", "1"),
    ("badblocks", "0+512"),
    ("record", "/tmp/pmemvm-keys-rec"),
    ("mce", "on"),
];

impl std::str::FromStr for NvdimmSpec {
    type Err = ConfigError;

    fn from_str(spec: &str) -> Result<Self, ConfigError> {
        let mut parts = spec.split(',');
        let size_text = parts.next().unwrap_or_default().to_string();
        let size = parse_size(&size_text)?;
        if size % layout::NVDIMM_REGION_ALIGN != 0 {
            return Err(ConfigError::RegionSize {
                nearest: nearest_region_sizes(size),
                value: size_text,
            });
        }
        let mut out = NvdimmSpec {
            size_text,
            label_size: layout::NVDIMM_DEFAULT_LABEL_SIZE,
            ..NvdimmSpec::temporary(size)
        };
        let options =
            spec_options(parts).map_err(|key| ConfigError::NvdimmDuplicate(key.to_string()))?;
        for (key, value, part) in options {
            match (key, value) {
                ("file", Some("")) => return Err(ConfigError::EmptyPath),
                ("file", Some(v)) => out.file = Some(PathBuf::from(v)),
                ("readonly", None) => out.readonly = true,
                ("prealloc", None) => out.prealloc = true,
                ("hugepages", None) => out.hugepages = true,
                ("label-size", Some(v)) => out.label_size = parse_label_size(v)?,
                ("node", Some(v)) => out.node = Some(parse_node(v)?),
                ("badblocks", Some(v)) => out.badblocks = badblocks::parse_badblocks(v, size)?,
                ("record", Some("")) => return Err(ConfigError::EmptyRecord),
                ("record", Some(v)) => out.record = Some(PathBuf::from(v)),
                ("mce", Some("on")) => out.mce = true,
                ("mce", Some("off")) => out.mce = false,
                ("mce", Some(v)) => return Err(ConfigError::Mce(v.to_string())),
                _ => return Err(ConfigError::NvdimmOption(part.to_string())),
            }
        }
        if out.hugepages && out.file.is_some() {
            return Err(ConfigError::HugepagesWithFile);
        }
        if out.readonly && out.record.is_some() {
            return Err(ConfigError::RecordReadOnly);
        }
        if out.mce && out.record.is_some() {
            return Err(ConfigError::MceWith("record="));
        }
        if out.mce && out.hugepages {
            return Err(ConfigError::MceWith("hugepages"));
        }
        if size
            .checked_add(out.label_size + layout::NVDIMM_IDENTITY_SIZE)
            .is_none()
        {
            return Err(ConfigError::Size {
                value: out.size_text,
                why: "it is too large",
            });
        }
        Ok(out)
    }
}

/// One option of a spec: (key, value, the option as typed).
type SpecOption<'a> = (&'a str, Option<&'a str>, &'a str);

/// The `KEY[=VALUE]` options after a spec's first field (`--nvdimm`,
/// `--pmem-legacy`), in order, each as (key, value, the option as typed);
/// `Err(key)` names an option given twice.
pub(crate) fn spec_options<'a>(
    parts: impl Iterator<Item = &'a str>,
) -> Result<Vec<SpecOption<'a>>, &'a str> {
    let mut out: Vec<SpecOption<'a>> = Vec::new();
    for part in parts {
        let (key, value) = match part.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (part, None),
        };
        if out.iter().any(|(k, _, _)| *k == key) {
            return Err(key);
        }
        out.push((key, value, part));
    }
    Ok(out)
}

/// The guest NUMA node of every DIMM, in order: `node=N` where given; DIMMs
/// without it get nodes of their own, the lowest numbers from 1 up that no
/// `node=` names (so by default DIMM *i* is node *i* + 1, node 0 being the
/// CPUs' and RAM's). Linux numbers nodes densely in the order the SRAT
/// names proximity domains, so a gap in the numbers is refused: node *N*
/// of the guest is then proximity domain *N* of the SRAT.
pub fn resolve_nodes(specs: &[NvdimmSpec]) -> Result<Vec<u32>, ConfigError> {
    let named: std::collections::BTreeSet<u32> = specs.iter().filter_map(|s| s.node).collect();
    let mut next = 1u32;
    let mut nodes = Vec::with_capacity(specs.len());
    for s in specs {
        let node = match s.node {
            Some(n) => n,
            None => {
                while named.contains(&next) {
                    next += 1;
                }
                if next > MAX_NODE {
                    return Err(ConfigError::TooManyNodes);
                }
                next += 1;
                next - 1
            }
        };
        nodes.push(node);
    }
    let mut used: std::collections::BTreeSet<u32> = nodes.iter().copied().collect();
    used.insert(0);
    let max = used.last().copied().unwrap_or(0);
    if let Some(missing) = (0..=max).find(|n| !used.contains(n)) {
        return Err(ConfigError::NodeGap {
            used: max,
            missing,
            max_ok: u32::try_from(used.len() - 1).unwrap_or(MAX_NODE),
        });
    }
    Ok(nodes)
}

fn parse_label_size(text: &str) -> Result<u64, ConfigError> {
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
    if n < layout::NVDIMM_DEFAULT_LABEL_SIZE {
        return Err(bad(
            "Linux needs at least 128 KiB of labels (use 0 for label-less)".into(),
        ));
    }
    if n > u64::from(u32::MAX) {
        return Err(bad("it must be below 4 GiB".into()));
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
