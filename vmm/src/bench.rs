//! `pmemvm bench`: the upstream experiments as one command. Boots the guest
//! image once per side and per run, collects fio's figures and writes the
//! report (terminal table, JSON, CSV, SVG) — after every run, so partial
//! results survive a failure or an interrupt.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::NvdimmSpec;
use crate::experiments::{self, BenchParams, ExperimentError};
use crate::fio;
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
}

impl BenchError {
    /// True when the user's input is at fault (exit status 2).
    pub fn is_usage(&self) -> bool {
        match self {
            Self::Experiment(_) => true,
            Self::Report(ReportError::CreateDir { .. }) => true,
            Self::Report(_) => false,
            Self::Run(e) => e.is_usage(),
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

/// The finished report and whether every run succeeded.
#[derive(Debug)]
pub struct BenchOutcome {
    /// The report.
    pub report: BenchReport,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// Runs that failed.
    pub failed: usize,
}

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

/// Runs the experiment.
pub fn bench(req: &BenchRequest) -> Result<BenchOutcome, BenchError> {
    let experiment = experiments::find_experiment(&req.experiment)?;
    let engine = req.engine.resolve(&crate::host::HostKvm::probe())?;
    let plan = experiment.plan(&BenchParams {
        vcpus: u32::from(req.cpus),
        jobs: req.jobs,
        nvdimm_bytes: req.nvdimm,
        runtime_s: req.runtime,
        iodepth: req.iodepth,
        nullb_mib: None,
    })?;
    let memory = req.memory.max(plan.min_guest_mem_mib << 20);
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
    // Fail early when the output directory cannot be written.
    let mut files = report.write_files(&req.out, true)?;
    let nvdimms: Vec<NvdimmSpec> = plan
        .nvdimm_bytes
        .map(NvdimmSpec::temporary)
        .into_iter()
        .collect();
    progress(&format!(
        "{}: {} run(s) × side(s) {:?}, {} vCPU(s), {} MiB RAM, {} fio job(s), engine {}; writing to {}",
        experiment.name,
        req.runs,
        report.sides,
        req.cpus,
        memory >> 20,
        plan.jobs,
        report.engine,
        req.out.display()
    ));
    let mut failed = 0;
    for run_index in 1..=req.runs {
        for side in &plan.sides {
            let extra = plan.cmdline_for(side);
            progress(&format!(
                "run {run_index}/{}, side {}: booting ({extra})",
                req.runs, side.label
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
                timeout: req.timeout,
            };
            let result = run::run_job(&spec)?;
            report.accelerator = match (result.functional_only, result.accelerator.as_str()) {
                (_, "tcg") => Accelerator::Tcg,
                (true, _) => Accelerator::Nested,
                _ => Accelerator::Kvm,
            };
            let outcome = outcome_of(experiment, &result);
            match &outcome {
                RunOutcome::Ok { summary } => progress(&format!(
                    "run {run_index}, side {}: IOPS {:.0}, slat min/avg {}/{:.0} ns, sys {:.1}%, ctx {} ({:.1} s)",
                    side.label,
                    summary.iops,
                    summary.slat.min_ns,
                    summary.slat.mean_ns,
                    summary.sys_cpu,
                    summary.ctx,
                    result.wall_seconds
                )),
                RunOutcome::Failed { error } => {
                    failed += 1;
                    progress(&format!("run {run_index}, side {}: FAILED: {error}", side.label));
                    if !result.console_tail.is_empty() {
                        eprintln!("{}", result.console_tail);
                    }
                }
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
    Ok(BenchOutcome {
        report,
        files,
        failed,
    })
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
