//! `--side NAME:kernel=PATH[,initrd=PATH][,modules=DIR][,append=ARGS]`: the sides of an A/B comparison
//! between any two kernels (or command lines), instead of the experiment's own parameter.
//!
//! `append=` takes the rest of the value, commas included (`append=console=ttyS0,115200`), so
//! it comes last. Without `kernel=` a side boots the guest image's kernel (or `--kernel`);
//! without `initrd=`, the guest image's initramfs (or `--initrd`), which carries the init that
//! runs the job. `modules=DIR` packs that kernel's modules into the guest (see
//! [`crate::modules`]; default: `--modules`).

use std::path::PathBuf;

use crate::experiments::Side;

/// What `--side` accepts, for the messages.
pub const SIDE_SYNTAX: &str = "NAME:kernel=PATH[,initrd=PATH][,modules=DIR][,append=ARGS]";

/// Errors in `--side` values: each names the value and what is accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SideError {
    /// No `NAME:` part.
    #[error("--side {spec:?} has no name: use {SIDE_SYNTAX}")]
    NoName {
        /// The value given.
        spec: String,
    },
    /// The name has characters other than letters, digits, `-`, `_`, `.`.
    #[error("--side name {name:?} is not accepted: use letters, digits, '-', '_' or '.' (at most 32), as in base:kernel=bzImage")]
    BadName {
        /// The name.
        name: String,
    },
    /// A key other than kernel, initrd, modules, append.
    #[error("--side {name}: unknown key {key:?}; accepted: kernel, initrd, modules, append ({SIDE_SYNTAX})")]
    UnknownKey {
        /// Side name.
        name: String,
        /// The key.
        key: String,
    },
    /// `key` without `=value`, or an empty value.
    #[error("--side {name}: {key:?} needs a value ({SIDE_SYNTAX})")]
    NoValue {
        /// Side name.
        name: String,
        /// The key.
        key: String,
    },
    /// The same key twice.
    #[error("--side {name}: {key} is given twice")]
    DuplicateKey {
        /// Side name.
        name: String,
        /// The key.
        key: String,
    },
    /// A modules directory that is not one.
    #[error("--side {name}: modules {path} is not a directory ({reason}); give what `make modules_install INSTALL_MOD_PATH=X` wrote: X or X/lib/modules/RELEASE")]
    ModulesDir {
        /// Side name.
        name: String,
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A kernel or initrd that cannot be read.
    #[error("--side {name}: {key} {path} cannot be read ({reason}); give an existing file")]
    File {
        /// Side name.
        name: String,
        /// `kernel` or `initrd`.
        key: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS's reason.
        reason: String,
    },
    /// Two sides with one name.
    #[error("--side {name} is given twice; each side needs its own name")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// Not exactly two sides.
    #[error("{count} --side given ({names}); an A/B comparison takes exactly two (or none, for the experiment's own sides)")]
    Count {
        /// How many.
        count: usize,
        /// Their names.
        names: String,
    },
}

fn check_file(name: &str, key: &'static str, path: &str) -> Result<PathBuf, SideError> {
    let p = PathBuf::from(path);
    let meta = std::fs::metadata(&p).map_err(|e| SideError::File {
        name: name.to_owned(),
        key,
        path: p.clone(),
        reason: e.to_string(),
    })?;
    if !meta.is_file() {
        return Err(SideError::File {
            name: name.to_owned(),
            key,
            path: p,
            reason: "not a regular file".into(),
        });
    }
    Ok(p)
}

