//! A bounded number of QEMU-TCG guests at once on this machine.
//!
//! TCG is CPU-bound: more emulated guests than cores only make every
//! deadline tighter. Every test that boots QEMU under TCG — the nested L1s,
//! the image and table checks, `--engine qemu` runs — holds [`lock`] while
//! the guest runs. The lock is one of [`slots`] `flock`s: slot 0 is
//! `$PMEMVM_TCG_LOCK` (default `/tmp/pmemvm-tcg.lock`), slot N that path with
//! `.N` appended, so it also bounds test processes of different binaries and
//! of other checkouts on the same machine, and threads of one process (each
//! call opens the file itself, and flocks of different open files conflict).
//! `$PMEMVM_TCG_SLOTS` sets the number (default: the machine's cores; an L1
//! has one vCPU, one core of work).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Held while one TCG guest runs; released on drop.
#[derive(Debug)]
pub struct TcgGuard {
    file: File,
    path: PathBuf,
    /// Further slots held with this one (a guest with more than one vCPU).
    more: Vec<TcgGuard>,
    /// When the slots were taken and how long the wait for them was (the
    /// first guard of a [`lock_n`] only), for [`HOLD_LOG_ENV`].
    taken: Option<(Instant, Duration)>,
}

/// The file (when set) where each released guard appends one line: the
/// test, the slots it held, the seconds it held them and the seconds it
/// waited for them — tests/run.sh prints the longest holders, the tests
/// that cost the TCG queues their time.
pub const HOLD_LOG_ENV: &str = "PMEMVM_TCG_HOLD_LOG";

/// The lock file: `$PMEMVM_TCG_LOCK` or `/tmp/pmemvm-tcg.lock`.
pub fn lock_path() -> PathBuf {
    match std::env::var_os("PMEMVM_TCG_LOCK") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/tmp/pmemvm-tcg.lock"),
    }
}

/// How many TCG guests of this suite may run at once: `$PMEMVM_TCG_SLOTS`,
/// else the number of cores.
///
/// # Panics
/// On a `PMEMVM_TCG_SLOTS` that is not a whole number from 1 to 64: a
/// misconfigured run fails, it does not guess.
pub fn slots() -> usize {
    match std::env::var("PMEMVM_TCG_SLOTS") {
        Ok(v) if !v.is_empty() => parse_slots(&v).unwrap_or_else(|| {
            panic!("PMEMVM_TCG_SLOTS={v:?} is not a number of guests from 1 to 64")
        }),
        _ => std::thread::available_parallelism().map_or(1, |n| n.get().min(64)),
    }
}

fn parse_slots(v: &str) -> Option<usize> {
    v.trim().parse().ok().filter(|n| (1..=64).contains(n))
}

/// The lock file of slot `n` (slot 0 is `path` itself).
pub fn slot_path(path: &Path, n: usize) -> PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let mut p = path.as_os_str().to_os_string();
    p.push(format!(".{n}"));
    PathBuf::from(p)
}

/// Waits until fewer than [`slots`] TCG guests of this suite run on the
/// machine.
pub fn lock() -> io::Result<TcgGuard> {
    lock_at(&lock_path(), slots())
}

/// Waits until `n` slots are free at once and holds them all (an L1 with `n` vCPUs is `n`
/// cores of work); never more than there are.
pub fn lock_n(n: usize) -> io::Result<TcgGuard> {
    lock_n_at(&lock_path(), slots(), n)
}

fn lock_n_at(path: &Path, slots: usize, n: usize) -> io::Result<TcgGuard> {
    let want = n.clamp(1, slots.max(1));
    let asked = Instant::now();
    if want > 1 {
        // Slot 0, then slot 1, ..., each waited for and kept: a guest of several
        // vCPUs is not starved by one-slot guests that keep taking whichever
        // slot frees first (it once waited 870 s with a slot free most of the
        // time). Every multi-slot taker goes in this order, so two of them
        // never hold a slot the other waits for while waiting themselves.
        let mut held = Vec::with_capacity(want);
        for s in 0..want {
            held.push(take_slot(&slot_path(path, s), true)?.ok_or_else(|| {
                io::Error::other(format!("flock {}: not taken", slot_path(path, s).display()))
            })?);
        }
        return Ok(one_guard(held, asked));
    }
    loop {
        let mut held = Vec::new();
        for s in 0..slots.max(1) {
            if held.len() == want {
                break;
            }
            if let Some(g) = try_slot(&slot_path(path, s))? {
                held.push(g);
            }
        }
        if held.len() == want {
            return Ok(one_guard(held, asked));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The slots `held` (at least one) as one guard, asked for at `asked`.
fn one_guard(mut held: Vec<TcgGuard>, asked: Instant) -> TcgGuard {
    let mut first = held.remove(0);
    first.more = held;
    first.taken = Some((Instant::now(), asked.elapsed()));
    first
}

fn lock_at(path: &Path, slots: usize) -> io::Result<TcgGuard> {
    lock_n_at(path, slots, 1)
}

/// The slot at `path` if it is free now.
fn try_slot(path: &Path) -> io::Result<Option<TcgGuard>> {
    take_slot(path, false)
}

/// The slot at `path`: waited for with `wait`, else only if it is free now.
fn take_slot(path: &Path, wait: bool) -> io::Result<Option<TcgGuard>> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))?;
    loop {
        let op = if wait {
            libc::LOCK_EX
        } else {
            libc::LOCK_EX | libc::LOCK_NB
        };
        // SAFETY: flock only reads the descriptor, which `file` keeps open for
        // the call; it touches no memory of ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op) };
        if rc == 0 {
            break;
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(None),
            kind => {
                return Err(io::Error::new(
                    kind,
                    format!("flock {}: {err}", path.display()),
                ))
            }
        }
    }
    let mut guard = TcgGuard {
        file,
        path: path.to_path_buf(),
        more: Vec::new(),
        taken: None,
    };
    guard.describe(None);
    Ok(Some(guard))
}

