//! The share of one L1 run (a host directory, `/share` in L1): the binaries
//! put in it with their libraries, the script the L1 init runs, and what the
//! init writes back (status, console markers).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{io_err, NestedError, ERROR_MARKER, L1_DIR, STATUS_MARKER};

/// One more host directory mounted in L1 over 9p.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The 9p mount tag.
    pub tag: String,
    /// The host directory.
    pub host_dir: PathBuf,
    /// Where the L1 init mounts it.
    pub l1_dir: String,
}

/// Quotes one word for a POSIX shell.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The variables of this process's environment the pmemvm in L1 is given
/// too: `RUST_LOG` (its log filter) and `PMEMVM_TEST_FAULT` (the faults a
/// debug build injects, for the tests of its failure paths).
pub const FORWARDED_ENV: [&str; 2] = ["RUST_LOG", "PMEMVM_TEST_FAULT"];

/// [`FORWARDED_ENV`]'s variables that `get` has a value for.
pub fn forwarded_env(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    FORWARDED_ENV
        .iter()
        .filter_map(|k| get(k).map(|v| ((*k).to_string(), v)))
        .collect()
}

/// The script the L1 init (or the harness's direct runner) executes in the share.
pub fn command_script(env: &[(String, String)], argv: &[&str]) -> String {
    let mut s =
        String::from("# Written by pmemvm for its L1 VM (--engine nested or the test harness).\n");
    for (k, v) in env {
        let _ = writeln!(s, "export {k}={}", shell_quote(v));
    }
    let words: Vec<String> = argv.iter().map(|w| shell_quote(w)).collect();
    let _ = writeln!(s, "exec {}", words.join(" "));
    s
}

/// Parses `exit=N` from the status file the L1 init writes.
pub fn parse_status_file(text: &str) -> Option<i32> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("exit="))
        .and_then(|n| n.trim().parse().ok())
}

