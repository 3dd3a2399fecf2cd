//! `--pmem-legacy SIZE[,file=PATH][,readonly]`: legacy persistent memory,
//! an E820 type 12 range (what `memmap=nn!ss` makes on real machines) backed
//! by a host file. Linux's `nd_e820` driver turns each range into a region
//! of the `e820` nvdimm bus. See docs/nvdimm.md, "Legacy persistent memory".

use std::fmt;
use std::path::PathBuf;

use super::{nearest_region_sizes, parse_size, size_text, ConfigError};
use crate::layout;

/// Errors in a `--pmem-legacy` value. Each message names the value and what
/// is accepted.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum LegacyPmemError {
    /// A size that is not a number with a known suffix, or too large.
    #[error("--pmem-legacy size '{value}' is not valid: {why}; use a multiple of 16M with a K, M, G or T suffix (e.g. 256M, 2G)")]
    Size {
        /// The text the user gave.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A size of zero.
    #[error("--pmem-legacy size '{0}' is zero; use a multiple of 16M, e.g. 256M")]
    Zero(String),
    /// A size that breaks Linux's alignment rule (docs/nvdimm.md).
    #[error("--pmem-legacy size '{value}' is not a multiple of 16 MiB (Linux gives an e820 region a 16 MiB align and ndctl refuses namespaces on a region that is not a multiple of it); {nearest}")]
    Alignment {
        /// The text the user gave.
        value: String,
        /// "the nearest valid sizes are 992M and 1008M".
        nearest: String,
    },
    /// An option this version does not know.
    #[error("--pmem-legacy option '{0}' is not known; accepted: SIZE[,file=PATH][,readonly]")]
    UnknownOption(String),
    /// An option given twice.
    #[error("--pmem-legacy option '{0}' is given more than once")]
    DuplicateOption(String),
    /// `file=` with an empty path.
    #[error("--pmem-legacy file= needs a path, got an empty one")]
    EmptyPath,
}

/// One `--pmem-legacy` range as given: an E820 type 12 range of exactly
/// `size` bytes, backed by a file of exactly `size` bytes (offset *n* of the
/// file is byte *n* of the range).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LegacyPmemSpec {
    /// Bytes of the range (a multiple of [`layout::LEGACY_PMEM_SIZE_ALIGN`]).
    pub size: u64,
    /// Backing file; `None` → a temporary file, gone at exit.
    pub file: Option<PathBuf>,
    /// Map read-only (a read-only KVM memslot; guest stores are dropped).
    pub readonly: bool,
}

impl LegacyPmemSpec {
    /// A temporary, writable range of `size` bytes.
    pub fn temporary(size: u64) -> Self {
        Self {
            size,
            file: None,
            readonly: false,
        }
    }

    /// The same range backed by `file` (the nested engine's path in its L1).
    pub fn with_file(&self, file: PathBuf) -> Self {
        Self {
            file: Some(file),
            ..self.clone()
        }
    }
}

impl fmt::Display for LegacyPmemSpec {
    /// The `--pmem-legacy` spelling that parses back to the same spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&size_text(self.size))?;
        if let Some(p) = &self.file {
            write!(f, ",file={}", p.display())?;
        }
        if self.readonly {
            f.write_str(",readonly")?;
        }
        Ok(())
    }
}

fn parse_range_size(text: &str) -> Result<u64, LegacyPmemError> {
    let size = match parse_size(text) {
        Ok(n) => n,
        Err(ConfigError::Size {
            why: "it is zero", ..
        }) => return Err(LegacyPmemError::Zero(text.to_string())),
        Err(ConfigError::Size { why, .. }) => {
            return Err(LegacyPmemError::Size {
                value: text.to_string(),
                why: why.to_string(),
            })
        }
        Err(other) => {
            return Err(LegacyPmemError::Size {
                value: text.to_string(),
                why: other.to_string(),
            })
        }
    };
    if size % layout::LEGACY_PMEM_SIZE_ALIGN != 0 {
        return Err(LegacyPmemError::Alignment {
            value: text.to_string(),
            nearest: nearest_region_sizes(size),
        });
    }
    Ok(size)
}

impl std::str::FromStr for LegacyPmemSpec {
    type Err = LegacyPmemError;

