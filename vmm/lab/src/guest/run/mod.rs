//! `pmemvm run`: one fio job in the guest image, on pmemvm or on QEMU, with
//! fio's JSON and the run's metadata returned to the host.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::guest::engine::{self, EngineError, Machine};
use crate::guest::guest_job::{self, GuestJob};
use crate::guest::nested::share::tail;
use crate::guest::preflight::PreflightError;
use crate::guest::transfer::{CommandJob, PreparedTransfer};
use vmm::exit_status;
use vmm::host::HostKvm;
use vmm::vstate::vm::VmError;

mod collect;
mod prepare;
mod record;
mod request;
use record::PendingHashes;
pub use record::{describe_host, DimmDescription, HashedFile, HostDescription, RunResult};
pub use request::{check_output, RunRequest};

/// Errors of a job run. Partial results are kept in [`RunResult`] where possible.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--api`.
    #[error(transparent)]
    Api(#[from] vmm::api::ApiError),
    /// `--dump-on-panic`.
    #[error(transparent)]
    Dump(#[from] vmm::debug::dump::DumpError),
    /// `--gdb` beyond loopback without `--gdb-any-address`.
    #[error(transparent)]
    Gdb(#[from] vmm::debug::gdb::GdbError),
    /// The engine failed before or while booting.
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    /// An output file cannot be written there.
    #[error("cannot write {path}: {source}")]
    Output {
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The job archive.
    #[error(transparent)]
    Job(#[from] guest_job::GuestJobError),
    /// The guest image was needed (no kernel, or no initrd to run the job) and is not there.
    #[error(transparent)]
    Image(#[from] guest_job::ImageUnavailable),
    /// A prerequisite of the engine or the host is not met.
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// `--put`, `--get` or the command.
    #[error(transparent)]
    Transfer(#[from] crate::guest::transfer::TransferError),
    /// `--modules`.
    #[error(transparent)]
    Modules(#[from] crate::guest::modules::ModulesError),
}

/// The engine's own errors (building the VM, its endpoints, an engine that is
/// not usable or cannot honour an option) are a run's through [`RunError::Engine`],
/// whichever layer meets them first.
macro_rules! through_the_engine {
    ($($from:ty),*) => {$(
        impl From<$from> for RunError {
            fn from(e: $from) -> Self {
                Self::Engine(engine::EngineError::from(e))
            }
        }
    )*};
}
through_the_engine!(
    VmError,
    vmm::launch::LaunchError,
    engine::Unavailable,
    engine::Refusal
);

impl vmm::exit_status::Classified for RunError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Engine(e) => e.kind(),
            Self::Output { .. } | Self::Preflight(_) | Self::Image(_) => Usage,
            Self::Transfer(e) => e.kind(),
            Self::Modules(e) => e.kind(),
            Self::Api(e) => e.kind(),
            Self::Dump(e) => e.kind(),
            Self::Gdb(e) => e.kind(),
            Self::Job(_) => Guest,
        }
    }
}

pub use crate::guest::engine::Engine;

/// Everything a job run needs (serialisable: a bench hands it to a child process).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSpec {
    /// Engine.
    pub engine: Engine,
    /// What it boots (kernel and initrd `None`: the guest image's; command
    /// line `None`: the job default).
    pub boot: vmm::config::BootFiles,
    /// vCPUs, RAM, placement and the user's devices.
    pub machine: vmm::config::MachineSpec,
    /// What the guest runs: fio, or a command.
    pub workload: Workload,
    /// Stream the console to stdout.
    pub stream_console: bool,
    /// Keep the whole console in this file.
    pub console_log: Option<PathBuf>,
    /// Give up after this long.
    pub timeout: Duration,
    /// `--gdb ADDR`: serve gdb there while the guest runs.
    #[serde(default)]
    pub gdb: Option<vmm::debug::gdb::GdbAddr>,
    /// `--gdb-wait`: hold the vCPUs until a debugger attaches.
    #[serde(default)]
    pub gdb_wait: bool,
    /// `--api` and `--dump-on-panic`.
    #[serde(default)]
    pub control: RunControl,
}

pub use crate::guest::engine::RunControl;

/// What a run's guest runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Workload {
    /// fio: one job file or phases (`run --fio`, a bench's boot).
    Fio(GuestJob),
    /// A command (`run -- CMD`) with its transfers, after `setup`.
    Command {
        /// The command, its root file system and transfers.
        job: CommandJob,
        /// `--setup`: run with `sh -e` in `/job` before the command.
        setup: Option<String>,
    },
}

impl Workload {
    /// The job archive's fio side: the fio job; for a command its setup and
    /// the job an image without commands runs, failing at once.
    pub fn guest_job(&self) -> GuestJob {
        match self {
            Self::Fio(job) => job.clone(),
            Self::Command { setup, .. } => GuestJob {
                fio_job: guest_job::COMMAND_FALLBACK_JOB.into(),
                setup: setup.clone(),
                ..GuestJob::default()
            },
        }
    }

    /// The command, if it is one.
    pub fn command(&self) -> Option<&CommandJob> {
        match self {
            Self::Command { job, .. } => Some(job),
            Self::Fio(_) => None,
        }
    }
}

impl RunControl {
    /// Binds `gdb` and `--api` for the run and checks that the
    /// `--dump-on-panic` file is new: a busy port or an existing path stops
    /// the run before anything boots.
    pub fn bind(
        &self,
        gdb: Option<(&vmm::debug::gdb::GdbAddr, bool)>,
    ) -> Result<vmm::launch::Endpoints, RunError> {
        let endpoints = vmm::launch::Endpoints::bind(gdb, self.api.as_deref())?;
        if let Some(f) = &self.dump_on_panic {
            vmm::debug::dump::check_new_file(f)?;
        }
        Ok(endpoints)
    }

    /// [`Self::bind`] without a debugger, let go at once: the check of a
    /// run that binds later (each boot of a bench); nothing is left behind.
    pub fn check(&self) -> Result<(), RunError> {
        self.bind(None).map(drop)
    }
}

/// A per-run scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Self, RunError> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "pmemvm-run-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).map_err(|source| EngineError::Io {
            what: format!("creating {}", p.display()),
            source,
        })?;
        Ok(Self(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Default kernel command line for jobs in the guest image.
pub const JOB_CMDLINE: &str = "console=ttyS0 reboot=acpi panic=-1 loglevel=4 swiotlb=noforce";

/// The engine `spec` runs on here, and the refusal of an option that engine cannot
/// honour (`--pin`, `--host-node`, huge pages on QEMU): what `run` does first and what
/// `pmemvm preflight run` checks, so the refusal comes before any install or build.
pub fn engine_for(spec: &RunSpec) -> Result<Engine, RunError> {
    let kvm = HostKvm::probe();
    // A guest that is not Linux (e.g. a test payload) may still run on a PVM KVM.
    let linux = spec.boot.boots_linux();
    let engine = match spec.engine.resolve(&kvm) {
        Err(engine::Unavailable::HostCannotRunLinux(_)) if !linux => Engine::Pmemvm,
        other => other?,
    };
    if let Some(refusal) = engine.refusal(&spec.machine, &spec.control) {
        return Err(refusal.into());
    }
    Ok(engine)
}

/// Checks the job's inputs ([`check_inputs`]) and runs it: for a spec made
/// elsewhere (a bench's plan, a child's spec file, a suite).
pub fn run_job(spec: &RunSpec) -> Result<RunResult, RunError> {
    check_inputs(&spec.boot)?;
    run_checked_job(spec)
}

/// Runs a job whose inputs [`RunRequest::spec`] checked; returns the result
/// (check `error`/`status`) or an error when nothing could be started.
pub fn run_checked_job(spec: &RunSpec) -> Result<RunResult, RunError> {
    let began = Instant::now();
    // Where the time before the boot goes, at debug level (`-vv`).
    let step = |what: &str| {
        log::debug!("startup: {what} at {:.3} s", began.elapsed().as_secs_f64());
    };
    let engine = engine_for(spec)?;
    step("inputs checked and engine chosen");
    let kvm = HostKvm::probe();
    let scratch = Scratch::new()?;
    let prepared = prepare::prepare(spec, engine, &scratch.0)?;
    step("job archive packed");
    let hashes = PendingHashes::start(&prepared.config.kernel, prepared.config.initrd.as_deref());
    let mut result = new_result(spec, engine, &prepared);
    step("host and machine described");
    let gdb = spec.gdb.as_ref().map(|a| (a, spec.gdb_wait));
    // Bound once here, before the boot.
    let endpoints = spec.control.bind(gdb)?;
    let machine = Machine {
        gdb,
        endpoints: std::cell::RefCell::new(Some(endpoints)),
        control: &spec.control,
        config: &prepared.config,
        console: &prepared.console,
        channel: &prepared.channel,
        scratch: &scratch.0,
        stream_console: spec.stream_console,
        timeout: spec.timeout,
    };
    step("booting");
    let start = Instant::now();
    let ended = engine::for_engine(engine, &kvm)?.boot(&machine)?;
    result.wall_seconds = start.elapsed().as_secs_f64();
    step("guest ended");
    (result.kernel, result.initrd) = hashes.finish();
    step("kernel and initrd hashed");
    let transfer = prepared.transfer.as_ref().map(|(c, t)| (*c, t));
    let outputs = Outputs {
        console: &prepared.console,
        channel: &prepared.channel,
        console_log: spec.console_log.as_deref(),
    };
    let collected = collect_ended(result, ended, &outputs, transfer);
    step("results collected");
    collected
}

/// A run's result before the guest runs: what was asked and where it runs
/// (status 1 until the guest says otherwise; hashes filled in after).
fn new_result(spec: &RunSpec, engine: Engine, prepared: &prepare::Prepared<'_>) -> RunResult {
    let nvdimms = spec.machine.nvdimms.iter().map(|n| DimmDescription {
        size: n.size,
        file: n.file.as_ref().map(|f| f.display().to_string()),
        readonly: n.readonly,
        label_size: n.label_size,
    });
    let image_manifest = prepared
        .image
        .as_ref()
        .and_then(|i| std::fs::read(&i.manifest).ok())
        .and_then(|b| serde_json::from_slice(&b).ok());
    let placement = &spec.machine.placement;
    RunResult {
        schema_version: crate::study::results::record::SCHEMA_VERSION,
        pmemvm_version: env!("CARGO_PKG_VERSION").into(),
        engine,
        accelerator: "kvm".into(),
        functional_only: false,
        status: exit_status::RUNTIME_ERROR,
        error: None,
        // Filled in from the pending hashes once the guest has run.
        kernel: HashedFile {
            path: prepared.config.kernel.display().to_string(),
            sha256: String::new(),
        },
        initrd: None,
        modules: prepared.modules.clone(),
        image_manifest,
        cmdline: prepared.config.cmdline.clone(),
        cpus: spec.machine.cpus,
        memory: spec.machine.memory,
        nvdimms: nvdimms.collect(),
        host: describe_host(),
        exits: None,
        nvdimm_stats: Vec::new(),
        machine: vmm::host::machine::MachineDescription::probe().with_run(
            &placement.pin,
            placement.host_node,
            Vec::new(),
        ),
        wall_seconds: 0.0,
        fio: None,
        command: None,
        guest_files: Default::default(),
        console_tail: String::new(),
    }
}

/// Where a finished guest left its output.
struct Outputs<'a> {
    console: &'a std::path::Path,
    channel: &'a std::path::Path,
    /// `--console-log`: the console's copy for the user.
    console_log: Option<&'a std::path::Path>,
}

/// The result of an ended guest: the engine's figures, the console's tail
/// (and the user's copy of it), then what the guest reported on its channel.
fn collect_ended(
    mut result: RunResult,
    ended: engine::Ended,
    outputs: &Outputs<'_>,
    transfer: Option<(&CommandJob, &PreparedTransfer)>,
) -> Result<RunResult, RunError> {
    result.accelerator = ended.accelerator;
    result.functional_only = ended.functional_only;
    result.exits = ended.exits;
    result.nvdimm_stats = ended.nvdimm_stats;
    if let Some(m) = ended.machine {
        result.machine = m;
    }
    let console_text =
        String::from_utf8_lossy(&std::fs::read(outputs.console).unwrap_or_default()).into_owned();
    result.console_tail = tail(&console_text, 40);
    if let Some(log) = outputs.console_log {
        std::fs::write(log, console_text.as_bytes()).map_err(|source| EngineError::Io {
            what: format!("writing the console log {}", log.display()),
            source,
        })?;
    }
    let channel_bytes = std::fs::read(outputs.channel).unwrap_or_default();
    let got = collect::collect(
        ended.error,
        &channel_bytes,
        &console_text,
        ended.status,
        transfer,
    );
    result.fio = got.fio;
    result.guest_files = got.guest_files;
    result.command = got.command;
    result.status = got.status;
    result.error = got.error;
    Ok(result)
}

/// The user's kernel and initrd can be read, and `--modules` fits the kernel:
/// checked before the engine is chosen, so a mistyped path is named as such on
/// every host.
pub fn check_inputs(boot: &vmm::config::BootFiles) -> Result<(), RunError> {
    let files = [
        ("kernel", boot.kernel.as_ref()),
        ("initrd", boot.initrd.as_ref()),
    ];
    for (what, path) in files {
        let Some(path) = path else { continue };
        let opened = std::fs::File::open(path).and_then(|f| {
            if f.metadata()?.is_dir() {
                Err(std::io::Error::new(
                    std::io::ErrorKind::IsADirectory,
                    "it is a directory",
                ))
            } else {
                Ok(())
            }
        });
        opened.map_err(|source| EngineError::Input {
            what,
            path: path.clone(),
            source,
        })?;
    }
    if let Some(dir) = &boot.modules {
        // Without --kernel, the guest image's (no image: run_job says so).
        let kernel = boot
            .kernel
            .clone()
            .or_else(|| guest_job::find_image_dir().ok().map(|i| i.vmlinux));
        if let Some(kernel) = kernel {
            crate::guest::modules::ModuleTree::open(dir, &kernel)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_workload_archives_its_setup_and_the_job_an_old_image_fails_on() {
        let w = Workload::Command {
            job: CommandJob {
                rootfs: None,
                argv: vec!["true".into()],
                puts: Vec::new(),
                gets: Vec::new(),
                out: None,
                area: 0,
            },
            setup: Some("ndctl list\n".into()),
        };
        let job = w.guest_job();
        assert_eq!(job.setup.as_deref(), Some("ndctl list\n"));
        // The phases' stand-in, worded for a command: the same job fio refuses.
        assert_eq!(
            job.fio_job,
            guest_job::PHASES_FALLBACK_JOB
                .replace("has phases (/job/phases)", "is a command (/job/cmd.sh)")
        );
        assert_eq!(w.command().map(|c| c.argv.len()), Some(1));
        let fio = Workload::Fio(GuestJob::default());
        assert!(fio.command().is_none());
        assert_eq!(fio.guest_job(), GuestJob::default());
    }
    use vmm::exit_status::Classified;

    #[test]
    fn engine_resolution_follows_the_host() {
        let pvm = HostKvm {
            hw_virt: false,
            pvm: true,
        };
        let hw = HostKvm {
            hw_virt: true,
            pvm: false,
        };
        assert_eq!(Engine::Auto.resolve(&pvm).unwrap(), Engine::Qemu);
        assert_eq!(Engine::Auto.resolve(&hw).unwrap(), Engine::Pmemvm);
        assert_eq!(Engine::Pmemvm.resolve(&hw).unwrap(), Engine::Pmemvm);
        assert_eq!(Engine::Qemu.resolve(&pvm).unwrap(), Engine::Qemu);
        let e = RunError::from(Engine::Pmemvm.resolve(&pvm).unwrap_err());
        assert!(e.is_usage());
        assert!(e.to_string().contains("--engine qemu"), "{e}");
    }
}
