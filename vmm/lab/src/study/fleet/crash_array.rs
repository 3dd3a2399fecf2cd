//! `pmemvm crash-check DIR [--at N|--every K|--all] [--torn SEED] --slurm SHARED [RUN OPTIONS]
//! -- CMD`: the crash check as a Slurm job array, one task per selected flush, on whichever
//! node Slurm picks. Writes, and runs nothing:
//!
//! - `SHARED/check.sbatch`: task `I` runs the user's `pmemvm crash-check` command again, as
//!   typed, with `--slurm-task I`: it makes the image after the `I`-th selected flush (and its
//!   torn variant) in a temporary directory of its node, boots and checks it, and writes
//!   `SHARED/results/flush-N.json`;
//! - `SHARED/report.sbatch`: the same command with `--slurm-report`: merges the results (a task
//!   that left none counts as a failed image, named), prints the table, writes `--json`, and
//!   ends with status 1 when an image failed;
//! - `SHARED/submit.sh`: `sbatch --parsable` of the array, then the report job with
//!   `--dependency=afterany:` on it.
//!
//! Every node reads the recording in DIR and writes SHARED: both on a shared file system, as
//! for `bench --slurm`. The images are deterministic (the same log and seed give the same
//! bytes), so a task makes its own instead of reading one made at submission.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vmm::nvdimm::record::images::Manifest;

use super::sbatch::{check_path, here, script_head, sh_quote, write_files, SlurmError};
use crate::study::crash_check::{result_path, CrashCheck, ImageCheck};

/// A crash check as a Slurm job array.
#[derive(Debug, Clone)]
pub struct CrashArray {
    /// The flush each task checks, in array order.
    pub flushes: Vec<u64>,
    /// The user's `crash-check` arguments (everything after `crash-check`), which every task
    /// and the report job run again.
    pub args: Vec<String>,
    /// The shared directory (absolute).
    pub out: PathBuf,
    /// Where the tasks start (the directory `--slurm` ran in: relative paths stay valid).
    pub workdir: PathBuf,
    /// The pmemvm the tasks run (`$PMEMVM` overrides it).
    pub pmemvm: PathBuf,
}

impl CrashArray {
    /// The array of `flushes` for the command `args`, into `out` (made absolute against the
    /// working directory); refuses paths no quoting carries into the scripts.
    pub fn new(flushes: Vec<u64>, args: Vec<String>, out: &Path) -> Result<Self, SlurmError> {
        let (workdir, pmemvm) = here()?;
        let a = CrashArray {
            flushes,
            args,
            out: workdir.join(out),
            workdir,
            pmemvm,
        };
        check_path("--slurm", &a.out)?;
        check_path("the working directory", &a.workdir)?;
        check_path("this pmemvm's path", &a.pmemvm)?;
        Ok(a)
    }

    fn head(&self, s: &mut String, job: &str, array_last: Option<usize>, log: &str) {
        script_head(
            s,
            job,
            array_last,
            &self.workdir,
            &self.out,
            log,
            &self.pmemvm,
        );
    }

    fn command(&self, mode: &str) -> String {
        let args: Vec<String> = self.args.iter().map(|a| sh_quote(a)).collect();
        format!("exec \"$PMEMVM\" crash-check {mode} {}\n", args.join(" "))
    }

    /// The array job's script.
    pub fn check_script(&self) -> String {
        let last = self.flushes.len().saturating_sub(1);
        let mut s = String::from("#!/bin/sh\n");
        let _ = writeln!(
            s,
            "# pmemvm crash-check as a Slurm job array (written by pmemvm {} --slurm; runs nothing itself).",
            env!("CARGO_PKG_VERSION")
        );
        let _ = writeln!(
            s,
            "# One task per flush: task I checks the image after the flush below and writes {}.",
            result_path(&self.out, 0)
                .with_file_name("flush-N.json")
                .display()
        );
        let _ = writeln!(
            s,
            "# Rerun failed tasks only: sbatch --array=I[,J...] {}",
            sh_quote(&self.out.join("check.sbatch").display().to_string())
        );
        self.head(&mut s, "pmemvm-crash-check", Some(last), "check-%A_%a.out");
        s.push_str("# task: flush\n");
        for (i, f) in self.flushes.iter().enumerate() {
            let _ = writeln!(s, "#   {i}: {f}");
        }
        s.push_str(&self.command(
            "--slurm-task \"${SLURM_ARRAY_TASK_ID:?this script runs as a Slurm array task}\"",
        ));
        s
    }

