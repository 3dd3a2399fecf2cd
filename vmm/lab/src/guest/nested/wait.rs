//! Child processes with a time limit: one deadline loop for the L1 of
//! `--engine nested`, the QEMU of `--engine qemu` and every test harness (the nested L1, direct runs, QEMU
//! guests of the peer-engine and table tiers), killing the whole process group
//! at the deadline.

use std::process::{Child, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

/// How a watched child ended.
#[derive(Debug)]
pub enum Waited {
    /// It exited by itself.
    Exited(ExitStatus),
    /// The deadline passed; its process group was killed.
    Deadline,
    /// The watcher stopped it (its process group was killed) for this reason.
    Stopped(String),
}

/// Waits for `child` until it exits, the deadline passes (`None`: no
/// deadline), or `watch` (called about once a second) returns a reason to stop
/// it; the last two kill its process group.
pub fn wait_watched(
    child: &mut Child,
    deadline: Option<Duration>,
    watch: impl FnMut() -> Option<String>,
) -> std::io::Result<Waited> {
    wait_watched_with_grace(child, deadline, Duration::ZERO, watch)
}

/// As [`wait_watched`], but a stop asked for by `watch` first sends SIGTERM
/// to the process group and waits up to `grace` for the child to exit (QEMU
/// ends in order on SIGTERM) before SIGKILL. The deadline still kills at once.
pub fn wait_watched_with_grace(
    child: &mut Child,
    deadline: Option<Duration>,
    grace: Duration,
    mut watch: impl FnMut() -> Option<String>,
) -> std::io::Result<Waited> {
    let start = Instant::now();
    let mut last_watch = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Waited::Exited(status));
        }
        if deadline.is_some_and(|d| start.elapsed() >= d) {
            kill_group(child);
            let _ = child.wait();
            return Ok(Waited::Deadline);
        }
        if last_watch.elapsed() >= Duration::from_secs(1) {
            last_watch = Instant::now();
            if let Some(reason) = watch() {
                end_group(child, grace);
                return Ok(Waited::Stopped(reason));
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Ends the process group led by `child`: SIGTERM, up to `grace` for the
/// child to exit, then SIGKILL (at once for a zero grace); reaps the child.
pub fn end_group(child: &mut Child, grace: Duration) {
    if !grace.is_zero() {
        signal_group(child, libc::SIGTERM);
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if matches!(child.try_wait(), Ok(Some(_))) {
                // The leader is gone; anything it left in its group goes too.
                signal_group(child, libc::SIGKILL);
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
    kill_group(child);
    let _ = child.wait();
}

fn signal_group(child: &Child, signal: libc::c_int) -> bool {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return false;
    };
    // SAFETY: kill(2) only sends a signal; -pid names the process group
    // created for the child, so no unrelated process is hit.
    unsafe { libc::kill(-pid, signal) == 0 }
}

/// Kills the process group led by `child` (it was spawned with
/// `process_group(0)`), falling back to the child alone.
pub fn kill_group(child: &mut Child) {
    if !signal_group(child, libc::SIGKILL) {
        let _ = child.kill();
    }
}

/// Makes `cmd` a child that dies with this process however it ends, SIGKILL
/// included (`PR_SET_PDEATHSIG`): a QEMU it starts never outlives pmemvm.
pub fn dies_with_this_process(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the forked child before exec and makes only
    // the async-signal-safe calls prctl(2) and getppid(2).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("pmemvm exited while QEMU started"));
            }
            Ok(())
        });
    }
}

/// Starts `cmd` with an empty signal mask. std's fork path (taken with a
/// `pre_exec`) keeps the parent thread's mask, so a QEMU started while pmemvm
/// blocks its stop signals (to read them from a signalfd) would keep SIGTERM
/// blocked and ignore the SIGTERM that asks it to end in order.
pub fn with_empty_signal_mask(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and makes only
    // the async-signal-safe calls sigemptyset(3) and pthread_sigmask(3), on a
    // sigset of its own stack.
    unsafe {
        cmd.pre_exec(|| {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            match libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) {
                0 => Ok(()),
                rc => Err(std::io::Error::from_raw_os_error(rc)),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn a_watcher_can_stop_the_child_and_an_exit_is_reported() {
        let mut child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let mut calls = 0;
        let w = wait_watched(&mut child, Some(Duration::from_secs(20)), || {
            calls += 1;
            (calls == 2).then(|| "stalled".to_string())
        })
        .expect("wait");
        assert!(
            matches!(w, Waited::Stopped(ref r) if r == "stalled"),
            "{w:?}"
        );
        let mut ok = Command::new("true").spawn().expect("true");
        let w = wait_watched(&mut ok, None, || None).expect("wait");
        assert!(matches!(w, Waited::Exited(s) if s.success()), "{w:?}");
    }
}
