//! Power loss at every flush, on this host's KVM with the tiny `epochs`
//! guest (tests/guests/epochs.S): `--nvdimm ...,record=DIR` writes one
//! epoch per guest flush from KVM's dirty log, `pmemvm crash-images` makes
//! the DIMM file after each flush (and torn variants), and bad logs and
//! requests are refused with status 2, nothing of the user's changed.
//!
//! The guest's steps: page 1 ← A (no flush), page 2 ← B, flush 1; page 1 ←
//! C, flush 2; page 3 ← D without a flush (the tail), power-off.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const REGION: u64 = 16 << 20;
const LABELS: u64 = 128 << 10;
const PAGE: u64 = 4096;
const DEADLINE: Duration = Duration::from_secs(60);
const A: u32 = 0xaaaa_0001;
const B: u32 = 0xbbbb_0002;
const C: u32 = 0xcccc_0003;
const D: u32 = 0xdddd_0004;

/// The DIMM file with the guest's parameter block: (offset, value, flush).
fn prepare(path: &Path, steps: &[(u64, u32, bool)]) {
    let f = std::fs::File::create(path).expect("backing file");
    f.set_len(REGION + LABELS + 4096).expect("size");
    let mut b = b"EPOCHS01".to_vec();
    b.extend_from_slice(&u32::try_from(steps.len()).expect("steps").to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    for &(off, value, flush) in steps {
        b.extend_from_slice(&off.to_le_bytes());
        b.extend_from_slice(&value.to_le_bytes());
        b.extend_from_slice(&u32::from(flush).to_le_bytes());
    }
    f.write_all_at(&b, 0).expect("parameter block");
}

fn word(img: &[u8], page: u64) -> u32 {
    let at = usize::try_from(page * PAGE).expect("offset");
    u32::from_le_bytes(img[at..at + 4].try_into().expect("4 bytes"))
}

/// Boots the guest with `record=` and returns the record directory.
fn record(d: &TempDir) -> std::path::PathBuf {
    let k = guest("epochs").expect("the epochs guest");
    let dimm = d.join("pm0.img");
    prepare(
        &dimm,
        &[
            (PAGE, A, false),
            (2 * PAGE, B, true),
            (PAGE, C, true),
            (3 * PAGE, D, false),
        ],
    );
    let rec = d.join("rec");
    let spec = format!("16M,file={},record={}", dimm.display(), rec.display());
    let out = run(
        &["boot", "--kernel", &k.to_string_lossy(), "--nvdimm", &spec],
        DEADLINE,
    );
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(out.stdout.contains("epochs written"), "{}", out.dump());
    let fin = std::fs::read(&dimm).expect("the DIMM file");
    assert_eq!(
        [word(&fin, 1), word(&fin, 2), word(&fin, 3)],
        [C, B, D],
        "the guest's stores are in the file"
    );
    rec
}

#[test]
fn each_image_holds_what_was_flushed_before_it_and_torn_ones_are_reproducible() {
    require!(kvm_available());
    require!(guest("epochs"));
    let d = TempDir::new("record-flushes");
    let rec = record(&d);
    let out_dir = d.join("img");
    let r = run(
        &[
            "crash-images",
            &rec.to_string_lossy(),
            "--out",
            &out_dir.to_string_lossy(),
            "--all",
            "--torn",
            "42",
        ],
        DEADLINE,
    );
    assert_eq!(r.status, Some(0), "{}", r.dump());
    assert!(r.stdout.contains("3 crash images"), "{}", r.dump());
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("images.json")).expect("manifest"))
            .expect("manifest JSON");
    assert_eq!(m["last_flush"], 2, "{m}");
    assert_eq!(m["complete"], true, "{m}");
    let img = |n: u64| std::fs::read(out_dir.join(format!("flush-{n:06}.img"))).expect("image");
    let words = |v: &[u8]| [word(v, 1), word(v, 2), word(v, 3)];
    // Before the first flush nothing the guest stored is promised; after
    // flush 1 pages 1 and 2 are; after flush 2 page 1 is C; D never is.
    assert_eq!(words(&img(0)), [0, 0, 0]);
    assert_eq!(words(&img(1)), [A, B, 0]);
    assert_eq!(words(&img(2)), [C, B, 0]);
    assert_eq!(
        img(2).len(),
        usize::try_from(REGION + LABELS + 4096).expect("len")
    );
    // The flushing vCPU is named.
    assert_eq!(m["images"][1]["vcpu"], 0, "{m}");
    // Torn variants: after flush 1 the later lines are page 1's first line
    // (C over A); after flush 2 the tail's page 3 line (D).
    for (n, page, later, before) in [(1u64, 1u64, C, A), (2, 3, D, 0)] {
        let t = &m["images"][usize::try_from(n).expect("n")]["torn"];
        assert_eq!(t["lines_after"], 1, "{t}");
        let applied = t["lines_applied"].as_array().expect("lines").len();
        let v = std::fs::read(out_dir.join(t["file"].as_str().expect("file"))).expect("torn");
        let want = if applied == 1 { later } else { before };
        assert_eq!(word(&v, page), want, "torn image after flush {n}: {t}");
    }
    // The same seed gives the same bytes; the manifests agree.
    let again = d.join("img2");
    let r = run(
        &[
            "crash-images",
            &rec.to_string_lossy(),
            "--out",
            &again.to_string_lossy(),
            "--torn",
            "42",
        ],
        DEADLINE,
    );
    assert_eq!(r.status, Some(0), "{}", r.dump());
    for n in 0..=2u64 {
        for name in [
            format!("flush-{n:06}.img"),
            format!("flush-{n:06}-torn.img"),
        ] {
            assert_eq!(
                std::fs::read(out_dir.join(&name)).expect("first"),
                std::fs::read(again.join(&name)).expect("second"),
                "{name} differs between two runs with seed 42"
            );
        }
    }
    assert_eq!(
        std::fs::read(out_dir.join("images.json")).expect("first"),
        std::fs::read(again.join("images.json")).expect("second")
    );
}

