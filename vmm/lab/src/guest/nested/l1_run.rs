//! One run of the L1 (from [`super::l1::l1_command`]) to its end: the
//! deadline, stop signals, SIGQUIT relayed to pmemvm in the L1, the
//! heartbeat watch with its wake-ups, and what the end means.

use std::fs;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::heartbeat::{self, Heartbeat};
use super::l1::{reset_cause, reset_log};
use super::share::{
    l1_dir, parse_console_error, parse_console_status, parse_marker_uptime, parse_status_file, tail,
};
use super::stall;
use super::wait::{wait_watched, Waited};
use super::{CONSOLE_TAIL_LINES, RUN_MARKER};

/// What a finished L1 run brought back.
#[derive(Debug)]
pub struct L1Run {
    /// The command's exit status.
    pub status: i32,
    /// The L1 console without heartbeats.
    pub console: String,
    /// Host wall time from starting QEMU to its end.
    pub elapsed: Duration,
    /// L1 uptime when its init started the command.
    pub uptime_at_run: Option<f64>,
    /// Each time the L1 fell silent and a key event was sent to wake it
    /// ([`stall::kick`]): how long it had been silent, its vCPUs then, and
    /// whether its heartbeat came back.
    pub wakeups: Vec<String>,
}

/// Why an L1 run did not bring back a status.
#[derive(Debug, thiserror::Error)]
pub enum L1Failure {
    /// The deadline passed; QEMU was killed.
    #[error("the L1 VM did not finish within {} s and was killed; where its vCPUs were:\n{state}\nL1 console, last lines:\n{console}", deadline.as_secs())]
    Deadline {
        /// The deadline.
        deadline: Duration,
        /// When it was killed.
        elapsed: Duration,
        /// The L1's vCPUs just before (QEMU's monitor, `stall::diagnose`).
        state: String,
        /// Tail of the L1 console.
        console: String,
    },
    /// The L1 kernel stopped running (no heartbeat from its init).
    #[error(
        "the L1 VM stopped running ({reason}) and was killed; what it was doing:\n{state}\nL1 console, last lines:\n{console}"
    )]
    Stalled {
        /// What the heartbeat watch saw.
        reason: String,
        /// Its vCPUs and QEMU's threads when it was found stopped.
        state: String,
        /// Tail of the L1 console.
        console: String,
    },
    /// SIGINT, SIGTERM or SIGHUP reached this process; QEMU was killed.
    #[error("stopped by signal {signal}; the L1 VM was killed")]
    Signal {
        /// The signal.
        signal: i32,
    },
    /// The L1 init could not set up (module load, 9p mount).
    #[error("the L1 VM failed to set up: {message}; L1 console, last lines:\n{console}")]
    Setup {
        /// The init's error line.
        message: String,
        /// Tail of the L1 console.
        console: String,
    },
    /// L1 stopped (panic, crash, QEMU error) without reporting a status.
    #[error("the L1 VM stopped without reporting the command's exit status (QEMU {qemu_status}{reset}); QEMU said: {qemu_log}\nL1 console, last lines:\n{console}")]
    NoStatus {
        /// QEMU's exit status.
        qemu_status: String,
        /// `; ` and what ended the L1 when QEMU logged it (a triple fault), or empty.
        reset: String,
        /// QEMU's own output.
        qemu_log: String,
        /// Tail of the L1 console.
        console: String,
    },
    /// QEMU could not be started or waited for.
    #[error("cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> L1Failure + '_ {
    move |source| L1Failure::Io {
        what: what.to_string(),
        source,
    }
}

/// SIGQUIT under `--engine nested`: the request goes to pmemvm in the L1
/// (the L1 init's watch loop sees `.l1/describe` in the share within a second
/// and sends pmemvm SIGQUIT there); pmemvm's answer, its `pmemvm: SIGQUIT:`
/// lines on its stderr in the share, is copied to this process's stderr. The
/// guest and the L1 go on.
struct DescribeRelay {
    request: PathBuf,
    stderr: PathBuf,
    /// Bytes of pmemvm's stderr already looked at.
    seen: usize,
    /// A request is out and its answer not all shown.
    waiting: bool,
}

