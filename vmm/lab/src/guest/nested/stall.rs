//! What a stopped L1 was doing: when the heartbeat watch finds the L1 silent,
//! its QEMU is asked over its human monitor (a Unix socket beside the
//! console) for each vCPU's registers and local APIC, and each QEMU thread's
//! state is read from `/proc`, before QEMU is killed. The whole answer goes to
//! a file beside the console; a few lines of it (per vCPU: RIP, flags,
//! halted or not; QEMU's CPU time) go into the error, so a stall seen once in
//! CI can be told apart from the next: halted with interrupts enabled and no
//! timer armed is a lost interrupt, a running vCPU at 100 % is a guest loop,
//! every QEMU thread asleep on a lock is QEMU itself.

use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest Unix socket path the kernel takes (`sun_path` is 108 bytes).
const MAX_SOCKET_PATH: usize = 107;
/// How long the monitor may take to answer everything.
const MONITOR_TIME: Duration = Duration::from_secs(5);

/// The monitor socket of the L1 whose console is `console`, if its path fits
/// a Unix socket address.
pub fn monitor_socket(console: &Path) -> Option<PathBuf> {
    let path = console.with_file_name("l1-monitor.sock");
    (path.as_os_str().len() <= MAX_SOCKET_PATH).then_some(path)
}

/// The `-monitor` value for [`monitor_socket`]'s path.
pub fn monitor_arg(socket: &Path) -> String {
    format!(
        "unix:{},server=on,wait=off",
        crate::guest::qemu::opt_escape(&socket.to_string_lossy())
    )
}

/// The file beside `console` the whole diagnosis is written to.
pub fn diagnosis_file(console: &Path) -> PathBuf {
    console.with_file_name("l1-stall.txt")
}

/// The file of the L1's share directory where the L1 init writes where its
/// kernel's and modules' code lies (`guest-images/l1/init`): `kernel START
/// END` (`_stext`, `_etext`) and one `module NAME START SIZE` per module.
pub const CODE_RANGES: &str = "code-ranges";

/// Where the L1's kernel and modules have their code, from [`CODE_RANGES`].
#[derive(Debug, Default)]
pub struct CodeRanges {
    kernel: Option<(u64, u64)>,
    modules: Vec<(String, u64, u64)>,
}

impl CodeRanges {
    /// The ranges in `path`; empty when the L1 wrote none (an older L1 image,
    /// or the L1 stopped before its share was mounted).
    pub fn read(path: &Path) -> Self {
        Self::parse(&fs::read_to_string(path).unwrap_or_default())
    }

    fn parse(text: &str) -> Self {
        let hex = |w: Option<&str>| u64::from_str_radix(w?.trim_start_matches("0x"), 16).ok();
        let mut ranges = Self::default();
        for line in text.lines() {
            let mut w = line.split_whitespace();
            match w.next() {
                Some("kernel") => {
                    if let (Some(a), Some(b)) = (hex(w.next()), hex(w.next())) {
                        ranges.kernel = Some((a, b));
                    }
                }
                Some("module") => {
                    let name = w.next().unwrap_or("?").to_owned();
                    let base = hex(w.next());
                    let size = w.next().and_then(|n| n.parse().ok());
                    if let (Some(base), Some(size)) = (base, size) {
                        ranges.modules.push((name, base, size));
                    }
                }
                _ => {}
            }
        }
        ranges
    }

    /// Where an L1 vCPU at `rip` with privilege level `cpl` was, in words;
    /// `None` when the L1 wrote no ranges.
    fn place(&self, rip: u64, cpl: &str) -> Option<String> {
        let (start, end) = self.kernel?;
        if (start..end).contains(&rip) {
            return Some(format!(
                "in the L1 kernel's code, _stext+{:#x}",
                rip - start
            ));
        }
        if let Some((name, base, _)) = self
            .modules
            .iter()
            .find(|(_, base, size)| *base != 0 && rip >= *base && rip - base < *size)
        {
            return Some(format!("in the L1's module {name}+{:#x}", rip - base));
        }
        Some(if cpl == "3" {
            "in user space (an L1 process, or the guest's)".to_owned()
        } else {
            "outside the L1 kernel's and modules' code: in guest mode, the guest's".to_owned()
        })
    }
}

