//! The engines a guest job runs on, behind one interface: pmemvm's own VMM
//! core, QEMU with its own NVDIMM (the peer engine), and pmemvm inside a QEMU
//! TCG L1 with emulated SVM ([`crate::nested`]). [`crate::run`]
//! prepares the machine (kernel, initrd with the job, command line, DIMMs,
//! console and channel files) once; an engine boots it and says how it ended.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use devices::exit::ExitRequest;
use vmm::config::{ConsoleMode, NvdimmSpec, VmConfig};
use vmm::exit_status;
use vmm::host::HostKvm;
use vmm::run_loop::RunOptions;
use vmm::stats::{ExitCounts, NvdimmCounts};
use vmm::vm::{Vm, VmError};

use crate::nested::wait::Waited;
use crate::preflight::Engine;
use crate::preflight::PreflightError;
use crate::qemu::{self, QemuAccel, QemuMachine};

/// Errors of an engine before or while it boots a machine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Building pmemvm's VM.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// `--gdb`'s endpoint.
    #[error(transparent)]
    Gdb(#[from] vmm::gdb::GdbError),
    /// `--api`'s socket.
    #[error(transparent)]
    Api(#[from] vmm::api::ApiError),
    /// `--dump-on-panic`'s file.
    #[error(transparent)]
    Dump(#[from] vmm::dump::DumpError),
    /// The engine is not usable here (e.g. QEMU missing).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// `--pmem-legacy` on QEMU (refused before anything boots).
    #[error("--pmem-legacy {0} cannot run on --engine qemu: QEMU can only carve legacy persistent memory out of guest RAM with memmap=, which does not persist; use --engine pmemvm or --engine nested")]
    LegacyPmemOnQemu(String),
    /// An input file cannot be read.
    #[error("cannot read {what} {path}: {source}")]
    Input {
        /// What it is.
        what: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// `--engine nested` could not set up its L1.
    #[error(transparent)]
    Nested(#[from] crate::nested::NestedError),
    /// Host I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl EngineError {
    /// True when the user's input is at fault (exit status 2).
    pub fn is_usage(&self) -> bool {
        match self {
            Self::Vm(e) => e.is_usage(),
            Self::Gdb(e) => e.is_usage(),
            Self::Api(e) => e.is_usage(),
            Self::Dump(e) => e.is_usage(),
            Self::Preflight(_) | Self::Input { .. } | Self::LegacyPmemOnQemu(_) => true,
            Self::Nested(e) => e.is_usage(),
            Self::Io { .. } => false,
        }
    }
}

/// The first option of a machine that only the pmemvm engine honours (host
/// placement and huge pages), as the user typed its name: the one check every
/// other engine (QEMU, nested; `run`, `bench`, `boot`, Slurm) refuses with.
pub fn pmemvm_only_option(
    placement: &vmm::placement::Placement,
    ram_pages: vmm::hugepages::RamPages,
    nvdimms: &[vmm::config::NvdimmSpec],
) -> Option<&'static str> {
    if !placement.pin.is_empty() {
        Some("--pin")
    } else if placement.host_node.is_some() {
        Some("--host-node")
    } else if ram_pages != vmm::hugepages::RamPages::Default {
        Some("--memory SIZE,hugepages/thp")
    } else if nvdimms.iter().any(|n| n.hugepages) {
        Some("--nvdimm SIZE,hugepages")
    } else {
        None
    }
}

/// The control socket and the panic dump of a run (engine pmemvm); `run` checks them before
/// anything boots.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RunControl {
    /// `--api PATH`: serve the control socket there.
    pub api: Option<PathBuf>,
    /// `--dump-on-panic FILE`: write the guest's memory there when it panics.
    pub dump_on_panic: Option<PathBuf>,
}

impl RunControl {
    /// True when neither is asked for.
    pub fn is_empty(&self) -> bool {
        self.api.is_none() && self.dump_on_panic.is_none()
    }
}

/// One guest boot, as the engines see it.
#[derive(Debug)]
pub struct Machine<'a> {
    /// `--gdb ADDR` and `--gdb-wait`.
    pub gdb: Option<(&'a vmm::gdb::GdbAddr, bool)>,
    /// `--api` and `--dump-on-panic` (engine pmemvm).
    pub control: &'a RunControl,
    /// Kernel file.
    pub kernel: &'a Path,
    /// Initrd file, without the job.
    pub initrd: Option<&'a Path>,
    /// The job's newc archive, appended to the initrd.
    pub job_archive: &'a [u8],
    /// Kernel command line.
    pub cmdline: &'a str,
    /// vCPUs, RAM, placement and devices: the user's NVDIMMs and legacy
    /// ranges, and as virtio disks the user's `--disk`s, then the root file
    /// system and the transfer disks of a command run.
    pub spec: &'a vmm::config::MachineSpec,
    /// COM1 goes here (and to stdout when `stream_console`).
    pub console: &'a Path,
    /// COM2 (the job's result channel) goes here.
    pub channel: &'a Path,
    /// A scratch directory for the engine's own files.
    pub scratch: &'a Path,
    /// Show the console on stdout while the guest runs.
    pub stream_console: bool,
    /// Give up after this long.
    pub timeout: Duration,
}

/// How a boot ended, engine-independent.
#[derive(Debug, Default)]
pub struct Ended {
    /// The exit status the engine derived (guest exit code, power-off = 0),
    /// `None` when the guest did not end by itself.
    pub status: Option<u8>,
    /// Why the boot failed, if it did.
    pub error: Option<String>,
    /// "kvm" or "tcg".
    pub accelerator: String,
    /// TCG or nested: figures are functional only.
    pub functional_only: bool,
    /// VM exits by reason (pmemvm only).
    pub exits: Option<ExitCounts>,
    /// Per-DIMM flush and label counters (pmemvm only).
    pub nvdimm_stats: Vec<NvdimmCounts>,
    /// The machine with the page sizes measured behind guest memory (pmemvm only).
    pub machine: Option<vmm::host::machine::MachineDescription>,
}

/// An engine: boots a [`Machine`] to its end.
pub trait GuestEngine: std::fmt::Debug {
    /// The engine's name as reports print it.
    fn engine(&self) -> Engine;
    /// Boots the machine and waits for its end (or its timeout).
    fn boot(&self, machine: &Machine<'_>) -> Result<Ended, EngineError>;
}

/// The engine for an already resolved choice (see [`Engine::resolve`]).
pub fn for_engine(engine: Engine, kvm: &HostKvm) -> Result<Box<dyn GuestEngine>, EngineError> {
    Ok(match engine {
        Engine::Pmemvm | Engine::Auto => Box::new(Pmemvm { kvm: kvm.clone() }),
        Engine::Qemu => {
            let qemu = qemu::find_qemu().ok_or(PreflightError::NoQemu {
                engine: Engine::Qemu.name(),
            })?;
            Box::new(Qemu {
                qemu,
                accel: QemuAccel::choose(kvm),
            })
        }
        Engine::Nested => {
            let qemu = qemu::find_qemu().ok_or(PreflightError::NoQemu {
                engine: Engine::Nested.name(),
            })?;
            Box::new(crate::nested::NestedEngine::new(qemu)?)
        }
    })
}

/// QEMU's `-gdb` device for the user's `--gdb` address.
fn qemu_gdb_device(addr: &vmm::gdb::GdbAddr) -> String {
    match addr {
        vmm::gdb::GdbAddr::Tcp(a) => format!("tcp:{}:{}", a.ip(), a.port()),
        vmm::gdb::GdbAddr::Unix(p) => format!("unix:{},server=on,wait=off", p.display()),
        vmm::gdb::GdbAddr::Serial(p) => p.display().to_string(),
    }
}

/// pmemvm's own VMM core, in this process.
#[derive(Debug)]
pub struct Pmemvm {
    kvm: HostKvm,
}

impl GuestEngine for Pmemvm {
    fn engine(&self) -> Engine {
        Engine::Pmemvm
    }

    fn boot(&self, m: &Machine<'_>) -> Result<Ended, EngineError> {
        let config = VmConfig {
            kernel: m.kernel.to_path_buf(),
            initrd: m.initrd.map(Path::to_path_buf),
            initrd_append: m.job_archive.to_vec(),
            cmdline: m.cmdline.to_string(),
            machine: m.spec.clone(),
            // The scratch copy is kept either way: its tail explains failures.
            console: ConsoleMode::from_choice(m.stream_console, Some(m.console.to_path_buf())),
            channel: Some(m.channel.to_path_buf()),
        };
        let gdb = m
            .gdb
            .map(|(addr, wait)| vmm::gdb::GdbListener::bind(addr, wait))
            .transpose()?;
        let api = m
            .control
            .api
            .as_deref()
            .map(vmm::api::ApiListener::bind)
            .transpose()?;
        let building = std::time::Instant::now();
        let mut vm = Vm::build(&config)?;
        log::debug!(
            "startup: VM built (memory, devices, kernel and initrd loaded, ACPI) in {:.3} s",
            building.elapsed().as_secs_f64()
        );
        if let Some(listener) = gdb {
            vm.attach_gdb(listener);
        }
        if let Some(listener) = api {
            vm.attach_api(listener);
        }
        if let Some(f) = &m.control.dump_on_panic {
            vm.dump_on_panic(f.clone())?;
        }
        let outcome = vm.run_with(RunOptions {
            timeout: Some(m.timeout),
            ..RunOptions::default()
        })?;
        let error = match &outcome.reason {
            ExitRequest::GuestExit(_) | ExitRequest::PowerOff => None,
            other => {
                let mut msg = exit_status::describe(other);
                if let Some(h) = &outcome.host_hint {
                    msg.push_str("; ");
                    msg.push_str(h);
                }
                for v in &outcome.vcpus {
                    msg.push_str("; ");
                    msg.push_str(v);
                }
                Some(msg)
            }
        };
        Ok(Ended {
            status: Some(exit_status::for_request(&outcome.reason)),
            error,
            accelerator: "kvm".into(),
            // Nested guests run on a real KVM, but their numbers are not performance.
            functional_only: self.kvm.cannot_run_linux() || in_nested_l1(),
            exits: Some(outcome.exits.clone()),
            nvdimm_stats: outcome.nvdimms.clone(),
            machine: Some(outcome.machine.clone()),
        })
    }
}

/// `qemu-system-x86_64` with QEMU's own NVDIMM, as a child process.
#[derive(Debug)]
pub struct Qemu {
    qemu: PathBuf,
    accel: QemuAccel,
}

impl GuestEngine for Qemu {
    fn engine(&self) -> Engine {
        Engine::Qemu
    }

    fn boot(&self, m: &Machine<'_>) -> Result<Ended, EngineError> {
        if let Some(l) = m.spec.legacy_pmem.first() {
            return Err(EngineError::LegacyPmemOnQemu(l.to_string()));
        }
        let mut ended = Ended {
            accelerator: self.accel.name().into(),
            functional_only: self.accel == QemuAccel::Tcg || in_nested_l1(),
            ..Ended::default()
        };
        let initrd_file = m.scratch.join("initrd");
        let data = match m.initrd {
            Some(p) => std::fs::read(p).map_err(|source| EngineError::Input {
                what: "initrd",
                path: p.to_path_buf(),
                source,
            })?,
            None => Vec::new(),
        };
        let data = crate::guest_job::append_to_initrd(&data, m.job_archive);
        std::fs::write(&initrd_file, &data).map_err(|source| EngineError::Io {
            what: "writing the job initrd".into(),
            source,
        })?;
        // QEMU needs named backing files: temporary ones live in the scratch dir.
        let dimms: Vec<(&NvdimmSpec, PathBuf)> = m
            .spec
            .nvdimms
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let p = n
                    .file
                    .clone()
                    .unwrap_or_else(|| m.scratch.join(format!("pmem{i}.img")));
                (n, p)
            })
            .collect();
        for (n, p) in &dimms {
            if !p.exists() {
                let f = std::fs::File::create(p).and_then(|f| f.set_len(n.file_len()).map(|_| f));
                f.map_err(|source| EngineError::Io {
                    what: format!("creating {}", p.display()),
                    source,
                })?;
            }
            // A new DIMM starts as on pmemvm (and on a real platform): an empty,
            // valid label index, no namespace. QEMU alone would show a zeroed label
            // area, which Linux reads as label-less (a raw /dev/pmem0 of it all).
            if !n.readonly && n.label_size > 0 {
                let init = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(p)
                    .and_then(|f| vmm::backing::init_empty_labels(&f, n));
                init.map_err(|source| EngineError::Io {
                    what: format!("initialising the label area of {}", p.display()),
                    source,
                })?;
            }
        }
        let machine = QemuMachine {
            qemu: &self.qemu,
            accel: self.accel,
            cpus: m.spec.cpus,
            memory: m.spec.memory,
            kernel: m.kernel,
            initrd: Some(&initrd_file),
            cmdline: m.cmdline,
            nvdimms: dimms,
            disks: &m.spec.disks,
            console: m.console,
            channel: m.channel,
        };
        let mut cmd = machine.command();
        if let Some((addr, wait)) = m.gdb {
            let dev = qemu_gdb_device(addr);
            eprintln!("pmemvm: --engine qemu: --gdb is QEMU's own gdbstub (-gdb {dev}{}): gdb attaches the same way; pmemvm's monitor commands are not there", if wait { " -S" } else { "" });
            cmd.args(["-gdb", &dev]);
            if wait {
                cmd.arg("-S");
            }
        }
        log::info!("running {cmd:?}");
        let end = run_with_deadline(
            &mut cmd,
            m.timeout,
            m.stream_console.then_some(m.console),
            &m.scratch.join("qemu.log"),
        )?;
        ended.status = match end {
            // isa-debug-exit: QEMU exits with (byte << 1) | 1.
            QemuEnd::Exited(Some(s)) if s & 1 == 1 => u8::try_from(s >> 1).ok(),
            QemuEnd::Exited(Some(0)) => Some(0),
            QemuEnd::Exited(Some(s)) => {
                ended.error = Some(format!("qemu-system-x86_64 failed with status {s}"));
                None
            }
            QemuEnd::Exited(None) => {
                ended.error = Some("qemu-system-x86_64 was killed by a signal".into());
                None
            }
            QemuEnd::Deadline => {
                ended.error = Some(format!(
                    "the guest did not finish within {} s (use --timeout to allow more); QEMU was killed",
                    m.timeout.as_secs()
                ));
                Some(exit_status::TIMED_OUT)
            }
            QemuEnd::Signal(signal) => {
                ended.error = Some(format!("stopped by signal {signal}; QEMU was ended"));
                u8::try_from(128 + signal).ok()
            }
        };
        Ok(ended)
    }
}

/// True when this process runs inside the nested harness's L1 (QEMU TCG guest).
pub fn in_nested_l1() -> bool {
    std::fs::read_to_string("/sys/class/dmi/id/sys_vendor")
        .map(|v| v.trim() == "QEMU")
        .unwrap_or(false)
        && std::fs::read_to_string("/proc/cpuinfo")
            .map(|c| c.contains("hypervisor"))
            .unwrap_or(false)
}

/// How QEMU's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QemuEnd {
    /// QEMU exited with this status (None: killed by a signal).
    Exited(Option<i32>),
    /// The deadline passed; QEMU was killed.
    Deadline,
    /// A stop signal reached pmemvm; QEMU was ended (SIGTERM, then SIGKILL).
    Signal(i32),
}

