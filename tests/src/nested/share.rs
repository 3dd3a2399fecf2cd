//! The share directory of one run: the files and binaries put in it, the
//! script the L1 init runs, and what the init writes back (status, console
//! markers).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use super::l1::find_in_path;
use super::{io_err, NestedError, ERROR_MARKER, L1_DIR, STATUS_MARKER};

/// Quotes one word for a POSIX shell.
pub(super) fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The script the L1 init (or the direct runner) executes in the share.
pub(super) fn command_script(env: &[(String, String)], argv: &[&str]) -> String {
    let mut s = String::from("# Written by the pmemvm-tests end-to-end harness.\n");
    for (k, v) in env {
        let _ = writeln!(s, "export {k}={}", shell_quote(v));
    }
    let words: Vec<String> = argv.iter().map(|w| shell_quote(w)).collect();
    let _ = writeln!(s, "exec {}", words.join(" "));
    s
}

/// Parses `exit=N` from the status file the L1 init writes.
pub(super) fn parse_status_file(text: &str) -> Option<i32> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("exit="))
        .and_then(|n| n.trim().parse().ok())
}

/// The last `PMEMVM-L1-STATUS N` on the console.
pub(super) fn parse_console_status(console: &str) -> Option<i32> {
    console.lines().rev().find_map(|l| {
        let rest = l.split(STATUS_MARKER).nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The message of the last `PMEMVM-L1-ERROR ...` line on the console.
pub(super) fn parse_console_error(console: &str) -> Option<String> {
    console.lines().rev().find_map(|l| {
        let rest = l.split(ERROR_MARKER).nth(1)?;
        Some(rest.trim().to_string())
    })
}

/// L1 uptime (seconds) printed with a marker, e.g. [`RUN_MARKER`].
pub(super) fn parse_marker_uptime(console: &str, marker: &str) -> Option<f64> {
    console.lines().find_map(|l| {
        let rest = l.split(marker).nth(1)?;
        rest.split_whitespace()
            .find_map(|w| w.strip_prefix("uptime="))?
            .parse()
            .ok()
    })
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A shared library a binary needs: the name it is loaded by and where it is.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Library {
    pub(super) name: String,
    pub(super) path: PathBuf,
}

/// Parses `ldd` output. `Ok(vec![])` for a static binary.
pub(super) fn parse_ldd(output: &str) -> Result<Vec<Library>, String> {
    if output.contains("not a dynamic executable") || output.contains("statically linked") {
        return Ok(Vec::new());
    }
    let mut libs = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some((name, rest)) = line.split_once("=>") {
            let target = rest.trim();
            if target.starts_with("not found") {
                return Err(format!("{} not found", name.trim()));
            }
            let path = target.split_whitespace().next().unwrap_or("");
            if path.starts_with('/') {
                libs.push(Library {
                    name: name.trim().to_string(),
                    path: PathBuf::from(path),
                });
            }
        } else if line.starts_with('/') {
            // The dynamic loader, listed by its absolute path.
            let path = PathBuf::from(line.split_whitespace().next().unwrap_or(line));
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            libs.push(Library { name, path });
        }
    }
    Ok(libs)
}

pub(super) fn libraries_of(binary: &Path) -> Result<Vec<Library>, NestedError> {
    let ldd = find_in_path("ldd").ok_or_else(|| NestedError::Libraries {
        binary: binary.to_path_buf(),
        detail: "ldd not found".to_string(),
    })?;
    let out = Command::new(ldd)
        .arg(binary)
        .stdin(Stdio::null())
        .output()
        .map_err(io_err("run ldd"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_ldd(&text).map_err(|detail| NestedError::Libraries {
        binary: binary.to_path_buf(),
        detail,
    })
}

/// A run directory under the system temp dir; removed on drop unless kept.
#[derive(Debug)]
pub(super) struct RunDir {
    pub(super) path: PathBuf,
    keep: bool,
}

impl RunDir {
    pub(super) fn create() -> Result<RunDir, NestedError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("pmemvm-e2e-{}-{n}-{nanos:09}", std::process::id()));
        fs::create_dir_all(path.join("share").join(L1_DIR))
            .map_err(io_err(format!("create {}", path.display())))?;
        let keep = std::env::var_os("PMEMVM_TEST_KEEP").is_some_and(|v| v != "0");
        Ok(RunDir { path, keep })
    }

    pub(super) fn share(&self) -> PathBuf {
        self.path.join("share")
    }

    pub(super) fn l1(&self) -> PathBuf {
        self.share().join(L1_DIR)
    }

    /// Keeps the directory (for errors) and returns its path.
    pub(super) fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.path.clone()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

#[derive(Debug)]
pub(super) enum FileSource {
    Copy(PathBuf),
    Bytes(Vec<u8>),
}
