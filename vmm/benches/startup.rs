//! Startup figures of `pmemvm boot` (the VMM core), measured in one run so
//! they can be compared as ratios:
//!
//! * time from `main` to the first KVM_RUN with `--nvdimm 1G` and `--nvdimm 128G`
//!   (median of N alternating runs, and the 128G/1G ratio);
//! * the VMM's RSS excluding guest memory;
//! * host disk blocks allocated for an untouched 128G NVDIMM backing file.
//!
//! Run: `cargo bench -p vmm --bench startup` (needs /dev/kvm and binutils; it
//! assembles the tiny `hello` guest from tests/guests). `PMEMVM_BENCH_RUNS`
//! sets N (default 15). `PMEMVM_BENCH_BASELINE=PATH` also measures another
//! pmemvm binary (e.g. a build of an earlier commit), alternating with this
//! one run by run, so both sets of figures come from the same conditions.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn assemble_hello(dir: &Path) -> PathBuf {
    let src = workspace().join("tests/guests");
    let obj = dir.join("hello.o");
    let elf = dir.join("hello.elf");
    let ok = Command::new("as")
        .args(["--64", "-I"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .arg(src.join("hello.S"))
        .status()
        .is_ok_and(|s| s.success())
        && Command::new("ld")
            .args(["-m", "elf_x86_64", "-Ttext=0x100000", "-e", "_start", "-o"])
            .arg(&elf)
            .arg(&obj)
            .status()
            .is_ok_and(|s| s.success());
    assert!(
        ok,
        "assembling tests/guests/hello.S failed (is binutils installed?)"
    );
    elf
}

fn pmemvm() -> PathBuf {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "-q",
            "--release",
            "-p",
            "pmemvm",
            "--bin",
            "pmemvm",
            "--bin",
            "pmemvm-vm",
        ])
        .current_dir(workspace())
        .status()
        .expect("running cargo build");
    assert!(status.success(), "building pmemvm failed");
    workspace().join("target/release/pmemvm")
}

/// (first KVM_RUN µs, VMM RSS KiB) of one boot.
fn one(bin: &Path, guest: &Path, nvdimm: &str) -> (u64, u64) {
    let out = Command::new(bin)
        .args(["-v", "boot", "--kernel"])
        .arg(guest)
        .args(["--nvdimm", nvdimm])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running pmemvm");
    assert_eq!(
        out.status.code(),
        Some(42),
        "the hello guest did not exit with 42"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let grab = |key: &str, unit: &str| -> u64 {
        err.lines()
            .find_map(|l| {
                let rest = l.split(key).nth(1)?;
                rest.trim().split(unit).next()?.trim().parse().ok()
            })
            .unwrap_or_else(|| panic!("no '{key}' line in pmemvm's log:\n{err}"))
    };
    (
        grab("startup: first KVM_RUN", "us"),
        grab("VMM RSS excluding guest memory", "KiB"),
    )
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The figures of one binary.
#[derive(Default)]
struct Figures {
    t1: Vec<u64>,
    t128: Vec<u64>,
    rss: Vec<u64>,
}

impl Figures {
    fn measure(&mut self, bin: &Path, guest: &Path) {
        let (t, r) = one(bin, guest, "1G");
        self.t1.push(t);
        self.rss.push(r);
        let (t, r) = one(bin, guest, "128G");
        self.t128.push(t);
        self.rss.push(r);
    }

    fn print(&self, name: &str, runs: usize) {
        let (m1, m128) = (median(self.t1.clone()), median(self.t128.clone()));
        println!("{name} ({runs} runs each, alternating; release build)");
        println!("  main -> first KVM_RUN, --nvdimm 1G   : {m1} us (median)");
        println!("  main -> first KVM_RUN, --nvdimm 128G : {m128} us (median)");
        println!(
            "  ratio 128G / 1G                      : {:.2}",
            m128 as f64 / m1 as f64
        );
        println!(
            "  VMM RSS excluding guest memory       : {} KiB (max {} KiB)",
            median(self.rss.clone()),
            self.rss.iter().max().unwrap_or(&0)
        );
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs: usize = std::env::var("PMEMVM_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let dir = std::env::temp_dir().join(format!("pmemvm-startup-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let guest = assemble_hello(&dir);
    let bin = pmemvm();
    let baseline = std::env::var_os("PMEMVM_BENCH_BASELINE").map(PathBuf::from);
    let (mut this, mut base) = (Figures::default(), Figures::default());
    for _ in 0..runs {
        if let Some(b) = &baseline {
            base.measure(b, &guest);
        }
        this.measure(&bin, &guest);
    }
    let file = dir.join("untouched-128g.img");
    let spec = format!("128G,file={}", file.display());
    one(&bin, &guest, &spec);
    let md = std::fs::metadata(&file).expect("backing file");
    if let Some(b) = &baseline {
        base.print(&format!("baseline {}", b.display()), runs);
    }
    this.print("pmemvm startup", runs);
    println!(
        "  untouched 128G backing file          : {} bytes, {} blocks allocated",
        md.len(),
        md.blocks()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