impl TcgGuard {
    /// The slot's lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names the guest's console log in the lock file, beside the test that
    /// holds the lock: `tests/run.sh` prints its tail when the suite's
    /// deadline passes while this guest runs.
    pub fn note_console(&mut self, console: &Path) {
        self.describe(Some(console));
        for g in &mut self.more {
            g.describe(Some(console));
        }
    }

    /// How many slots this guard holds.
    pub fn slots_held(&self) -> usize {
        1 + self.more.len()
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
        if let (Some((at, waited)), Some(log)) = (self.taken, std::env::var_os(HOLD_LOG_ENV)) {
            let line = hold_line(
                &pmemvm_skip::tier(),
                self.slots_held(),
                at.elapsed(),
                waited,
            );
            // Best effort: the log only tells where the suite's time went.
            let _ = append(Path::new(&log), &line);
        }
    }
}

/// One line of the hold log: test, slots, seconds held, seconds waited.
fn hold_line(test: &str, slots: usize, held: Duration, waited: Duration) -> String {
    format!(
        "{:.0}\t{slots}\t{:.0}\t{test}\n",
        held.as_secs_f64(),
        waited.as_secs_f64()
    )
}

fn append(path: &Path, line: &str) -> io::Result<()> {
    use std::io::Write;
    // One write of a short line to an O_APPEND file: lines of concurrent
    // tests do not interleave.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_guard_logs_its_test_slots_and_times() {
        let line = hold_line(
            "nested_gdb::x",
            2,
            Duration::from_millis(61_600),
            Duration::from_secs(3),
        );
        assert_eq!(line, "62\t2\t3\tnested_gdb::x\n");
        let dir = std::env::temp_dir().join(format!("pmemvm-tcg-hold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let log = dir.join("holds");
        append(&log, "a\n").expect("append");
        append(&log, "b\n").expect("append");
        assert_eq!(std::fs::read_to_string(&log).expect("read"), "a\nb\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_second_process_waits_for_the_holder() {
        let dir = std::env::temp_dir().join(format!("pmemvm-tcg-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("lock");
        let guard = lock_at(&path, 1).expect("lock");
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

    #[test]
    fn two_slots_admit_two_holders_and_the_third_waits() {
        let dir = std::env::temp_dir().join(format!("pmemvm-tcg-slots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("lock");
        let a = lock_at(&path, 2).expect("first");
        let b = lock_at(&path, 2).expect("second, in the same process");
        assert_ne!(a.path(), b.path());
        assert_eq!(b.path(), dir.join("lock.1"));
        // A third holder (another thread) waits until one is dropped.
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        let t = std::thread::spawn(move || {
            let g = lock_at(&p, 2).expect("third");
            tx.send(g.path().to_path_buf()).expect("send");
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(800)).is_err(),
            "a third guest ran beside two"
        );
        drop(a);
        let got = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("third got a slot");
        assert_eq!(got, path);
        t.join().expect("join");
        drop(b);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_two_slot_holder_waits_for_both_and_holds_them_together() {
        let dir = std::env::temp_dir().join(format!("pmemvm-tcg-two-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("lock");
        let one = lock_at(&path, 2).expect("one");
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        let t = std::thread::spawn(move || {
            let g = lock_n_at(&p, 2, 2).expect("two");
            tx.send(g.slots_held()).expect("send");
            // Both are held: a single-slot taker finds none free now.
            assert!(try_slot(&p).expect("try").is_none());
            assert!(try_slot(&slot_path(&p, 1)).expect("try").is_none());
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(800)).is_err(),
            "two slots taken while one was held"
        );
        drop(one);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).expect("got both"),
            2
        );
        t.join().expect("join");
        // More than there are is clamped to all of them.
        assert_eq!(lock_n_at(&path, 2, 5).expect("all").slots_held(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_two_slot_taker_is_not_starved_by_one_slot_takers() {
        let dir = std::env::temp_dir().join(format!("pmemvm-tcg-fair-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("lock");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Two one-slot takers that keep both slots busy, each free for only
        // 2 ms between holds of 100 ms: both slots are never free at once.
        let churn: Vec<_> = (0..2)
            .map(|_| {
                let (p, stop) = (path.clone(), std::sync::Arc::clone(&stop));
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let g = lock_at(&p, 2).expect("one");
                        std::thread::sleep(Duration::from_millis(100));
                        drop(g);
                        std::thread::sleep(Duration::from_millis(2));
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        let t = std::thread::spawn(move || {
            let g = lock_n_at(&p, 2, 2).expect("two");
            tx.send(g.slots_held()).expect("send");
        });
        let got = rx.recv_timeout(Duration::from_secs(5));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for c in churn {
            c.join().expect("churn");
        }
        t.join().expect("join");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            got.ok(),
            Some(2),
            "the two-slot taker did not get both slots within 5 s"
        );
    }

    #[test]
    fn slot_counts_outside_one_to_64_are_refused() {
        assert_eq!(parse_slots("2"), Some(2));
        assert_eq!(parse_slots(" 1 "), Some(1));
        for bad in ["0", "65", "-1", "two", ""] {
            assert_eq!(parse_slots(bad), None, "{bad}");
        }
        assert_eq!(slot_path(Path::new("/tmp/l"), 0), Path::new("/tmp/l"));
        assert_eq!(slot_path(Path::new("/tmp/l"), 3), Path::new("/tmp/l.3"));
    }
}
