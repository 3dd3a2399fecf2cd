//! Driving Debian's gdb against `pmemvm --gdb` in tests: start pmemvm,
//! wait until its stub listens, run `gdb -batch` with the commands a user
//! types, then wait for pmemvm's exit status.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::skip::Skip;

/// Ok when gdb runs here; a skip naming the package otherwise.
pub fn gdb_available() -> Result<(), Skip> {
    match Command::new("gdb").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(Skip::new("gdb is not installed (apt-get install gdb)")),
    }
}

/// A TCP port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// A running pmemvm with its output collected.
#[derive(Debug)]
pub struct Debugged {
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

fn collect(
    mut pipe: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
}

impl Debugged {
    /// Starts `cmd`, collecting its stdout and stderr.
    pub fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pmemvm");
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().expect("stdout"), out.clone()),
            collect(child.stderr.take().expect("stderr"), err.clone()),
        ];
        Self {
            child,
            out,
            err,
            readers,
        }
    }

    /// What pmemvm printed so far: its stdout (the guest's console), then
    /// its stderr.
    pub fn output(&self) -> String {
        let out = self.out.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let err = self.err.lock().unwrap_or_else(|e| e.into_inner()).clone();
        format!("{out}\n{err}")
    }

    /// The process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until pmemvm printed `needle`; false after `limit` or when it exited.
    pub fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self.output().contains(needle) {
                return true;
            }
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                std::thread::sleep(Duration::from_millis(200));
                return self.output().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Waits for pmemvm's exit status (killed after `limit`: `None`).
    pub fn finish(mut self, limit: Duration) -> (Option<i32>, String) {
        let end = Instant::now() + limit;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.code(),
                _ if Instant::now() >= end => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        (status, self.output())
    }
}

