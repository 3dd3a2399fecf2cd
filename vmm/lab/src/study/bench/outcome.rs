//! One boot's results → the report's records: a [`RunRecord`] per measured phase, a
//! [`CheckRecord`] per unmeasured phase (verify, fill), with the boot's [`Provenance`].
//!
//! A phase failed when the guest did not run it (boot failure, time-out, setup failure), when
//! fio exited non-zero or wrote no readable JSON, or when fio reported a job error (a verify
//! failure, err=84). A failed measured phase is a failed run; a failed unmeasured phase is a
//! failed check; both make `pmemvm bench` exit non-zero.

use std::collections::BTreeMap;

use crate::guest::guest_job::{GUEST_INFO_FRAME, PHASES_COMMANDS_FRAME, PHASES_STATUS_FRAME};
use crate::guest::run::RunResult;
use crate::study::experiments::{Experiment, ExperimentPlan, Phase, PhaseRole};
use crate::study::fio;
use crate::study::report::{CheckRecord, Provenance, RunOutcome, RunRecord};

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
        modules: result.modules.clone(),
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

/// fio's own words on a job error: its `verify:` and `fio:` lines on stderr, and a checksum's
/// `crc32c: verify failed at ...`.
fn fio_detail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            l.starts_with("verify:") || l.starts_with("fio:") || l.contains(": verify failed at ")
        })
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
        if result
            .guest_files
            .get("fio.stderr")
            .is_some_and(|t| t.contains("pmemvm-image-without-phases"))
        {
            return failed(
                "the guest image's /init does not run /job/phases (the image is older than this \
                 pmemvm): rebuild it with guest-images/build.sh"
                    .into(),
            );
        }
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
        Some(Err(err)) => failed(format!(
            "fio exited with status {st} and its JSON could not be read ({err}): {}",
            tail(stderr, 3)
        )),
        None => failed(format!(
            "fio exited with status {st} without a JSON report: {}",
            tail(stderr, 3)
        )),
    }
}

