//! One boot in a child process. A bench runs every boot through the same
//! `pmemvm` binary in a fresh process (both engines measured the same way;
//! nothing — signal state, file descriptors, allocator state, a stuck vCPU
//! thread — carries over from one run to the next). The parent hands the
//! [`RunSpec`] over as JSON, the child ([`serve`]) runs it and writes a
//! [`ChildOutcome`] back.
//!
//! Signals: while a child runs, the parent holds SIGINT, SIGTERM and SIGHUP
//! blocked and forwards each one to the child (Ctrl-C reaches both through
//! the terminal's process group; `kill -INT <bench>` reaches the parent only),
//! so the child ends its VM in order — fdatasync included — and the parent
//! learns of the signal and stops the bench after that run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::guest::run::{self, RunResult, RunSpec};
use vmm::exit_status::{Classified, ErrorKind};

/// The hidden subcommand of the `pmemvm` binary that runs one spec.
pub const SUBCOMMAND: &str = "__run-job";

/// Extra time the parent allows a child beyond its own timeout before it
/// kills it (boot, image checks and the exit fdatasync are outside the VM's
/// timeout).
const GRACE: Duration = Duration::from_secs(120);

/// What the child wrote back.
#[derive(Debug, Serialize, Deserialize)]
pub enum ChildOutcome {
    /// The run happened (it may still have failed: see its `error`).
    Ran(Box<RunResult>),
    /// Nothing ran; the message says why, the kind whose fault it is.
    Refused {
        /// The error, as the user sees it.
        message: String,
        /// Whose fault it is (the exit status follows).
        kind: ErrorKind,
    },
}

/// Errors of running a boot in a child process.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// The child refused the run before it started.
    #[error("{message}")]
    Refused {
        /// Its message.
        message: String,
        /// Whose fault it is.
        kind: ErrorKind,
    },
    /// The child could not be started, or it ended without an outcome.
    #[error("the run's child process ({}) {what}", exe.display())]
    Child {
        /// The binary.
        exe: PathBuf,
        /// What happened.
        what: String,
    },
    /// A signal arrived and the child ended before it had run anything (it
    /// was still starting up); the bench stops there.
    #[error("stopped by signal {signal} before the boot produced a result")]
    Interrupted {
        /// The signal.
        signal: i32,
    },
    /// Host I/O around the child.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl vmm::exit_status::Classified for ChildError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Refused { kind, .. } => *kind,
            Self::Child { .. } | Self::Interrupted { .. } | Self::Io { .. } => {
                ErrorKind::Environment
            }
        }
    }
}

/// A finished child run.
#[derive(Debug)]
pub struct ChildRun {
    /// What the run produced.
    pub result: RunResult,
    /// The signal that arrived while it ran (and was forwarded to it), if any.
    pub interrupted_by: Option<i32>,
}

/// In the child: runs the spec in `spec_path` and writes the outcome to
/// `outcome_path`. Returns the process's exit status (the run's own).
pub fn serve(spec_path: &Path, outcome_path: &Path) -> u8 {
    let outcome = match std::fs::read(spec_path)
        .map_err(|e| format!("cannot read {}: {e}", spec_path.display()))
        .and_then(|b| {
            serde_json::from_slice::<RunSpec>(&b)
                .map_err(|e| format!("{} is not a run spec: {e}", spec_path.display()))
        }) {
        Err(message) => ChildOutcome::Refused {
            message,
            kind: ErrorKind::Usage,
        },
        Ok(spec) => match run::run_job(&spec) {
            Ok(r) => ChildOutcome::Ran(Box::new(r)),
            Err(e) => ChildOutcome::Refused {
                message: e.to_string(),
                kind: e.kind(),
            },
        },
    };
    let status = match &outcome {
        ChildOutcome::Ran(r) => r.status,
        ChildOutcome::Refused { kind, .. } => kind.exit_status(),
    };
    let written = serde_json::to_vec(&outcome)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(outcome_path, b));
    if let Err(e) = written {
        eprintln!("pmemvm: cannot write {}: {e}", outcome_path.display());
        return vmm::exit_status::RUNTIME_ERROR;
    }
    status
}