    /// The report job's script.
    pub fn report_script(&self) -> String {
        let mut s = String::from("#!/bin/sh\n");
        let _ = writeln!(
            s,
            "# Merges the array's results in {} into one table (written by pmemvm --slurm).",
            self.out.join("results").display()
        );
        self.head(&mut s, "pmemvm-crash-check-report", None, "report-%j.out");
        s.push_str(&self.command("--slurm-report"));
        s
    }

    /// The submit script: the array, then the report after it.
    pub fn submit_script(&self) -> String {
        let mut s = String::from("#!/bin/sh\n");
        s.push_str(
            "# Submits the crash-check array, then the report job once every task has ended\n",
        );
        s.push_str(
            "# (afterany: failed tasks too; the report names them). Options are passed to the\n",
        );
        s.push_str("# array's sbatch, e.g. sh submit.sh --partition=NAME or --array=0-3%1.\n");
        s.push_str("set -eu\n");
        let _ = writeln!(s, "cd {}", sh_quote(&self.out.display().to_string()));
        s.push_str("array=$(sbatch --parsable \"$@\" check.sbatch)\narray=${array%%;*}\n");
        s.push_str("report=$(sbatch --parsable --dependency=afterany:\"$array\" report.sbatch)\nreport=${report%%;*}\n");
        let _ = writeln!(
            s,
            "echo \"submitted array job $array ({} tasks) and report job $report; squeue -j $array,$report; sacct -j $array\"",
            self.flushes.len()
        );
        let _ = writeln!(
            s,
            "echo \"the table will be in \"{}\"/logs/report-$report.out\"",
            sh_quote(&self.out.display().to_string())
        );
        s
    }

    /// Writes the three scripts (and `logs/`, `results/`); refuses when one exists.
    pub fn write(&self) -> Result<Vec<PathBuf>, SlurmError> {
        write_files(
            &self.out,
            &[
                ("check.sbatch", self.check_script()),
                ("report.sbatch", self.report_script()),
                ("submit.sh", self.submit_script()),
            ],
            &["logs", "results"],
        )
    }
}