/// Asks the stopped L1's QEMU (`pid`) what it was doing — each vCPU placed
/// in the L1's kernel, a module of it or guest mode by `code` (the L1's
/// [`CODE_RANGES`] file) — writes everything to [`diagnosis_file`] and
/// returns the summary for the error.
pub fn diagnose(pid: u32, console: &Path, code: &Path) -> String {
    let threads = threads(pid);
    let monitor = ask(console);
    let text = match &monitor {
        Ok(answer) => answer.clone(),
        Err(why) => format!("({why})"),
    };
    let full = format!("QEMU threads (pid {pid}):\n{threads}\nQEMU monitor:\n{text}\n");
    let file = diagnosis_file(console);
    let written = fs::write(&file, &full).is_ok();
    let mut s = summary_of(&monitor, &CodeRanges::read(code));
    let _ = write!(s, "QEMU threads: {}", thread_summary(&threads));
    if written {
        let _ = write!(s, "\n(all of it in {})", file.display());
    }
    s
}

/// One line per vCPU of the L1 whose console is `console`, as
/// [`diagnose`] summarises them (nothing written).
pub fn glance(console: &Path) -> String {
    summary_of(&ask(console), &CodeRanges::default())
}

/// Wakes an L1 that QEMU left halted with an interrupt pending: a key event
/// (a Shift press, which no program in L1 reads) through the monitor. QEMU
/// 7.2's TCG can leave a halted vCPU asleep with its local APIC timer
/// interrupt in IRR, deliverable (IF=1, priority above PPR) and never taken;
/// any new interrupt makes it look again. An L1 that was only busy sees one
/// key event more.
pub fn kick(console: &Path) -> Result<(), String> {
    let mut stream = connect(console)?;
    let answer = exchange(&mut stream, "sendkey shift\n");
    // HMP answers an error with a sentence; success is the bare prompt.
    match answer
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("(qemu)") && !l.starts_with("QEMU "))
    {
        Some(err) => Err(format!("QEMU's monitor refused the key event: {err}")),
        None => Ok(()),
    }
}

/// The monitor of the L1 whose console is `console`, ready to read with a short timeout.
fn connect(console: &Path) -> Result<UnixStream, String> {
    let socket = monitor_socket(console)
        .ok_or_else(|| "no monitor: the console path is too long for a socket".to_string())?;
    let stream = UnixStream::connect(&socket)
        .map_err(|e| format!("cannot connect to QEMU's monitor {}: {e}", socket.display()))?;
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    Ok(stream)
}

fn summary_of(monitor: &Result<String, String>, code: &CodeRanges) -> String {
    match monitor {
        Ok(answer) => summary(answer, code),
        Err(why) => format!("vCPUs unknown: {why}\n"),
    }
}

/// One line per QEMU thread: name, state, CPU time in clock ticks, wait channel.
fn threads(pid: u32) -> String {
    let mut out = String::new();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("(cannot read /proc/{pid}/task)\n");
    };
    let mut tids: Vec<String> = dir
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    tids.sort();
    for tid in tids {
        let base = format!("/proc/{pid}/task/{tid}");
        let stat = fs::read_to_string(format!("{base}/stat")).unwrap_or_default();
        let wchan = fs::read_to_string(format!("{base}/wchan")).unwrap_or_default();
        let (comm, state, ticks) = parse_stat(&stat).unwrap_or(("?".into(), '?', 0));
        let _ = writeln!(out, "{tid} {comm} {state} {ticks} ticks wchan={wchan}");
    }
    out
}

/// `(comm, state, utime + stime)` of a `/proc/.../stat` line.
fn parse_stat(stat: &str) -> Option<(String, char, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let state = rest.first()?.chars().next()?;
    // Fields after the comm: state is field 3, utime 14 and stime 15.
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, state, utime + stime))
}