/// Every file under `dir` with its bytes.
fn contents(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("listing")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let b = std::fs::read(&p).unwrap_or_default();
            (p, b)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn bad_logs_and_requests_are_refused_with_status_2_and_nothing_changed() {
    require!(kvm_available());
    require!(guest("epochs"));
    let d = TempDir::new("record-bad");
    let rec = record(&d);
    let out = d.join("out");
    let images = |extra: &[&str], rec: &Path| {
        let mut args = vec![
            "crash-images".to_string(),
            rec.to_string_lossy().into_owned(),
            "--out".into(),
            out.to_string_lossy().into_owned(),
        ];
        args.extend(extra.iter().map(ToString::to_string));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&a, DEADLINE)
    };
    let refused = |o: &pmemvm_tests::pmemvm::Output, words: &str| {
        assert_eq!(o.status, Some(2), "{}", o.dump());
        assert!(o.stderr.contains(words), "wanted {words:?}: {}", o.dump());
        assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.dump());
        assert!(!out.exists(), "--out was created: {}", o.dump());
    };
    let before = contents(&rec);
    // Past the last flush.
    refused(
        &images(&["--at", "3"], &rec),
        "--at 3 is past the last flush",
    );
    assert_eq!(contents(&rec), before);
    // A torn granule that is not one store up to a cache line (refused by the
    // option parser: its sentence inside clap's "invalid value" line).
    let o = images(&["--torn", "1,granule=3"], &rec);
    assert_eq!(o.status, Some(2), "{}", o.dump());
    assert!(
        o.stderr
            .contains("--torn '1,granule=3': a granule is 8, 16, 32 or 64 bytes"),
        "{}",
        o.dump()
    );
    assert!(!out.exists(), "--out was created: {}", o.dump());

    // A copy of the log, cut inside its last frame (the end record).
    let cut = d.join("cut");
    std::fs::create_dir(&cut).expect("cut");
    let log = std::fs::read(rec.join("flush.log")).expect("log");
    std::fs::write(cut.join("flush.log"), &log[..log.len() - 5]).expect("cut log");
    std::fs::copy(rec.join("base.img"), cut.join("base.img")).expect("base");
    refused(&images(&[], &cut), "--partial");
    let o = images(&["--partial"], &cut);
    assert_eq!(o.status, Some(0), "{}", o.dump());
    assert!(
        o.stdout
            .contains("cut short: the file ends inside the frame at byte"),
        "{}",
        o.dump()
    );
    std::fs::remove_dir_all(&out).expect("rm out");

    // One flipped byte in the middle.
    let bad = d.join("flipped");
    std::fs::create_dir(&bad).expect("flipped");
    let mut flipped = log.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    std::fs::write(bad.join("flush.log"), &flipped).expect("flipped log");
    std::fs::copy(rec.join("base.img"), bad.join("base.img")).expect("base");
    let snap = contents(&bad);
    refused(&images(&[], &bad), "is corrupted at byte");
    assert_eq!(contents(&bad), snap);

    // The base image of another DIMM size.
    let other = d.join("other");
    std::fs::create_dir(&other).expect("other");
    std::fs::write(other.join("flush.log"), &log).expect("log");
    std::fs::write(other.join("base.img"), vec![0u8; 4096]).expect("base");
    refused(&images(&[], &other), "from different DIMMs");

    // An --out that holds the user's files.
    std::fs::create_dir(&out).expect("out");
    std::fs::write(out.join("mine"), b"keep").expect("mine");
    let o = images(&[], &rec);
    assert_eq!(o.status, Some(2), "{}", o.dump());
    assert!(o.stderr.contains("is not empty"), "{}", o.dump());
    assert_eq!(contents(&out), vec![(out.join("mine"), b"keep".to_vec())]);

    // A second recording into the same, now full, directory.
    let k = guest("epochs").expect("guest");
    let spec = format!(
        "16M,file={},record={}",
        d.join("pm1.img").display(),
        rec.display()
    );
    let o = run(
        &["boot", "--kernel", &k.to_string_lossy(), "--nvdimm", &spec],
        DEADLINE,
    );
    assert_eq!(o.status, Some(2), "{}", o.dump());
    assert!(o.stderr.contains("is not empty"), "{}", o.dump());
    assert!(!d.join("pm1.img").exists(), "the DIMM file was created");
    assert_eq!(contents(&rec), before);
}