/// The array's results in `out` merged into one check of `flushes`, in their order: a flush
/// whose task left no readable result is a failed image that says so.
pub fn merge(out: &Path, flushes: &[u64], command: &[String]) -> CrashCheck {
    let mut manifest: Option<Manifest> = None;
    let mut images = Vec::new();
    let mut checks = Vec::new();
    for (task, &flush) in flushes.iter().enumerate() {
        let path = result_path(out, flush);
        let read = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<CrashCheck>(&b).map_err(|e| e.to_string()));
        match read {
            Ok(r) => {
                images.extend(r.manifest.images.iter().cloned());
                checks.extend(r.checks);
                manifest.get_or_insert(r.manifest);
            }
            Err(why) => checks.push(ImageCheck {
                flush,
                torn: false,
                image: path.display().to_string(),
                status: 1,
                error: Some(format!(
                    "array task {task} left no result ({why}; its log: {}/logs/check-JOB_{task}.out)",
                    out.display()
                )),
                seconds: 0.0,
                stdout: String::new(),
                stderr: String::new(),
            }),
        }
    }
    let mut manifest = manifest.unwrap_or(Manifest {
        dimm: String::new(),
        region_size: 0,
        last_flush: flushes.last().copied().unwrap_or(0),
        complete: false,
        cut: None,
        images: Vec::new(),
    });
    manifest.images = images;
    CrashCheck {
        manifest,
        command: command.to_vec(),
        checks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::exit_status::Classified;

    fn array(out: &Path) -> CrashArray {
        CrashArray {
            flushes: vec![0, 3, 6, 7],
            args: vec![
                "rec".into(),
                "--every".into(),
                "3".into(),
                "--slurm".into(),
                out.display().to_string(),
                "--".into(),
                "sh".into(),
                "-c".into(),
                "e2fsck -fn /dev/pmem0 && echo 'it''s clean'".into(),
            ],
            out: out.to_path_buf(),
            workdir: "/work dir".into(),
            pmemvm: "/opt/pmemvm/pmemvm".into(),
        }
    }

    #[test]
    fn the_scripts_run_the_users_command_again_per_task_and_for_the_report() {
        let a = array(Path::new("/shared/cc"));
        let check = a.check_script();
        assert!(check.contains("#SBATCH --array=0-3\n"), "{check}");
        assert!(check.contains("#   1: 3\n#   2: 6\n"), "{check}");
        assert!(
            check.contains("#SBATCH --output=\"/shared/cc/logs/check-%A_%a.out\""),
            "{check}"
        );
        assert!(check.contains("#SBATCH --chdir=\"/work dir\""), "{check}");
        assert!(
            check.contains(
                "crash-check --slurm-task \"${SLURM_ARRAY_TASK_ID:?this script runs as a Slurm array task}\" rec --every 3 --slurm /shared/cc -- sh -c"
            ),
            "{check}"
        );
        assert!(a
            .report_script()
            .contains("crash-check --slurm-report rec --every 3"));
        assert!(a
            .submit_script()
            .contains("--dependency=afterany:\"$array\" report.sbatch"));
        // Each script is valid sh, and the task's words are the user's, unchanged.
        for text in [check, a.report_script(), a.submit_script()] {
            let out = std::process::Command::new("sh")
                .args(["-n", "-c", &text])
                .output()
                .unwrap();
            assert!(out.status.success(), "{text}");
        }
        let line = a.command("");
        let words = line.trim_start_matches("exec \"$PMEMVM\" crash-check  ");
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("printf '%s\\n' {words}")])
            .output()
            .unwrap();
        let got: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(got, a.args);
    }

    #[test]
    fn writing_refuses_existing_scripts_and_paths_sbatch_cannot_carry() {
        let d = std::env::temp_dir().join(format!("pmemvm-crash-array-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let a = array(&d);
        let files = a.write().unwrap();
        assert_eq!(files.len(), 3);
        assert!(d.join("results").is_dir() && d.join("logs").is_dir());
        let e = a.write().unwrap_err();
        assert!(matches!(e, SlurmError::Exists(_)), "{e}");
        assert!(e.is_usage());
        std::fs::remove_dir_all(&d).unwrap();
        let e = CrashArray::new(vec![0], Vec::new(), Path::new("/tmp/a\nb")).unwrap_err();
        assert!(e.to_string().contains("control character"), "{e}");
    }

    #[test]
    fn the_merge_keeps_flush_order_and_names_a_task_without_a_result() {
        let d = std::env::temp_dir().join(format!("pmemvm-crash-merge-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("results")).unwrap();
        let one = |flush: u64, status: u8| CrashCheck {
            manifest: Manifest {
                dimm: "pm0.img".into(),
                region_size: 16 << 20,
                last_flush: 7,
                complete: true,
                cut: None,
                images: vec![vmm::nvdimm::record::images::ImageInfo {
                    flush,
                    file: format!("flush-{flush:06}.img"),
                    time_ns: flush,
                    vcpu: None,
                    torn: None,
                }],
            },
            command: vec!["check".into()],
            checks: vec![ImageCheck {
                flush,
                torn: false,
                image: format!("/tmp/x/flush-{flush:06}.img"),
                status,
                error: None,
                seconds: 1.0,
                stdout: format!("flush {flush}\n"),
                stderr: String::new(),
            }],
        };
        for (flush, status) in [(6, 1), (0, 0)] {
            std::fs::write(
                result_path(&d, flush),
                serde_json::to_vec(&one(flush, status)).unwrap(),
            )
            .unwrap();
        }
        std::fs::write(result_path(&d, 7), b"{ cut sh").unwrap();
        let m = merge(&d, &[0, 3, 6, 7], &["check".into()]);
        let got: Vec<(u64, u8)> = m.checks.iter().map(|c| (c.flush, c.status)).collect();
        assert_eq!(got, [(0, 0), (3, 1), (6, 1), (7, 1)]);
        assert_eq!(m.manifest.dimm, "pm0.img");
        assert_eq!(m.manifest.images.len(), 2);
        let missing = m.checks[1].error.as_deref().unwrap();
        assert!(
            missing.contains("array task 1 left no result") && missing.contains("check-JOB_1.out"),
            "{missing}"
        );
        assert!(m.checks[3]
            .error
            .as_deref()
            .unwrap()
            .contains("array task 3"));
        let t = m.table();
        assert!(
            t.contains("3 of 4 images failed `check`; the first: the image after flush 3"),
            "{t}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