impl DescribeRelay {
    fn new(l1: &Path) -> Self {
        Self {
            request: l1.join("describe"),
            stderr: l1.join("stderr"),
            seen: 0,
            waiting: false,
        }
    }

    fn ask(&mut self) {
        self.seen = fs::metadata(&self.stderr)
            .map_or(0, |m| usize::try_from(m.len()).unwrap_or(usize::MAX));
        match fs::write(&self.request, b"SIGQUIT\n") {
            Ok(()) => {
                eprintln!("pmemvm: SIGQUIT: asking pmemvm in the L1 VM where each vCPU is");
                self.waiting = true;
            }
            Err(e) => eprintln!(
                "pmemvm: SIGQUIT: could not ask pmemvm in the L1 VM ({}: {e})",
                self.request.display()
            ),
        }
    }

    /// pmemvm's answer lines that arrived since the last look.
    fn relay(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.waiting {
            return out;
        }
        let Ok(bytes) = fs::read(&self.stderr) else {
            return out;
        };
        if bytes.len() < self.seen {
            // The L1's command started after the request and truncated the file.
            self.seen = 0;
        }
        // Whole lines only; a partial last line waits for the next look.
        let Some(end) = bytes
            .get(self.seen..)
            .and_then(|b| b.iter().rposition(|&c| c == b'\n'))
        else {
            return out;
        };
        let new = String::from_utf8_lossy(&bytes[self.seen..self.seen + end + 1]).into_owned();
        self.seen += end + 1;
        for line in new.lines().filter(|l| l.starts_with("pmemvm: SIGQUIT:")) {
            if line.contains("the guest goes on") {
                self.waiting = false;
            }
            out.push(line.to_owned());
        }
        out
    }
}

/// What the watch of a running L1 holds between its looks (about one a second).
struct Watch<'a> {
    start: Instant,
    deadline: Option<Duration>,
    pid: u32,
    console: &'a Path,
    code_ranges: PathBuf,
    signals: std::io::Result<vmm::signals::StopSignals>,
    describe: DescribeRelay,
    /// `run --console`: this file's new bytes go to stdout.
    stream: Option<&'a Path>,
    shown: usize,
    beat: Heartbeat,
    /// The L1's vCPUs as QEMU's monitor showed them when the watch gave up.
    stalled_state: String,
    deadline_passed: bool,
    stopped_by: Option<i32>,
    wakeups: Vec<String>,
    /// Beats seen at the last kick and the silence it was sent after.
    kicked: Option<(u64, Duration)>,
}

