//! The L1 machine: its QEMU command line (TCG with emulated AMD SVM, the
//! prepared kernel and initramfs, the share and the backing files'
//! directories over 9p) and one run of it to its end, with the deadline and
//! the heartbeat watch.

use std::fs;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::heartbeat::{self, Heartbeat};
use super::share::{
    l1_dir, parse_console_error, parse_console_status, parse_marker_uptime, parse_status_file, tail,
};
use super::stall;
use super::wait::{wait_watched, Waited};
use super::{L1Image, CONSOLE_TAIL_LINES, RUN_MARKER};
use crate::qemu::{QemuAccel, QemuCommand};

pub use super::share::Mount;

/// The L1's size and wiring.
#[derive(Debug, Clone)]
pub struct L1Options {
    /// L1 RAM in MiB.
    pub memory_mib: u32,
    /// L1 vCPUs.
    pub cpus: u32,
    /// Directories mounted beside the share.
    pub mounts: Vec<Mount>,
    /// The command runs on L1's second serial port, relayed to this
    /// process's stdin and stdout (`pmemvm boot --engine nested`).
    pub interactive: bool,
    /// QEMU's chardev for the L1's third serial port ([`GDB_TTY`]), where
    /// pmemvm in the L1 serves gdb (`--gdb`): a private socket the user's door
    /// relays to ([`super::doors`]), or the user's serial device.
    pub gdb: Option<String>,
    /// QEMU's private socket for the L1's [`API_TTY`], where pmemvm in the L1
    /// serves the control protocol; the user's `--api` door relays to it.
    pub api: Option<PathBuf>,
}

/// The L1 serial port pmemvm serves gdb on, as the L1 sees it.
pub const GDB_TTY: &str = "/dev/ttyS2";

/// The L1 serial port pmemvm serves the control socket's protocol on
/// (`--api` through `--engine nested`), as the L1 sees it.
pub const API_TTY: &str = "/dev/ttyS3";

/// QEMU's chardev (without its id) that listens at the user's `--gdb`
/// address and carries the bytes to the L1's [`GDB_TTY`].
pub fn gdb_chardev(addr: &vmm::gdb::GdbAddr) -> String {
    match addr {
        vmm::gdb::GdbAddr::Tcp(a) => format!(
            "socket,host={},port={},server=on,wait=off,nodelay=on",
            a.ip(),
            a.port()
        ),
        vmm::gdb::GdbAddr::Unix(p) => format!("socket,path={},server=on,wait=off", p.display()),
        vmm::gdb::GdbAddr::Serial(p) => format!("tty,path={}", p.display()),
    }
}

/// The second serial port of an interactive L1, as the L1 init sees it.
pub const INTERACTIVE_TTY: &str = "/dev/ttyS1";

/// The L1's QEMU command: TCG with emulated AMD SVM
/// (`-cpu max,vendor=AuthenticAMD`), the prepared kernel and initramfs, COM1
/// to `console`, `share` as the 9p tag `share` and every [`Mount`]; an
/// interactive L1 has COM2 on this process's stdio (`signal=off`: Ctrl-C
/// reaches the guest).
pub fn l1_command(
    qemu: &Path,
    l1: &L1Image,
    opts: &L1Options,
    console: &Path,
    share: &Path,
) -> Command {
    let mut q = QemuCommand::new(qemu, QemuAccel::Tcg, "max,vendor=AuthenticAMD");
    q.memory(&format!("{}M", opts.memory_mib))
        .smp(opts.cpus)
        .serial_file(console);
    if opts.interactive {
        q.chardev("stdio,id=user,signal=off").serial("chardev:user");
    }
    if let Some(gdb) = &opts.gdb {
        if !opts.interactive {
            // The gdb port is the third: the second exists, unconnected.
            q.serial("null");
        }
        q.chardev(&format!("{gdb},id=gdb")).serial("chardev:gdb");
    }
    if let Some(api) = &opts.api {
        // The API port is the fourth: the ones before it exist, unconnected
        // when nothing else uses them.
        let before = 1
            + usize::from(opts.interactive || opts.gdb.is_some())
            + usize::from(opts.gdb.is_some());
        for _ in before..3 {
            q.serial("null");
        }
        q.chardev(&format!(
            "socket,path={},server=on,wait=off,id=api",
            api.display()
        ))
        .serial("chardev:api");
    }
    q.kernel(
        &l1.vmlinuz,
        Some(&l1.initramfs),
        // TCG runs the L1: on a busy host its check that the IO-APIC routes
        // the timer can miss its ticks and panic at boot ("IO-APIC + timer
        // doesn't work!", seen in CI); KVM guests skip that check themselves.
        L1_CMDLINE,
    )
    .virtfs(share, "share");
    for m in &opts.mounts {
        q.virtfs(&m.host_dir, &m.tag);
    }
    // The monitor a stall is diagnosed through, and thread names it reads (see `stall`).
    q.name_with_threads("pmemvm-l1");
    // An L1 that resets itself ends QEMU with status 0 (`-no-reboot`): the
    // reset log tells that from a power-off (see `reset_cause`).
    q.log_resets(&reset_log(console));
    if let Some(socket) = stall::monitor_socket(console) {
        q.monitor(&stall::monitor_arg(&socket));
    }
    let mut cmd = q.into_command();
    if makes_user_socket(opts) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only umask, which is async-signal-safe and cannot fail: the
        // control and gdb sockets QEMU makes are the user's alone from their
        // creation.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o077);
                Ok(())
            });
        }
    }
    cmd
}

