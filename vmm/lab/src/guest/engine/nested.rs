//! The nested engine: this same `pmemvm` binary, inside the L1 (see the
//! module docs of [`crate::guest::nested`]), runs `pmemvm boot` of the machine the
//! caller prepared. The run's scratch directory is the share: the kernel, the
//! initrd with the job appended, the console and the result channel are
//! files there; each of the user's backing files is reached through a 9p
//! mount of its own directory, so pmemvm in L1 maps the user's file itself.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vmm::config::MachineSpec;

use super::{Ended, Engine, EngineError, GuestEngine, Machine};
use crate::guest::nested::l1::{l1_command, L1Options, INTERACTIVE_TTY};
use crate::guest::nested::l1_run::run_l1;
use crate::guest::nested::placement::{in_share, place_machine, write_machine, MACHINE_FILE};
use crate::guest::nested::share::{forwarded_env, install_pmemvm, l1_dir, tail, write_command};
use crate::guest::nested::{cache_dir, io_err, prepare_l1, L1Image, NestedError};

pub use crate::guest::nested::prepare::L1_OVERHEAD_MIB;
/// Time the L1 takes to boot and to set up under TCG, on top of a run's
/// `--timeout`.
pub const L1_BOOT_ALLOWANCE: Duration = Duration::from_secs(240);
/// The accelerator the results name: the guest runs on the L1's KVM, which
/// runs under QEMU's TCG (functional only).
pub const ACCELERATOR: &str = "kvm-on-tcg";

/// L1 RAM for a guest of `guest_bytes`.
pub fn l1_memory_mib(guest_bytes: u64) -> u32 {
    u32::try_from((guest_bytes >> 20) + L1_OVERHEAD_MIB).unwrap_or(u32::MAX)
}

/// vCPUs of the L1 VM for a guest of `guest_cpus`: as many as the guest has
/// (a guest's vCPUs are threads of pmemvm in L1; on fewer L1 vCPUs, a guest
/// vCPU that spins waiting for another, e.g. for an IPI's answer, starves it
/// and Linux in L1 reports soft lockups), at most the host's CPUs (QEMU's TCG
/// runs one thread per L1 vCPU).
pub fn l1_cpus(guest_cpus: u8, host_cpus: usize) -> u32 {
    let host = u32::try_from(host_cpus.max(1)).unwrap_or(u32::MAX);
    u32::from(guest_cpus.max(1)).min(host)
}

/// The environment the pmemvm in L1 is given (see [`forwarded_env`]).
fn env() -> Vec<(String, String)> {
    forwarded_env(|k| std::env::var(k).ok())
}

/// This host's CPUs as the bench sees them (`$PMEMVM_HOST_CPUS` when set: a
/// smaller host, or a test, gets the L1 that host would get); one where they
/// cannot be read. A value that is not a count is refused in one sentence.
fn host_cpus() -> Result<usize, NestedError> {
    let cpus = crate::guest::host_cpus::host_cpus()?;
    Ok(cpus.map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX)))
}

/// pmemvm's own lines on the stderr of pmemvm in L1 (errors and their
/// causes, abnormal ends), without log lines.
fn pmemvm_messages(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            (l.starts_with("pmemvm: ")
                && !l.starts_with("pmemvm: warning")
                && !l.starts_with("pmemvm: SIGQUIT:"))
                || l.trim_start()
                    .split_once(": ")
                    .is_some_and(|(n, _)| l.starts_with("  ") && n.trim().parse::<u32>().is_ok())
        })
        .map(str::trim)
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// Common argv of `pmemvm boot` in L1: what it boots and the machine, which
/// the L1 reads serialized from the share ([`write_machine`]).
fn boot_argv(kernel: &str, initrd: Option<&str>, cmdline: &str) -> Vec<String> {
    let mut argv: Vec<String> = ["pmemvm", "boot", "--kernel", kernel]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(i) = initrd {
        argv.extend(["--initrd".to_string(), i.to_string()]);
    }
    argv.extend([
        "--cmdline".to_string(),
        cmdline.to_string(),
        "--machine".to_string(),
        MACHINE_FILE.to_string(),
    ]);
    argv
}

/// `--engine nested`: pmemvm in a QEMU TCG L1 with emulated SVM.
#[derive(Debug)]
pub struct NestedEngine {
    qemu: PathBuf,
    l1: L1Image,
    pmemvm: PathBuf,
}

