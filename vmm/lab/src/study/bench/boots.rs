//! The boots of a bench: one per side and repetition, each a fresh guest (in a
//! child process of `pmemvm` or in this one), its records printed as they come
//! and the report rewritten after every boot.

use std::path::PathBuf;

use super::{
    outcome, progress, side_modules, BenchError, BenchOutcome, BenchRequest, Prepared, Runner,
};
use crate::guest::child::{self, ChildError};
use crate::guest::guest_job;
use crate::guest::preflight::Needs;
use crate::guest::run::{self, Engine, RunResult, RunSpec};
use crate::study::experiments::{Experiment, ExperimentPlan, Side};
use crate::study::report::{Accelerator, BenchReport, HostInfo, RunOutcome, VerifyExpectation};
use crate::study::results::record::ResultInfo;

/// Where the child processes' spec and outcome files live; removed at the end.
struct BenchScratch(PathBuf);

impl BenchScratch {
    fn new() -> Result<Self, BenchError> {
        let p = std::env::temp_dir().join(format!("pmemvm-bench-{}", std::process::id()));
        std::fs::create_dir_all(&p).map_err(|source| ChildError::Io {
            what: format!("creating {}", p.display()),
            source,
        })?;
        Ok(Self(p))
    }
}

impl Drop for BenchScratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a side boots: kernel, initrd and modules.
struct SideFiles {
    kernel: Option<PathBuf>,
    initrd: Option<PathBuf>,
    modules: Option<PathBuf>,
}

/// The kernel, initrd and modules a side boots: its own, else `--kernel`/`--initrd`/
/// `--modules`, else the guest image's (a side with its own kernel still needs the image's
/// initramfs for the job). Modules are checked against the kernel here, before any boot.
fn side_files(side: &Side, req: &BenchRequest) -> Result<SideFiles, BenchError> {
    let kernel = side.kernel.clone().or_else(|| req.boot.kernel.clone());
    let modules = side_modules(side, req)?;
    let mut initrd = side.initrd.clone().or_else(|| req.boot.initrd.clone());
    if let (Some(k), None) = (&kernel, &initrd) {
        let image = guest_job::image_for(guest_job::ImageNeed::SideInitrd {
            side: side.label.clone(),
            kernel: k.clone(),
        })?;
        initrd = Some(image.initramfs);
    }
    Ok(SideFiles {
        kernel,
        initrd,
        modules,
    })
}

/// The report before any boot: the experiment, the host, the sides and what
/// the thread expects.
fn new_report(req: &BenchRequest, prepared: &Prepared) -> BenchReport {
    let Prepared {
        experiment,
        plan,
        memory,
        engine,
    } = prepared;
    let mut host = HostInfo::detect_host();
    host.guest_vcpus = plan.vcpus;
    host.guest_mem_mib = memory >> 20;
    host.nvdimm_bytes = plan.nvdimm_bytes;
    host.pmem_device = req.pmem_device;
    host.jobs = plan.jobs;
    let own_sides = req.sides.is_empty();
    let thread_sides = match plan.sides.iter().any(|s| s.thread_side.is_some()) {
        true => plan.sides.iter().map(|s| s.thread_side).collect(),
        false => Vec::new(),
    };
    let verify_expectation =
        experiment
            .expectation
            .filter(|_| own_sides)
            .map(|x| VerifyExpectation {
                job: x.job.to_owned(),
                fails_off: x.fails_off,
                fails_on: x.fails_on,
                thread: x.thread.to_owned(),
            });
    BenchReport {
        experiment: experiment.name.to_string(),
        description: experiment.description.to_string(),
        engine: engine.name().into(),
        accelerator: Accelerator::Kvm,
        host,
        sides: plan.sides.iter().map(|s| s.label.clone()).collect(),
        thread_sides,
        runs: Vec::new(),
        upstream: experiment.upstream_figures(),
        upstream_source: experiment.upstream_source.to_string(),
        checks: Vec::new(),
        verify_expectation,
        deviations: plan.deviations.clone(),
        job_files: plan.job_files(),
        result: None,
    }
}

