//! One QEMU-TCG guest at a time on this machine.
//!
//! TCG is CPU-bound and the machines this suite runs on have two cores: two
//! emulated guests at once only make every deadline tighter (and an L1 under
//! a loaded host has hung in emulation before). Every test that boots QEMU
//! under TCG — the nested L1s, the image and table checks, `--engine qemu`
//! runs — holds [`lock`] while the guest runs. The lock is a `flock` on
//! `$PMEMVM_TCG_LOCK` (default `/tmp/pmemvm-tcg.lock`), so it also serialises
//! test processes of different binaries and of other checkouts on the same
//! machine, plus a mutex for threads of one process (flock is per open file,
//! not per thread).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

static IN_PROCESS: Mutex<()> = Mutex::new(());

/// Held while one TCG guest runs; released on drop.
#[derive(Debug)]
pub struct TcgGuard {
    file: File,
    _thread: MutexGuard<'static, ()>,
}

/// The lock file: `$PMEMVM_TCG_LOCK` or `/tmp/pmemvm-tcg.lock`.
pub fn lock_path() -> PathBuf {
    match std::env::var_os("PMEMVM_TCG_LOCK") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/tmp/pmemvm-tcg.lock"),
    }
}

/// Waits until no other TCG guest of this suite runs on the machine.
pub fn lock() -> io::Result<TcgGuard> {
    lock_at(&lock_path())
}

fn lock_at(path: &Path) -> io::Result<TcgGuard> {
    let thread = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))?;
    loop {
        // SAFETY: flock only reads the descriptor, which `file` keeps open for
        // the call; it touches no memory of ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(io::Error::new(
                err.kind(),
                format!("flock {}: {err}", path.display()),
            ));
        }
    }
    let mut guard = TcgGuard {
        file,
        _thread: thread,
    };
    guard.describe(None);
    Ok(guard)
}

impl TcgGuard {
    /// Names the guest's console log in the lock file, beside the test that
    /// holds the lock: `tests/run.sh` prints its tail when the suite's
    /// deadline passes while this guest runs.
    pub fn note_console(&mut self, console: &Path) {
        self.describe(Some(console));
    }

    fn describe(&mut self, console: Option<&Path>) {
        use std::io::{Seek, Write};
        let mut text = format!("test={}\npid={}\n", pmemvm_skip::tier(), std::process::id());
        if let Some(c) = console {
            text.push_str(&format!("console={}\n", c.display()));
        }
        // Best effort: the note only helps a reader after a deadline.
        let _ = self.file.set_len(0);
        let _ = self.file.rewind();
        let _ = self.file.write_all(text.as_bytes());
    }
}

impl Drop for TcgGuard {
    fn drop(&mut self) {
        // Still locked here (the descriptor closes after this): no stale note.
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_process_waits_for_the_holder() {
        let dir = std::env::temp_dir().join(format!("pmemvm-tcg-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("lock");
        let guard = lock_at(&path).expect("lock");
        // flock(1) -n from another process must fail while we hold it.
        let held = std::process::Command::new("flock")
            .args(["-n", path.to_str().expect("utf-8 path"), "true"])
            .status()
            .expect("run flock(1)");
        assert!(
            !held.success(),
            "another process got the TCG lock while it was held"
        );
        drop(guard);
        let free = std::process::Command::new("flock")
            .args(["-n", path.to_str().expect("utf-8 path"), "true"])
            .status()
            .expect("run flock(1)");
        assert!(free.success(), "the TCG lock was not released on drop");
        assert_eq!(
            std::fs::read_to_string(&path).expect("lock file"),
            "",
            "note left after drop"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
