//! `pmemvm bench`: the request from the arguments, the run, the report and
//! the exit status (0: every run produced figures; 1: some failed; 128 + N:
//! stopped by signal N).

use std::path::PathBuf;

use crate::args::BenchArgs;
use crate::error::CommandError;
use lab::study::bench::{BenchRequest, Runner};

/// The request of `args`; for a Slurm task (`--request FILE`), the one in the file with the
/// task's own `--only` and `--out`.
pub(crate) fn bench_request(
    args: &BenchArgs,
) -> Result<BenchRequest, lab::study::bench::BenchError> {
    let out = args.out.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("pmemvm-bench/{}-{secs}", args.experiment))
    });
    // Every boot in a fresh process of this binary (lab::guest::child).
    let runner = std::env::current_exe().map_or(Runner::InProcess, Runner::Child);
    if let Some(file) = &args.request {
        return Ok(BenchRequest {
            only: args.only.clone(),
            out,
            runner,
            ..lab::study::bench::request_file::read(file, &args.experiment)?
        });
    }
    Ok(BenchRequest {
        experiment: args.experiment.clone(),
        runs: args.runs,
        cpus: args.cpus,
        memory: args.memory.map(|m| m.size),
        jobs: args.jobs,
        nvdimm: args.nvdimm.or(args.cxl_pmem.flatten()),
        pmem_device: match args.cxl_pmem {
            Some(_) => lab::study::bench::cxl::PmemDevice::Cxl,
            None => lab::study::bench::cxl::PmemDevice::Nvdimm,
        },
        runtime: args.runtime,
        iodepth: args.iodepth,
        size: args.size,
        sides: args.sides.clone(),
        out,
        engine: args.engine,
        timeout: std::time::Duration::from_secs(args.timeout),
        boot: args.files.boot_files(),
        only: args.only.clone(),
        runner,
        ram_pages: args.memory.map(|m| m.pages).unwrap_or_default(),
        placement: args.placement.placement(),
        api: args.api.clone(),
        fail_on_check: args.fail_on_check,
    })
}

/// `pmemvm bench`: 0 when every run succeeded.
pub fn bench(args: &BenchArgs) -> Result<u8, CommandError> {
    let req = bench_request(args)?;
    if args.plan {
        let (_, plan) = lab::study::bench::plan(&req)?;
        if args.json {
            let mut v =
                serde_json::to_value(&plan).map_err(lab::study::bench::BenchError::PlanJson)?;
            v["runs_per_side"] = req.runs.into();
            v["pmem_device"] = serde_json::to_value(req.pmem_device)
                .map_err(lab::study::bench::BenchError::PlanJson)?;
            let text = serde_json::to_string_pretty(&v)
                .map_err(lab::study::bench::BenchError::PlanJson)?;
            println!("{text}");
        } else {
            print!("{}", plan.render_text(req.runs));
            if let Some(line) =
                lab::study::bench::cxl::plan_line(req.pmem_device, plan.nvdimm_bytes)
            {
                println!("\n{line}");
            }
        }
        return Ok(0);
    }
    if args.slurm {
        return crate::fleet_commands::slurm(&req);
    }
    let outcome = lab::study::bench::bench(&req)?;
    println!("{}", outcome.report.render_text());
    let ending = lab::study::bench::ending::ending(&outcome, &req.out, req.fail_on_check);
    for line in &ending.lines {
        eprintln!("{line}");
    }
    Ok(ending.status)
}
