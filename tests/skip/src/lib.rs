//! The one way a pmemvm test skips.
//!
//! Only a missing tool or missing hardware may skip a test: QEMU not
//! installed, no hardware virtualization, a kernel package that the machine
//! lacks. Everything else — a harness error, a failed download, a test guest
//! that does not assemble, a misconfigured variable — is a failure, and a
//! test reports it with `panic!`/`expect`, never through this crate.
//!
//! A skip goes through [`skip`] (or the [`require!`] and [`skip!`] macros):
//! - it prints `SKIP: [<test binary>::<test>] <reason>` to stderr;
//! - it appends `<test binary>::<test>\t<reason>` to the file named by
//!   `$PMEMVM_SKIP_LOG`, so `tests/run.sh` can list every skip at the end
//!   even though `cargo test` captures test output;
//! - with `PMEMVM_TEST_STRICT=1` (set by CI) it fails the test instead,
//!   naming the tier and the reason.
//!
//! ```no_run
//! use pmemvm_skip::{require, skip, Skip};
//!
//! fn qemu() -> Result<std::path::PathBuf, Skip> {
//!     Err(Skip::new("qemu-system-x86_64 is not installed"))
//! }
//!
//! #[test]
//! fn boots() {
//!     let q = require!(qemu());
//!     if !q.exists() {
//!         skip!("{} vanished", q.display());
//!     }
//! }
//! ```

use std::fmt;
use std::io::Write;

/// Environment variable that turns every skip into a failure when `1`.
pub const STRICT_ENV: &str = "PMEMVM_TEST_STRICT";
/// Environment variable naming the file every skip is appended to.
pub const LOG_ENV: &str = "PMEMVM_SKIP_LOG";

/// Why a test cannot run on this machine: a missing tool or missing
/// hardware, never a failure of the test or its harness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    reason: String,
}

impl Skip {
    /// A skip with a reason a reader of the test log understands.
    pub fn new(reason: impl Into<String>) -> Self {
        Skip {
            reason: reason.into(),
        }
    }

    /// The reason, without the `SKIP:` prefix.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.reason)
    }
}

/// An error that may stand for a missing requirement rather than a failure.
pub trait MaybeSkip: fmt::Display {
    /// `Some(reason)` if the test should be skipped instead of failed.
    fn skip_reason(&self) -> Option<&str>;
}

impl MaybeSkip for Skip {
    fn skip_reason(&self) -> Option<&str> {
        Some(&self.reason)
    }
}

/// True when `PMEMVM_TEST_STRICT=1`: every skip fails its test.
pub fn strict() -> bool {
    std::env::var(STRICT_ENV).is_ok_and(|v| v.trim() == "1")
}

/// `<test binary>::<test name>` of the running test, e.g.
/// `nested_nvdimm::fsdax_on_defaults` (the binary's hash suffix dropped).
pub fn tier() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
            _ => stem,
        })
        .unwrap_or_else(|| "?".into());
    let thread = std::thread::current();
    match thread.name() {
        Some(name) if name != "main" => format!("{binary}::{name}"),
        _ => binary,
    }
}

/// Records a skip (stderr and the skip log) and, in strict mode, fails the
/// test. Callers return from the test right after it.
pub fn skip(reason: &str) {
    let tier = tier();
    let strict = strict();
    if let Some(path) = std::env::var_os(LOG_ENV).filter(|p| !p.is_empty()) {
        let line = format!(
            "{tier}\t{}{}\n",
            if strict { "FAILED (strict): " } else { "" },
            reason.replace(['\n', '\t'], " ")
        );
        // One small O_APPEND write per skip: lines of parallel tests do not interleave.
        let logged = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = logged {
            panic!(
                "cannot append to the skip log {} ({LOG_ENV}): {e}",
                std::path::Path::new(&path).display()
            );
        }
    }
    remember(format!("{tier}: {reason}"));
    if strict {
        panic!("strict mode ({STRICT_ENV}=1): {tier} was skipped: {reason}");
    }
    // Straight to the stderr handle, not eprintln!: libtest captures the
    // print macros of passing tests, and a skip must be seen.
    let _ = std::io::stderr().write_all(format!("SKIP: [{tier}] {reason}\n").as_bytes());
}

