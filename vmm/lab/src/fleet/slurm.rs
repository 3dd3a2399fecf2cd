//! `pmemvm bench EXP --slurm --out SHARED_DIR`: the bench as a Slurm job array. Writes, and runs
//! nothing:
//!
//! - `SHARED_DIR/bench.sbatch`: an array of one task per (side, boot), in the order `bench`
//!   boots them (off 1, on 1, off 2, ...); task `i` runs `pmemvm bench EXP --only SIDE:BOOT
//!   --out SHARED_DIR/runs/SIDE-BOOT` with the options given, on whichever node Slurm picks;
//! - `SHARED_DIR/report.sbatch`: `pmemvm report SHARED_DIR/runs --out SHARED_DIR/report`;
//! - `SHARED_DIR/submit.sh`: `sbatch --parsable` of the array, then the report job with
//!   `--dependency=afterany:` on it (the report also runs when tasks failed, and lists them).
//!
//! Slurm does all the scheduling; a failed task is rerun with `sbatch --array=I bench.sbatch`
//! (or by hand with the same `--only`), then the report job again.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::task::Task;

/// Errors of writing the Slurm scripts.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The scripts exist already.
    #[error("{0} already exists; choose another --out directory or remove it")]
    Exists(PathBuf),
    /// The directory cannot be made or a script written.
    #[error("cannot write {path}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The path of this pmemvm or the working directory is unknown.
    #[error("cannot tell {what}")]
    Where {
        /// What.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl SlurmError {
    /// True when the user's input is at fault (exit status 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::Exists(_))
    }
}

/// A bench as a Slurm job array.
#[derive(Debug, Clone)]
pub struct SlurmJob {
    /// The experiment.
    pub experiment: String,
    /// One per array task, in array order.
    pub tasks: Vec<Task>,
    /// The bench options every task passes on (everything but --out, --only, --slurm).
    pub bench_args: Vec<String>,
    /// The shared directory (absolute).
    pub out: PathBuf,
    /// Where the tasks start (the directory `--slurm` ran in: relative paths stay valid).
    pub workdir: PathBuf,
    /// The pmemvm the tasks run (`$PMEMVM` overrides it).
    pub pmemvm: PathBuf,
}

/// `value` quoted for sh.
pub fn sh_quote(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

fn q(p: &Path) -> String {
    sh_quote(&p.display().to_string())
}

impl SlurmJob {
    /// The array job's script.
    pub fn bench_script(&self) -> String {
        let last = self.tasks.len().saturating_sub(1);
        let mut s = String::new();
        let _ = writeln!(s, "#!/bin/sh");
        let _ = writeln!(
            s,
            "# pmemvm bench {} as a Slurm job array (written by pmemvm {} --slurm; runs nothing itself).",
            self.experiment,
            env!("CARGO_PKG_VERSION")
        );
        let _ = writeln!(
            s,
            "# One task per side and boot; each writes {}/runs/SIDE-BOOT.",
            self.out.display()
        );
        let _ = writeln!(
            s,
            "# Rerun failed tasks only: sbatch --array=I[,J...] {}",
            q(&self.out.join("bench.sbatch"))
        );
        let _ = writeln!(s, "#SBATCH --job-name=pmemvm-{}", self.experiment);
        let _ = writeln!(s, "#SBATCH --array=0-{last}");
        let _ = writeln!(s, "#SBATCH --chdir={}", self.workdir.display());
        let _ = writeln!(
            s,
            "#SBATCH --output={}/logs/bench-%A_%a.out",
            self.out.display()
        );
        s.push_str("set -eu\n");
        let _ = writeln!(s, "PMEMVM=${{PMEMVM:-{}}}", q(&self.pmemvm));
        s.push_str("case \"${SLURM_ARRAY_TASK_ID:-}\" in\n");
        for (i, t) in self.tasks.iter().enumerate() {
            let _ = writeln!(
                s,
                "{i}) task={} dir={} ;;",
                sh_quote(&t.to_string()),
                sh_quote(&t.dir_name())
            );
        }
        let _ = writeln!(
            s,
            "*) echo \"pmemvm: array task '${{SLURM_ARRAY_TASK_ID:-}}' is not one of 0-{last}\" >&2; exit 2 ;;"
        );
        s.push_str("esac\n");
        let args: Vec<String> = self.bench_args.iter().map(|a| sh_quote(a)).collect();
        let _ = writeln!(
            s,
            "exec \"$PMEMVM\" bench {} --only \"$task\" --out {}/\"$dir\" {}",
            sh_quote(&self.experiment),
            q(&self.out.join("runs")),
            args.join(" ")
        );
        s
    }

    /// The report job's script.
    pub fn report_script(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "#!/bin/sh");
        let _ = writeln!(
            s,
            "# Merges the array's results into {}/report (written by pmemvm --slurm).",
            self.out.display()
        );
        let _ = writeln!(s, "#SBATCH --job-name=pmemvm-{}-report", self.experiment);
        let _ = writeln!(s, "#SBATCH --chdir={}", self.workdir.display());
        let _ = writeln!(
            s,
            "#SBATCH --output={}/logs/report-%j.out",
            self.out.display()
        );
        s.push_str("set -eu\n");
        let _ = writeln!(s, "PMEMVM=${{PMEMVM:-{}}}", q(&self.pmemvm));
        let _ = writeln!(
            s,
            "exec \"$PMEMVM\" report {} --out {}",
            q(&self.out.join("runs")),
            q(&self.out.join("report"))
        );
        s
    }

    /// The submit script: the array, then the report after it.
    pub fn submit_script(&self) -> String {
        let mut s = String::new();
        s.push_str("#!/bin/sh\n");
        s.push_str("# Submits the bench array, then the report job once every task has ended\n");
        s.push_str(
            "# (afterany: failed tasks too; the report lists them). Options are passed to the\n",
        );
        s.push_str("# array's sbatch, e.g. sh submit.sh --partition=NAME or --array=0-3%1.\n");
        s.push_str("set -eu\n");
        let _ = writeln!(s, "cd {}", q(&self.out));
        s.push_str("array=$(sbatch --parsable \"$@\" bench.sbatch)\narray=${array%%;*}\n");
        s.push_str("report=$(sbatch --parsable --dependency=afterany:\"$array\" report.sbatch)\nreport=${report%%;*}\n");
        let _ = writeln!(
            s,
            "echo \"submitted array job $array ({} tasks) and report job $report; squeue -j $array,$report; sacct -j $array\"",
            self.tasks.len()
        );
        let _ = writeln!(
            s,
            "echo \"the merged report will be in {}/report\"",
            self.out.display()
        );
        s
    }

    /// Writes the three scripts (and `logs/`, `runs/`) into `out`; refuses when they exist.
    pub fn write(&self) -> Result<Vec<PathBuf>, SlurmError> {
        let files = [
            ("bench.sbatch", self.bench_script()),
            ("report.sbatch", self.report_script()),
            ("submit.sh", self.submit_script()),
        ];
        if let Some(p) = files
            .iter()
            .map(|(n, _)| self.out.join(n))
            .find(|p| p.exists())
        {
            return Err(SlurmError::Exists(p));
        }
        for d in [self.out.join("logs"), self.out.join("runs")] {
            std::fs::create_dir_all(&d).map_err(|source| SlurmError::Write {
                path: d.clone(),
                source,
            })?;
        }
        let mut written = Vec::new();
        for (name, text) in files {
            let path = self.out.join(name);
            std::fs::write(&path, text).map_err(|source| SlurmError::Write {
                path: path.clone(),
                source,
            })?;
            written.push(path);
        }
        Ok(written)
    }
}

