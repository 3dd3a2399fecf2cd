//! `pmemvm report DIR...` and `pmemvm bench EXP --slurm`: the command-line side of
//! `lab::fleet`.

use lab::bench::BenchRequest;

use crate::args::{BenchArgs, ReportArgs};
use crate::error::CommandError;

/// `pmemvm report`: the merged report on stdout (files in `--out`); 0 when every planned boot
/// is in and produced figures, 1 otherwise, 2 for bad input.
pub fn report(args: &ReportArgs) -> Result<u8, CommandError> {
    let merged = lab::fleet::merge::merge_dirs_with(
        &args.dirs,
        lab::fleet::merge::PoolOptions {
            hosts: args.pool_hosts,
            different_inputs: args.pool_different_inputs,
        },
    )?;
    let files = match &args.out {
        Some(out) => merged.write_files(out)?,
        None => Vec::new(),
    };
    print!("{}", merged.render_text());
    for f in &files {
        eprintln!("[report] wrote {}", f.display());
    }
    let failed = merged.report.failed_runs();
    for f in &failed {
        if merged.report.is_verify_failure_of(f) {
            eprintln!("pmemvm: verify failed (a result of the experiment): {f}");
        } else {
            eprintln!("pmemvm: failed: {f}");
        }
    }
    let missing = merged
        .info
        .left_out
        .iter()
        .filter(|l| l.dir.is_empty())
        .count();
    let verify_results = merged.report.verify_failures().len();
    eprintln!(
        "[report] {}: {} run(s) from {} result director{}, {} failed, {} failed verify (a result), {} planned boot(s) missing",
        merged.report.experiment,
        merged.report.runs.len(),
        merged.info.inputs.len(),
        if merged.info.inputs.len() == 1 {
            "y"
        } else {
            "ies"
        },
        failed.len() - verify_results,
        verify_results,
        missing
    );
    Ok(if merged.all_good() { 0 } else { 1 })
}

/// `pmemvm bench EXP --slurm --out DIR`: checks the bench as `--plan` does (sides, experiment,
/// scaling; the engine is the nodes' business, except that `--engine qemu|nested` with
/// `--pin`/`--host-node`/huge pages is refused here) and that DIR can be made, and writes
/// the scripts.
pub fn slurm(args: &BenchArgs, req: &BenchRequest) -> Result<u8, CommandError> {
    let (_, plan) = lab::bench::plan(req)?;
    // An engine named outright that cannot honour host placement would fail every task
    // (`auto` is resolved on each node).
    let shared = vmm::config::MachineSpec {
        ram_pages: req.ram_pages,
        placement: req.placement.clone(),
        ..Default::default()
    };
    if let Some(refusal) = req
        .engine
        .refusal(&shared, &lab::run::RunControl::default())
    {
        return Err(lab::run::RunError::from(refusal).into());
    }
    lab::preflight::output_dir(&req.out).map_err(lab::bench::BenchError::from)?;
    let sides: Vec<String> = plan.sides.iter().map(|s| s.label.clone()).collect();
    let job = lab::fleet::slurm::job_for(
        &args.experiment,
        &sides,
        args.runs,
        forwarded_args(args),
        &req.out,
    )?;
    let files = job.write()?;
    for f in &files {
        println!("wrote {}", f.display());
    }
    println!(
        "{} array task(s) ({} side(s) x {} boot(s)); submit with: sh {}",
        job.tasks.len(),
        sides.len(),
        args.runs,
        job.out.join("submit.sh").display()
    );
    Ok(0)
}

/// The options of `args` that each task passes on to its `pmemvm bench`.
fn forwarded_args(args: &BenchArgs) -> Vec<String> {
    let mut v = vec![
        "--runs".to_owned(),
        args.runs.to_string(),
        "--engine".to_owned(),
        lab::run::Engine::from(args.engine).name().to_owned(),
        "--timeout".to_owned(),
        args.timeout.to_string(),
    ];
    let mut opt = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            v.push(name.to_owned());
            v.push(value);
        }
    };
    // Unset, each node sizes the guest by its own CPUs, as a bench run there would.
    opt("--cpus", args.cpus.map(|n| n.to_string()));
    opt("--memory", args.memory.map(|m| m.to_string()));
    opt("--pin", args.pin.as_ref().map(|p| p.pin_text.clone()));
    opt("--host-node", args.host_node.map(|n| n.to_string()));
    opt("--jobs", args.jobs.map(|n| n.to_string()));
    opt("--nvdimm", args.nvdimm.map(|n| n.to_string()));
    opt("--runtime", args.runtime.map(|n| n.to_string()));
    opt("--iodepth", args.iodepth.map(|n| n.to_string()));
    opt("--size", args.size.map(|n| n.to_string()));
    opt(
        "--kernel",
        args.kernel.as_ref().map(|p| p.display().to_string()),
    );
    opt(
        "--initrd",
        args.initrd.as_ref().map(|p| p.display().to_string()),
    );
    opt(
        "--modules",
        args.modules.as_ref().map(|p| p.display().to_string()),
    );
    for s in &args.sides {
        v.push("--side".to_owned());
        v.push(s.clone());
    }
    if args.fail_on_check {
        v.push("--fail-on-check".to_owned());
    }
    // Each task serves it on its own node while its boot runs.
    if let Some(p) = &args.api {
        v.push("--api".to_owned());
        v.push(p.display().to_string());
    }
    v
}
