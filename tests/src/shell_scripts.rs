//! The repository's shell scripts read as text, for the test that holds them
//! to one rule of `set -o pipefail`: no pipeline hands its output to a reader
//! that stops reading early (`head`, `grep -q`, `grep -m`). Such a reader
//! leaves its writer a broken pipe — status 141, or 2 from `sort` where
//! SIGPIPE is ignored, as under CI's runner — and under pipefail that is the
//! pipeline's status: a table that printed fine ends the script, a test that
//! matched reads as "no match". `awk 'NR <= n'`, `sed -n 1p` and
//! `grep PATTERN >/dev/null` read to the end.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every shell script the repository tracks under `root` (`git ls-files`): a
/// `.sh` file, or a file whose first line is a `#!` line naming a shell.
/// Build outputs (kernel trees, fuzz corpora) are not ours and not read.
pub fn shell_scripts(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "git ls-files in {} failed: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut scripts: Vec<PathBuf> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| root.join(String::from_utf8_lossy(name).as_ref()))
        .filter(|p| p.extension().is_some_and(|e| e == "sh") || has_shell_shebang(p))
        .collect();
    scripts.sort();
    Ok(scripts)
}

fn has_shell_shebang(path: &Path) -> bool {
    let Ok(bytes) = fs::read(path) else {
        return false;
    };
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let first = String::from_utf8_lossy(first);
    first.starts_with("#!")
        && (first.ends_with("sh") || first.contains("bash") || first.contains("/sh "))
}

/// The lines (1-based number, text) of `text` where a pipeline's later stage
/// is a reader that stops early: `| head`, `| grep -q…`, `| grep -m…`,
/// `| grep --quiet`, `| grep --max-count`. Comments are not read.
pub fn early_quitting_readers(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split(" #").next().unwrap_or_default();
        if code.trim_start().starts_with('#') {
            continue;
        }
        let stages: Vec<&str> = code.split('|').collect();
        // A stage after a lone '|' (a "||" leaves an empty piece between).
        let quits = stages
            .windows(2)
            .any(|w| !w[0].is_empty() && quits_early(w[1]));
        if quits {
            out.push((i + 1, line.trim().to_string()));
        }
    }
    out
}

fn quits_early(stage: &str) -> bool {
    let mut words = stage.split_whitespace();
    match words.next() {
        Some("head") => true,
        Some("grep") => words.take_while(|w| w.starts_with('-')).any(|w| {
            w == "--quiet"
                || w == "--silent"
                || w.starts_with("--max-count")
                || (!w.starts_with("--") && (w.contains('q') || w.contains('m')))
        }),
        _ => false,
    }
}

/// Whether `text` turns pipefail on anywhere (`set -o pipefail`, `set -eu -o pipefail`).
pub fn uses_pipefail(text: &str) -> bool {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .any(|l| l.contains("pipefail") && l.trim_start().starts_with("set "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_readers_are_found_and_full_readers_are_not() {
        let text = "\
sort -rn | head -n 40
x=$(printf a | head -n1)
dpkg-query -W p | grep -q 'ok' || need=1
apt-cache showsrc fio | grep -qF Version
cmd | grep -m1 x
cmd | grep --quiet x
# a comment | head
cmd | awk 'NR <= 40'
cmd | grep 'ok' >/dev/null
a || head -c 10 f
head -c 512 dev | grep -F x >/dev/null
grep -q x file
";
        let found: Vec<usize> = early_quitting_readers(text)
            .iter()
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(found, vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn pipefail_is_seen_only_where_it_is_set() {
        assert!(uses_pipefail("#!/bin/bash\nset -eu -o pipefail\n"));
        assert!(uses_pipefail("f() {\n    set -o pipefail\n}\n"));
        assert!(!uses_pipefail("# set -o pipefail is not used here\n"));
    }
}