/// What the user should know about an L1 run by `qemu` with `cpus` vCPUs
/// (an old QEMU's lost wake-ups, TCG's breakdowns with two or more vCPUs).
fn warn_about_the_l1(qemu: &Path, cpus: u32) {
    let warnings = [
        crate::guest::qemu::nested_qemu_warning(qemu),
        crate::guest::qemu::nested_smp_warning(cpus),
    ];
    for w in warnings.into_iter().flatten() {
        eprintln!("pmemvm: warning: --engine nested: {w}");
    }
}

impl NestedEngine {
    /// Prepares (or finds cached) the L1 and finds this pmemvm binary.
    pub fn new(qemu: PathBuf) -> Result<Self, NestedError> {
        let l1 = prepare_l1(&cache_dir())?;
        let pmemvm = std::env::current_exe().map_err(io_err("find the pmemvm binary"))?;
        Ok(Self { qemu, l1, pmemvm })
    }

    fn boot_nested(&self, m: &Machine<'_>) -> Result<Ended, NestedError> {
        // The doors below listen at --gdb and --api themselves.
        drop(m.take_endpoints());
        let api = m.control.api.as_deref();
        let cpus = l1_cpus(m.config.machine.cpus, host_cpus()?);
        warn_about_the_l1(&self.qemu, cpus);
        let share = m.scratch;
        let (l1_machine, mounts, _locks) = place_machine(share, &m.config.machine)?;
        write_machine(share, &l1_machine)?;
        let argv = self.share_the_boot(m)?;
        install_pmemvm(share, &self.pmemvm)?;
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        write_command(share, &env(), &words, &mounts, None)?;
        let l1 = l1_dir(share);
        // The user's doors are this pmemvm's, owner-only; QEMU gets private ends.
        let doors = crate::guest::nested::doors::open(&l1, m.gdb.map(|(addr, _)| addr), api)
            .map_err(io_err("open the --gdb or --api door"))?;
        let opts = L1Options {
            memory_mib: l1_memory_mib(m.config.machine.memory),
            cpus,
            mounts,
            interactive: false,
            gdb: doors.gdb_chardev.clone(),
            api: doors.api_private.clone(),
        };
        let console = l1.join("l1-console.log");
        let cmd = l1_command(&self.qemu, &self.l1, &opts, &console, share);
        log::info!("running the L1: {cmd:?}");
        let announcer = m.gdb.map(|(addr, _)| {
            crate::guest::nested::gdb::Announcer::start(l1.join("stderr"), addr.to_string())
        });
        let api_announcer =
            api.map(|p| crate::guest::nested::gdb::Announcer::api(l1.join("stderr"), p));
        let run = run_l1(
            cmd,
            false,
            &console,
            &l1.join("qemu.log"),
            share,
            Some(m.timeout + L1_BOOT_ALLOWANCE),
            m.stream_console.then_some(m.console),
        );
        drop(announcer);
        drop(api_announcer);
        drop(doors);
        Ok(l1_ended(run, &l1, m.timeout))
    }

    /// The kernel and the job's initrd in the share, and the argv of pmemvm
    /// in the L1 for them (its doors, console, channel and time limit).
    fn share_the_boot(&self, m: &Machine<'_>) -> Result<Vec<String>, NestedError> {
        let share = m.scratch;
        fs::copy(&m.config.kernel, share.join("kernel")).map_err(io_err(format!(
            "copy {} into the share",
            m.config.kernel.display()
        )))?;
        let initrd = match &m.config.initrd {
            Some(p) => fs::read(p).map_err(io_err(format!("read {}", p.display())))?,
            None => Vec::new(),
        };
        let initrd = crate::guest::guest_job::append_to_initrd(&initrd, &m.config.initrd_append);
        fs::write(share.join("initrd"), initrd).map_err(io_err("write the job initrd"))?;
        let mut argv = boot_argv("kernel", Some("initrd"), &m.config.cmdline);
        if let Some((addr, wait)) = m.gdb {
            argv.extend(crate::guest::nested::gdb::l1_args(&self.qemu, addr, wait));
        }
        if m.control.api.is_some() {
            argv.extend([
                "--api".to_string(),
                crate::guest::nested::l1::API_TTY.to_string(),
            ]);
        }
        argv.extend([
            "--console-log".to_string(),
            in_share(share, m.console)?,
            "--channel".to_string(),
            in_share(share, m.channel)?,
            // The guest's own time limit, kept by pmemvm in L1: at it, pmemvm says where
            // each vCPU was (the L1's deadline adds the boot allowance on top).
            "--timeout".to_string(),
            m.timeout.as_secs().max(1).to_string(),
        ]);
        Ok(argv)
    }
}

