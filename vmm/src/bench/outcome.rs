//! One boot's results → the report's records: a [`RunRecord`] per measured phase, a
//! [`CheckRecord`] per unmeasured phase (verify, fill), with the boot's [`Provenance`].
//!
//! A phase failed when the guest did not run it (boot failure, time-out, setup failure), when
//! fio exited non-zero or wrote no readable JSON, or when fio reported a job error (a verify
//! failure, err=84). A failed measured phase is a failed run; a failed unmeasured phase is a
//! failed check; both make `pmemvm bench` exit non-zero.

use std::collections::BTreeMap;

use crate::experiments::{Experiment, ExperimentPlan, Phase, PhaseRole};
use crate::fio;
use crate::guest_job::{GUEST_INFO_FRAME, PHASES_STATUS_FRAME};
use crate::report::{CheckRecord, Provenance, RunOutcome, RunRecord};
use crate::run::RunResult;

/// The records of one boot.
#[derive(Debug, Default)]
pub struct BootRecords {
    /// One per measured phase.
    pub runs: Vec<RunRecord>,
    /// One per unmeasured phase.
    pub checks: Vec<CheckRecord>,
}

/// `key=value` lines of the guest-info frame.
fn guest_info(result: &RunResult) -> BTreeMap<String, String> {
    result
        .guest_files
        .get(GUEST_INFO_FRAME)
        .map(|t| {
            t.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// What the boot ran.
pub fn provenance(result: &RunResult) -> Provenance {
    let info = guest_info(result);
    // The manifest without its per-file listing (the input hash identifies the contents).
    let image = result.image_manifest.clone().map(|mut m| {
        if let Some(i) = m.get_mut("initramfs").and_then(|i| i.as_object_mut()) {
            i.remove("files");
        }
        m
    });
    Provenance {
        kernel: result.kernel.path.clone(),
        kernel_sha256: result.kernel.sha256.clone(),
        kernel_release: info.get("kernel_release").cloned().unwrap_or_default(),
        initrd: result.initrd.as_ref().map(|i| i.path.clone()),
        initrd_sha256: result.initrd.as_ref().map(|i| i.sha256.clone()),
        cmdline: result.cmdline.clone(),
        fio_version: info.get("fio_version").cloned().unwrap_or_default(),
        image,
    }
}

/// `<phase> <status>` lines.
fn statuses(result: &RunResult) -> Option<BTreeMap<String, i64>> {
    let text = result.guest_files.get(PHASES_STATUS_FRAME)?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(k, v)| Some((k.to_owned(), v.trim().parse().ok()?)))
            .collect(),
    )
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..].join(" | ")
}

/// fio's own words on a job error: its `verify:` and `fio:` lines on stderr.
fn fio_detail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("verify:") || l.starts_with("fio:"))
        .take(2)
        .collect();
    lines.join(" | ")
}

/// The outcome of one phase: figures, or why there are none.
fn phase_outcome(
    e: &Experiment,
    phase: &Phase,
    result: &RunResult,
    statuses: Option<&BTreeMap<String, i64>>,
) -> RunOutcome {
    let failed = |error: String| RunOutcome::Failed { error };
    let Some(statuses) = statuses else {
        return failed(
            result
                .error
                .clone()
                .unwrap_or_else(|| "the guest sent no phase results".into()),
        );
    };
    if let Some(&st) = statuses.get("setup").filter(|&&s| s != 0) {
        let log = result
            .guest_files
            .get("setup.log")
            .map_or("", String::as_str);
        return failed(format!("setup failed with status {st}: {}", tail(log, 3)));
    }
    let stderr = result
        .guest_files
        .get(&format!("{}.stderr", phase.name))
        .map_or("", String::as_str);
    let Some(&st) = statuses.get(&phase.name) else {
        return failed(format!(
            "phase {} did not run: {}",
            phase.name,
            result
                .error
                .as_deref()
                .unwrap_or("the guest stopped before it")
        ));
    };
    let json = result.guest_files.get(&format!("{}.json", phase.name));
    let parsed = json.map(|j| fio::parse_fio_json(j.as_bytes()));
    match parsed {
        Some(Ok(out)) => match e.measurement(phase, &out) {
            Ok(summary) if !summary.ok() => failed(format!(
                "{}{}",
                summary
                    .errors
                    .iter()
                    .map(|x| format!("fio error {} in job {}", x.error, x.jobname))
                    .collect::<Vec<_>>()
                    .join("; "),
                match fio_detail(stderr) {
                    d if d.is_empty() => String::new(),
                    d => format!(" ({d})"),
                }
            )),
            Ok(_) if st != 0 => failed(format!("fio exited with status {st}: {}", tail(stderr, 3))),
            Ok(summary) => RunOutcome::Ok {
                summary: Box::new(summary),
            },
            Err(err) => failed(err.to_string()),
        },
        Some(Err(err)) => failed(format!("fio's JSON could not be read: {err}")),
        None => failed(format!(
            "fio exited with status {st} without a JSON report: {}",
            tail(stderr, 3)
        )),
    }
}

/// The records of one boot of `side`: runs numbered from `first_run`.
pub fn boot_records(
    e: &Experiment,
    plan: &ExperimentPlan,
    side: &str,
    boot: u32,
    first_run: u32,
    result: &RunResult,
) -> BootRecords {
    let statuses = statuses(result);
    let prov = provenance(result);
    let mut records = BootRecords::default();
    let mut run = first_run;
    for phase in &plan.phases {
        let outcome = phase_outcome(e, phase, result, statuses.as_ref());
        match phase.role {
            PhaseRole::Measured { .. } => {
                records.runs.push(RunRecord {
                    side: side.to_owned(),
                    run,
                    kernel_cmdline: Some(result.cmdline.clone()),
                    outcome,
                    boot,
                    phase: phase.name.clone(),
                    provenance: Some(prov.clone()),
                });
                run += 1;
            }
            PhaseRole::Check | PhaseRole::Prepare => records.checks.push(CheckRecord {
                side: side.to_owned(),
                boot,
                phase: phase.name.clone(),
                role: phase.role.name().to_owned(),
                error: outcome.failure(),
            }),
        }
    }
    records
}
