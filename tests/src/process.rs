//! Child processes of the tests with a time limit: the product's deadline
//! loop (`lab::guest::nested::wait`, also the L1 of `--engine nested`) for every
//! harness (the nested L1, direct runs, QEMU guests of the peer-engine and
//! table tiers), killing the whole process group at the deadline.

use std::process::{Child, ExitStatus};
use std::time::Duration;

pub use lab::guest::nested::wait::{kill_group, Waited};

/// Waits for `child` until it exits, the deadline passes, or `watch` (called
/// about once a second) returns a reason to stop it; the last two kill its
/// process group.
pub fn wait_watched(
    child: &mut Child,
    deadline: Duration,
    watch: impl FnMut() -> Option<String>,
) -> std::io::Result<Waited> {
    lab::guest::nested::wait::wait_watched(child, Some(deadline), watch)
}

/// Waits for `child`; at the deadline kills its process group and returns
/// `None`.
pub fn wait_with_deadline(
    child: &mut Child,
    deadline: Duration,
) -> std::io::Result<Option<ExitStatus>> {
    Ok(match wait_watched(child, deadline, || None)? {
        Waited::Exited(status) => Some(status),
        Waited::Deadline | Waited::Stopped(_) => None,
    })
}

/// PIDs of the QEMU processes whose command line mentions `dir` (a run's
/// scratch directory: its DIMM files, its console).
pub fn qemus_under(dir: &std::path::Path) -> Vec<libc::pid_t> {
    let needle = dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.contains("qemu-system") && cmd.contains(&needle)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::time::Instant;

    #[test]
    fn deadline_kills_the_whole_group() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30"])
            .process_group(0)
            .spawn()
            .expect("sh");
        let start = Instant::now();
        let w = wait_with_deadline(&mut child, Duration::from_millis(300)).expect("wait");
        assert!(w.is_none());
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
