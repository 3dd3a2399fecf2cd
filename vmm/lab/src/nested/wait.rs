//! Child processes with a time limit: one deadline loop for the L1 of
//! `--engine nested` and every test harness (the nested L1, direct runs, QEMU
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
                kill_group(child);
                let _ = child.wait();
                return Ok(Waited::Stopped(reason));
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Kills the process group led by `child` (it was spawned with
/// `process_group(0)`), falling back to the child alone.
pub fn kill_group(child: &mut Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) only sends a signal; -pid names the process group
        // created for the child, so no unrelated process is hit.
        let rc = unsafe { libc::kill(-pid, libc::SIGKILL) };
        if rc == 0 {
            return;
        }
    }
    let _ = child.kill();
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