/// The last `PMEMVM-L1-STATUS N` on the console.
pub fn parse_console_status(console: &str) -> Option<i32> {
    console.lines().rev().find_map(|l| {
        let rest = l.split(STATUS_MARKER).nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The message of the last `PMEMVM-L1-ERROR ...` line on the console.
pub fn parse_console_error(console: &str) -> Option<String> {
    console.lines().rev().find_map(|l| {
        let rest = l.split(ERROR_MARKER).nth(1)?;
        Some(rest.trim().to_string())
    })
}

/// L1 uptime (seconds) printed with a marker, e.g. [`RUN_MARKER`].
pub fn parse_marker_uptime(console: &str, marker: &str) -> Option<f64> {
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
pub struct Library {
    pub name: String,
    pub path: PathBuf,
}

/// Parses `ldd` output. `Ok(vec![])` for a static binary.
pub fn parse_ldd(output: &str) -> Result<Vec<Library>, String> {
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

/// The shared libraries and loader of `binary` (`ldd`); none for a static one.
pub fn libraries_of(binary: &Path) -> Result<Vec<Library>, NestedError> {
    let ldd = super::find_in_path("ldd").ok_or_else(|| NestedError::Libraries {
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

/// The harness-owned directory of a share (`/share/.l1` in L1).
pub fn l1_dir(share: &Path) -> PathBuf {
    share.join(L1_DIR)
}

/// Puts the host binary `src` into the share as `.l1/bin/NAME` (on the
/// command's `PATH` in L1) and, with `libraries`, its shared libraries and
/// dynamic loader into `.l1/lib/` (the L1 init links the loader and sets
/// `LD_LIBRARY_PATH`).
pub fn install_binary(
    share: &Path,
    name: &str,
    src: &Path,
    libraries: bool,
) -> Result<(), NestedError> {
    let l1 = l1_dir(share);
    fs::create_dir_all(l1.join("bin")).map_err(io_err("create the bin dir"))?;
    fs::copy(src, l1.join("bin").join(name))
        .map_err(io_err(format!("copy {} into the share", src.display())))?;
    if libraries {
        let lib_dir = l1.join("lib");
        fs::create_dir_all(&lib_dir).map_err(io_err("create the lib dir"))?;
        for lib in libraries_of(src)? {
            let dst = lib_dir.join(&lib.name);
            if !dst.exists() {
                fs::copy(&lib.path, &dst)
                    .map_err(io_err(format!("copy {}", lib.path.display())))?;
            }
        }
    }
    Ok(())
}

/// Installs this `pmemvm` binary (and its libraries) into the L1, with the
/// core executable beside it when it is installed beside this one, so a
/// `boot` in the L1 hands its VM over as it does here.
pub fn install_pmemvm(share: &Path, pmemvm: &Path) -> Result<(), NestedError> {
    install_binary(share, "pmemvm", pmemvm, true)?;
    let core = pmemvm.with_file_name(vmm::launch::CORE_EXECUTABLE);
    if core.is_file() {
        install_binary(share, vmm::launch::CORE_EXECUTABLE, &core, false)?;
    }
    Ok(())
}

/// Writes the command the L1 init runs (`.l1/cmd.sh`), the extra 9p mounts
/// (`.l1/mounts`: `TAG DIR` lines) and, for an interactive run, the serial
/// port it runs on (`.l1/tty`).
pub fn write_command(
    share: &Path,
    env: &[(String, String)],
    argv: &[&str],
    mounts: &[Mount],
    tty: Option<&str>,
) -> Result<(), NestedError> {
    let l1 = l1_dir(share);
    fs::create_dir_all(&l1).map_err(io_err(format!("create {}", l1.display())))?;
    fs::write(l1.join("cmd.sh"), command_script(env, argv)).map_err(io_err("write cmd.sh"))?;
    if !mounts.is_empty() {
        let text: String = mounts
            .iter()
            .map(|m| format!("{} {}\n", m.tag, m.l1_dir))
            .collect();
        fs::write(l1.join("mounts"), text).map_err(io_err("write the mount list"))?;
    }
    if let Some(tty) = tty {
        fs::write(l1.join("tty"), tty).map_err(io_err("write the tty name"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_shell_words() {
        assert_eq!(shell_quote("pmemvm"), "pmemvm");
        assert_eq!(
            shell_quote("--nvdimm=16G,file=a.img"),
            "--nvdimm=16G,file=a.img"
        );
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("exit 7"), "'exit 7'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn builds_command_script() {
        let env = forwarded_env(|k| (k == "RUST_LOG").then(|| "debug".to_string()));
        let s = command_script(&env, &["sh", "-c", "exit 7"]);
        assert!(s.contains("export RUST_LOG=debug\n"));
        assert!(s.ends_with("exec sh -c 'exit 7'\n"));
        assert_eq!(env.len(), 1, "only what is set is forwarded: {env:?}");
        let all = forwarded_env(|k| Some(format!("{k} value")));
        let s = command_script(&all, &["true"]);
        assert!(s.contains("export PMEMVM_TEST_FAULT='PMEMVM_TEST_FAULT value'\n"));
        assert!(forwarded_env(|k| (k == "HOME").then(String::new)).is_empty());
    }

    #[test]
    fn parses_status_file_and_console() {
        assert_eq!(parse_status_file("exit=7\n"), Some(7));
        assert_eq!(parse_status_file("exit=x\n"), None);
        assert_eq!(parse_status_file(""), None);
        let console = "[ 1.0] boot\nPMEMVM-L1-RUN uptime=2.61\nPMEMVM-L1-STATUS 3 uptime=2.65\n";
        assert_eq!(parse_console_status(console), Some(3));
        assert_eq!(parse_console_status("PMEMVM-L1-RUN uptime=1\n"), None);
        assert_eq!(
            parse_marker_uptime(console, crate::guest::nested::RUN_MARKER),
            Some(2.61)
        );
        assert_eq!(parse_console_error(console), None);
        assert_eq!(
            parse_console_error("PMEMVM-L1-ERROR insmod kvm-amd.ko failed\n").as_deref(),
            Some("insmod kvm-amd.ko failed")
        );
    }

    #[test]
    fn parses_ldd_output() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        let libs = parse_ldd(out).expect("valid ldd output");
        let names: Vec<&str> = libs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            ["libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"]
        );
        assert_eq!(libs[1].path, Path::new("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(parse_ldd("\tnot a dynamic executable\n")
            .expect("static")
            .is_empty());
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
