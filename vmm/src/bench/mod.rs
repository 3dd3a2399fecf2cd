//! `pmemvm bench`: the upstream experiments as one command. Boots the guest
//! image once per side and per run, collects fio's figures and writes the
//! report (terminal table, JSON, CSV, SVG) — after every run, so partial
//! results survive a failure or an interrupt.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::NvdimmSpec;
use crate::experiments::{self, BenchParams, ExperimentError};
use crate::fio;
use crate::preflight::{self, Needs, PreflightError};
use crate::report::{Accelerator, BenchReport, HostInfo, ReportError, RunOutcome, RunRecord};
use crate::run::{self, Engine, RunError, RunSpec};

/// Errors of `pmemvm bench` before or after the runs.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Unknown experiment or bad scaling.
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    /// Writing the report.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// A run could not even start (e.g. QEMU missing, no guest image).
    #[error(transparent)]
    Run(#[from] RunError),
    /// A prerequisite of the host is not met (checked before any boot).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
}

impl BenchError {
    /// True when the user's input is at fault (exit status 2).
    pub fn is_usage(&self) -> bool {
        match self {
            Self::Experiment(_) => true,
            Self::Report(ReportError::CreateDir { .. }) => true,
            Self::Report(_) => false,
            Self::Run(e) => e.is_usage(),
            Self::Preflight(_) => true,
        }
    }
}

/// What `pmemvm bench` was asked.
#[derive(Debug, Clone)]
pub struct BenchRequest {
    /// Experiment name.
    pub experiment: String,
    /// Repetitions per side.
    pub runs: u32,
    /// Guest vCPUs.
    pub cpus: u8,
    /// Guest RAM (raised to the experiment's minimum).
    pub memory: u64,
    /// fio jobs of the measured phase.
    pub jobs: Option<u32>,
    /// NVDIMM size.
    pub nvdimm: Option<u64>,
    /// Seconds per measured phase.
    pub runtime: Option<u32>,
    /// Queue depth.
    pub iodepth: Option<u32>,
    /// Output directory.
    pub out: PathBuf,
    /// Engine.
    pub engine: Engine,
    /// Per-boot timeout.
    pub timeout: Duration,
    /// Kernel override.
    pub kernel: Option<PathBuf>,
    /// Initrd override.
    pub initrd: Option<PathBuf>,
}

/// The finished report (its `failed_runs` say which runs failed) and its files.
#[derive(Debug)]
pub struct BenchOutcome {
    /// The report.
    pub report: BenchReport,
    /// Files written.
    pub files: Vec<PathBuf>,
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
    pub plan: experiments::ExperimentPlan,
    /// Guest RAM (the request raised to the plan's minimum).
    pub memory: u64,
    /// The engine `auto` resolved to.
    pub engine: Engine,
}

/// Everything a bench checks before its first boot: the experiment and its
/// scaling, the engine (KVM usable, QEMU present — or, with `allow_install`,
/// listed in `needs`), RAM for the guest, disk for the NVDIMM it fills, and
/// an output directory that can be created. Creates nothing.
pub fn prepare(
    req: &BenchRequest,
    allow_install: bool,
    needs: &mut Needs,
) -> Result<Prepared, BenchError> {
    let experiment = experiments::find_experiment(&req.experiment)?;
    let plan = experiment.plan(&BenchParams {
        vcpus: u32::from(req.cpus),
        jobs: req.jobs,
        nvdimm_bytes: req.nvdimm,
        runtime_s: req.runtime,
        iodepth: req.iodepth,
        nullb_mib: None,
    })?;
    let engine = preflight::engine(
        req.engine,
        &crate::host::HostKvm::probe(),
        preflight::kvm_opens(),
        crate::qemu::find_qemu().is_some(),
        allow_install,
        needs,
    )?;
    let memory = req.memory.max(plan.min_guest_mem_mib << 20);
    preflight::memory(memory, preflight::mem_available())?;
    if let Some(bytes) = plan.nvdimm_bytes {
        let tmp = std::env::temp_dir();
        preflight::dimm_disk(bytes, &tmp, preflight::free_bytes(&tmp))?;
    }
    preflight::output_dir(&req.out)?;
    needs.image |= req.kernel.is_none();
    Ok(Prepared {
        experiment,
        plan,
        memory,
        engine,
    })
}