/// The job of `experiment` with `sides` and `runs` boots per side, its tasks passing on
/// `bench_args`, writing into `out`: paths made absolute against the working directory.
pub fn job_for(
    experiment: &str,
    sides: &[String],
    runs: u32,
    bench_args: Vec<String>,
    out: &Path,
) -> Result<SlurmJob, SlurmError> {
    let workdir = std::env::current_dir().map_err(|source| SlurmError::Where {
        what: "the working directory",
        source,
    })?;
    let pmemvm = std::env::current_exe().map_err(|source| SlurmError::Where {
        what: "where this pmemvm is",
        source,
    })?;
    Ok(SlurmJob {
        experiment: experiment.to_owned(),
        tasks: Task::all(sides, runs),
        bench_args,
        out: workdir.join(out),
        workdir,
        pmemvm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> SlurmJob {
        SlurmJob {
            experiment: "pmem-verify".into(),
            tasks: Task::all(&["off".into(), "on".into()], 2),
            bench_args: vec![
                "--size".into(),
                "8388608".into(),
                "--side".into(),
                "a b:append=x".into(),
            ],
            out: "/shared/exp".into(),
            workdir: "/home/u".into(),
            pmemvm: "/opt/pmemvm".into(),
        }
    }

    #[test]
    fn array_has_one_task_per_side_and_boot_in_bench_order() {
        let s = job().bench_script();
        assert!(s.contains("#SBATCH --array=0-3\n"), "{s}");
        for line in [
            "0) task=off:1 dir=off-1 ;;",
            "1) task=on:1 dir=on-1 ;;",
            "3) task=on:2 dir=on-2 ;;",
        ] {
            assert!(s.contains(line), "{line} missing in\n{s}");
        }
        assert!(
            s.contains("exec \"$PMEMVM\" bench pmem-verify --only \"$task\" --out /shared/exp/runs/\"$dir\" --size 8388608 --side 'a b:append=x'\n"),
            "{s}"
        );
    }

    #[test]
    fn scripts_parse_in_sh_and_report_waits_for_the_array() {
        let j = job();
        assert!(j
            .submit_script()
            .contains("--dependency=afterany:\"$array\" report.sbatch"));
        assert!(j
            .report_script()
            .contains("report /shared/exp/runs --out /shared/exp/report"));
        for text in [j.bench_script(), j.report_script(), j.submit_script()] {
            let out = std::process::Command::new("sh")
                .args(["-n", "-c", &text])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    fn quotes_what_sh_would_split() {
        assert_eq!(sh_quote("a'b c"), r"'a'\''b c'");
        assert_eq!(sh_quote("/x/y.z"), "/x/y.z");
        assert_eq!(sh_quote(""), "''");
    }
}