    fn from_str(spec: &str) -> Result<Self, LegacyPmemError> {
        let mut parts = spec.split(',');
        let size = parse_range_size(parts.next().unwrap_or_default())?;
        let mut out = Self::temporary(size);
        let options = super::spec_options(parts)
            .map_err(|key| LegacyPmemError::DuplicateOption(key.to_string()))?;
        for (key, value, part) in options {
            match (key, value) {
                ("file", Some("")) => return Err(LegacyPmemError::EmptyPath),
                ("file", Some(v)) => out.file = Some(PathBuf::from(v)),
                ("readonly", None) => out.readonly = true,
                _ => return Err(LegacyPmemError::UnknownOption(part.to_string())),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_size_file_and_readonly() {
        let s: LegacyPmemSpec = "256M".parse().unwrap();
        assert_eq!(s, LegacyPmemSpec::temporary(256 << 20));
        let s: LegacyPmemSpec = "2G,file=/tmp/e820.img,readonly".parse().unwrap();
        assert_eq!(s.size, 2 << 30);
        assert_eq!(s.file, Some(PathBuf::from("/tmp/e820.img")));
        assert!(s.readonly);
        assert!(matches!(
            "readonly".parse::<LegacyPmemSpec>(),
            Err(LegacyPmemError::Size { .. })
        ));
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "16M",
            "256M",
            "1G",
            "1040M",
            "3T",
            "256M,file=/var/tmp/pm.img",
            "2G,file=rel/a b.img,readonly",
            "64M,readonly",
        ] {
            let spec: LegacyPmemSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(spec.to_string().parse::<LegacyPmemSpec>(), Ok(spec.clone()));
        }
        // Other spellings of the same spec come back in the canonical one.
        let spec: LegacyPmemSpec = "268435456,readonly,file=x.img".parse().unwrap();
        assert_eq!(spec.to_string(), "256M,file=x.img,readonly");
        assert_eq!(spec.to_string().parse::<LegacyPmemSpec>(), Ok(spec));
        let spec = LegacyPmemSpec::temporary(1 << 30).with_file("/host/d0/f".into());
        assert_eq!(spec.to_string(), "1G,file=/host/d0/f");
    }

    #[test]
    fn each_bad_input_is_its_own_sentence() {
        let err = |t: &str| t.parse::<LegacyPmemSpec>().unwrap_err();
        assert_eq!(err("0"), LegacyPmemError::Zero("0".into()));
        assert_eq!(err("0M,file=x"), LegacyPmemError::Zero("0M".into()));
        assert!(matches!(err(""), LegacyPmemError::Size { .. }));
        assert!(matches!(err("12X"), LegacyPmemError::Size { .. }));
        assert!(matches!(
            err("99999999999999T"),
            LegacyPmemError::Size { .. }
        ));
        assert_eq!(
            err("100M"),
            LegacyPmemError::Alignment {
                value: "100M".into(),
                nearest: "the nearest valid sizes are 96M and 112M".into()
            }
        );
        let m = err("1000M").to_string();
        assert!(m.contains("'1000M'") && m.contains("992M and 1008M"), "{m}");
        let m = err("4M").to_string();
        assert!(m.contains("smallest valid size is 16M"), "{m}");
        assert_eq!(
            err("1G,bogus"),
            LegacyPmemError::UnknownOption("bogus".into())
        );
        assert_eq!(
            err("1G,readonly=yes"),
            LegacyPmemError::UnknownOption("readonly=yes".into())
        );
        assert_eq!(
            err("1G,file"),
            LegacyPmemError::UnknownOption("file".into())
        );
        assert_eq!(
            err("1G,label-size=0"),
            LegacyPmemError::UnknownOption("label-size=0".into())
        );
        assert_eq!(
            err("1G,readonly,readonly"),
            LegacyPmemError::DuplicateOption("readonly".into())
        );
        assert_eq!(
            err("1G,file=a,file=b"),
            LegacyPmemError::DuplicateOption("file".into())
        );
        assert_eq!(err("1G,file="), LegacyPmemError::EmptyPath);
        for e in [err("0"), err("1G,x"), err("1G,file="), err("17M")] {
            let m = e.to_string();
            assert!(m.starts_with("--pmem-legacy "), "{m}");
            assert!(!m.replace("e.g. ", "").contains(". "), "one sentence: {m}");
        }
    }
}
