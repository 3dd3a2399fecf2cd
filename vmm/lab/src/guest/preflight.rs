//! Checks that run before anything slow: a `run` or `bench` that cannot
//! succeed on this host says so in one sentence before the guest image is
//! built or the first guest boots, and leaves nothing behind.
//!
//! The same checks back `pmemvm preflight`, which the `./pmemvm` wrapper
//! calls before it installs an engine's packages and builds the guest image:
//! it prints what the command needs (`install PACKAGE`, `image`) on stdout,
//! one item a line, and fails with status 2 on anything no install can fix.

use std::path::{Path, PathBuf};

use vmm::host::HostKvm;

/// Memory the host keeps beside a guest: QEMU or pmemvm's own process,
/// page tables, the page cache of the initrd.
pub const HOST_OVERHEAD_BYTES: u64 = 256 << 20;

/// A prerequisite that is not met.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PreflightError {
    /// The engine is not usable here (no KVM that runs Linux, no QEMU).
    #[error(transparent)]
    Engine(#[from] crate::guest::engine::Unavailable),
    /// Not enough memory for the guest.
    #[error("the guest needs {need_mib} MiB of RAM plus {overhead_mib} MiB for the VMM, but this host has {avail_mib} MiB available (MemAvailable); use a smaller --memory or free memory")]
    Memory {
        /// Guest RAM.
        need_mib: u64,
        /// What the VMM takes beside it.
        overhead_mib: u64,
        /// MemAvailable.
        avail_mib: u64,
    },
    /// Not enough disk for temporary NVDIMMs the experiment fills.
    #[error("the experiment writes its {need_mib} MiB NVDIMM in full, but {dir} has only {free_mib} MiB free; free space there, point TMPDIR at a larger file system, or use a smaller --nvdimm")]
    DimmDisk {
        /// Bytes the DIMMs take when full.
        need_mib: u64,
        /// Where the temporary DIMMs live.
        dir: PathBuf,
        /// Free space there.
        free_mib: u64,
    },
    /// `$PMEMVM_HOST_CPUS` is not a CPU count.
    #[error(transparent)]
    HostCpus(#[from] super::host_cpus::HostCpusError),
    /// The output directory cannot be created or written.
    #[error("--out {path} cannot be used: {why}")]
    Output {
        /// The path given.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// What a command needs that an install can provide.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Needs {
    /// Debian packages to install (e.g. qemu-system-x86).
    pub packages: Vec<&'static str>,
    /// The project's guest image must be built (no `--kernel` given).
    pub image: bool,
}

impl Needs {
    /// The wrapper's lines: `install PACKAGE` and `image`.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .packages
            .iter()
            .map(|p| format!("install {p}"))
            .collect();
        if self.image {
            out.push("image".into());
        }
        out
    }
}

use crate::guest::engine::Unavailable;
pub use crate::guest::engine::QEMU_PACKAGE;

/// The engine that will run, and what it lacks. `qemu_found` says whether
/// qemu-system-x86_64 is installed: a missing QEMU is a need (the wrapper
/// installs it) when `allow_install`, an error otherwise.
pub fn engine(
    requested: Engine,
    host: &HostKvm,
    kvm_open: Result<(), String>,
    qemu_found: bool,
    allow_install: bool,
    needs: &mut Needs,
) -> Result<Engine, PreflightError> {
    let engine = requested.resolve(host)?;
    match engine {
        Engine::Pmemvm => kvm_open.map_err(|why| Unavailable::NoKvm { why })?,
        _ if qemu_found => {}
        _ if allow_install => needs.packages.extend(engine.packages()),
        _ => {
            return Err(Unavailable::NoQemu {
                engine: requested.name(),
            }
            .into())
        }
    }
    Ok(engine)
}

/// [`engine`] with this host's facts: its KVM, whether /dev/kvm opens, and
/// whether qemu-system-x86_64 is on PATH.
pub fn engine_on_this_host(
    requested: Engine,
    allow_install: bool,
    needs: &mut Needs,
) -> Result<Engine, PreflightError> {
    let engine = engine(
        requested,
        &HostKvm::probe(),
        kvm_opens(),
        crate::guest::qemu::find_qemu().is_some(),
        allow_install,
        needs,
    )?;
    // The L1 preparation's tools (prepare.sh reports them itself when run
    // without the wrapper).
    if engine == Engine::Nested && allow_install {
        for p in crate::guest::nested::prepare::missing_tool_packages() {
            if !needs.packages.contains(&p) {
                needs.packages.push(p);
            }
        }
    }
    Ok(engine)
}

/// Whether /dev/kvm opens read-write.
pub fn kvm_opens() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Guest RAM plus the VMM's overhead against `MemAvailable` (bytes).
pub fn memory(guest_bytes: u64, available: Option<u64>) -> Result<(), PreflightError> {
    let Some(avail) = available else {
        return Ok(());
    };
    if guest_bytes.saturating_add(HOST_OVERHEAD_BYTES) > avail {
        return Err(PreflightError::Memory {
            need_mib: guest_bytes >> 20,
            overhead_mib: HOST_OVERHEAD_BYTES >> 20,
            avail_mib: avail >> 20,
        });
    }
    Ok(())
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Free bytes on the file system holding `dir` (statvfs `f_bavail`).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path that outlives the call and `st`
    // points to writable memory of the size statvfs fills; it is read only
    // after statvfs reported success.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised the whole struct.
    let st = unsafe { st.assume_init() };
    st.f_bavail.checked_mul(st.f_frsize)
}

/// Temporary NVDIMMs of `bytes` in total, written in full, fit in `dir`.
pub fn dimm_disk(bytes: u64, dir: &Path, free: Option<u64>) -> Result<(), PreflightError> {
    match free {
        Some(free) if bytes > free => Err(PreflightError::DimmDisk {
            need_mib: bytes >> 20,
            dir: dir.to_path_buf(),
            free_mib: free >> 20,
        }),
        _ => Ok(()),
    }
}

/// An output directory that can be created (or already is a writable
/// directory), checked without creating anything.
pub fn output_dir(path: &Path) -> Result<(), PreflightError> {
    let err = |why: &str| PreflightError::Output {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    let mut probe = path.to_path_buf();
    if probe.as_os_str().is_empty() {
        probe = PathBuf::from(".");
    }
    loop {
        if probe.exists() {
            if !probe.is_dir() {
                return Err(err(if probe == path {
                    "it exists and is not a directory"
                } else {
                    "a part of it exists and is not a directory"
                }));
            }
            return if writable(&probe) {
                Ok(())
            } else {
                Err(err(&format!("{} is not writable", probe.display())))
            };
        }
        match probe.parent() {
            Some(p) if !p.as_os_str().is_empty() => probe = p.to_path_buf(),
            _ => probe = PathBuf::from("."),
        }
    }
}

fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path valid for the call; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

pub use crate::guest::engine::Engine;

#[cfg(test)]
mod tests {
    use super::*;

    const PVM: HostKvm = HostKvm {
        hw_virt: false,
        pvm: true,
    };
    const HW: HostKvm = HostKvm {
        hw_virt: true,
        pvm: false,
    };

    #[test]
    fn auto_on_pvm_needs_qemu_installed_or_refuses() {
        let mut needs = Needs::default();
        let e = engine(Engine::Auto, &PVM, Ok(()), false, true, &mut needs).unwrap();
        assert_eq!(e, Engine::Qemu);
        assert_eq!(needs.packages, vec![QEMU_PACKAGE]);
        let mut needs = Needs::default();
        let err = engine(Engine::Auto, &PVM, Ok(()), false, false, &mut needs).unwrap_err();
        assert!(err.to_string().contains("qemu-system-x86"), "{err}");
        assert!(err.to_string().contains("--engine auto"), "{err}");
        let mut needs = Needs::default();
        engine(Engine::Qemu, &PVM, Ok(()), true, false, &mut needs).unwrap();
        assert!(needs.packages.is_empty());
    }

    #[test]
    fn pmemvm_engine_needs_a_kvm_that_runs_linux_and_opens() {
        let mut needs = Needs::default();
        let err = engine(Engine::Pmemvm, &PVM, Ok(()), true, true, &mut needs).unwrap_err();
        assert!(matches!(
            err,
            PreflightError::Engine(Unavailable::HostCannotRunLinux(_))
        ));
        let err = engine(
            Engine::Pmemvm,
            &HW,
            Err("Permission denied".into()),
            true,
            true,
            &mut needs,
        )
        .unwrap_err();
        assert!(err.to_string().contains("Permission denied"), "{err}");
        assert_eq!(
            engine(Engine::Auto, &HW, Ok(()), false, false, &mut needs).unwrap(),
            Engine::Pmemvm
        );
        assert!(needs.packages.is_empty(), "pmemvm needs no QEMU");
    }

    #[test]
    fn memory_and_disk_limits_name_the_numbers() {
        memory(1 << 30, Some(2 << 30)).unwrap();
        memory(1 << 30, None).unwrap();
        let err = memory(2 << 30, Some(2 << 30)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the guest needs 2048 MiB of RAM plus 256 MiB for the VMM, but this host has 2048 MiB available (MemAvailable); use a smaller --memory or free memory"
        );
        dimm_disk(1 << 30, Path::new("/tmp"), Some(1 << 30)).unwrap();
        let err = dimm_disk(3 << 30, Path::new("/tmp"), Some(1 << 30)).unwrap_err();
        assert!(err.to_string().contains("3072 MiB NVDIMM"), "{err}");
        assert!(
            err.to_string().contains("/tmp has only 1024 MiB free"),
            "{err}"
        );
    }

    #[test]
    fn mem_available_is_read_in_kib() {
        let text = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2048 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
        assert!(mem_available().is_some_and(|b| b > 0));
        assert!(free_bytes(Path::new("/")).is_some_and(|b| b > 0));
        assert!(free_bytes(Path::new("/no/such/dir")).is_none());
    }

    #[test]
    fn output_dir_is_checked_without_creating_it() {
        let base = std::env::temp_dir().join(format!("pmemvm-preflight-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let deep = base.join("a/b/c");
        output_dir(&deep).unwrap();
        assert!(!base.join("a").exists(), "the check created a directory");
        let file = base.join("file");
        std::fs::write(&file, b"x").unwrap();
        let err = output_dir(&file).unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");
        let err = output_dir(&file.join("sub")).unwrap_err();
        assert!(err.to_string().contains("a part of it"), "{err}");
        output_dir(Path::new("relative-dir-that-does-not-exist")).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn needs_print_one_item_a_line() {
        let n = Needs {
            packages: vec![QEMU_PACKAGE],
            image: true,
        };
        assert_eq!(n.lines(), vec!["install qemu-system-x86", "image"]);
        assert!(Needs::default().lines().is_empty());
    }
}
