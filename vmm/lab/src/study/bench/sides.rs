//! `--side NAME:kernel=PATH[,initrd=PATH][,modules=DIR][,as=off|on][,append=ARGS]`: the sides of
//! an A/B comparison between any two kernels (or command lines), instead of the experiment's own
//! parameter.
//!
//! `as=off` or `as=on` declares that the side repeats the thread's off or on side (a kernel
//! without the patch, or with it): upstream's figures stand beside that side in the report.
//! Without it, only sides named `off`/`on` are the thread's; any other name gets no upstream
//! column and no upstream ratio, since the thread never ran it.
//!
//! `append=` takes the rest of the value, commas included (`append=console=ttyS0,115200`), so
//! it comes last. Without `kernel=` a side boots the guest image's kernel (or `--kernel`);
//! without `initrd=`, the guest image's initramfs (or `--initrd`), which carries the init that
//! runs the job. `modules=DIR` packs that kernel's modules into the guest (see
//! [`crate::guest::modules`]; default: `--modules`).

use std::path::PathBuf;

use crate::study::experiments::Side;
use crate::study::report::ThreadSide;

/// What `--side` accepts, for the messages.
pub const SIDE_SYNTAX: &str =
    "NAME:kernel=PATH[,initrd=PATH][,modules=DIR][,as=off|on][,append=ARGS]";

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
    /// A key other than kernel, initrd, modules, as, append.
    #[error("--side {name}: unknown key {key:?}; accepted: kernel, initrd, modules, as, append ({SIDE_SYNTAX})")]
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
    /// `as=` with something other than `off` or `on`.
    #[error("--side {name}: as={value:?} is not accepted; use as=off or as=on, the side of the thread this side repeats (its figures then stand beside it)")]
    BadThreadSide {
        /// Side name.
        name: String,
        /// The value given.
        value: String,
    },
    /// Two sides that both are the thread's off (or on).
    #[error("--side {a} and --side {b} are both the thread's {thread} side; declare one as=off and the other as=on, or leave as= out")]
    ThreadSideTwice {
        /// One side.
        a: String,
        /// The other.
        b: String,
        /// `off` or `on`.
        thread: &'static str,
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
        if !["kernel", "initrd", "modules", "as", "append"].contains(&key) {
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
            "as" => {
                side.thread_side =
                    Some(
                        ThreadSide::parse(value).ok_or_else(|| SideError::BadThreadSide {
                            name: name.to_owned(),
                            value: value.to_owned(),
                        })?,
                    );
            }
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
    let thread = |s: &Side| {
        s.thread_side
            .or_else(|| ThreadSide::by_name(&s.label, specs.len()))
    };
    if let [a, b] = sides.as_slice() {
        if let (Some(x), Some(y)) = (thread(a), thread(b)) {
            if x == y {
                return Err(SideError::ThreadSideTwice {
                    a: a.label.clone(),
                    b: b.label.clone(),
                    thread: x.name(),
                });
            }
        }
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
    fn as_declares_the_threads_side() {
        let s = parse_side("base:as=off,append=x=1").unwrap();
        assert_eq!(s.thread_side, Some(ThreadSide::Off));
        assert_eq!(s.cmdline.as_deref(), Some("x=1"));
        assert_eq!(parse_side("good:append=x").unwrap().thread_side, None);
        let e = parse_side("base:as=yes").unwrap_err().to_string();
        assert_eq!(
            e,
            "--side base: as=\"yes\" is not accepted; use as=off or as=on, the side of the thread this side repeats (its figures then stand beside it)"
        );
        let e = parse_sides(&["a:as=on".into(), "b:as=on".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--side a and --side b are both the thread's on side"),
            "{e}"
        );
        // A side named on is the thread's on by name.
        let e = parse_sides(&["on:append=x".into(), "b:as=on".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("both the thread's on side"), "{e}");
        let two = parse_sides(&["base:as=off".into(), "patched:as=on".into()])
            .unwrap()
            .unwrap();
        assert_eq!(two[1].thread_side, Some(ThreadSide::On));
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
                "--side a: unknown key \"kernl\"; accepted: kernel, initrd, modules, as, append",
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
