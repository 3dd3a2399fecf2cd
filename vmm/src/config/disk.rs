//! `--disk PATH[,readonly]`: a host file the guest sees as a virtio block
//! device (`/dev/vda`, `/dev/vdb`, ... in the order given), outside the
//! NVDIMM bus.

use std::path::PathBuf;

/// Errors in a `--disk` value. Each message names the value and what is accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DiskSpecError {
    /// No path before the options.
    #[error("--disk '{0}' has no file path; use --disk PATH[,readonly] (e.g. --disk /var/tmp/root.ext4,readonly)")]
    EmptyPath(String),
    /// An option this version does not know.
    #[error("--disk option '{option}' in '{value}' is not known; accepted: PATH[,readonly]")]
    Option {
        /// The whole value.
        value: String,
        /// The unknown part.
        option: String,
    },
    /// `readonly` twice.
    #[error("--disk option 'readonly' is given more than once in '{0}'")]
    Duplicate(String),
}

/// One virtio disk as given.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DiskSpec {
    /// The host file (used as it is: never created, resized or truncated).
    pub path: PathBuf,
    /// The guest cannot write it (the device refuses writes, the file is opened read-only).
    pub readonly: bool,
}

impl std::str::FromStr for DiskSpec {
    type Err = DiskSpecError;

    fn from_str(spec: &str) -> Result<Self, DiskSpecError> {
        // The path is everything before the last ",readonly" options; a path
        // may itself hold commas, so options are taken from the end.
        let mut path = spec;
        let mut readonly = false;
        while let Some((head, tail)) = path.rsplit_once(',') {
            match tail {
                "readonly" if readonly => return Err(DiskSpecError::Duplicate(spec.to_string())),
                "readonly" => readonly = true,
                _ if tail.contains('=') || !tail.contains('/') && !head.is_empty() => {
                    return Err(DiskSpecError::Option {
                        value: spec.to_string(),
                        option: tail.to_string(),
                    })
                }
                _ => break,
            }
            path = head;
        }
        if path.is_empty() {
            return Err(DiskSpecError::EmptyPath(spec.to_string()));
        }
        Ok(Self {
            path: PathBuf::from(path),
            readonly,
        })
    }
}

impl std::fmt::Display for DiskSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.readonly {
            f.write_str(",readonly")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<DiskSpec, DiskSpecError> {
        s.parse()
    }

    #[test]
    fn a_path_and_readonly_parse_and_print_back() {
        for text in [
            "/a/root.ext4",
            "/a/root.ext4,readonly",
            "rel.img",
            "/dir,with,commas/x.img",
        ] {
            let d = parse(text).unwrap();
            assert_eq!(d.to_string(), text, "round trip of {text}");
            assert_eq!(parse(&d.to_string()).unwrap(), d);
        }
        let d = parse("/a/b.img,readonly").unwrap();
        assert_eq!(d.path, PathBuf::from("/a/b.img"));
        assert!(d.readonly);
    }

    #[test]
    fn bad_values_are_named() {
        assert_eq!(
            parse(",readonly").unwrap_err(),
            DiskSpecError::EmptyPath(",readonly".into())
        );
        assert_eq!(
            parse("").unwrap_err(),
            DiskSpecError::EmptyPath(String::new())
        );
        let e = parse("/a.img,cache=none").unwrap_err();
        assert_eq!(e.to_string(), "--disk option 'cache=none' in '/a.img,cache=none' is not known; accepted: PATH[,readonly]");
        assert!(matches!(
            parse("/a.img,ro"),
            Err(DiskSpecError::Option { .. })
        ));
        assert!(matches!(
            parse("/a.img,readonly,readonly"),
            Err(DiskSpecError::Duplicate(_))
        ));
    }
}
