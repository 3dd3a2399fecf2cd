//! `pmemvm bench`: the upstream experiments as one command. Boots the guest once per side and
//! per repetition (`--runs`), each boot running the thread's script for that side (setup, then
//! every phase in order: verify, fill, the measured runs); collects fio's figures and writes
//! the report (terminal table, JSON, CSV, SVG) after every boot, so partial results survive a
//! failure or an interrupt.
//!
//! - [`sides`]: `--side NAME:kernel=PATH[,initrd=PATH][,append=ARGS]`, A/B between any two
//!   kernels or command lines;
//! - [`outcome`]: one boot's frames → runs, checks and provenance.

use std::path::PathBuf;
use std::time::Duration;

use crate::guest::child::ChildError;
use crate::guest::guest_job;
use crate::guest::preflight::{self, Needs, PreflightError};
use crate::guest::run::{self, Engine, RunError};
use crate::study::experiments::{
    self, BenchParams, ExperimentError, ExperimentPlan, HostLimits, Side,
};
use crate::study::report::{BenchReport, ReportError};
use crate::study::results::task::Task;

mod boots;
pub mod cxl;
pub mod ending;
pub mod outcome;
pub mod request_file;
pub mod sides;

pub use boots::bench;
pub use sides::{parse_sides, SideError};