/// True when QEMU makes a Unix socket at a path the user named (`--api`, or
/// `--gdb PATH`): QEMU then runs under umask 077, so the socket is
/// owner-only from its creation. QEMU accepts the connections itself, so
/// their credentials are not checked as pmemvm's own sockets' are; the
/// mode is the lock.
fn makes_user_socket(opts: &L1Options) -> bool {
    opts.api.is_some()
        || opts
            .gdb
            .as_deref()
            .is_some_and(|c| c.starts_with("socket,path="))
}

/// The L1 kernel's command line.
pub const L1_CMDLINE: &str = "console=ttyS0 panic=-1 rdinit=/init no_timer_check";

/// QEMU's log of the L1's CPU resets, beside its console.
pub fn reset_log(console: &Path) -> PathBuf {
    console.with_file_name("l1-resets.log")
}

/// What the reset log (`-d cpu_reset`) says ended the L1: a triple fault of
/// the L1 itself (not of a guest inside it, which KVM in the L1 sees as a
/// shutdown exit). `None` when it logged none.
pub fn reset_cause(log: &str) -> Option<String> {
    let faults = log.lines().filter(|l| l.trim() == "Triple fault").count();
    (faults > 0).then(|| {
        format!("the L1's CPU took a triple fault (QEMU's reset log counted {faults}), which -no-reboot turned into QEMU's exit")
    })
}

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