/// Time QEMU gets to end in order after SIGTERM before SIGKILL.
const QEMU_STOP_GRACE: Duration = Duration::from_secs(5);

/// Runs QEMU until it exits, the deadline passes (it is killed) or a stop
/// signal (SIGINT, SIGTERM, SIGHUP) reaches pmemvm (QEMU gets SIGTERM, then
/// SIGKILL after [`QEMU_STOP_GRACE`]). QEMU runs in a process group of its own
/// and dies with this thread (`PR_SET_PDEATHSIG`), so it never outlives pmemvm;
/// its stderr goes to `log` (warnings are logged at the end).
fn run_with_deadline(
    cmd: &mut std::process::Command,
    deadline: Duration,
    stream: Option<&Path>,
    log: &Path,
) -> Result<QemuEnd, EngineError> {
    let log_file = std::fs::File::create(log).map_err(|source| EngineError::Io {
        what: format!("creating {}", log.display()),
        source,
    })?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .process_group(0);
    crate::nested::wait::dies_with_this_process(cmd);
    crate::nested::wait::with_empty_signal_mask(cmd);
    // Blocked before the spawn, so none is missed; QEMU starts with an empty
    // mask (with_empty_signal_mask), so it ends on the SIGTERM below.
    let signals = vmm::signals::StopSignals::block();
    let mut child = cmd.spawn().map_err(|source| EngineError::Io {
        what: "starting qemu-system-x86_64".into(),
        source,
    })?;
    let mut shown = 0usize;
    let mut stopped_by = None;
    let waited = crate::nested::wait::wait_watched_with_grace(
        &mut child,
        Some(deadline),
        QEMU_STOP_GRACE,
        || {
            if let Some(sig) = signals.as_ref().ok().and_then(|s| s.read()) {
                stopped_by = Some(sig);
                return Some(format!("signal {sig}"));
            }
            if let Some(path) = stream {
                if let Ok(b) = std::fs::read(path) {
                    if b.len() > shown {
                        use std::io::Write;
                        let _ = std::io::stdout().write_all(&b[shown..]);
                        let _ = std::io::stdout().flush();
                        shown = b.len();
                    }
                }
            }
            None
        },
    )
    .map_err(|source| EngineError::Io {
        what: "waiting for qemu-system-x86_64".into(),
        source,
    })?;
    let err = std::fs::read_to_string(log).unwrap_or_default();
    if !err.trim().is_empty() {
        log::warn!("qemu: {}", err.trim());
    }
    Ok(match waited {
        Waited::Exited(s) => QemuEnd::Exited(s.code()),
        Waited::Deadline => QemuEnd::Deadline,
        Waited::Stopped(_) => QemuEnd::Signal(stopped_by.unwrap_or(libc::SIGTERM)),
    })
}
