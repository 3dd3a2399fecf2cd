//! `pmemvm crash-images`: the DIMM file after power loss at each recorded
//! flush (`--nvdimm ...,record=DIR`; docs/crash-consistency.md).

use std::path::PathBuf;

use crate::crash_args::{CrashCheckArgs, CrashImagesArgs};
use vmm::nvdimm::record::images::{self, ImageError};

/// Writes the images and prints what was written.
pub fn crash_images(a: &CrashImagesArgs) -> Result<String, ImageError> {
    let m = images::write(&a.which.request(&a.dir, a.out.clone()))?;
    let torn = m.images.iter().filter(|i| i.torn.is_some()).count();
    let first = m.images.first().map_or(0, |i| i.flush);
    let last = m.images.last().map_or(0, |i| i.flush);
    Ok(format!(
        "{} crash image{} of {} (after flush {first}{}; the log recorded flushes 1 to {}{}){} in {}; what each holds: {}",
        m.images.len(),
        if m.images.len() == 1 { "" } else { "s" },
        m.dimm,
        if first == last { String::new() } else { format!(" to {last}") },
        m.last_flush,
        match (&m.complete, &m.cut) {
            (true, _) => String::new(),
            (false, Some(why)) => format!(", cut short: {why}"),
            (false, None) => ", cut short".into(),
        },
        if torn > 0 { format!(", {torn} torn variant{}", if torn == 1 { "" } else { "s" }) } else { String::new() },
        a.out.display(),
        a.out.join(images::MANIFEST).display()
    ))
}

/// Runs the check; the exit status is 0 when every image passed, 1 when one failed.
pub fn crash_check(a: &CrashCheckArgs) -> Result<u8, crate::error::CommandError> {
    let template = crate::commands::run_spec(&a.run)?;
    // Refusals of the engine, before any image is written.
    lab::guest::run::engine_for(&template)?;
    if let Some(shared) = &a.slurm {
        return slurm(a, shared, &template);
    }
    let (out, _temp) = lab::study::crash_check::TempImages::for_check(a.images.as_deref(), "check");
    let req = a.which.request(&a.dir, out);
    // Images the user did not ask to keep go one by one, as they are checked.
    let after = match a.images {
        Some(_) => lab::study::crash_check::AfterCheck::Keep,
        None => lab::study::crash_check::AfterCheck::Remove,
    };
    let report = check(&template, &req, &a.run.command, after)?;
    finish(a, &report)
}

/// How each image went, as it is checked.
fn progress(c: &lab::study::crash_check::ImageCheck) {
    eprintln!(
        "pmemvm: crash-check: the image after {}: status {}{} in {:.1} s",
        c.name(),
        c.status,
        c.error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default(),
        c.seconds
    );
}

/// Boots and checks the images of `req`, saying how each went.
fn check(
    template: &lab::guest::run::RunSpec,
    req: &images::Request,
    command: &[String],
    after: lab::study::crash_check::AfterCheck,
) -> Result<lab::study::crash_check::CrashCheck, lab::study::crash_check::CrashCheckError> {
    lab::study::crash_check::check(
        template,
        req,
        command,
        after,
        lab::guest::run::run_job,
        progress,
    )
}

/// `--slurm SHARED`: writes the array's scripts (no `--slurm-task`/`--slurm-report`), runs
/// one task's flush, or merges the results.
fn slurm(
    a: &CrashCheckArgs,
    shared: &std::path::Path,
    template: &lab::guest::run::RunSpec,
) -> Result<u8, crate::error::CommandError> {
    use lab::study::crash_check::CrashCheckError;
    use lab::study::fleet::crash_array;
    let flushes =
        images::plan(&a.which.request(&a.dir, PathBuf::new())).map_err(CrashCheckError::from)?;
    if a.slurm_report {
        return finish(a, &crash_array::merge(shared, &flushes, &a.run.command));
    }
    if let Some(task) = a.slurm_task {
        let (report, path) = lab::study::crash_check::slurm_task(
            template,
            &a.which.request(&a.dir, PathBuf::new()),
            (&flushes, task),
            &a.run.command,
            shared,
            lab::guest::run::run_job,
            progress,
        )?;
        print!("{}", report.table());
        println!("result: {}", path.display());
        return Ok(0);
    }
    // The command as typed (after `crash-check`): what every task runs again.
    let mut args = Vec::new();
    for arg in std::env::args_os()
        .skip_while(|a| a != "crash-check")
        .skip(1)
    {
        args.push(
            arg.into_string()
                .map_err(|a| CrashCheckError::NotText(a.to_string_lossy().into_owned()))?,
        );
    }
    let array = crash_array::CrashArray::new(flushes, args, shared)?;
    for f in array.write()? {
        println!("wrote {}", f.display());
    }
    let list: Vec<String> = array.flushes.iter().map(u64::to_string).collect();
    println!(
        "{} array task(s), one per flush ({}); submit with: sh {}",
        array.flushes.len(),
        list.join(", "),
        array.out.join("submit.sh").display()
    );
    Ok(0)
}

/// Writes `--json`, prints the table; status 1 when an image failed.
fn finish(
    a: &CrashCheckArgs,
    report: &lab::study::crash_check::CrashCheck,
) -> Result<u8, crate::error::CommandError> {
    if let Some(path) = &a.run.json {
        let text = serde_json::to_string_pretty(report).unwrap_or_default();
        std::fs::write(path, text).map_err(|source| crate::error::CommandError::Output {
            path: path.clone(),
            source,
        })?;
    }
    print!("{}", report.table());
    Ok(match report.first_failure() {
        None => 0,
        Some(_) => 1,
    })
}