impl Drop for Debugged {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `pmemvm boot --kernel KERNEL --timeout 120 EXTRA...` of a tiny guest on
/// this host's KVM, its output collected.
pub fn boot_tiny(kernel: &Path, extra: &[&str]) -> Debugged {
    let mut cmd = Command::new(crate::pmemvm::pmemvm_bin());
    cmd.args(["boot", "--kernel"])
        .arg(kernel)
        .args(["--timeout", "120"])
        .args(extra);
    Debugged::start(cmd)
}

/// Runs `gdb -batch -nx FILE` with `target remote TARGET` and `commands`
/// (each an `-ex`); its stdout and stderr, with its exit status last.
pub fn gdb_batch(file: &Path, target: &str, commands: &[&str], limit: Duration) -> String {
    gdb_batch_with_ctrl_c(file, target, commands, None, limit)
}

/// [`gdb_batch`], and SIGINT to gdb (what Ctrl-C in its terminal sends)
/// `ctrl_c` after it started.
pub fn gdb_batch_with_ctrl_c(
    file: &Path,
    target: &str,
    commands: &[&str],
    ctrl_c: Option<Duration>,
    limit: Duration,
) -> String {
    let mut cmd = Command::new("gdb");
    cmd.args(["-batch", "-nx"])
        .arg(file)
        .args(["-ex", "set pagination off", "-ex", "set confirm off"])
        .args(["-ex", "set remotetimeout 60"])
        .args(["-ex", &format!("target remote {target}")]);
    for c in commands {
        cmd.args(["-ex", c]);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gdb");
    let pid = libc::pid_t::try_from(child.id()).expect("gdb's pid");
    let killer = std::thread::spawn(move || {
        let start = Instant::now();
        if let Some(after) = ctrl_c {
            std::thread::sleep(after);
            // SAFETY: kill(2) on gdb's pid, which is ours and not yet reaped
            // (the main thread reaps it only after joining this thread).
            unsafe { libc::kill(pid, libc::SIGINT) };
        }
        std::thread::sleep(limit.saturating_sub(start.elapsed()));
    });
    let waiter = std::thread::spawn(move || child.wait_with_output());
    let end = Instant::now() + limit;
    while !waiter.is_finished() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    if !waiter.is_finished() {
        // SAFETY: as above; gdb has not been reaped (its waiter runs on).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let out = waiter.join().expect("gdb waiter").expect("gdb output");
    drop(killer);
    format!(
        "{}{}\n[gdb status {:?}]",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        out.status.code()
    )
}

/// The value gdb printed for `info registers rip` as the n-th match (0-based).
pub fn rip_values(gdb_output: &str) -> Vec<u64> {
    gdb_output
        .lines()
        .filter_map(|l| l.strip_prefix("rip"))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rip_lines_are_read_as_gdb_prints_them() {
        let out = "rip            0x100018            0x100018 <poke>\nx\nrip            0xffffffff81000000  0xffffffff81000000 <_stext>\n";
        assert_eq!(rip_values(out), vec![0x100018, 0xffff_ffff_8100_0000]);
    }
}

/// What one debugging session brought back.
#[derive(Debug)]
pub struct Session {
    /// gdb's output.
    pub gdb: String,
    /// pmemvm's exit status (`None`: killed at the deadline).
    pub status: Option<i32>,
    /// pmemvm's output.
    pub pmemvm: String,
}

impl Session {
    /// Everything, for assertion messages.
    pub fn all(&self) -> String {
        format!(
            "{}\n--- pmemvm (status {:?}) ---\n{}",
            self.gdb, self.status, self.pmemvm
        )
    }
}

/// pmemvm's line when its stub listens.
pub const LISTENING: &str = "gdb: waiting for a debugger at";

/// Waits (up to `listen`) for `vm`'s stub, runs gdb on `file` against
/// `target` with `commands` (SIGINT to gdb after `ctrl_c`, if given), then
/// waits for pmemvm's end; each step bounded by `limit`.
pub fn debug_session(
    mut vm: Debugged,
    file: &Path,
    target: &str,
    commands: &[&str],
    ctrl_c: Option<Duration>,
    listen: Duration,
    limit: Duration,
) -> Session {
    assert!(vm.wait_for(LISTENING, listen), "{}", vm.output());
    let gdb = gdb_batch_with_ctrl_c(file, target, commands, ctrl_c, limit);
    let (status, pmemvm) = vm.finish(limit);
    Session {
        gdb,
        status,
        pmemvm,
    }
}

/// gdb's commands for the tiny `debuggee` guest: a write watchpoint on
/// `counter`, a breakpoint at `poke`, one step, `counter` read and
/// `status` set to 3, then on to the guest's end.
pub const WATCH_BREAK_STEP: &[&str] = &[
    "info threads",
    "watch *(long *)&counter",
    "continue",
    "delete",
    "break poke",
    "continue",
    "info registers rip",
    "stepi",
    "info registers rip",
    "print (long)counter",
    "set var *(unsigned char *)&status = 3",
    "continue",
];

/// What [`WATCH_BREAK_STEP`] must show where the KVM stops on breakpoints:
/// the watchpoint's first write (0 → 1), the stop at `poke` (0x100018),
/// one step over its 1-byte `nop`, five loop rounds, and the guest's exit
/// with the status gdb wrote, in gdb and as pmemvm's status.
pub fn assert_watch_break_step(s: &Session) {
    let (out, all) = (&s.gdb, s.all());
    assert!(
        out.contains("Old value = 0") && out.contains("New value = 1"),
        "the write watchpoint fires on the first increment:\n{all}"
    );
    assert!(
        out.contains("Breakpoint 2, "),
        "the breakpoint in poke is hit:\n{all}"
    );
    assert_eq!(
        rip_values(out),
        vec![0x100018, 0x100019],
        "stopped at poke, then one step over its 1-byte nop:\n{all}"
    );
    assert!(
        out.contains("$1 = 5"),
        "the loop ran five times before poke:\n{all}"
    );
    assert!(
        out.contains("exited with code 03"),
        "gdb sees the exit:\n{all}"
    );
    assert_eq!(
        s.status,
        Some(3),
        "pmemvm ends with the guest's status:\n{all}"
    );
}
