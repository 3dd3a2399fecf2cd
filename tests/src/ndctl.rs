//! ndctl's source tree for the tiers that run its own test suite (`nested_ndctl_suite`,
//! `nested_nfit_test`).

use std::path::PathBuf;

use pmemvm_skip::Skip;

/// Where ndctl's tree is when `PMEMVM_NDCTL_SRC` is not set.
pub const DEFAULT_SRC: &str = "/work/shared/third-party/ndctl-v81";

/// ndctl's source tree: `$PMEMVM_NDCTL_SRC` or [`DEFAULT_SRC`]; missing is a skip that
/// says where to get it.
pub fn source() -> Result<PathBuf, Skip> {
    let src = std::env::var_os("PMEMVM_NDCTL_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SRC));
    if src.join("meson.build").is_file() && src.join("test/meson.build").is_file() {
        Ok(src)
    } else {
        Err(Skip::new(format!(
            "ndctl's source tree is not at {}: get ndctl v81 with `git clone --branch v81 https://github.com/pmem/ndctl` and set PMEMVM_NDCTL_SRC to it",
            src.display()
        )))
    }
}

/// `pmemvm suite ndctl --engine nested --cpus 1 --timeout SECS --src SRC ARGS... --out OUT`
/// (one L1 vCPU: docs/ndctl-suite.md, "The platform under the suite"), run again after a
/// breakdown of the emulated platform; prints the table and returns the command's output and
/// its `summary.json` (a missing one fails the test, with the output).
pub fn run_nested(
    src: &std::path::Path,
    timeout_secs: u64,
    args: &[std::ffi::OsString],
    out: &std::path::Path,
    deadline: std::time::Duration,
) -> (crate::pmemvm::Output, serde_json::Value) {
    run_engines("nested", src, timeout_secs, args, out, deadline)
}

/// [`run_nested`] with `--engine ENGINES` (a comma list that includes `nested`, e.g.
/// `nested,qemu`: every boot on each, one table).
pub fn run_engines(
    engines: &str,
    src: &std::path::Path,
    timeout_secs: u64,
    args: &[std::ffi::OsString],
    out: &std::path::Path,
    deadline: std::time::Duration,
) -> (crate::pmemvm::Output, serde_json::Value) {
    run_engines_env(engines, src, timeout_secs, args, out, deadline, &[])
}

/// [`run_engines`] with `env` (name, value) set for pmemvm.
pub fn run_engines_env(
    engines: &str,
    src: &std::path::Path,
    timeout_secs: u64,
    args: &[std::ffi::OsString],
    out: &std::path::Path,
    deadline: std::time::Duration,
    env: &[(&str, &str)],
) -> (crate::pmemvm::Output, serde_json::Value) {
    let started = std::time::Instant::now();
    let timeout = timeout_secs.to_string();
    let output = crate::nested::run_engine_nested(
        || {
            let _ = std::fs::remove_dir_all(out);
            let mut c = std::process::Command::new(crate::pmemvm::pmemvm_bin());
            c.args(["suite", "ndctl", "--engine", engines, "--cpus", "1"])
                .args(["--timeout", &timeout, "--src"])
                .arg(src)
                .args(args)
                .arg("--out")
                .arg(out)
                .env("PMEMVM_L1_CACHE", crate::nested::cache_dir())
                .envs(env.iter().copied());
            c
        },
        deadline,
    );
    eprintln!(
        "pmemvm suite ndctl --engine {engines} {}: {:.1} s\n{}",
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        started.elapsed().as_secs_f64(),
        output.stdout
    );
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).unwrap_or_default(),
    )
    .unwrap_or_else(|e| panic!("no summary.json ({e})\n{}", output.dump()));
    (output, summary)
}

/// The part of meson's text logs `logs` that is test `name`'s own: from its
/// `test: SUITE / NAME` line to the next test's.
pub fn own_log(logs: &str, name: &str) -> String {
    let mut mine = false;
    let mut out = String::new();
    for line in logs.lines() {
        if let Some(t) = line.strip_prefix("test:") {
            let t = t.trim();
            mine = t == name || t.ends_with(&format!(" / {name}"));
        }
        if mine {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every meson text log of `engine`'s boots, for the message of a failure.
pub fn engine_logs(summary: &serde_json::Value, engine: &str) -> String {
    let mut text = String::new();
    for b in summary["boots"].as_array().into_iter().flatten() {
        if b["engine"] != engine {
            continue;
        }
        let d = std::path::PathBuf::from(b["dir"].as_str().unwrap_or_default());
        for n in 1..10 {
            let f = d.join(format!("ndctl-results/meson-{n}/testlog.txt"));
            text.push_str(&std::fs::read_to_string(f).unwrap_or_default());
        }
    }
    text
}