impl Watch<'_> {
    /// One look: the reason to end the L1 (deadline, stop signal, stopped
    /// heartbeat), or `None` to go on.
    fn look(&mut self) -> Option<String> {
        if self.deadline.is_some_and(|d| self.start.elapsed() >= d) {
            self.stalled_state = stall::diagnose(self.pid, self.console, &self.code_ranges);
            self.deadline_passed = true;
            return Some("the deadline passed".to_owned());
        }
        while let Some(sig) = self.signals.as_ref().ok().and_then(|s| s.read()) {
            if sig == vmm::signals::DESCRIBE_SIGNAL {
                self.describe.ask();
                continue;
            }
            self.stopped_by = Some(sig);
            return Some(format!("signal {sig}"));
        }
        for line in self.describe.relay() {
            eprintln!("{line}");
        }
        self.stream_console();
        let verdict = self.beat.check();
        if verdict.is_some() {
            self.stalled_state = stall::diagnose(self.pid, self.console, &self.code_ranges);
            return verdict;
        }
        self.wake_if_silent();
        None
    }

    /// Copies the streamed file's new bytes to stdout.
    fn stream_console(&mut self) {
        let Some(b) = self.stream.and_then(|path| fs::read(path).ok()) else {
            return;
        };
        if b.len() > self.shown {
            let _ = std::io::stdout().write_all(&b[self.shown..]);
            let _ = std::io::stdout().flush();
            self.shown = b.len();
        }
    }

    /// An L1 silent for [`heartbeat::KICK_AFTER`] (again) gets a key event
    /// ([`stall::kick`]); each is noted, and whether its heartbeat came back.
    fn wake_if_silent(&mut self) {
        if self
            .kicked
            .is_some_and(|(beats, _)| self.beat.beats() > beats)
        {
            if let Some(w) = self.wakeups.last_mut() {
                w.push_str("; its heartbeat came back");
            }
            self.kicked = None;
        }
        let due = match self.kicked {
            None => heartbeat::KICK_AFTER,
            Some((_, silent)) => silent + heartbeat::KICK_AFTER,
        };
        let Some(silent) = self.beat.silence().filter(|s| *s >= due) else {
            return;
        };
        let state = stall::glance(self.console);
        let sent = match stall::kick(self.console) {
            Ok(()) => "a key event was sent to wake it".to_string(),
            Err(e) => format!("no key event could be sent: {e}"),
        };
        self.wakeups.push(format!(
            "no heartbeat for {} s; {}; {sent}",
            silent.as_secs(),
            state.trim_end().replace('\n', ", "),
        ));
        self.kicked = Some((self.beat.beats(), silent));
    }
}

/// Runs the L1 `cmd` (from [`super::l1::l1_command`]) to its end: its console goes to
/// `console`, QEMU's own output to `qemu_log`; the command's status comes
/// from the share's status file (the console line is the fallback).
/// `stream`: copy this file's new bytes to stdout about once a second (the
/// guest console of `run --console`). Without a deadline it waits as long as
/// the L1 lives.
pub fn run_l1(
    mut cmd: Command,
    interactive: bool,
    console: &Path,
    qemu_log: &Path,
    share: &Path,
    deadline: Option<Duration>,
    stream: Option<&Path>,
) -> Result<L1Run, L1Failure> {
    let log = fs::File::create(qemu_log).map_err(io("create QEMU's log"))?;
    if interactive {
        // QEMU reads the terminal: it stays in the foreground process group.
        cmd.stdin(Stdio::inherit()).stdout(Stdio::inherit());
    } else {
        let log2 = log.try_clone().map_err(io("open QEMU's log"))?;
        cmd.stdin(Stdio::null()).stdout(log2).process_group(0);
    }
    cmd.stderr(log);
    // The L1 dies with the thread that waits for it, however that ends
    // (SIGKILL included): QEMU never outlives pmemvm.
    super::wait::dies_with_this_process(&mut cmd);
    // A stop signal ends the L1 with this process (QEMU, in a process group
    // of its own, would not see it). Blocked before the spawn, so none is
    // missed (QEMU inherits the blocked mask; it is killed, not asked, on a stop).
    let signals = vmm::signals::StopSignals::block();
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(io("start qemu-system-x86_64"))?;
    // The deadline is kept by the watch rather than by `wait_watched`, so the
    // L1's vCPUs are read through QEMU's monitor before it is killed.
    let mut watch = Watch {
        start,
        deadline,
        pid: child.id(),
        console,
        code_ranges: l1_dir(share).join(stall::CODE_RANGES),
        signals,
        describe: DescribeRelay::new(&l1_dir(share)),
        stream,
        shown: 0,
        beat: Heartbeat::new(console),
        stalled_state: String::new(),
        deadline_passed: false,
        stopped_by: None,
        wakeups: Vec::new(),
        kicked: None,
    };
    let waited = wait_watched(&mut child, None, || watch.look())
        .map_err(io("wait for qemu-system-x86_64"))?;
    ended(waited, watch, qemu_log, share)
}