/// `crash-check --slurm SHARED` on the recording: the scripts name one task per selected
/// flush and run the user's command again, as typed; a task number past the array is refused
/// (status 2, one sentence), and the report of an array whose tasks left no results fails,
/// naming each task. (The array on a real cluster: `slurm.rs`.)
#[test]
fn crash_check_slurm_writes_one_task_per_flush_and_its_report_names_missing_results() {
    require!(kvm_available());
    require!(guest("epochs"));
    let d = TempDir::new("record-slurm");
    let rec = record(&d);
    let shared = d.join("shared");
    let with = |mode: &[&str]| {
        let mut a: Vec<String> = vec!["crash-check".into()];
        a.extend(mode.iter().map(ToString::to_string));
        a.extend(
            [
                rec.to_str().unwrap(),
                "--all",
                "--engine",
                "qemu",
                "--slurm",
                shared.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "fsck -n /dev/pmem0 && echo \"it's clean\"",
            ]
            .map(String::from),
        );
        a
    };
    let go = |a: &[String]| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&a, DEADLINE)
    };
    let out = go(&with(&[]));
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(
        out.stdout
            .contains("3 array task(s), one per flush (0, 1, 2)"),
        "{}",
        out.dump()
    );
    let script = std::fs::read_to_string(shared.join("check.sbatch")).expect("check.sbatch");
    assert!(script.contains("#SBATCH --array=0-2\n"), "{script}");
    // The task line, read back by sh, is the command as typed plus --slurm-task.
    let line = script
        .lines()
        .find(|l| l.starts_with("exec "))
        .expect("the exec line");
    let words = std::process::Command::new("sh")
        .args([
            "-c",
            &line.replacen("exec \"$PMEMVM\"", "printf '%s\\n'", 1),
        ])
        .env("SLURM_ARRAY_TASK_ID", "1")
        .output()
        .expect("sh");
    let mut want = with(&["--slurm-task", "1"]);
    assert_eq!(
        String::from_utf8_lossy(&words.stdout)
            .lines()
            .collect::<Vec<_>>(),
        want.iter().map(String::as_str).collect::<Vec<_>>()
    );
    want[2] = "3".into();
    let o = go(&want);
    assert_eq!(o.status, Some(2), "{}", o.dump());
    assert!(
        o.stderr
            .contains("--slurm-task 3 is not a task of this array, whose 3 task(s)"),
        "{}",
        o.dump()
    );
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.dump());
    let o = go(&with(&["--slurm-report"]));
    assert_eq!(o.status, Some(1), "{}", o.dump());
    for task in 0..3 {
        assert!(
            o.stdout
                .contains(&format!("array task {task} left no result")),
            "{}",
            o.dump()
        );
    }
    assert!(
        o.stdout
            .contains("3 of 3 images failed `sh -c fsck -n /dev/pmem0 && echo \"it's clean\"`; the first: the image after flush 0"),
        "{}",
        o.dump()
    );
}
