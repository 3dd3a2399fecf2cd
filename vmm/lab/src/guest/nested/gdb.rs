//! `--gdb` through `--engine nested`: pmemvm's arguments in the L1, what
//! the user is told, and when the L1's stub listens.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Says where QEMU (`qemu`) listens for gdb and what it cannot do there,
/// and returns the words pmemvm in the L1 gets: `--gdb` on the L1's gdb
/// port ([`super::l1::GDB_TTY`]), and `--gdb-wait` with `wait`.
pub(crate) fn l1_args(qemu: &Path, addr: &vmm::debug::gdb::GdbAddr, wait: bool) -> Vec<String> {
    if let Some(w) =
        crate::guest::qemu::version_of(qemu).and_then(crate::guest::qemu::nested_gdb_warning)
    {
        eprintln!("pmemvm: warning: --engine nested: {w}");
    }
    eprintln!(
        "pmemvm: --engine nested: listening for gdb at {addr}, owner-only (target remote {addr})"
    );
    let mut args = vec!["--gdb".to_string(), super::l1::GDB_TTY.to_string()];
    if wait {
        args.push("--gdb-wait".to_string());
    }
    args
}

/// Says on this terminal when pmemvm in the L1 listens (for gdb, on the
/// control socket): its stderr (the L1's `.l1/stderr` in the share) is not
/// shown while a job runs, and a client that connects before pmemvm opens
/// its serial port loses its first bytes.
pub(crate) struct Announcer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Announcer {
    /// Announces gdb's stub at `addr` once pmemvm in the L1 said it listens.
    pub(crate) fn start(stderr: PathBuf, addr: String) -> Self {
        Self::when(
            stderr,
            vmm::debug::gdb::server::LISTENING.to_string(),
            format!(
                "pmemvm: --engine nested: {} {addr} (through the L1)",
                vmm::debug::gdb::server::LISTENING
            ),
        )
    }

    /// Announces the control socket at `path` once pmemvm in the L1 serves
    /// it on [`super::l1::API_TTY`].
    pub(crate) fn api(stderr: PathBuf, path: &Path) -> Self {
        Self::when(
            stderr,
            format!("{}{}", vmm::api::READY, super::l1::API_TTY),
            format!(
                "pmemvm: --engine nested: {}{} (through the L1)",
                vmm::api::READY,
                path.display()
            ),
        )
    }

    /// Prints `message` once `stderr` holds `marker`.
    fn when(stderr: PathBuf, marker: String, message: String) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("l1-announce".into())
            .spawn(move || {
                let mut said = false;
                while !said && !flag.load(Ordering::Relaxed) {
                    let text = fs::read_to_string(&stderr).unwrap_or_default();
                    said = text.contains(&marker);
                    if said {
                        eprintln!("{message}");
                    } else {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            })
            .ok();
        Self { stop, thread }
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