/// What the L1's end means: the command's status, or why there is none.
fn ended(
    waited: Waited,
    watch: Watch<'_>,
    qemu_log: &Path,
    share: &Path,
) -> Result<L1Run, L1Failure> {
    let elapsed = watch.start.elapsed();
    let console = watch.console;
    let console_text =
        heartbeat::without_heartbeats(&fs::read_to_string(console).unwrap_or_default());
    let console_tail = || tail(&console_text, CONSOLE_TAIL_LINES);
    let passed = |state| L1Failure::Deadline {
        deadline: watch.deadline.unwrap_or(elapsed),
        elapsed,
        state,
        console: console_tail(),
    };
    let qemu_status = match waited {
        Waited::Exited(status) => status,
        Waited::Deadline => return Err(passed(watch.stalled_state)),
        Waited::Stopped(_) if watch.deadline_passed => return Err(passed(watch.stalled_state)),
        Waited::Stopped(_) if watch.stopped_by.is_some() => {
            return Err(L1Failure::Signal {
                signal: watch.stopped_by.unwrap_or_default(),
            })
        }
        Waited::Stopped(reason) => {
            let mut state = watch.stalled_state;
            for w in &watch.wakeups {
                state.push_str("\nbefore that: ");
                state.push_str(w);
            }
            return Err(L1Failure::Stalled {
                reason,
                state,
                console: console_tail(),
            });
        }
    };
    if let Some(message) = parse_console_error(&console_text) {
        return Err(L1Failure::Setup {
            message,
            console: console_tail(),
        });
    }
    let status = fs::read_to_string(l1_dir(share).join("status"))
        .ok()
        .and_then(|s| parse_status_file(&s))
        .or_else(|| parse_console_status(&console_text));
    let Some(status) = status else {
        return Err(L1Failure::NoStatus {
            qemu_status: qemu_status.to_string(),
            reset: reset_cause(&fs::read_to_string(reset_log(console)).unwrap_or_default())
                .map(|c| format!("; {c}"))
                .unwrap_or_default(),
            qemu_log: fs::read_to_string(qemu_log).unwrap_or_default(),
            console: console_tail(),
        });
    };
    Ok(L1Run {
        status,
        uptime_at_run: parse_marker_uptime(&console_text, RUN_MARKER),
        console: console_text,
        elapsed,
        wakeups: watch.wakeups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigquit_is_asked_through_the_share_and_only_the_answer_is_relayed() {
        let dir = std::env::temp_dir().join(format!("pmemvm-relay-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let stderr = dir.join("stderr");
        fs::write(&stderr, "pmemvm: SIGQUIT: an old answer\n").unwrap();
        let mut r = DescribeRelay::new(&dir);
        assert!(r.relay().is_empty(), "nothing relayed before a request");
        r.ask();
        assert_eq!(
            fs::read_to_string(dir.join("describe")).unwrap(),
            "SIGQUIT\n"
        );
        assert!(
            r.relay().is_empty(),
            "the answer from before the request is not relayed"
        );
        let mut f = fs::OpenOptions::new().append(true).open(&stderr).unwrap();
        f.write_all(b"[log] x\npmemvm: SIGQUIT: vCPU 0: in the guest\npmemvm: SIGQ")
            .unwrap();
        assert_eq!(r.relay(), vec!["pmemvm: SIGQUIT: vCPU 0: in the guest"]);
        f.write_all(b"UIT: the guest goes on (SIGINT or SIGTERM stops it)\n")
            .unwrap();
        assert_eq!(
            r.relay(),
            vec!["pmemvm: SIGQUIT: the guest goes on (SIGINT or SIGTERM stops it)"]
        );
        f.write_all(b"pmemvm: SIGQUIT: late\n").unwrap();
        assert!(r.relay().is_empty(), "an answered request relays no more");
        // The L1's command truncates the file after the request: read from the start.
        r.ask();
        fs::write(&stderr, "pmemvm: SIGQUIT: vCPU 1: in the guest\n").unwrap();
        assert_eq!(r.relay(), vec!["pmemvm: SIGQUIT: vCPU 1: in the guest"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