/// What the L1's end means for the guest's run: pmemvm's status and its
/// messages, or the deadline, a stop signal, the L1's own failure.
fn l1_ended(
    run: Result<crate::guest::nested::L1Run, crate::guest::nested::L1Failure>,
    l1: &Path,
    timeout: std::time::Duration,
) -> Ended {
    let mut ended = Ended {
        accelerator: ACCELERATOR.into(),
        functional_only: true,
        ..Ended::default()
    };
    match run {
        Ok(run) => {
            for w in &run.wakeups {
                eprintln!("pmemvm: --engine nested: the L1 VM fell silent ({w})");
            }
            let stderr = fs::read_to_string(l1.join("stderr")).unwrap_or_default();
            ended.status = u8::try_from(run.status).ok();
            ended.error = pmemvm_messages(&stderr).map(|m| format!("pmemvm in the L1 VM: {m}"));
            log::info!(
                "L1 ran pmemvm for {:.1} s (command started at L1 uptime {:?} s); its stderr, last lines:\n{}",
                run.elapsed.as_secs_f64(),
                run.uptime_at_run,
                tail(&stderr, 20)
            );
        }
        Err(e @ crate::guest::nested::L1Failure::Deadline { .. }) => {
            ended.status = Some(vmm::exit_status::TIMED_OUT);
            ended.error = Some(format!(
                "the guest did not finish within {} s (use --timeout to allow more; the L1 VM gets {} s more to boot): {e}",
                timeout.as_secs(),
                L1_BOOT_ALLOWANCE.as_secs()
            ));
        }
        Err(crate::guest::nested::L1Failure::Signal { signal }) => {
            ended.status = u8::try_from(128 + signal).ok();
            ended.error = Some(format!("stopped by signal {signal}; the L1 VM was killed"));
        }
        Err(e) => ended.error = Some(format!("--engine nested: {e}")),
    }
    ended
}

impl GuestEngine for NestedEngine {
    fn engine(&self) -> Engine {
        Engine::Nested
    }

    fn boot(&self, m: &Machine<'_>) -> Result<Ended, EngineError> {
        if let Some(refusal) = Engine::Nested.refusal(&m.config.machine, m.control) {
            return Err(refusal.into());
        }
        Ok(self.boot_nested(m)?)
    }
}

/// `pmemvm boot --engine nested`: the machine to boot in the L1.
#[derive(Debug)]
pub struct InteractiveBoot<'a> {
    /// Kernel.
    pub kernel: &'a Path,
    /// Initrd.
    pub initrd: Option<&'a Path>,
    /// Kernel command line.
    pub cmdline: &'a str,
    /// vCPUs, RAM and the devices (no host placement: refused before).
    pub spec: &'a MachineSpec,
    /// `--gdb ADDR` and `--gdb-wait`: this pmemvm listens at ADDR and
    /// pmemvm in the L1 serves gdb through the L1's third serial port.
    pub gdb: Option<(&'a vmm::debug::gdb::GdbAddr, bool)>,
    /// `--api PATH`: this pmemvm listens at PATH and pmemvm in the L1
    /// serves the control protocol through the L1's fourth serial port.
    pub api: Option<&'a Path>,
}

/// A temporary share, removed on drop.
struct TempShare(PathBuf);