/// Errors of `pmemvm bench` before or after the runs.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Unknown experiment or bad scaling.
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    /// A bad `--side`.
    #[error(transparent)]
    Side(#[from] SideError),
    /// An `--only` task the bench does not have.
    #[error(transparent)]
    Only(#[from] crate::study::results::task::TaskError),
    /// Writing the report.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// A run could not even start (e.g. QEMU missing, no guest image).
    #[error(transparent)]
    Run(#[from] RunError),
    /// A run's child process failed or refused to start.
    #[error(transparent)]
    Child(#[from] ChildError),
    /// A prerequisite of the host is not met (checked before any boot).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// A side boots its own kernel without an initrd and there is no guest image to take the
    /// initramfs from.
    #[error(transparent)]
    Image(#[from] guest_job::ImageUnavailable),
    /// A Slurm task's request file (`--request`) cannot be read or is not one.
    #[error(transparent)]
    RequestFile(#[from] request_file::RequestFileError),
    /// The plan cannot be printed as JSON.
    #[error("cannot serialise the plan as JSON")]
    PlanJson(#[source] serde_json::Error),
    /// `--cxl-pmem` with an experiment it cannot serve.
    #[error(transparent)]
    Cxl(#[from] cxl::CxlBenchError),
}

impl vmm::exit_status::Classified for BenchError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Experiment(_)
            | Self::Side(_)
            | Self::Only(_)
            | Self::Image(_)
            | Self::Cxl(_)
            | Self::RequestFile(_) => Usage,
            Self::Report(ReportError::CreateDir { .. }) => Usage,
            Self::Report(_) => Environment,
            Self::PlanJson(_) => Internal,
            Self::Run(e) => e.kind(),
            Self::Child(e) => e.kind(),
            Self::Preflight(_) => Usage,
        }
    }
}

/// What `pmemvm bench` was asked. Serialized whole for the tasks of a Slurm array
/// ([`request_file`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BenchRequest {
    /// Experiment name.
    pub experiment: String,
    /// Boots per side; each runs all of the thread's repetitions (e.g. 3 randread runs).
    pub runs: u32,
    /// Guest vCPUs (`None`: the thread's job count, at most one per host CPU).
    pub cpus: Option<u8>,
    /// Guest RAM, raised to the experiment's minimum (`None`: the plan's default, which
    /// grows with the job count).
    pub memory: Option<u64>,
    /// fio jobs of the many-job phases.
    pub jobs: Option<u32>,
    /// The persistent memory's size (`--nvdimm` or `--cxl-pmem SIZE`).
    pub nvdimm: Option<u64>,
    /// The device that holds it (`--cxl-pmem`: a CXL Type-3 device).
    #[serde(default)]
    pub pmem_device: cxl::PmemDevice,
    /// Seconds of the time-bound phases.
    pub runtime: Option<u32>,
    /// Queue depth of the many-job phases.
    pub iodepth: Option<u32>,
    /// The thread's `--size`.
    pub size: Option<u64>,
    /// `--side` values (none: the experiment's own sides).
    pub sides: Vec<String>,
    /// Output directory.
    pub out: PathBuf,
    /// Engine.
    pub engine: Engine,
    /// Per-boot timeout.
    pub timeout: Duration,
    /// The kernel, initrd and `--modules` of all sides without their own (no
    /// command line: each side's comes from the experiment or its `append=`).
    pub boot: vmm::config::BootFiles,
    /// Run only this boot of this side (`--only SIDE:BOOT`, one Slurm array task).
    pub only: Option<Task>,
    /// Where each boot runs (this process's business: not serialized).
    #[serde(skip, default = "in_process")]
    pub runner: Runner,
    /// Guest RAM's pages (`--memory SIZE,hugepages|thp`), every boot.
    pub ram_pages: vmm::memory::hugepages::RamPages,
    /// vCPU pinning and host NUMA node (`--pin`, `--host-node`), every boot.
    pub placement: vmm::memory::placement::Placement,
    /// `--api PATH`: each boot serves the control socket there while it runs
    /// (engines pmemvm and nested).
    pub api: Option<PathBuf>,
    /// `--fail-on-check`: a failed check (a verify phase) makes the exit status 1.
    #[serde(default)]
    pub fail_on_check: bool,
}

fn in_process() -> Runner {
    Runner::InProcess
}

/// Where a bench's boots run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    /// Each boot in a fresh child process of this binary (the `pmemvm`
    /// command: see [`crate::guest::child`]).
    Child(PathBuf),
    /// In this process (library users and unit tests).
    InProcess,
}

/// The finished report (its `failed_runs` say which runs failed) and its files.
#[derive(Debug)]
pub struct BenchOutcome {
    /// The report.
    pub report: BenchReport,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// The signal (SIGINT, SIGTERM, SIGHUP) that stopped the bench after the
    /// boot it arrived in; the report holds the runs up to there.
    pub interrupted_by: Option<i32>,
}

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

/// A bench whose prerequisites were checked: what will run.
#[derive(Debug)]
pub struct Prepared {
    /// The experiment.
    pub experiment: &'static experiments::Experiment,
    /// Its plan on this machine.
    pub plan: ExperimentPlan,
    /// Guest RAM, bytes (the plan's).
    pub memory: u64,
    /// The engine `auto` resolved to.
    pub engine: Engine,
}

/// The experiment and its plan for this request, `--side` applied. Checks the sides' files;
/// boots nothing, creates nothing.
pub fn plan(
    req: &BenchRequest,
) -> Result<(&'static experiments::Experiment, ExperimentPlan), BenchError> {
    let sides = parse_sides(&req.sides)?;
    let experiment = experiments::find_experiment(&req.experiment)?;
    let tmp = std::env::temp_dir();
    let plan = experiment
        .plan(&BenchParams {
            vcpus: req.cpus.map(u32::from),
            jobs: req.jobs,
            nvdimm_bytes: req.nvdimm,
            runtime_s: req.runtime,
            iodepth: req.iodepth,
            size_bytes: req.size,
            host: HostLimits {
                cpus: crate::guest::host_cpus::host_cpus().map_err(PreflightError::from)?,
                disk_free_bytes: preflight::free_bytes(&tmp),
                guest_mem_bytes: preflight::mem_available()
                    .map(|m| m.saturating_sub(preflight::HOST_OVERHEAD_BYTES)),
            },
        })?
        .with_memory(req.memory);
    if req.pmem_device == cxl::PmemDevice::Cxl && plan.nvdimm_bytes.is_none() {
        return Err(cxl::CxlBenchError::NoPmem(req.experiment.clone()).into());
    }
    let plan = match sides {
        Some(s) => plan.with_sides(s),
        None => plan,
    };
    if let Some(task) = &req.only {
        let labels: Vec<String> = plan.sides.iter().map(|s| s.label.clone()).collect();
        task.check(&labels, req.runs)?;
    }
    Ok((experiment, plan))
}

/// Whether any side boots (part of) the guest image: a side without its own kernel and
/// initrd, and no `--kernel`/`--initrd` for it.
pub fn uses_image(req: &BenchRequest, plan: &ExperimentPlan) -> bool {
    plan.sides.iter().any(|s| {
        s.kernel.is_none() && req.boot.kernel.is_none()
            || s.initrd.is_none() && req.boot.initrd.is_none()
    })
}

/// Everything a bench checks before its first boot: the sides, the experiment and its
/// scaling, the engine (KVM usable, QEMU present — or, with `allow_install`, listed in
/// `needs`), RAM for the guest, disk for the NVDIMM it fills, and an output directory that can
/// be created. Creates nothing.
pub fn prepare(
    req: &BenchRequest,
    allow_install: bool,
    needs: &mut Needs,
) -> Result<Prepared, BenchError> {
    let (experiment, plan) = plan(req)?;
    for side in &plan.sides {
        side_modules(side, req)?;
    }
    // The socket's path is the user's input: refused on any host.
    let control = run::RunControl {
        api: req.api.clone(),
        dump_on_panic: None,
    };
    control.check()?;
    let engine = preflight::engine_on_this_host(req.engine, allow_install, needs)?;
    // The machine every boot shares (the DIMMs and sides differ).
    let shared = vmm::config::MachineSpec {
        ram_pages: req.ram_pages,
        placement: req.placement.clone(),
        ..Default::default()
    };
    if let Some(refusal) = engine.refusal(&shared, &control) {
        return Err(RunError::from(refusal).into());
    }
    let memory = plan.guest_mem_mib << 20;
    vmm::memory::memory_placement::check_host_placement(
        u8::try_from(plan.vcpus).unwrap_or(u8::MAX),
        &vmm::memory::hugepages::MemorySpec {
            size: memory,
            pages: req.ram_pages,
        },
        &req.placement,
        &[],
    )
    .map_err(|e| RunError::from(vmm::vstate::vm::VmError::from(e)))?;
    if req.ram_pages != vmm::memory::hugepages::RamPages::Hugetlb {
        // hugetlb RAM is not in MemAvailable; the check above counted free huge pages.
        preflight::memory(engine.memory_on_host(memory), preflight::mem_available())?;
    }
    if let Some(bytes) = plan.nvdimm_bytes {
        let tmp = std::env::temp_dir();
        preflight::dimm_disk(bytes, &tmp, preflight::free_bytes(&tmp))?;
    }
    preflight::output_dir(&req.out)?;
    needs.image |= uses_image(req, &plan);
    Ok(Prepared {
        experiment,
        plan,
        memory,
        engine,
    })
}

/// A side's modules (its own, else `--modules`), checked against the kernel it boots (its
/// own, `--kernel`, or the guest image's where there is one).
fn side_modules(side: &Side, req: &BenchRequest) -> Result<Option<PathBuf>, BenchError> {
    let modules = side.modules.clone().or_else(|| req.boot.modules.clone());
    if let Some(dir) = &modules {
        let kernel = side
            .kernel
            .clone()
            .or_else(|| req.boot.kernel.clone())
            .or_else(|| guest_job::find_image_dir().ok().map(|i| i.vmlinux));
        if let Some(k) = kernel {
            crate::guest::modules::ModuleTree::open(dir, &k).map_err(RunError::from)?;
        }
    }
    Ok(modules)
}
