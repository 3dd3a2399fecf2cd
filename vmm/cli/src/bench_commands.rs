//! `pmemvm bench`: the request from the arguments, the run, the report and
//! the exit status (0: every run produced figures; 1: some failed; 128 + N:
//! stopped by signal N).

use std::path::PathBuf;

use crate::args::BenchArgs;
use crate::error::CommandError;
use lab::bench::{BenchRequest, Runner};
use vmm::exit_status;

/// The request of `args`; for a Slurm task (`--request FILE`), the one in the file with the
/// task's own `--only` and `--out`.
pub(crate) fn bench_request(args: &BenchArgs) -> Result<BenchRequest, lab::bench::BenchError> {
    let out = args.out.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("pmemvm-bench/{}-{secs}", args.experiment))
    });
    // Every boot in a fresh process of this binary (lab::child).
    let runner = std::env::current_exe().map_or(Runner::InProcess, Runner::Child);
    if let Some(file) = &args.request {
        return Ok(BenchRequest {
            only: args.only.clone(),
            out,
            runner,
            ..lab::bench::request_file::read(file, &args.experiment)?
        });
    }
    Ok(BenchRequest {
        experiment: args.experiment.clone(),
        runs: args.runs,
        cpus: args.cpus,
        memory: args.memory.map(|m| m.size),
        jobs: args.jobs,
        nvdimm: args.nvdimm,
        runtime: args.runtime,
        iodepth: args.iodepth,
        size: args.size,
        sides: args.sides.clone(),
        out,
        engine: args.engine.into(),
        timeout: std::time::Duration::from_secs(args.timeout),
        boot: vmm::config::BootFiles {
            kernel: args.kernel.clone(),
            initrd: args.initrd.clone(),
            modules: args.modules.clone(),
            ..Default::default()
        },
        only: args.only.clone(),
        runner,
        ram_pages: args.memory.map(|m| m.pages).unwrap_or_default(),
        placement: vmm::placement::Placement {
            host_node: args.host_node,
            ..args.pin.clone().unwrap_or_default()
        },
        api: args.api.clone(),
        fail_on_check: args.fail_on_check,
    })
}

/// `pmemvm bench`: 0 when every run succeeded.
pub fn bench(args: &BenchArgs) -> Result<u8, CommandError> {
    let req = bench_request(args)?;
    if args.plan {
        let (_, plan) = lab::bench::plan(&req)?;
        if args.json {
            let mut v = serde_json::to_value(&plan).map_err(lab::bench::BenchError::PlanJson)?;
            v["runs_per_side"] = req.runs.into();
            let text =
                serde_json::to_string_pretty(&v).map_err(lab::bench::BenchError::PlanJson)?;
            println!("{text}");
        } else {
            print!("{}", plan.render_text(req.runs));
        }
        return Ok(0);
    }
    if args.slurm {
        return crate::fleet_commands::slurm(&req);
    }
    let outcome = lab::bench::bench(&req)?;
    println!("{}", outcome.report.render_text());
    for f in &outcome.files {
        eprintln!("[bench] wrote {}", f.display());
    }
    let failed = outcome.report.failed_runs();
    for f in &failed {
        if outcome.report.is_verify_failure_of(f) {
            eprintln!("pmemvm: verify failed (a result of the experiment): {f}");
        } else {
            eprintln!("pmemvm: failed: {f}");
        }
    }
    let r = &outcome.report;
    // Failed phases before the measurement (run 0) are not runs.
    let failed_runs = failed.iter().filter(|f| f.run != 0).count();
    eprintln!(
        "[bench] {}: {} of {} runs produced figures; engine {} ({}){}; report in {}",
        r.experiment,
        r.runs.len().saturating_sub(failed_runs),
        r.runs.len(),
        r.engine,
        r.accelerator.name(),
        if r.accelerator.is_performance() {
            ""
        } else {
            " — functional check only, not performance"
        },
        req.out.display()
    );
    let verify_results = r.verify_failures().len();
    if let Some(v) = r.verify_verdict() {
        for o in &v.observations {
            eprintln!("[bench] verify observed: {}", o.describe());
        }
        if v.observations.iter().any(|o| o.stale_header()) {
            eprintln!("pmemvm: note: {}", lab::report::STALE_HEADER_NOTE);
        }
        eprintln!(
            "[bench] verify ({}): {}{}",
            r.verify_job(),
            v.summary,
            match (verify_results, req.fail_on_check) {
                (0, _) => String::new(),
                (_, false) =>
                    " — a result of the experiment, not a failure of pmemvm (exit status 0 \
                     unless something else failed; --fail-on-check makes it 1)"
                        .to_owned(),
                (_, true) => " — exit status 1 (--fail-on-check)".to_owned(),
            }
        );
    }
    let failed_runs = failed_runs
        - failed
            .iter()
            .filter(|f| f.run != 0 && r.is_verify_failure_of(f))
            .count();
    if failed_runs > 0 {
        eprintln!(
            "pmemvm: {failed_runs} of {} runs failed; the report lists them (partial results)",
            outcome.report.runs.len()
        );
    }
    let failed_phases = failed
        .iter()
        .filter(|f| f.run == 0 && !r.is_verify_failure_of(f))
        .count();
    if failed_phases > 0 {
        eprintln!(
            "pmemvm: {failed_phases} phase(s) before the measurement failed; the report lists them"
        );
    }
    if let Some(sig) = outcome.interrupted_by {
        eprintln!(
            "pmemvm: bench stopped by signal {sig} after {} run(s); the report holds them",
            outcome.report.runs.len()
        );
        return Ok(u8::try_from(128 + sig).unwrap_or(exit_status::RUNTIME_ERROR));
    }
    Ok(lab::report::bench_exit_status(
        &r.exit_failures(req.fail_on_check),
    ))
}
