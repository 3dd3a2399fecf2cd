//! `--cxl-pmem SIZE[,file=PATH][,label-size=SIZE]`: a CXL Type-3 memory device
//! whose capacity is all persistent, backed by a host file: `SIZE` bytes of
//! memory, then the label storage area (the device's LSA, which `ndctl`
//! writes namespace labels into through the mailbox). Each device sits alone
//! behind its own host bridge and fixed memory window (`crate::cxl`), so a
//! region on it is one KVM memory slot.

use std::fmt;
use std::path::PathBuf;

use super::{nearest_sizes, parse_size, size_text, ConfigError};
use crate::layout;

/// Errors in a `--cxl-pmem` value. Each message names the value and what is
/// accepted.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CxlPmemError {
    /// A size that is not a number with a known suffix, or too large.
    #[error("--cxl-pmem {what} '{value}' is not valid: {why}; use a number with a K, M, G or T suffix (e.g. {example})")]
    Size {
        /// "size" or "label-size".
        what: &'static str,
        /// The text the user gave.
        value: String,
        /// What is wrong with it.
        why: String,
        /// A value that works.
        example: &'static str,
    },
    /// A capacity that is not a whole number of 256 MiB units.
    #[error("--cxl-pmem size '{value}' is not a multiple of 256 MiB (a CXL device reports its capacity in 256 MiB units and Linux places regions in 256 MiB steps); {nearest}")]
    Capacity {
        /// The text the user gave.
        value: String,
        /// "the nearest valid sizes are 256M and 512M".
        nearest: String,
    },
    /// A label area Linux's nvdimm driver cannot keep namespace labels in.
    #[error("--cxl-pmem label-size '{0}' is not valid: use a multiple of 4K from 128K to 16M (Linux's nvdimm driver needs a label area on a CXL memory device; 128K, the default, holds 510 labels)")]
    LabelSize(String),
    /// An option this version does not know.
    #[error("--cxl-pmem option '{0}' is not known; accepted: SIZE[,file=PATH][,label-size=SIZE]")]
    UnknownOption(String),
    /// An option given twice.
    #[error("--cxl-pmem option '{0}' is given more than once")]
    DuplicateOption(String),
    /// `file=` with an empty path.
    #[error("--cxl-pmem file= needs a path, got an empty one")]
    EmptyPath,
}

/// One `--cxl-pmem` device as given.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CxlPmemSpec {
    /// Persistent capacity in bytes (a multiple of [`layout::CXL_CAPACITY_UNIT`]).
    pub size: u64,
    /// Backing file; `None` → a temporary file, gone at exit.
    pub file: Option<PathBuf>,
    /// Bytes of the label storage area after the capacity in the backing file.
    pub label_size: u64,
}

impl CxlPmemSpec {
    /// A temporary device of `size` bytes with the default label area.
    pub fn temporary(size: u64) -> Self {
        Self {
            size,
            file: None,
            label_size: layout::CXL_DEFAULT_LABEL_SIZE,
        }
    }
}

impl fmt::Display for CxlPmemSpec {
    /// The `--cxl-pmem` spelling that parses back to the same spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&size_text(self.size))?;
        if let Some(p) = &self.file {
            write!(f, ",file={}", p.display())?;
        }
        if self.label_size != layout::CXL_DEFAULT_LABEL_SIZE {
            write!(f, ",label-size={}", size_text(self.label_size))?;
        }
        Ok(())
    }
}

/// `text` as a size, or the error naming `what` it was for.
fn size_of(text: &str, what: &'static str, example: &'static str) -> Result<u64, CxlPmemError> {
    parse_size(text).map_err(|e| CxlPmemError::Size {
        what,
        value: text.to_string(),
        why: match e {
            ConfigError::Size { why, .. } => why.to_string(),
            other => other.to_string(),
        },
        example,
    })
}

fn capacity(text: &str) -> Result<u64, CxlPmemError> {
    let size = size_of(text, "size", "1G")?;
    if !size.is_multiple_of(layout::CXL_CAPACITY_UNIT) {
        return Err(CxlPmemError::Capacity {
            value: text.to_string(),
            nearest: nearest_sizes(size, layout::CXL_CAPACITY_UNIT),
        });
    }
    Ok(size)
}

