//! What one harness run brings back.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use super::run_dir::RunDir;
use super::tail;
use super::{Mode, CONSOLE_TAIL_LINES};

/// What a command left behind.
#[derive(Debug)]
pub struct RunOutput {
    /// Where it ran.
    pub mode: Mode,
    /// Exit status of the command (128 + signal if killed by a signal in direct mode).
    pub status: i32,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// The L1 serial console (empty in direct mode).
    pub l1_console: String,
    /// Host path of the share: the command's working directory, with every
    /// file it wrote. Removed when this value is dropped unless
    /// `PMEMVM_TEST_KEEP=1`.
    pub share_dir: PathBuf,
    /// Host wall time from starting QEMU (or the command) to its end.
    pub elapsed: Duration,
    /// L1 uptime when its init started the command (nested mode).
    pub l1_uptime_at_run: Option<f64>,
    /// The L1 kernel package (nested mode).
    pub l1_kernel: Option<String>,
    /// Each time the L1 fell silent and was sent a key event to wake it
    /// (`lab::guest::nested::stall::kick`; nested mode).
    pub l1_wakeups: Vec<String>,
    pub(super) _run_dir: RunDir,
}

impl RunOutput {
    /// Host path of `name` in the share.
    pub fn path(&self, name: &str) -> PathBuf {
        self.share_dir.join(name)
    }

    /// Everything useful for an assertion message: status, stdout, stderr and
    /// the tail of the L1 console.
    pub fn dump(&self) -> String {
        let mut s = format!(
            "command ({}) exited with {} after {:.1?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n",
            self.mode,
            self.status,
            self.elapsed,
            tail(&self.stdout, 200),
            tail(&self.stderr, 100)
        );
        if self.mode == Mode::Nested {
            let _ = write!(
                s,
                "--- L1 console (last lines) ---\n{}\n",
                tail(&self.l1_console, CONSOLE_TAIL_LINES)
            );
        }
        s
    }

    /// The files a guest job wrote to `$PMEMVM_OUT`, from the channel file
    /// `channel` of the share, each also copied into `target/KEEP/` for a
    /// reader of a failure (with `channel` itself). A channel that does not
    /// parse gives no files (and says why on stderr): the test's asserts on
    /// them then fail with their own messages.
    pub fn guest_files(&self, channel: &str, keep: &str) -> GuestFiles {
        let bytes = std::fs::read(self.path(channel)).unwrap_or_default();
        let dir = crate::pmemvm::workspace_root().join("target").join(keep);
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(dir.join(channel), &bytes);
        let files = match lab::guest::guest_job::parse_channel(&bytes) {
            Ok(r) => r.files,
            Err(e) => {
                eprintln!("{keep}: the guest's report does not parse: {e}");
                Default::default()
            }
        };
        for (name, b) in &files {
            let _ = std::fs::write(dir.join(name), b);
        }
        GuestFiles { files, dir }
    }
}

/// The files of a guest job's report ([`RunOutput::guest_files`]).
#[derive(Debug)]
pub struct GuestFiles {
    files: std::collections::BTreeMap<String, Vec<u8>>,
    /// Where they were copied.
    pub dir: PathBuf,
}

impl GuestFiles {
    /// The text of file `name` ("" when the guest wrote none).
    pub fn text(&self, name: &str) -> String {
        self.files
            .get(name)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    }
}