impl Drop for TempShare {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Boots `b` under pmemvm inside the L1 with the guest's console on this
/// terminal (L1's second serial port, relayed by QEMU; the L1's own console
/// goes to a file). Returns pmemvm's exit status in L1; the guest powering
/// off (or `Ctrl-A x`) ends both levels.
pub fn boot_interactive(b: &InteractiveBoot<'_>, qemu: &Path) -> Result<u8, NestedError> {
    let l1_image = prepare_l1(&cache_dir())?;
    let cpus = l1_cpus(b.spec.cpus, host_cpus()?);
    warn_about_the_l1(qemu, cpus);
    let pmemvm = std::env::current_exe().map_err(io_err("find the pmemvm binary"))?;
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let share = TempShare(std::env::temp_dir().join(format!(
        "pmemvm-nested-boot-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )));
    fs::create_dir_all(&share.0).map_err(io_err(format!("create {}", share.0.display())))?;
    let (l1_machine, mounts, _locks) = place_machine(&share.0, b.spec)?;
    write_machine(&share.0, &l1_machine)?;
    fs::copy(b.kernel, share.0.join("kernel")).map_err(io_err(format!(
        "copy {} into the share",
        b.kernel.display()
    )))?;
    if let Some(i) = b.initrd {
        fs::copy(i, share.0.join("initrd"))
            .map_err(io_err(format!("copy {} into the share", i.display())))?;
    }
    let mut argv = boot_argv("kernel", b.initrd.map(|_| "initrd"), b.cmdline);
    if let Some((addr, wait)) = b.gdb {
        argv.extend(crate::guest::nested::gdb::l1_args(qemu, addr, wait));
    }
    if b.api.is_some() {
        argv.extend([
            "--api".to_string(),
            crate::guest::nested::l1::API_TTY.to_string(),
        ]);
    }
    install_pmemvm(&share.0, &pmemvm)?;
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    write_command(&share.0, &env(), &words, &mounts, Some(INTERACTIVE_TTY))?;
    let l1 = l1_dir(&share.0);
    let doors = crate::guest::nested::doors::open(&l1, b.gdb.map(|(addr, _)| addr), b.api)
        .map_err(io_err("open the --gdb or --api door"))?;
    let opts = L1Options {
        memory_mib: l1_memory_mib(b.spec.memory),
        cpus,
        mounts,
        interactive: true,
        gdb: doors.gdb_chardev.clone(),
        api: doors.api_private.clone(),
    };
    let console = l1.join("l1-console.log");
    let cmd = l1_command(qemu, &l1_image, &opts, &console, &share.0);
    log::info!("running the L1: {cmd:?}");
    eprintln!("pmemvm: --engine nested: booting the L1 VM (QEMU TCG with emulated SVM; the guest's console follows here, functional only)");
    if let Some(p) = b.api {
        eprintln!(
            "pmemvm: --engine nested: listening for the control socket at {} (owner-only; pmemvm in the L1 serves it once the guest boots)",
            p.display()
        );
    }
    // QEMU restores the terminal itself when it exits in order; this covers a killed QEMU.
    let saved = vmm::console::SavedTerminal::save();
    let run = run_l1(
        cmd,
        true,
        &console,
        &l1.join("qemu.log"),
        &share.0,
        None,
        None,
    );
    drop(saved);
    match run {
        Ok(run) => {
            for w in &run.wakeups {
                eprintln!("pmemvm: --engine nested: the L1 VM fell silent ({w})");
            }
            Ok(u8::try_from(run.status).unwrap_or(vmm::exit_status::RUNTIME_ERROR))
        }
        // As `boot` on the other engines: 128 + N, the terminal given back.
        Err(crate::guest::nested::L1Failure::Signal { signal }) => {
            eprintln!("pmemvm: stopped by signal {signal}; the L1 VM was killed");
            Ok(u8::try_from(128 + signal).unwrap_or(vmm::exit_status::RUNTIME_ERROR))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_l1_has_as_many_vcpus_as_the_guest_up_to_the_hosts() {
        assert_eq!(l1_cpus(1, 2), 1);
        assert_eq!(l1_cpus(2, 2), 2);
        assert_eq!(l1_cpus(4, 2), 2);
        assert_eq!(l1_cpus(48, 64), 48);
        assert_eq!(l1_cpus(0, 0), 1);
    }

    #[test]
    fn only_pmemvm_lines_are_messages() {
        let stderr = "[2026 WARN vmm] x\npmemvm: error: --nvdimm 16M: wrong size\n  1: cause\npmemvm: warning: y\npmemvm: SIGQUIT: vCPU 0: in the guest\n";
        assert_eq!(
            pmemvm_messages(stderr).as_deref(),
            Some("pmemvm: error: --nvdimm 16M: wrong size; 1: cause")
        );
        assert_eq!(pmemvm_messages("[log] ok\n"), None);
        assert_eq!(l1_memory_mib(512 << 20), 1536);
    }
}