/// `name state,...` counts of the thread lines, e.g. `CPU 0/TCG S 5123, ...`.
fn thread_summary(threads: &str) -> String {
    threads
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(' ')?;
            let (head, _) = rest.split_once(" ticks")?;
            Some(head.to_string())
        })
        .filter(|h| h.contains("CPU") || h.starts_with("qemu"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each vCPU's registers and local APIC.
fn ask(console: &Path) -> Result<String, String> {
    let mut stream = connect(console)?;
    let mut answer = exchange(&mut stream, "info cpus\ninfo registers -a\n");
    // `info cpus` lists `* CPU #0: thread_id=...`, one line per vCPU.
    let cpus = answer.lines().filter(|l| l.contains("CPU #")).count();
    let mut lapics = String::new();
    for cpu in 0..cpus {
        let _ = write!(lapics, "cpu {cpu}\ninfo lapic\n");
    }
    if !lapics.is_empty() {
        answer.push_str(&exchange(&mut stream, &lapics));
    }
    Ok(answer)
}

/// Sends `commands` and reads the answer until the monitor is quiet.
fn exchange(stream: &mut UnixStream, commands: &str) -> String {
    if stream.write_all(commands.as_bytes()).is_err() {
        return "(the monitor did not take the commands)\n".into();
    }
    let start = Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    let mut quiet = 0;
    while start.elapsed() < MONITOR_TIME && quiet < 2 {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                quiet = 0;
            }
            Err(_) => quiet += 1,
        }
    }
    clean(&String::from_utf8_lossy(&answer))
}

/// The monitor's answer without terminal escapes, carriage returns and the
/// line editor's echo of each command.
fn clean(raw: &str) -> String {
    without_escapes(raw)
        .lines()
        .map(|l| if l.starts_with("(qemu)") { "(qemu)" } else { l })
        .collect::<Vec<_>>()
        .join("\n")
}