/// The bench's first progress lines: what boots, what each runs, where.
fn announce(req: &BenchRequest, prepared: &Prepared, report: &BenchReport, boots: usize) {
    let (plan, engine) = (&prepared.plan, &prepared.engine);
    let what = match &req.only {
        Some(t) => format!(
            "only boot {} of side {} (--only {t}; --runs {})",
            t.boot, t.side, req.runs
        ),
        None => format!(
            "{} boot(s) per side × side(s) {:?} = {boots} boot(s)",
            req.runs, report.sides
        ),
    };
    let phases: Vec<&str> = plan.phases.iter().map(|p| p.name.as_str()).collect();
    let tcg = *engine == Engine::Qemu
        && crate::guest::qemu::QemuAccel::choose(&vmm::host::HostKvm::probe())
            == crate::guest::qemu::QemuAccel::Tcg;
    let functional = match (tcg, *engine == Engine::Nested) {
        (true, _) => " (TCG: figures are functional only)",
        (_, true) => " (pmemvm in a TCG L1: figures are functional only)",
        _ => "",
    };
    progress(&format!(
        "{}: {what}, each: {}{}; {} vCPU(s), {} MiB RAM, {} fio job(s), engine {}{functional}; writing to {}",
        prepared.experiment.name,
        if plan.setup.is_some() { "setup, " } else { "" },
        phases.join(", "),
        plan.vcpus,
        prepared.memory >> 20,
        plan.jobs,
        report.engine,
        req.out.display()
    ));
    if !plan.deviations.is_empty() {
        progress(&format!(
            "{} deviation(s) from the thread (listed in the report; `--plan` shows them)",
            plan.deviations.len()
        ));
    }
}

/// The run of one boot of a side: its files, and `extra`, the experiment's
/// words for its kernel command line.
fn boot_spec(req: &BenchRequest, prepared: &Prepared, files: &SideFiles, extra: String) -> RunSpec {
    let plan = &prepared.plan;
    let (nvdimms, cxl_pmem) = super::cxl::devices(req.pmem_device, plan.nvdimm_bytes);
    let mut job = plan.guest_job();
    job.setup = super::cxl::setup(req.pmem_device, job.setup);
    RunSpec {
        gdb: None,
        gdb_wait: false,
        control: run::RunControl {
            api: req.api.clone(),
            dump_on_panic: None,
        },
        engine: prepared.engine,
        boot: vmm::config::BootFiles {
            kernel: files.kernel.clone(),
            initrd: files.initrd.clone(),
            modules: files.modules.clone(),
            cmdline: None,
            append: if extra.is_empty() {
                vec![]
            } else {
                vec![extra]
            },
        },
        machine: vmm::config::MachineSpec {
            // At most the thread's 48 by default, at most u8::MAX given (`--cpus`).
            cpus: u8::try_from(plan.vcpus).unwrap_or(u8::MAX),
            memory: prepared.memory,
            ram_pages: req.ram_pages,
            placement: req.placement.clone(),
            nvdimms,
            disks: Vec::new(),
            legacy_pmem: Vec::new(),
            nvdimm_slots: 0,
            cxl_pmem,
        },
        workload: run::Workload::Fio(job),
        stream_console: false,
        console_log: None,
        timeout: req.timeout,
    }
}

/// How one boot went: its result and the signal that arrived during it, or
/// the signal that stopped it before it started.
enum Ran {
    Done(Box<RunResult>, Option<i32>),
    StoppedBefore(i32),
}

fn run_boot(req: &BenchRequest, spec: &RunSpec, scratch: &BenchScratch) -> Result<Ran, BenchError> {
    match &req.runner {
        Runner::InProcess => Ok(Ran::Done(Box::new(run::run_job(spec)?), None)),
        Runner::Child(exe) => match child::run_in_child(exe, spec, &scratch.0) {
            Ok(done) => Ok(Ran::Done(Box::new(done.result), done.interrupted_by)),
            Err(ChildError::Interrupted { signal }) => Ok(Ran::StoppedBefore(signal)),
            Err(e) => Err(e.into()),
        },
    }
}