fn label_size(text: &str) -> Result<u64, CxlPmemError> {
    let size = size_of(text, "label-size", "128K").map_err(|e| match e {
        CxlPmemError::Size { why, .. } if why == "it is zero" => {
            CxlPmemError::LabelSize(text.to_string())
        }
        other => other,
    })?;
    let accepted = layout::CXL_MIN_LABEL_SIZE..=layout::CXL_MAX_LABEL_SIZE;
    if !accepted.contains(&size) || !size.is_multiple_of(4096) {
        return Err(CxlPmemError::LabelSize(text.to_string()));
    }
    Ok(size)
}

impl std::str::FromStr for CxlPmemSpec {
    type Err = CxlPmemError;

    fn from_str(spec: &str) -> Result<Self, CxlPmemError> {
        let mut parts = spec.split(',');
        let mut out = Self::temporary(capacity(parts.next().unwrap_or_default())?);
        let options = super::spec_options(parts)
            .map_err(|key| CxlPmemError::DuplicateOption(key.to_string()))?;
        for (key, value, part) in options {
            match (key, value) {
                ("file", Some("")) => return Err(CxlPmemError::EmptyPath),
                ("file", Some(v)) => out.file = Some(PathBuf::from(v)),
                ("label-size", Some(v)) => out.label_size = label_size(v)?,
                _ => return Err(CxlPmemError::UnknownOption(part.to_string())),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_size_file_and_label_size_and_writes_them_back() {
        let s: CxlPmemSpec = "1G".parse().unwrap();
        assert_eq!(s, CxlPmemSpec::temporary(1 << 30));
        assert_eq!(s.label_size, 128 << 10);
        let s: CxlPmemSpec = "512M,label-size=256K,file=/var/tmp/cxl0.img"
            .parse()
            .unwrap();
        assert_eq!(s.size, 512 << 20);
        assert_eq!(s.file, Some(PathBuf::from("/var/tmp/cxl0.img")));
        assert_eq!(s.label_size, 256 << 10);
        assert_eq!(s.to_string(), "512M,file=/var/tmp/cxl0.img,label-size=256K");
        for text in [
            "256M",
            "4G,file=a b.img",
            "1T,label-size=16M",
            "768M,label-size=132K",
        ] {
            let spec: CxlPmemSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(spec.to_string().parse::<CxlPmemSpec>(), Ok(spec.clone()));
        }
        // The default label area is left out, as typed without it.
        let s: CxlPmemSpec = "1G,label-size=128K".parse().unwrap();
        assert_eq!(s.to_string(), "1G");
    }

    #[test]
    fn each_bad_input_is_one_sentence_naming_the_value() {
        let err = |t: &str| t.parse::<CxlPmemSpec>().unwrap_err();
        assert!(matches!(err(""), CxlPmemError::Size { what: "size", .. }));
        assert!(matches!(err("0"), CxlPmemError::Size { .. }));
        assert!(matches!(err("1Q"), CxlPmemError::Size { .. }));
        assert_eq!(
            err("300M"),
            CxlPmemError::Capacity {
                value: "300M".into(),
                nearest: "the nearest valid sizes are 256M and 512M".into()
            }
        );
        assert!(err("16M")
            .to_string()
            .contains("the smallest valid size is 256M"));
        for bad in ["0", "4K", "100000", "64K", "32M", "129K"] {
            assert_eq!(
                err(&format!("1G,label-size={bad}")),
                CxlPmemError::LabelSize(bad.into()),
                "{bad}"
            );
        }
        assert!(matches!(
            err("1G,label-size=x"),
            CxlPmemError::Size {
                what: "label-size",
                ..
            }
        ));
        assert_eq!(
            err("1G,readonly"),
            CxlPmemError::UnknownOption("readonly".into())
        );
        assert_eq!(err("1G,file"), CxlPmemError::UnknownOption("file".into()));
        assert_eq!(err("1G,file="), CxlPmemError::EmptyPath);
        assert_eq!(
            err("1G,file=a,file=b"),
            CxlPmemError::DuplicateOption("file".into())
        );
        for e in [
            err("0"),
            err("300M"),
            err("1G,x"),
            err("1G,label-size=0"),
            err("1G,file="),
        ] {
            let m = e.to_string();
            assert!(m.starts_with("--cxl-pmem "), "{m}");
            assert!(!m.replace("e.g. ", "").contains(". "), "one sentence: {m}");
        }
    }
}