/// Runs the experiment. The output directory is created when the first run
/// has finished: a bench that fails before any guest ran leaves nothing.
pub fn bench(req: &BenchRequest) -> Result<BenchOutcome, BenchError> {
    let Prepared {
        experiment,
        plan,
        memory,
        engine,
    } = prepare(req, false, &mut Needs::default())?;
    let mut host = HostInfo::detect_host();
    host.guest_vcpus = u32::from(req.cpus);
    host.guest_mem_mib = memory >> 20;
    host.nvdimm_bytes = plan.nvdimm_bytes;
    host.jobs = plan.jobs;
    let mut report = BenchReport {
        experiment: experiment.name.to_string(),
        description: experiment.description.to_string(),
        engine: engine.name().into(),
        accelerator: Accelerator::Kvm,
        host,
        sides: plan.sides.iter().map(|s| s.label.to_string()).collect(),
        runs: Vec::new(),
        upstream: experiment.upstream_figures(),
        upstream_source: experiment.upstream_source.to_string(),
    };
    let mut files = Vec::new();
    let nvdimms: Vec<NvdimmSpec> = plan
        .nvdimm_bytes
        .map(|b| NvdimmSpec {
            size: b,
            size_text: format!("{b}"),
            file: None,
            readonly: false,
            label_size: 0,
            prealloc: false,
        })
        .into_iter()
        .collect();
    let boots = req.runs as usize * plan.sides.len();
    progress(&format!(
        "{}: {} run(s) × side(s) {:?} = {boots} boot(s), {} vCPU(s), {} MiB RAM, {} fio job(s), engine {}{}; writing to {}",
        experiment.name,
        req.runs,
        report.sides,
        req.cpus,
        memory >> 20,
        plan.jobs,
        report.engine,
        if engine == Engine::Qemu && crate::qemu::QemuAccel::choose(&crate::host::HostKvm::probe()) == crate::qemu::QemuAccel::Tcg {
            " (TCG: figures are functional only)"
        } else {
            ""
        },
        req.out.display()
    ));
    let started = std::time::Instant::now();
    let mut boot = 0;
    for run_index in 1..=req.runs {
        for side in &plan.sides {
            let extra = plan.cmdline_for(side);
            boot += 1;
            progress(&format!(
                "boot {boot}/{boots} (run {run_index}/{}, side {}): booting ({extra}); {:.0} s elapsed",
                req.runs,
                side.label,
                started.elapsed().as_secs_f64()
            ));
            let spec = RunSpec {
                engine,
                kernel: req.kernel.clone(),
                initrd: req.initrd.clone(),
                cmdline: None,
                extra_cmdline: if extra.is_empty() {
                    vec![]
                } else {
                    vec![extra.clone()]
                },
                cpus: req.cpus,
                memory,
                nvdimms: nvdimms.clone(),
                job: plan.guest_job(),
                stream_console: false,
                console_log: None,
                timeout: req.timeout,
            };
            let result = run::run_job(&spec)?;
            report.accelerator = match (result.functional_only, result.accelerator.as_str()) {
                (_, "tcg") => Accelerator::Tcg,
                (true, _) => Accelerator::Nested,
                _ => Accelerator::Kvm,
            };
            let outcome = outcome_of(experiment, &result);
            match (&outcome, outcome.failure()) {
                (_, Some(error)) => {
                    progress(&format!("run {run_index}, side {}: FAILED: {error}", side.label));
                    if !result.console_tail.is_empty() {
                        eprintln!("{}", result.console_tail);
                    }
                }
                (RunOutcome::Ok { summary }, None) => progress(&format!(
                    "run {run_index}, side {}: IOPS {:.0}, slat min/avg {}/{:.0} ns, sys {:.1}%, ctx {} ({:.1} s)",
                    side.label,
                    summary.iops,
                    summary.slat.min_ns,
                    summary.slat.mean_ns,
                    summary.sys_cpu,
                    summary.ctx,
                    result.wall_seconds
                )),
                (RunOutcome::Failed { .. }, None) => {}
            }
            report.runs.push(RunRecord {
                side: side.label.to_string(),
                run: run_index,
                kernel_cmdline: Some(result.cmdline.clone()),
                outcome,
            });
            files = report.write_files(&req.out, true)?;
        }
    }
    Ok(BenchOutcome { report, files })
}

fn outcome_of(experiment: &experiments::Experiment, result: &run::RunResult) -> RunOutcome {
    let fio_json = result.fio.as_ref().and_then(|v| serde_json::to_vec(v).ok());
    let parsed = fio_json.as_deref().map(fio::parse_fio_json);
    match (parsed, &result.error) {
        (Some(Ok(out)), _) => match experiment.measurement(&out) {
            Ok(summary) => RunOutcome::Ok {
                summary: Box::new(summary),
            },
            Err(e) => RunOutcome::Failed {
                error: e.to_string(),
            },
        },
        (Some(Err(e)), _) => RunOutcome::Failed {
            error: format!("fio's JSON could not be read: {e}"),
        },
        (None, Some(e)) => RunOutcome::Failed { error: e.clone() },
        (None, None) => RunOutcome::Failed {
            error: "the guest sent no fio results".into(),
        },
    }
}