/// A progress line per failed check and per run; the console's tail when one failed.
fn print_records(side: &str, rep: u32, records: &outcome::BootRecords, result: &RunResult) {
    let mut any_failed = false;
    for c in &records.checks {
        if let Some(e) = &c.error {
            any_failed = true;
            let what = match crate::study::report::is_verify_failure(e) {
                true => "verify failed (a result of the experiment)",
                false => "FAILED",
            };
            progress(&format!("side {side} boot {rep} {}: {what}: {e}", c.phase));
        }
    }
    for r in &records.runs {
        match (&r.outcome, r.outcome.failure()) {
            (_, Some(error)) => {
                any_failed = true;
                progress(&format!(
                    "side {side} run {} ({}): FAILED: {error}",
                    r.run, r.phase
                ));
            }
            (RunOutcome::Ok { summary }, None) => progress(&format!(
                "side {side} run {} ({}): IOPS {:.0}, slat min/avg {}/{:.0} ns, sys {:.1}%, ctx {}",
                r.run,
                r.phase,
                summary.iops,
                summary.slat.min_ns,
                summary.slat.mean_ns,
                summary.sys_cpu,
                summary.ctx
            )),
            (RunOutcome::Failed { .. }, None) => {}
        }
        if let Some(why) = &r.series_error {
            progress(&format!(
                "side {side} run {} ({}): no per-second series: {why}",
                r.run, r.phase
            ));
        }
    }
    if any_failed && !result.console_tail.is_empty() {
        eprintln!("{}", result.console_tail);
    }
}

/// The accelerator a boot's result says it ran on.
fn accelerator_of(result: &RunResult) -> Accelerator {
    match (result.functional_only, result.accelerator.as_str()) {
        (_, "tcg") => Accelerator::Tcg,
        (true, _) => Accelerator::Nested,
        _ => Accelerator::Kvm,
    }
}

/// Runs the experiment. The output directory is created when the first boot has finished: a
/// bench that fails before any guest ran leaves nothing.
pub fn bench(req: &BenchRequest) -> Result<BenchOutcome, BenchError> {
    let prepared = super::prepare(req, false, &mut Needs::default())?;
    let plan: &ExperimentPlan = &prepared.plan;
    let experiment: &Experiment = prepared.experiment;
    let files_of: Vec<SideFiles> = plan
        .sides
        .iter()
        .map(|s| side_files(s, req))
        .collect::<Result<_, _>>()?;
    let mut report = new_report(req, &prepared);
    let per_boot = u32::try_from(plan.measured().count()).unwrap_or(u32::MAX);
    let wanted = |side: &Side, rep: u32| {
        req.only
            .as_ref()
            .is_none_or(|t| t.side == side.label && t.boot == rep)
    };
    let boots = match req.only {
        Some(_) => 1,
        None => req.runs as usize * plan.sides.len(),
    };
    announce(req, &prepared, &report, boots);
    let started = std::time::Instant::now();
    let scratch = BenchScratch::new()?;
    let (mut files, mut interrupted_by, mut boot) = (Vec::new(), None, 0);
    'reps: for rep in 1..=req.runs {
        for (side, inputs) in plan
            .sides
            .iter()
            .zip(&files_of)
            .filter(|(s, _)| wanted(s, rep))
        {
            boot += 1;
            let extra = plan.cmdline_for(side);
            progress(&format!(
                "boot {boot}/{boots} (side {}, boot {rep}/{}): {}; {:.0} s elapsed",
                side.label,
                req.runs,
                if extra.is_empty() {
                    "no extra parameters"
                } else {
                    &extra
                },
                started.elapsed().as_secs_f64()
            ));
            let spec = boot_spec(req, &prepared, inputs, extra);
            let result = match run_boot(req, &spec, &scratch)? {
                Ran::Done(result, signal) => {
                    interrupted_by = signal;
                    result
                }
                Ran::StoppedBefore(signal) => {
                    progress(&format!(
                        "stopped by signal {signal} while boot {boot}/{boots} was starting"
                    ));
                    interrupted_by = Some(signal);
                    break 'reps;
                }
            };
            report.accelerator = accelerator_of(&result);
            let first_run = (rep - 1) * per_boot + 1;
            let records =
                outcome::boot_records(experiment, plan, &side.label, rep, first_run, &result);
            print_records(&side.label, rep, &records, &result);
            progress(&format!(
                "boot {boot}/{boots} done in {:.1} s",
                result.wall_seconds
            ));
            report.runs.extend(records.runs);
            report.checks.extend(records.checks);
            let failed = report.failed_runs().len();
            let all = u32::try_from(boots).unwrap_or(u32::MAX);
            report.result = Some(ResultInfo::of_bench(
                req.runs,
                req.only.clone(),
                all,
                boot,
                failed,
            ));
            files = report.write_files(&req.out, true)?;
            if let Some(sig) = interrupted_by {
                progress(&format!(
                    "stopped by signal {sig} during boot {boot}/{boots}; the report holds the runs so far"
                ));
                break 'reps;
            }
        }
    }
    Ok(BenchOutcome {
        report,
        files,
        interrupted_by,
    })
}