/// In the parent: runs `spec` as `exe __run-job SPEC OUTCOME` in `dir` (a
/// scratch directory the caller owns) and returns what it produced.
pub fn run_in_child(exe: &Path, spec: &RunSpec, dir: &Path) -> Result<ChildRun, ChildError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| ChildError::Io { what, source }
    };
    let spec_path = dir.join("run-spec.json");
    let outcome_path = dir.join("run-outcome.json");
    let _ = std::fs::remove_file(&outcome_path);
    let bytes = serde_json::to_vec(spec).map_err(|e| ChildError::Io {
        what: "serialising the run spec".into(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(&spec_path, bytes).map_err(io("writing the run spec"))?;

    // The core's stop-signal block (SIGINT, SIGTERM, SIGHUP, and SIGQUIT, read here and
    // left alone: the child has its own, and a terminal's Ctrl-\ reaches it directly).
    let held = vmm::signals::StopSignals::block().map_err(io("blocking SIGINT/SIGTERM/SIGHUP"))?;
    let take_pending =
        || std::iter::from_fn(|| held.read()).find(|&sig| sig != vmm::signals::DESCRIBE_SIGNAL);
    // The child starts with an empty signal mask (std resets it on spawn).
    let mut child = Command::new(exe)
        .arg(SUBCOMMAND)
        .arg(&spec_path)
        .arg(&outcome_path)
        .spawn()
        .map_err(|e| ChildError::Child {
            exe: exe.to_path_buf(),
            what: format!("could not be started: {e}"),
        })?;
    let limit = spec.timeout + GRACE;
    let start = Instant::now();
    let mut interrupted_by = None;
    let mut killed = false;
    let status = loop {
        if let Some(sig) = take_pending() {
            interrupted_by = Some(sig);
            forward(&child, sig);
        }
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() > limit && !killed => {
                let _ = child.kill();
                killed = true;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(io("waiting for the run's child process")(e)),
        }
    };
    if let Some(sig) = take_pending() {
        interrupted_by = Some(sig);
    }
    drop(held);
    if killed {
        return Err(ChildError::Child {
            exe: exe.to_path_buf(),
            what: format!(
                "did not end within {} s (its timeout plus {} s) and was killed",
                limit.as_secs(),
                GRACE.as_secs()
            ),
        });
    }
    let outcome = std::fs::read(&outcome_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<ChildOutcome>(&b).ok());
    match outcome {
        Some(ChildOutcome::Ran(result)) => Ok(ChildRun {
            result: *result,
            interrupted_by,
        }),
        Some(ChildOutcome::Refused { message, kind }) => Err(ChildError::Refused { message, kind }),
        None => match interrupted_by {
            Some(signal) => Err(ChildError::Interrupted { signal }),
            None => Err(ChildError::Child {
                exe: exe.to_path_buf(),
                what: format!("ended ({status}) without writing its outcome"),
            }),
        },
    }
}

fn forward(child: &std::process::Child, sig: i32) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) only sends a signal to our own child process.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_round_trips_and_keeps_its_usage_flag() {
        let o = ChildOutcome::Refused {
            message: "cannot read kernel /nope".into(),
            kind: ErrorKind::Usage,
        };
        let back: ChildOutcome =
            serde_json::from_slice(&serde_json::to_vec(&o).expect("ser")).expect("de");
        assert!(
            matches!(back, ChildOutcome::Refused { kind: ErrorKind::Usage, ref message } if message.contains("/nope"))
        );
    }

    fn small_spec() -> RunSpec {
        RunSpec {
            gdb: None,
            gdb_wait: false,
            control: Default::default(),
            engine: run::Engine::Pmemvm,
            boot: Default::default(),
            machine: vmm::config::MachineSpec {
                cpus: 1,
                memory: 256 << 20,
                ..Default::default()
            },
            workload: run::Workload::Fio(Default::default()),
            stream_console: false,
            console_log: None,
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn a_missing_binary_is_named() {
        let dir = std::env::temp_dir().join(format!("child-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let spec = small_spec();
        let e = run_in_child(Path::new("/nonexistent/pmemvm"), &spec, &dir).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/pmemvm"), "{e}");
        assert!(e.to_string().contains("could not be started"), "{e}");
        let back: RunSpec = serde_json::from_slice(
            &std::fs::read(dir.join("run-spec.json")).expect("spec written"),
        )
        .expect("spec round-trips");
        assert_eq!(back.machine, spec.machine);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// Whether `signal` is blocked on thread `tid` of this process.
    fn blocked_on(tid: libc::pid_t, signal: i32) -> bool {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("SigBlk:"))
                    .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            })
            .is_some_and(|m| m & (1 << (signal - 1)) != 0)
    }

    #[test]
    fn a_stop_signal_is_forwarded_to_the_child_and_sigquit_is_not_a_stop() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("child-signal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // A stand-in for `pmemvm __run-job`: notes the SIGTERM it gets and ends.
        let (got, ready) = (dir.join("got-term"), dir.join("trap-set"));
        let exe = dir.join("child.sh");
        std::fs::write(
            &exe,
            format!(
                "#!/bin/sh\ntrap 'touch {}; exit 0' TERM\ntouch {}\nwhile :; do sleep 0.1; done\n",
                got.display(),
                ready.display()
            ),
        )
        .expect("script");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn({
            let (exe, dir) = (exe.clone(), dir.clone());
            move || {
                // SAFETY: gettid has no arguments and cannot fail.
                tx.send(unsafe { libc::gettid() }).expect("send tid");
                run_in_child(&exe, &small_spec(), &dir)
            }
        });
        let tid = rx.recv().expect("tid");
        let start = Instant::now();
        while !blocked_on(tid, libc::SIGTERM) || !ready.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "never blocked or started"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        for sig in [libc::SIGQUIT, libc::SIGTERM] {
            // SAFETY: tgkill on this process's worker thread, which blocks both signals.
            let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sig) };
            assert_eq!(rc, 0);
        }
        let e = worker.join().expect("join").unwrap_err();
        assert!(
            matches!(e, ChildError::Interrupted { signal } if signal == libc::SIGTERM),
            "{e}"
        );
        assert!(got.exists(), "the child did not get the SIGTERM");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn the_child_side_refuses_a_spec_it_cannot_read() {
        let dir = std::env::temp_dir().join(format!("child-serve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let spec = dir.join("spec.json");
        std::fs::write(&spec, b"{not json").expect("write");
        let out = dir.join("out.json");
        assert_eq!(serve(&spec, &out), vmm::exit_status::USAGE);
        let o: ChildOutcome =
            serde_json::from_slice(&std::fs::read(&out).expect("outcome")).expect("de");
        assert!(matches!(
            o,
            ChildOutcome::Refused {
                kind: ErrorKind::Usage,
                ..
            }
        ));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