/// `<phase> <command>` lines.
fn commands(result: &RunResult) -> BTreeMap<String, String> {
    result
        .guest_files
        .get(PHASES_COMMANDS_FRAME)
        .map(|t| {
            t.lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
                .collect()
        })
        .unwrap_or_default()
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
    let commands = commands(result);
    let prov = provenance(result);
    let mut records = BootRecords::default();
    let mut run = first_run;
    for phase in &plan.phases {
        let outcome = phase_outcome(e, phase, result, statuses.as_ref());
        let command = commands.get(&phase.name).cloned().unwrap_or_default();
        match phase.role {
            PhaseRole::Measured { .. } => {
                let logs = |kind: &str| {
                    result
                        .guest_files
                        .get(&format!("{}_{kind}.log", phase.name))
                        .map(String::as_bytes)
                };
                let (series, series_error) = match fio::log::phase_series(logs("iops"), logs("bw"))
                {
                    None => (None, None),
                    Some(Ok(s)) => (Some(s), None),
                    Some(Err(e)) => (None, Some(e.to_string())),
                };
                records.runs.push(RunRecord {
                    side: side.to_owned(),
                    run,
                    kernel_cmdline: Some(result.cmdline.clone()),
                    outcome,
                    boot,
                    phase: phase.name.clone(),
                    provenance: Some(prov.clone()),
                    command,
                    machine: Some(result.machine.clone()),
                    series,
                    series_error,
                });
                run += 1;
            }
            PhaseRole::Check | PhaseRole::Prepare => records.checks.push(CheckRecord {
                side: side.to_owned(),
                boot,
                phase: phase.name.clone(),
                role: phase.role.name().to_owned(),
                error: outcome.failure(),
                command,
            }),
        }
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::run::{Engine, HashedFile, HostDescription};
    use crate::study::experiments::{find_experiment, BenchParams};

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

    /// A real fio report (fixture) with its job renamed to `job`.
    fn fio_json(fixture: &str, from: &str, job: &str) -> String {
        let text = std::fs::read_to_string(format!("{FIXTURES}/{fixture}")).unwrap();
        let start = text.find('{').unwrap();
        text[start..].replace(
            &format!("\"jobname\" : \"{from}\""),
            &format!("\"jobname\" : \"{job}\""),
        )
    }

    fn result(files: &[(&str, String)], error: Option<&str>) -> RunResult {
        RunResult {
            command: None,
            schema_version: crate::study::results::record::SCHEMA_VERSION,
            pmemvm_version: "test".into(),
            engine: Engine::Qemu,
            accelerator: "tcg".into(),
            functional_only: true,
            status: 0,
            error: error.map(str::to_owned),
            kernel: HashedFile {
                path: "/img/bzImage".into(),
                sha256: "ab".repeat(32),
            },
            initrd: Some(HashedFile {
                path: "/img/initramfs.cpio.gz".into(),
                sha256: "cd".repeat(32),
            }),
            modules: None,
            image_manifest: Some(serde_json::json!({
                "input_hash": "0123",
                "initramfs": {"files": [1, 2, 3], "cache_key": "k"}
            })),
            cmdline: "console=ttyS0 nd_pmem.nowait=0".into(),
            cpus: 1,
            memory: 1 << 30,
            nvdimms: Vec::new(),
            host: HostDescription {
                identity: vmm::host::machine::HostIdentity {
                    cpu_model: "cpu".into(),
                    host_cpus: 2,
                    host_kernel: "6.1".into(),
                    hostname: String::new(),
                },
                kvm: vmm::host::HostKvm {
                    hw_virt: false,
                    pvm: true,
                },
            },
            exits: None,
            nvdimm_stats: Vec::new(),
            machine: Default::default(),
            wall_seconds: 1.0,
            fio: None,
            guest_files: files
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            console_tail: String::new(),
        }
    }

    fn plan(name: &str) -> (&'static Experiment, ExperimentPlan) {
        let e = find_experiment(name).unwrap();
        let p = e
            .plan(&BenchParams {
                vcpus: Some(1),
                ..BenchParams::default()
            })
            .unwrap();
        (e, p)
    }

    const INFO: &str = "kernel_release=6.1.192\nfio_version=fio-3.33\ncmdline=x\n";

    #[test]
    fn a_runs_fio_report_reads_back_typed_and_anything_else_is_none() {
        let mut r = result(&[], None);
        assert!(r.fio_output().is_none());
        let text = std::fs::read_to_string(format!("{FIXTURES}/guest-pmem-nowait.json")).unwrap();
        r.fio = Some(serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap());
        let fio = r.fio_output().expect("fio's own report");
        let groups = fio.summaries();
        assert!(!groups.is_empty() && groups[0].iops > 0.0, "{groups:?}");
        r.fio = Some(serde_json::json!({"jobs": "not fio's"}));
        assert!(r.fio_output().is_none());
    }

    #[test]
    fn a_failed_verify_before_the_measurement_is_a_failed_check_with_fio_s_words() {
        let (e, p) = plan("pmem-nowait");
        let good = fio_json("verify-pass.json", "verify", "randread");
        let files = vec![
            ("guest-info", INFO.to_owned()),
            (
                "phases.commands",
                "randread-1 fio --output-format=json --output=/tmp/randread-1.json  /job/randread-1.fio\n"
                    .to_owned(),
            ),
            (
                "phases.status",
                "write-and-verify 1\nrandwrite 0\nrandread-1 0\nrandread-2 0\n".to_owned(),
            ),
            (
                "write-and-verify.json",
                fio_json("verify-fail.out", "verify-garbage", "write-and-verify"),
            ),
            (
                "write-and-verify.stderr",
                "verify: bad header numberio 63917, wanted 64003 at file /dev/pmem0\nfio: pid=1, err=84\n"
                    .to_owned(),
            ),
            ("randwrite.json", fio_json("verify-pass.json", "verify", "RANDWRITE")),
            ("randread-1.json", good.clone()),
            ("randread-2.json", good),
        ];
        let r = boot_records(e, &p, "off", 2, 4, &result(&files, Some("guest status 1")));
        assert_eq!(r.checks.len(), 2);
        let verify = r.checks[0].error.as_deref().unwrap();
        assert!(
            verify.starts_with(
                "fio error 84 in job write-and-verify (verify: bad header numberio 63917"
            ),
            "{verify}"
        );
        assert_eq!(r.checks[1].error, None);
        // Runs numbered on from 4; the third randread never ran (the guest stopped).
        let runs: Vec<(u32, &str, bool)> = r
            .runs
            .iter()
            .map(|x| (x.run, x.phase.as_str(), x.outcome.failure().is_none()))
            .collect();
        assert_eq!(
            runs,
            [
                (4, "randread-1", true),
                (5, "randread-2", true),
                (6, "randread-3", false)
            ]
        );
        assert_eq!(
            r.runs[2].outcome.failure().unwrap(),
            "phase randread-3 did not run: guest status 1"
        );
        let prov = r.runs[0].provenance.as_ref().unwrap();
        assert_eq!(prov.kernel_release, "6.1.192");
        assert_eq!(prov.fio_version, "fio-3.33");
        assert_eq!(prov.kernel_sha256, "ab".repeat(32));
        assert!(prov.image.as_ref().unwrap()["initramfs"]
            .get("files")
            .is_none());
        assert_eq!(r.runs[0].boot, 2);
        assert_eq!(
            r.runs[0].command,
            "fio --output-format=json --output=/tmp/randread-1.json  /job/randread-1.fio"
        );
        assert_eq!(r.runs[1].command, "", "not reported");
    }

    #[test]
    fn fios_detail_keeps_its_verify_checksum_and_fio_lines_only() {
        let stderr = "note: both iodepth >= 1 and synchronous I/O engine are selected\n\
                      crc32c: verify failed at file /dev/pmem0 offset 180224, length 4096 \
                      (requested block: offset=180224, length=4096, flags=88)\n\
                      \x20      Expected CRC: 1\n\
                      fio: pid=1, err=84/file:io_u.c:2156, func=io_u_queued_complete\n";
        assert_eq!(
            fio_detail(stderr),
            "crc32c: verify failed at file /dev/pmem0 offset 180224, length 4096 (requested \
             block: offset=180224, length=4096, flags=88) | fio: pid=1, \
             err=84/file:io_u.c:2156, func=io_u_queued_complete"
        );
    }

    #[test]
    fn the_phase_logs_become_the_runs_time_series_and_slat_has_percentiles() {
        let (e, p) = plan("pmem-nowait");
        let fixture = |f: &str| std::fs::read_to_string(format!("{FIXTURES}/{f}")).unwrap();
        let json = fio_json("logs.json", "randread", "randread");
        let files = vec![
            (
                "phases.status",
                "write-and-verify 0\nrandwrite 0\nrandread-1 0\nrandread-2 0\nrandread-3 0\n"
                    .to_owned(),
            ),
            ("randread-1.json", json.clone()),
            ("randread-1_iops.log", fixture("logs_iops.log")),
            ("randread-1_bw.log", fixture("logs_bw.log")),
            ("randread-2.json", json.clone()),
            ("randread-2_iops.log", "garbage\n".to_owned()),
            ("randread-2_bw.log", fixture("logs_bw.log")),
            ("randread-3.json", json),
        ];
        let r = boot_records(e, &p, "on", 1, 1, &result(&files, None));
        // Logs read: five seconds, four of them complete, the bandwidth in MiB/s.
        let s = r.runs[0].series.as_ref().unwrap();
        assert_eq!((s.iops.values.len(), s.iops.complete), (5, 4));
        assert_eq!(s.bw_mib_s.values.len(), 5);
        assert_eq!(r.runs[0].series_error, None);
        // The measurement has slat percentiles (slat_percentiles=1 in the job).
        let summary = r.runs[0].good_summary().unwrap();
        assert!(summary.slat.p50_ns.is_some() && summary.slat.p99_9_ns.is_some());
        // A damaged log costs the series, not the run's figures.
        assert!(r.runs[1].series.is_none());
        let why = r.runs[1].series_error.as_deref().unwrap();
        assert!(why.starts_with("line 1 of fio's log"), "{why}");
        assert!(r.runs[1].good_summary().is_some());
        // No logs (an older image): neither a series nor an error.
        assert_eq!((&r.runs[2].series, &r.runs[2].series_error), (&None, &None));
        // report.json keeps the series; without one the field is absent.
        let v = serde_json::to_value(&r.runs).unwrap();
        assert_eq!(
            v[0]["series"]["iops"]["values"].as_array().unwrap().len(),
            5
        );
        assert!(v[2].get("series").is_none() && v[2].get("series_error").is_none());
    }

    #[test]
    fn a_failed_setup_fails_every_run_of_the_boot() {
        let (e, p) = plan("bcache-verify");
        let files = vec![
            ("phases.status", "setup 1\n".to_owned()),
            (
                "setup.log",
                "setup: /dev/nullb0 did not appear\n".to_owned(),
            ),
        ];
        let r = boot_records(e, &p, "on", 1, 1, &result(&files, None));
        assert_eq!(r.runs.len(), 1);
        assert_eq!(
            r.runs[0].outcome.failure().unwrap(),
            "setup failed with status 1: setup: /dev/nullb0 did not appear"
        );
        assert_eq!(r.runs[0].provenance.as_ref().unwrap().kernel_release, "");
    }

    #[test]
    fn no_phase_results_and_a_nonzero_fio_without_job_error_are_failures() {
        let (e, p) = plan("pmem-verify");
        let r = boot_records(
            e,
            &p,
            "off",
            1,
            1,
            &result(&[], Some("the guest did not finish within 60 s")),
        );
        assert_eq!(
            r.runs[0].outcome.failure().unwrap(),
            "the guest did not finish within 60 s"
        );
        let old_image = vec![(
            "fio.stderr",
            "fio: engine pmemvm-image-without-phases not loadable\n".to_owned(),
        )];
        let r = boot_records(e, &p, "off", 1, 1, &result(&old_image, Some("status 1")));
        assert!(
            r.runs[0]
                .outcome
                .failure()
                .unwrap()
                .contains("rebuild it with guest-images/build.sh"),
            "{:?}",
            r.runs[0].outcome
        );
        let files = vec![
            ("phases.status", "write-and-verify 1\n".to_owned()),
            (
                "write-and-verify.json",
                fio_json("verify-pass.json", "verify", "write-and-verify"),
            ),
            ("write-and-verify.stderr", "fio: some trouble\n".to_owned()),
        ];
        let r = boot_records(e, &p, "off", 1, 1, &result(&files, None));
        assert_eq!(
            r.runs[0].outcome.failure().unwrap(),
            "fio exited with status 1: fio: some trouble"
        );
        let files = vec![
            ("phases.status", "write-and-verify 0\n".to_owned()),
            (
                "write-and-verify.json",
                fio_json("verify-pass.json", "verify", "write-and-verify"),
            ),
        ];
        let r = boot_records(e, &p, "off", 1, 1, &result(&files, None));
        assert!(
            r.runs[0].outcome.failure().is_none(),
            "{:?}",
            r.runs[0].outcome
        );
    }
}