fn without_escapes(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: ESC [ parameters final-byte.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for f in chars.by_ref() {
                        if ('@'..='~').contains(&f) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// Per vCPU: `CPU#n RIP=... IF=0|1 HLT=0|1 CPL=n IRR=...` (IRR: the
/// vectors its local APIC holds pending, when `info lapic` answered).
fn summary(monitor: &str, code: &CodeRanges) -> String {
    let mut irr = std::collections::BTreeMap::new();
    let mut lapic_cpu = None;
    for line in monitor.lines() {
        let line = line.trim();
        if let Some(n) = line.strip_prefix("dumping local APIC state for CPU ") {
            lapic_cpu = Some(n.trim().to_string());
        } else if let (Some(c), Some(v)) = (&lapic_cpu, line.strip_prefix("IRR")) {
            irr.insert(c.clone(), v.trim().to_string());
            lapic_cpu = None;
        }
    }
    let mut out = String::new();
    let mut cpu = None;
    for line in monitor.lines() {
        let line = line.trim();
        if line.starts_with("CPU#") && !line.contains(' ') {
            cpu = Some(line.to_string());
        } else if let (Some(c), true) = (&cpu, line.starts_with("RIP=") || line.starts_with("EIP="))
        {
            // 64-bit mode prints RIP/RFL, the others EIP/EFL.
            let field = |names: [&str; 2]| {
                line.split_whitespace()
                    .find_map(|w| names.iter().find_map(|n| w.strip_prefix(n)))
                    .unwrap_or("?")
                    .to_string()
            };
            let rfl = u64::from_str_radix(&field(["RFL=", "EFL="]), 16).ok();
            let intr = rfl.map_or("?".into(), |f| ((f >> 9) & 1).to_string());
            let _ = write!(
                out,
                "{c} RIP={} IF={intr} HLT={} CPL={}",
                field(["RIP=", "EIP="]),
                field(["HLT=", "HLT="]),
                field(["CPL=", "CPL="])
            );
            if let Some(v) = c.strip_prefix("CPU#").and_then(|n| irr.get(n)) {
                let _ = write!(out, " IRR={}", v.replace(' ', ","));
            }
            let place = u64::from_str_radix(&field(["RIP=", "EIP="]), 16)
                .ok()
                .and_then(|rip| code.place(rip, &field(["CPL=", "CPL="])));
            if let Some(place) = place {
                let _ = write!(out, " ({place})");
            }
            out.push('\n');
            cpu = None;
        }
    }
    if out.is_empty() {
        out.push_str("(no vCPU registers from the monitor)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_gives_name_state_and_cpu_time() {
        let stat = "4242 (CPU 0/TCG) S 1 4242 4242 0 -1 4194368 1 0 0 0 700 50 0 0 20 0 3 0 1 2 3";
        assert_eq!(parse_stat(stat), Some(("CPU 0/TCG".to_string(), 'S', 750)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn registers_become_one_line_per_cpu() {
        let monitor = "(qemu) info registers -a\n\nCPU#0\nRAX=0 RBX=0\n\
RIP=ffffffff81e0123e RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\n\
CPU#1\nEIP=000fd09a EFL=00000002 [-------] CPL=3 II=0 A20=1 SMM=0 HLT=0\n\
(qemu)\ndumping local APIC state for CPU 0 \n\nLVT0\t 0x00010700\nISR\t (none)\nIRR\t 236 \n\
dumping local APIC state for CPU 1 \nIRR\t (none)\n";
        let none = CodeRanges::default();
        assert_eq!(
            summary(monitor, &none),
            "CPU#0 RIP=ffffffff81e0123e IF=1 HLT=1 CPL=0 IRR=236\n\
CPU#1 RIP=000fd09a IF=0 HLT=0 CPL=3 IRR=(none)\n"
        );
        assert_eq!(summary("", &none), "(no vCPU registers from the monitor)\n");
    }

    #[test]
    fn each_vcpu_is_placed_in_the_l1_kernel_a_module_or_guest_mode() {
        let code = CodeRanges::parse(
            "kernel ffffffff9a000000 ffffffff9b200000\n\
             module kvm_amd 0xffffffffc0470000 155648\n\
             module hidden 0x0000000000000000 4096\n\
             garbage\n",
        );
        let line = |rip: &str, cpl: &str| {
            summary(
                &format!("CPU#0\nRIP={rip} RFL=00000246 CPL={cpl} HLT=0\n"),
                &code,
            )
        };
        assert_eq!(
            line("ffffffff9a1f6a07", "0"),
            "CPU#0 RIP=ffffffff9a1f6a07 IF=1 HLT=0 CPL=0 (in the L1 kernel's code, _stext+0x1f6a07)\n"
        );
        assert!(
            line("ffffffffc047d20c", "0").contains("(in the L1's module kvm_amd+0xd20c)"),
            "{}",
            line("ffffffffc047d20c", "0")
        );
        assert!(line("ffffffff81002fad", "0").contains("in guest mode, the guest's"));
        assert!(line("00007f0012345678", "3").contains("in user space"));
        // No ranges written: no place, only the registers.
        assert!(!summary(
            "CPU#0\nRIP=ffffffff81002fad CPL=0\n",
            &CodeRanges::default()
        )
        .contains('('));
    }

    #[test]
    fn escapes_are_dropped_from_the_monitor_answer() {
        assert_eq!(
            clean("(qemu) i\u{1b}[K\u{1b}[Din\u{1b}[K\r\n* CPU #0: thread_id=1\r\n"),
            "(qemu)\n* CPU #0: thread_id=1"
        );
    }

    #[test]
    fn socket_path_must_fit() {
        assert!(monitor_socket(Path::new("/tmp/x/console")).is_some());
        let long = format!("/tmp/{}/console", "d".repeat(120));
        assert!(monitor_socket(Path::new(&long)).is_none());
    }

    #[test]
    fn a_live_process_has_its_threads_listed() {
        let t = threads(std::process::id());
        assert!(t.lines().count() >= 1, "{t}");
        assert!(t.contains(" ticks wchan="), "{t}");
    }
}