/// Skips of this process, printed as a summary when it exits.
static SKIPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn remember(line: String) {
    let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    if skipped.is_empty() {
        // SAFETY: atexit only stores the function pointer; `print_summary`
        // is an `extern "C" fn()` that neither unwinds nor returns a value.
        unsafe {
            libc::atexit(print_summary);
        }
    }
    skipped.push(line);
}

/// The summary of a test binary's skips, printed at its exit (after
/// libtest's own result line) so a plain `cargo test` shows them too.
extern "C" fn print_summary() {
    let skipped = match SKIPPED.lock() {
        Ok(s) => s,
        Err(e) => e.into_inner(),
    };
    let mut text = format!("skipped in this test binary: {}\n", skipped.len());
    for line in skipped.iter() {
        text.push_str(&format!("  skip: {line}\n"));
    }
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// Unwraps a `Result<T, E: MaybeSkip>` inside a test function: on a skip
/// reason records the skip ([`skip`]) and returns from the test; on any
/// other error fails the test with the error's message.
#[macro_export]
macro_rules! require {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => {
                if let Some(reason) = $crate::MaybeSkip::skip_reason(&e) {
                    $crate::skip(reason);
                    return;
                }
                panic!("{e}");
            }
        }
    };
}

/// Records a skip with a formatted reason and returns from the test.
#[macro_export]
macro_rules! skip {
    ($($arg:tt)+) => {{
        $crate::skip(&format!($($arg)+));
        return;
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_unwraps_ok() {
        let mut got = 0;
        let mut body = || {
            got = require!(Ok::<u32, Skip>(5));
        };
        body();
        assert_eq!(got, 5);
    }

    #[test]
    #[should_panic(expected = "broken")]
    fn require_panics_on_real_error() {
        #[derive(Debug)]
        struct Broken;
        impl fmt::Display for Broken {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "broken")
            }
        }
        impl MaybeSkip for Broken {
            fn skip_reason(&self) -> Option<&str> {
                None
            }
        }
        let body = || {
            require!(Err::<(), Broken>(Broken));
        };
        body();
    }

    #[test]
    fn skip_displays_its_reason() {
        let s = Skip::new("QEMU not found");
        assert_eq!(s.to_string(), "QEMU not found");
        assert_eq!(s.skip_reason(), Some("QEMU not found"));
    }

    #[test]
    fn tier_names_binary_and_test() {
        let t = tier();
        assert!(t.ends_with("::tests::tier_names_binary_and_test"), "{t}");
        assert!(t.starts_with("pmemvm_skip"), "{t}");
    }

    /// Runs this crate's own test binary for one test, with the environment given.
    fn rerun(test: &str, env: &[(&str, &str)]) -> std::process::Output {
        let exe = std::env::current_exe().expect("test binary");
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
            "--ignored",
        ]);
        cmd.env_remove(STRICT_ENV).env_remove(LOG_ENV);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run the test binary")
    }

    /// The body the two tests below run in a child process.
    #[test]
    #[ignore = "a planted failure: a skip, run by skip_is_logged_and_strict_mode_fails"]
    fn plant_child_that_skips() {
        require!(Err::<(), Skip>(Skip::new("no QEMU here")));
        unreachable!("require! returned");
    }

    #[test]
    fn skip_is_logged_and_strict_mode_fails() {
        let dir = std::env::temp_dir().join(format!("pmemvm-skip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let log = dir.join("skips.log");
        let log_s = log.to_str().expect("utf-8 path");
        let test = "tests::plant_child_that_skips";

        let out = rerun(test, &[(LOG_ENV, log_s)]);
        assert!(out.status.success(), "a plain skip must pass: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("SKIP: [pmemvm_skip::tests::plant_child_that_skips] no QEMU here"),
            "{stderr}"
        );
        let logged = std::fs::read_to_string(&log).expect("skip log");
        assert_eq!(
            logged,
            "pmemvm_skip::tests::plant_child_that_skips\tno QEMU here\n"
        );

        let out = rerun(test, &[(LOG_ENV, log_s), (STRICT_ENV, "1")]);
        assert!(
            !out.status.success(),
            "strict mode must fail the skipped test"
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(text.contains("strict mode (PMEMVM_TEST_STRICT=1): pmemvm_skip::tests::plant_child_that_skips was skipped: no QEMU here"), "{text}");
        let logged = std::fs::read_to_string(&log).expect("skip log");
        assert!(
            logged.ends_with("child_that_skips\tFAILED (strict): no QEMU here\n"),
            "{logged}"
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
