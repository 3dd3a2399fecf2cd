//! What a guest flush of pmemvm's NVDIMM costs, and what `record=` adds to
//! it, without Linux: the tiny `epochs` guest (tests/guests/epochs.S) stores
//! a word to a new page of the DIMM and writes the DIMM's flush hint, N
//! times, then powers off. Each round boots it as a user types it (`pmemvm
//! boot --kernel epochs.elf --nvdimm 16M,file=F[,record=R]`) on this pmemvm
//! plain, this pmemvm recorded, and — with `--baseline` — another pmemvm
//! binary plain (one built from before `record=` existed: what a DIMM
//! without `record=` pays for the recorder's being there). Prints each
//! boot's wall time, the time per flush and the ratios, per round and as
//! medians (docs/crash-consistency.md, "Cost").
//!
//! `cargo bench -p pmemvm-lab --bench flush_path -- --guest EPOCHS_ELF [--flushes N] [--rounds R] [--baseline PMEMVM]`
//!
//! The guest runs in ring 0: on a PVM host that code is emulated, so the
//! figures there are of this host only; every flush is an exit to pmemvm
//! and an `fdatasync` of the DIMM file, which the ratios compare alike.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[path = "support/mod.rs"]
mod support;
use support::{median, pmemvm_bin};

struct Args {
    guest: PathBuf,
    flushes: u32,
    rounds: u32,
    baseline: Option<PathBuf>,
}

fn number(flag: &str, v: &str) -> Result<u32, String> {
    v.parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or(format!("{flag} {v} is not a number from 1 up"))
}

fn parse_args() -> Result<Args, String> {
    let (mut guest, mut flushes, mut rounds, mut baseline) = (None, 2000, 3, None);
    let mut it = std::env::args().skip(1).filter(|s| s != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--guest" => guest = Some(PathBuf::from(value()?)),
            "--flushes" => flushes = number(&flag, &value()?)?,
            "--rounds" => rounds = number(&flag, &value()?)?,
            "--baseline" => baseline = Some(PathBuf::from(value()?)),
            f => {
                return Err(format!(
                    "{f} is not an option of this bench (--guest, --flushes, --rounds, --baseline)"
                ))
            }
        }
    }
    let guest = guest.ok_or(
        "--guest names the tiny epochs guest (target/debug/build/pmemvm-tests-*/out/epochs.elf, built by `cargo test -p pmemvm-tests --no-run`)",
    )?;
    for p in std::iter::once(&guest).chain(baseline.as_ref()) {
        if !p.is_file() {
            return Err(format!("{} is not a file", p.display()));
        }
    }
    // The steps start at 1 MiB and take one page each, in a 16 MiB region.
    if flushes > 3840 * 4 {
        return Err(format!("--flushes {flushes} is more than 15360"));
    }
    Ok(Args {
        guest,
        flushes,
        rounds,
        baseline,
    })
}

/// A new DIMM file whose parameter block asks for `flushes` store-and-flush steps.
fn dimm(path: &Path, flushes: u32) -> Result<(), String> {
    let f = std::fs::File::create(path).map_err(|e| e.to_string())?;
    f.set_len((16 << 20) + (128 << 10) + 4096)
        .map_err(|e| e.to_string())?;
    let mut b = b"EPOCHS01".to_vec();
    b.extend_from_slice(&flushes.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    for i in 0..u64::from(flushes) {
        // Pages from 1 MiB on, 3840 of them (the last 1 MiB left alone), reused round-robin.
        let offset = (256 + i % 3840) * 4096;
        b.extend_from_slice(&offset.to_le_bytes());
        b.extend_from_slice(&u32::try_from(i).unwrap_or(u32::MAX).to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
    }
    f.write_all_at(&b, 0).map_err(|e| e.to_string())
}

/// One boot: its wall time in seconds.
fn boot(bin: &Path, a: &Args, work: &Path, record: bool) -> Result<f64, String> {
    let file = work.join("pm0.img");
    let rec = work.join("rec");
    let _ = std::fs::remove_dir_all(&rec);
    dimm(&file, a.flushes)?;
    let mut spec = format!("16M,file={}", file.display());
    if record {
        spec.push_str(&format!(",record={}", rec.display()));
    }
    let start = Instant::now();
    let out = Command::new(bin)
        .args(["boot", "--kernel"])
        .arg(&a.guest)
        .args(["--nvdimm", &spec])
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let secs = start.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains("epochs written") {
        return Err(format!(
            "{} boot: {}\n{}{}",
            bin.display(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(secs)
}

fn main() {
    let fail = |e: String, code: i32| -> ! {
        eprintln!("flush_path: {e}");
        std::process::exit(code)
    };
    let a = parse_args().unwrap_or_else(|e| fail(e, 2));
    let bin = pmemvm_bin().unwrap_or_else(|e| fail(e, 2));
    let work = std::env::temp_dir().join(format!("pmemvm-flush-path-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap_or_else(|e| fail(format!("{}: {e}", work.display()), 1));
    println!(
        "flush path: the epochs guest, {} store+flush steps a boot, {} rounds of (plain, recorded{}) on {}",
        a.flushes,
        a.rounds,
        if a.baseline.is_some() { ", baseline plain" } else { "" },
        bin.display()
    );
    let per = |s: f64| s / f64::from(a.flushes) * 1e6;
    let (mut rec_ratio, mut base_ratio) = (Vec::new(), Vec::new());
    for n in 0..a.rounds {
        let run = |b: &Path, record: bool| {
            boot(b, &a, &work, record).unwrap_or_else(|e| {
                let _ = std::fs::remove_dir_all(&work);
                fail(e, 1)
            })
        };
        let plain = run(&bin, false);
        let recorded = run(&bin, true);
        let mut line = format!(
            "round {n}: plain {plain:.2} s ({:.0} µs a flush); recorded {recorded:.2} s ({:.0} µs a flush), recorded/plain {:.3}",
            per(plain),
            per(recorded),
            recorded / plain
        );
        rec_ratio.push(recorded / plain);
        if let Some(b) = &a.baseline {
            let base = run(b, false);
            line.push_str(&format!(
                "; baseline {base:.2} s ({:.0} µs a flush), plain/baseline {:.3}",
                per(base),
                plain / base
            ));
            base_ratio.push(plain / base);
        }
        println!("{line}");
    }
    println!("median recorded/plain (time): {:.3}", median(rec_ratio));
    if !base_ratio.is_empty() {
        println!(
            "median plain/baseline (time; 1.0 = no cost for a DIMM without record=): {:.3}",
            median(base_ratio)
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}
