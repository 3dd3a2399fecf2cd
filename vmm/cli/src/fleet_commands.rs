//! `pmemvm report DIR...` and `pmemvm bench EXP --slurm`: the command-line side of
//! `lab::study::fleet`.

use lab::study::bench::BenchRequest;

use crate::args::ReportArgs;
use crate::error::CommandError;

/// `pmemvm report`: the merged report on stdout (files in `--out`); 0 when every planned boot
/// is in and produced figures, 1 otherwise, 2 for bad input.
pub fn report(args: &ReportArgs) -> Result<u8, CommandError> {
    let merged = lab::study::fleet::merge::merge_dirs_with(
        &args.dirs,
        lab::study::fleet::merge::PoolOptions {
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
pub fn slurm(req: &BenchRequest) -> Result<u8, CommandError> {
    let (_, plan) = lab::study::bench::plan(req)?;
    // An engine named outright that cannot honour host placement would fail every task
    // (`auto` is resolved on each node).
    let shared = vmm::config::MachineSpec {
        ram_pages: req.ram_pages,
        placement: req.placement.clone(),
        ..Default::default()
    };
    if let Some(refusal) = req
        .engine
        .refusal(&shared, &lab::guest::run::RunControl::default())
    {
        return Err(lab::guest::run::RunError::from(refusal).into());
    }
    lab::guest::preflight::output_dir(&req.out).map_err(lab::study::bench::BenchError::from)?;
    let sides: Vec<String> = plan.sides.iter().map(|s| s.label.clone()).collect();
    let job = lab::study::fleet::slurm::job_for(req, &sides)?;
    let files = job.write()?;
    for f in &files {
        println!("wrote {}", f.display());
    }
    println!(
        "{} array task(s) ({} side(s) x {} boot(s)); submit with: sh {}",
        job.tasks.len(),
        sides.len(),
        req.runs,
        job.out.join("submit.sh").display()
    );
    Ok(0)
}