/// Runs the L1 `cmd` (from [`l1_command`]) to its end: its console goes to
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
    let pid = child.id();
    let mut stalled_state = String::new();
    let mut wakeups: Vec<String> = Vec::new();
    // Beats seen at the last kick and the silence it was sent after.
    let mut kicked: Option<(u64, Duration)> = None;
    let mut stopped_by = None;
    let mut beat = Heartbeat::new(console);
    let mut shown = 0usize;
    let mut describe = DescribeRelay::new(&l1_dir(share));
    let code_ranges = l1_dir(share).join(stall::CODE_RANGES);
    // The deadline is kept here rather than by `wait_watched`, so the L1's
    // vCPUs are read through QEMU's monitor before it is killed.
    let mut deadline_passed = false;
    let waited = wait_watched(&mut child, None, || {
        if deadline.is_some_and(|d| start.elapsed() >= d) {
            stalled_state = stall::diagnose(pid, console, &code_ranges);
            deadline_passed = true;
            return Some("the deadline passed".to_owned());
        }
        while let Some(sig) = signals.as_ref().ok().and_then(|s| s.read()) {
            if sig == vmm::signals::DESCRIBE_SIGNAL {
                describe.ask();
                continue;
            }
            stopped_by = Some(sig);
            return Some(format!("signal {sig}"));
        }
        for line in describe.relay() {
            eprintln!("{line}");
        }
        if let Some(path) = stream {
            if let Ok(b) = fs::read(path) {
                if b.len() > shown {
                    let _ = std::io::stdout().write_all(&b[shown..]);
                    let _ = std::io::stdout().flush();
                    shown = b.len();
                }
            }
        }
        let verdict = beat.check();
        if verdict.is_some() {
            stalled_state = stall::diagnose(pid, console, &code_ranges);
            return verdict;
        }
        if kicked.is_some_and(|(beats, _)| beat.beats() > beats) {
            if let Some(w) = wakeups.last_mut() {
                w.push_str("; its heartbeat came back");
            }
            kicked = None;
        }
        let due = match kicked {
            None => heartbeat::KICK_AFTER,
            Some((_, silent)) => silent + heartbeat::KICK_AFTER,
        };
        if let Some(silent) = beat.silence().filter(|s| *s >= due) {
            let state = stall::glance(console);
            let sent = stall::kick(console);
            wakeups.push(format!(
                "no heartbeat for {} s; {}; {}",
                silent.as_secs(),
                state.trim_end().replace('\n', ", "),
                match sent {
                    Ok(()) => "a key event was sent to wake it".to_string(),
                    Err(e) => format!("no key event could be sent: {e}"),
                }
            ));
            kicked = Some((beat.beats(), silent));
        }
        None
    })
    .map_err(io("wait for qemu-system-x86_64"))?;
    let elapsed = start.elapsed();
    let console_text =
        heartbeat::without_heartbeats(&fs::read_to_string(console).unwrap_or_default());
    let console_tail = || tail(&console_text, CONSOLE_TAIL_LINES);
    let passed = |state| L1Failure::Deadline {
        deadline: deadline.unwrap_or(elapsed),
        elapsed,
        state,
        console: console_tail(),
    };
    let qemu_status = match waited {
        Waited::Exited(status) => status,
        Waited::Deadline => return Err(passed(stalled_state)),
        Waited::Stopped(_) if deadline_passed => return Err(passed(stalled_state)),
        Waited::Stopped(_) if stopped_by.is_some() => {
            return Err(L1Failure::Signal {
                signal: stopped_by.unwrap_or_default(),
            })
        }
        Waited::Stopped(reason) => {
            let mut state = stalled_state;
            for w in &wakeups {
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
        wakeups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The L1's QEMU arguments for `opts`.
    fn args_of(l1: &L1Image, opts: &L1Options) -> Vec<String> {
        l1_command(
            Path::new("qemu"),
            l1,
            opts,
            Path::new("/s/console"),
            Path::new("/s/share"),
        )
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
    }

    fn image() -> L1Image {
        L1Image {
            vmlinuz: "/c/vmlinuz".into(),
            initramfs: "/c/initramfs.cpio.gz".into(),
            l2_initramfs: "/c/l2.cpio.gz".into(),
            kernel_package: String::new(),
        }
    }

    #[test]
    fn command_line_has_svm_the_share_and_the_mounts() {
        let l1 = image();
        let opts = L1Options {
            memory_mib: 1536,
            cpus: 1,
            mounts: vec![Mount {
                tag: "dimm0".into(),
                host_dir: "/var/tmp".into(),
                l1_dir: "/host/dimm0".into(),
            }],
            interactive: true,
            gdb: None,
            api: None,
        };
        let args = args_of(&l1, &opts);
        let joined = args.join(" ");
        assert!(joined.contains("-accel tcg -cpu max,vendor=AuthenticAMD"));
        assert!(joined.contains("-m 1536M"));
        assert!(joined.contains(
            "-serial file:/s/console -chardev stdio,id=user,signal=off -serial chardev:user"
        ));
        assert!(joined.contains("local,path=/s/share,mount_tag=share,security_model=none"));
        assert!(joined.contains("local,path=/var/tmp,mount_tag=dimm0,security_model=none"));
        assert!(joined.contains("-d cpu_reset -D /s/l1-resets.log"));
        // The TCG-run L1 skips the IO-APIC timer check a busy host can fail.
        let append = args
            .iter()
            .position(|a| a == "-append")
            .and_then(|i| args.get(i + 1))
            .expect("an -append argument");
        assert!(append.split_whitespace().any(|w| w == "no_timer_check"));
    }

    #[test]
    fn the_api_socket_is_the_l1s_fourth_serial_port() {
        let l1 = image();
        let serials = |interactive: bool, gdb: Option<&str>| {
            let opts = L1Options {
                memory_mib: 1536,
                cpus: 1,
                mounts: Vec::new(),
                interactive,
                gdb: gdb.map(str::to_owned),
                api: Some("/home/u/api.sock".into()),
            };
            let args = args_of(&l1, &opts);
            let ports: Vec<String> = args
                .windows(2)
                .filter(|w| w[0] == "-serial")
                .map(|w| w[1].clone())
                .collect();
            assert!(
                args.join(" ")
                    .contains("-chardev socket,path=/home/u/api.sock,server=on,wait=off,id=api"),
                "{args:?}"
            );
            ports
        };
        let api = "chardev:api".to_string();
        let console = "file:/s/console".to_string();
        assert_eq!(
            serials(false, None),
            [console.clone(), "null".into(), "null".into(), api.clone()]
        );
        assert_eq!(
            serials(true, None),
            [
                console.clone(),
                "chardev:user".into(),
                "null".into(),
                api.clone()
            ]
        );
        assert_eq!(
            serials(false, Some("tcp::1234")),
            [console, "null".into(), "chardev:gdb".into(), api]
        );
    }

    #[test]
    fn qemu_makes_its_user_sockets_owner_only() {
        let opts = |gdb: Option<vmm::gdb::GdbAddr>, api: Option<&str>| L1Options {
            memory_mib: 1536,
            cpus: 1,
            mounts: Vec::new(),
            interactive: false,
            gdb: gdb.as_ref().map(gdb_chardev),
            api: api.map(PathBuf::from),
        };
        let unix = vmm::gdb::GdbAddr::Unix("/home/u/gdb.sock".into());
        let tcp = vmm::gdb::GdbAddr::parse(":1234").expect("an address");
        assert!(makes_user_socket(&opts(Some(unix), None)));
        assert!(makes_user_socket(&opts(None, Some("/home/u/api.sock"))));
        assert!(!makes_user_socket(&opts(Some(tcp), None)));
        assert!(!makes_user_socket(&opts(None, None)));
    }

    #[test]
    fn a_triple_fault_in_the_reset_log_is_named_and_start_up_resets_are_not() {
        // What QEMU 10 writes at start-up (a reset per CPU, with its registers).
        let start =
            "CPU Reset (CPU 0)\nEAX=00000000 EBX=00000000\nCPU Reset (CPU 1)\nEAX=00000000\n";
        assert_eq!(reset_cause(start), None);
        assert_eq!(reset_cause(""), None);
        let fault = format!("{start}Triple fault\n");
        let cause = reset_cause(&fault).expect("a triple fault");
        assert!(
            cause.contains("triple fault") && cause.contains("counted 1"),
            "{cause}"
        );
    }

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