fn check_dir(name: &str, path: &str) -> Result<PathBuf, SideError> {
    let p = PathBuf::from(path);
    let bad = |reason: String| SideError::ModulesDir {
        name: name.to_owned(),
        path: p.clone(),
        reason,
    };
    match std::fs::metadata(&p) {
        Ok(m) if m.is_dir() => Ok(p),
        Ok(_) => Err(bad("it is a file".into())),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// One `--side` value.
pub fn parse_side(spec: &str) -> Result<Side, SideError> {
    let Some((name, rest)) = spec.split_once(':') else {
        return Err(SideError::NoName {
            spec: spec.to_owned(),
        });
    };
    if name.is_empty()
        || name.len() > 32
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(SideError::BadName {
            name: name.to_owned(),
        });
    }
    let mut side = Side::cmdline(name, None);
    let mut rest = rest;
    let mut seen: Vec<&str> = Vec::new();
    while !rest.is_empty() {
        let (item, tail) = if rest.starts_with("append=") {
            (rest, "")
        } else {
            rest.split_once(',').unwrap_or((rest, ""))
        };
        rest = tail;
        let (key, value) = item.split_once('=').unwrap_or((item, ""));
        if !["kernel", "initrd", "modules", "append"].contains(&key) {
            return Err(SideError::UnknownKey {
                name: name.to_owned(),
                key: key.to_owned(),
            });
        }
        if value.trim().is_empty() {
            return Err(SideError::NoValue {
                name: name.to_owned(),
                key: key.to_owned(),
            });
        }
        if seen.contains(&key) {
            return Err(SideError::DuplicateKey {
                name: name.to_owned(),
                key: key.to_owned(),
            });
        }
        seen.push(key);
        match key {
            "kernel" => side.kernel = Some(check_file(name, "kernel", value)?),
            "initrd" => side.initrd = Some(check_file(name, "initrd", value)?),
            "modules" => side.modules = Some(check_dir(name, value)?),
            _ => side.cmdline = Some(value.trim().to_owned()),
        }
    }
    Ok(side)
}

/// All `--side` values: none (the experiment's sides) or exactly two with distinct names.
pub fn parse_sides(specs: &[String]) -> Result<Option<Vec<Side>>, SideError> {
    if specs.is_empty() {
        return Ok(None);
    }
    let mut sides: Vec<Side> = Vec::new();
    for spec in specs {
        let side = parse_side(spec)?;
        if sides.iter().any(|s| s.label == side.label) {
            return Err(SideError::DuplicateName { name: side.label });
        }
        sides.push(side);
    }
    if sides.len() != 2 {
        return Err(SideError::Count {
            count: sides.len(),
            names: sides
                .iter()
                .map(|s| s.label.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(Some(sides))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> (tempfile_dir::Dir, String, String) {
        let d = tempfile_dir::Dir::new();
        let k = d.file("bzImage");
        let i = d.file("initrd");
        (d, k, i)
    }

    /// A scratch directory removed on drop (no tempfile crate in vmm).
    mod tempfile_dir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "pmemvm-sides-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Self(p)
            }
            pub fn file(&self, name: &str) -> String {
                let p = self.0.join(name);
                std::fs::write(&p, b"x").unwrap();
                p.display().to_string()
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn sides_parse_with_every_key() {
        let (_d, k, i) = files();
        let s = parse_side(&format!(
            "base:kernel={k},initrd={i},append=a=1 console=ttyS0,115200"
        ))
        .unwrap();
        assert_eq!(s.label, "base");
        assert_eq!(s.kernel, Some(PathBuf::from(&k)));
        assert_eq!(s.initrd, Some(PathBuf::from(&i)));
        assert_eq!(s.cmdline.as_deref(), Some("a=1 console=ttyS0,115200"));
        let s = parse_side("v2:append=nd_pmem.nowait=1").unwrap();
        assert_eq!(
            (s.kernel, s.cmdline.as_deref()),
            (None, Some("nd_pmem.nowait=1"))
        );
        let two = parse_sides(&[format!("base:kernel={k}"), format!("patched:kernel={k}")])
            .unwrap()
            .unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(parse_sides(&[]).unwrap(), None);
    }

    #[test]
    fn bad_sides_name_the_value_and_what_is_accepted() {
        let (_d, k, _) = files();
        let cases: Vec<(Vec<String>, &str)> = vec![
            (
                vec!["kernel=x".into()],
                "--side \"kernel=x\" has no name: use NAME:kernel=PATH",
            ),
            (
                vec!["a b:kernel=x".into()],
                "--side name \"a b\" is not accepted",
            ),
            (
                vec![format!("a:kernl={k}")],
                "--side a: unknown key \"kernl\"; accepted: kernel, initrd, modules, append",
            ),
            (
                vec!["a:kernel=".into()],
                "--side a: \"kernel\" needs a value",
            ),
            (
                vec![format!("a:kernel={k},kernel={k}")],
                "--side a: kernel is given twice",
            ),
            (
                vec!["a:kernel=/nonexistent/bzImage".into()],
                "--side a: kernel /nonexistent/bzImage cannot be read",
            ),
            (
                vec![format!("a:kernel={k}"), format!("a:kernel={k}")],
                "--side a is given twice",
            ),
            (
                vec![format!("a:kernel={k}")],
                "1 --side given (a); an A/B comparison takes exactly two",
            ),
            (
                vec![
                    format!("a:kernel={k}"),
                    format!("b:kernel={k}"),
                    format!("c:kernel={k}"),
                ],
                "3 --side given (a, b, c)",
            ),
        ];
        for (specs, want) in cases {
            let err = parse_sides(&specs).unwrap_err().to_string();
            assert!(err.starts_with(want), "{specs:?}: {err}");
        }
        let dir = std::env::temp_dir();
        let err = parse_side(&format!("a:initrd={}", dir.display())).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let err = parse_side(&format!("a:modules={k}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("modules") && err.contains("is not a directory"),
            "{err}"
        );
        let s = parse_side(&format!("a:kernel={k},modules={}", dir.display())).unwrap();
        assert_eq!(s.modules, Some(dir));
    }
}
