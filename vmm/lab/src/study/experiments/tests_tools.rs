//! The plans checked by the real tools: `fio --parse-only` on every phase,
//! `sh -n` on the setup scripts, and every phase run by fio on host files.

use std::process::Command;

use super::tests::{plan, small, thread_host};
use super::*;
use crate::study::fio::parse_fio_json;

fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok()
}

/// fio itself accepts every rendered job file of every plan.
#[test]
fn fio_parses_every_phase() {
    if !have("fio") {
        pmemvm_skip::skip!("fio not installed (apt-get install fio)");
    }
    let dir = std::env::temp_dir().join(format!("pmemvm-exp-parse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for e in &EXPERIMENTS {
        for ph in plan(e.name, &thread_host()).phases {
            let path = dir.join(format!("{}-{}.fio", e.name, ph.name));
            std::fs::write(&path, &ph.job_file).unwrap();
            let out = Command::new("fio")
                .arg("--parse-only")
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{} {}: {}",
                e.name,
                ph.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The rendered setup scripts are valid for dash and for the guest's busybox sh.
#[test]
fn setup_scripts_parse() {
    for e in &EXPERIMENTS {
        let Some(setup) = plan(e.name, &small()).setup else {
            continue;
        };
        assert!(setup
            .script
            .starts_with("#!/bin/sh\n# SPDX-License-Identifier: Apache-2.0\n"));
        for shell in [&["sh"][..], &["busybox", "sh"][..]] {
            let Ok(mut child) = Command::new(shell[0])
                .args(&shell[1..])
                .arg("-n")
                .stdin(std::process::Stdio::piped())
                .spawn()
            else {
                pmemvm_skip::skip(&format!("{} not installed", shell.join(" ")));
                continue;
            };
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(setup.script.as_bytes())
                .unwrap();
            assert!(
                child.wait().unwrap().success(),
                "{} rejects {}",
                shell.join(" "),
                e.name
            );
        }
    }
}

/// Runs every phase of the scaled-down plans for real on host files and checks that the
/// measurement is found: the job names, groups and sizes are the ones the bench reads.
#[test]
fn phases_run_on_host_files() {
    if !have("fio") {
        pmemvm_skip::skip!("fio not installed (apt-get install fio)");
    }
    let dir = std::env::temp_dir().join(format!("pmemvm-exp-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["pmem-nowait", "xfs-dax-write"] {
        let e = find_experiment(name).unwrap();
        let p = e
            .plan(&BenchParams {
                vcpus: Some(2),
                nvdimm_bytes: Some(if name == "xfs-dax-write" {
                    512 << 20
                } else {
                    16 << 20
                }),
                // xfs-dax-write has no timed phase (--runtime is refused there).
                runtime_s: (name == "pmem-nowait").then_some(1),
                ..BenchParams::default()
            })
            .unwrap();
        let data = dir.join(format!("{name}.dat"));
        std::fs::write(&data, vec![0u8; 16 << 20]).unwrap();
        for ph in &p.phases {
            let job = ph
                .job_file
                .replace(
                    "filename=/dev/pmem0",
                    &format!("filename={}", data.display()),
                )
                .replace(
                    "directory=/mnt/xfs",
                    &format!("directory={}", dir.display()),
                )
                .replace("_log=/tmp/", &format!("_log={}/", dir.display()));
            // RANDWRITE is size-bound with `runtime` only as a cap: on a loaded host the
            // 1 s cap of this scaled-down plan can cut it short, so the cap is lifted here
            // and the size check below stays exact.
            let job = if ph.job == "RANDWRITE" {
                job.replace("runtime=1\n", "")
            } else {
                job
            };
            let path = dir.join(format!("{}.fio", ph.name));
            std::fs::write(&path, job).unwrap();
            let mut cmd = Command::new("fio");
            // fio leaves verify state files in its working directory.
            // The phases' extra arguments (--alloc-size=1048576, a 1 GiB shared pool) are
            // left out here: on a loaded host the pool alone can fail; the golden tests check
            // them and the nested tier runs them.
            cmd.current_dir(&dir).arg("--output-format=json");
            let out = cmd.arg(&path).output().unwrap();
            // The experiment's verify job is the thread's race: on this host's own
            // io_uring path a loaded machine reorders its overlapping writes now and
            // then, and fio's verify error is then the result the experiment reports
            // (report::failures), not a broken job. Any other failure is one.
            let stderr = String::from_utf8_lossy(&out.stderr);
            let race = e.expectation.is_some_and(|x| x.job == ph.name)
                && stderr.contains("verify: bad header");
            if !out.status.success() && race {
                eprintln!(
                    "{name} {}: the thread's verify race on this host: {stderr}",
                    ph.name
                );
                continue;
            }
            assert!(
                out.status.success(),
                "{name} {}: fio exited with {}: {} {}",
                ph.name,
                out.status,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
            let report = parse_fio_json(&out.stdout).unwrap();
            let m = e.measurement(ph, &report).unwrap();
            assert!(m.ok() && m.iops > 0.0, "{name} {}: {:?}", ph.name, m.errors);
            // A measured phase leaves one IOPS and one bandwidth log for all its jobs, and
            // its latencies have percentiles, submission latency included.
            let log = |kind: &str| std::fs::read(dir.join(format!("{}_{kind}.log", ph.name))).ok();
            let series =
                crate::study::fio::log::phase_series(log("iops").as_deref(), log("bw").as_deref());
            if matches!(ph.role, PhaseRole::Measured { .. }) {
                let series = series.unwrap_or_else(|| panic!("{name} {}: no logs", ph.name));
                let series = series.unwrap_or_else(|e| panic!("{name} {}: {e}", ph.name));
                // A job shorter than a second (the famfs write here) logs no second.
                let runtime = m.read.iter().chain(&m.write).map(|d| d.runtime_ms).max();
                if runtime.unwrap_or(0) >= 1500 {
                    assert!(
                        !series.iops.values.is_empty() && series.iops.streams >= 1,
                        "{name} {}: {runtime:?} ms of I/O and no second in its IOPS log {:?}",
                        ph.name,
                        log("iops").map(|l| String::from_utf8_lossy(&l).into_owned())
                    );
                }
                assert!(m.clat.p99_ns.is_some() && m.lat.p99_ns.is_some(), "{m:?}");
                if m.slat.samples > 0 {
                    assert!(m.slat.p99_ns.is_some(), "{name} {}: {:?}", ph.name, m.slat);
                }
            } else {
                assert!(
                    series.is_none(),
                    "{name} {}: logs of an unmeasured phase",
                    ph.name
                );
            }
            assert_eq!(m.jobnames.len(), 1, "group_reporting folds the jobs");
            match ph.job {
                "write-and-verify" => {
                    let (r, w) = (m.read.unwrap(), m.write.unwrap());
                    assert_eq!(w.io_bytes, 16 << 20);
                    // norandommap: only the last write of each block is verified.
                    assert!(
                        r.io_bytes < w.io_bytes && r.io_bytes > w.io_bytes / 2,
                        "{r:?}"
                    );
                }
                "RANDWRITE" => assert_eq!(m.write.unwrap().io_bytes, 2 * (16 << 20)),
                "randread" => assert!(m.read.is_some() && m.write.is_none()),
                "ten-256m-per-thread" => {
                    let files = 2 * 10 * p.vars["FILESIZE"].parse::<u64>().unwrap();
                    assert_eq!(m.write.unwrap().io_bytes, files);
                }
                other => panic!("unexpected job {other}"),
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
