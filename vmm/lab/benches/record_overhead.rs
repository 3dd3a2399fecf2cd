//! What `record=` costs: fio randwrite with `fsync=32` on a DIMM's
//! `/dev/pmem0`, recorded and not, alternating in one run, as a ratio of
//! IOPS (docs/crash-consistency.md, "Cost").
//!
//! `cargo bench -p pmemvm-lab --bench record_overhead -- [--engine pmemvm|nested] [--rounds N] [--seconds S] [--baseline PMEMVM]`
//!
//! `--baseline` names another pmemvm binary (one built from before `record=`
//! existed): each round then also boots the plain run on it, and the bench
//! prints plain/baseline — what a DIMM without `record=` pays for the
//! recorder's being there.
//!
//! The engine defaults to pmemvm; on a host whose KVM cannot run Linux
//! (PVM, or no hardware virtualization) give `--engine nested`, whose
//! figures are functional only (everything runs under TCG) and say so.

use std::path::PathBuf;
use std::process::Command;

#[path = "support/mod.rs"]
mod support;
use support::{median, pmemvm_bin};

struct Args {
    engine: &'static str,
    rounds: u32,
    seconds: u32,
    baseline: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        engine: "pmemvm",
        rounds: 3,
        seconds: 10,
        baseline: None,
    };
    let mut it = std::env::args().skip(1).filter(|s| s != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--engine" => {
                a.engine = match value()?.as_str() {
                    "pmemvm" => "pmemvm",
                    "nested" => "nested",
                    v => return Err(format!("--engine {v} is not pmemvm or nested")),
                }
            }
            "--rounds" => {
                let v = value()?;
                a.rounds = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--rounds {v} is not a number from 1 up"))?;
            }
            "--seconds" => {
                let v = value()?;
                a.seconds = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--seconds {v} is not a number from 1 up"))?;
            }
            "--baseline" => {
                let v = PathBuf::from(value()?);
                if !v.is_file() {
                    return Err(format!(
                        "--baseline {} is not a file; give the path of a pmemvm binary",
                        v.display()
                    ));
                }
                a.baseline = Some(v);
            }
            f => {
                return Err(format!(
                    "{f} is not an option of this bench (--engine, --rounds, --seconds, --baseline)"
                ))
            }
        }
    }
    Ok(a)
}

fn job(seconds: u32) -> String {
    format!(
        "[randwrite-fsync]\nfilename=/dev/pmem0\nrw=randwrite\nbs=4k\nsize=64M\nfsync=32\n\
         ioengine=psync\ntime_based=1\nruntime={seconds}\nnumjobs=1\n"
    )
}

/// One boot, as a user types it (`pmemvm run --fio JOB --json OUT`): IOPS,
/// guest flushes, bytes of log (0 when not recorded).
fn one(
    a: &Args,
    bin: &std::path::Path,
    work: &std::path::Path,
    n: u32,
    record: bool,
) -> Result<(f64, u64, u64), String> {
    let dimm = work.join(format!("pm-{n}-{record}.img"));
    let rec = work.join(format!("rec-{n}"));
    let jobfile = work.join("job.fio");
    let json = work.join(format!("run-{n}-{record}.json"));
    std::fs::write(&jobfile, job(a.seconds)).map_err(|e| e.to_string())?;
    let mut spec = format!("256M,label-size=0,file={}", dimm.display());
    if record {
        spec.push_str(&format!(",record={}", rec.display()));
    }
    let out = Command::new(bin)
        .args([
            "run", "--engine", a.engine, "--memory", "1G", "--nvdimm", &spec, "--fio",
        ])
        .arg(&jobfile)
        .arg("--json")
        .arg(&json)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "pmemvm run: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    let iops = r["fio"]["jobs"][0]["write"]["iops"]
        .as_f64()
        .ok_or("fio reported no write IOPS")?;
    let flushes = r["nvdimm_stats"][0]["flushes"].as_u64().unwrap_or(0);
    let log = std::fs::metadata(rec.join("flush.log")).map_or(0, |m| m.len());
    let _ = std::fs::remove_file(&dimm);
    let _ = std::fs::remove_dir_all(&rec);
    Ok((iops, flushes, log))
}

fn main() {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("record_overhead: {e}");
            std::process::exit(2);
        }
    };
    let work: PathBuf =
        std::env::temp_dir().join(format!("pmemvm-record-bench-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&work) {
        eprintln!("record_overhead: {}: {e}", work.display());
        std::process::exit(1);
    }
    let functional = a.engine == "nested";
    println!(
        "record= overhead: fio randwrite 4k fsync=32 on /dev/pmem0 (256M label-less DIMM), {} s a boot, {} rounds of (plain, recorded), engine {}{}",
        a.seconds,
        a.rounds,
        a.engine,
        if functional { " — functional only: the guest runs under TCG, the figures say nothing of performance" } else { "" }
    );
    let bin = match pmemvm_bin() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("record_overhead: {e}");
            std::process::exit(2);
        }
    };
    let (mut plain, mut recorded, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut against_baseline = Vec::new();
    for n in 0..a.rounds {
        let p = one(&a, &bin, &work, n, false);
        let r = one(&a, &bin, &work, n, true);
        if let (Some(base), Ok(p)) = (&a.baseline, &p) {
            match one(&a, base, &work, n, false) {
                Ok(b) => {
                    println!(
                        "round {n}: baseline {} {:.0} IOPS; plain/baseline {:.3}",
                        base.display(),
                        b.0,
                        p.0 / b.0
                    );
                    against_baseline.push(p.0 / b.0);
                }
                Err(e) => {
                    eprintln!("record_overhead: round {n}: baseline: {e}");
                    let _ = std::fs::remove_dir_all(&work);
                    std::process::exit(1);
                }
            }
        }
        match (p, r) {
            (Ok(p), Ok(r)) => {
                let flushes = |f: u64| match f {
                    0 => "guest flushes not reported by this engine".to_string(),
                    f => format!("{f} guest flushes"),
                };
                println!(
                    "round {n}: plain {:.0} IOPS ({}); recorded {:.0} IOPS ({}, {} KiB of log); ratio {:.3}",
                    p.0,
                    flushes(p.1),
                    r.0,
                    flushes(r.1),
                    r.2 >> 10,
                    r.0 / p.0
                );
                plain.push(p.0);
                recorded.push(r.0);
                ratios.push(r.0 / p.0);
            }
            (p, r) => {
                eprintln!("record_overhead: round {n}: plain {p:?}, recorded {r:?}");
                let _ = std::fs::remove_dir_all(&work);
                std::process::exit(1);
            }
        }
    }
    println!(
        "median: plain {:.0} IOPS, recorded {:.0} IOPS; recorded/plain {:.3} (per round: {})",
        median(plain),
        median(recorded),
        median(ratios.clone()),
        ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !against_baseline.is_empty() {
        println!(
            "plain/baseline (a DIMM without record= against the baseline binary): median {:.3} (per round: {})",
            median(against_baseline.clone()),
            against_baseline
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}
