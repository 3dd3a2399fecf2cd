//! `pmemvm bench EXP --slurm --out SHARED_DIR`: the bench as a Slurm job array. Writes, and runs
//! nothing:
//!
//! - `SHARED_DIR/bench.sbatch`: an array of one task per (side, boot), in the order `bench`
//!   boots them (off 1, on 1, off 2, ...); task `i` runs `pmemvm bench EXP --request
//!   SHARED_DIR/request.json --only SIDE:BOOT --out SHARED_DIR/runs/SIDE-BOOT` on whichever
//!   node Slurm picks;
//! - `SHARED_DIR/request.json`: the bench request itself, serialized
//!   ([`crate::study::bench::request_file`]): every task runs the same machine and experiment;
//! - `SHARED_DIR/report.sbatch`: `pmemvm report SHARED_DIR/runs --out SHARED_DIR/report`;
//! - `SHARED_DIR/submit.sh`: `sbatch --parsable` of the array, then the report job with
//!   `--dependency=afterany:` on it (the report also runs when tasks failed, and lists them).
//!
//! Slurm does all the scheduling; a failed task is rerun with `sbatch --array=I bench.sbatch`
//! (or by hand with the same `--only`), then the report job again.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::sbatch::{check_path, here, quote_path as q, script_head, write_files};
pub use super::sbatch::{pattern_escape, sbatch_quote, sh_quote, SlurmError};
use super::task::Task;
use crate::study::bench::{request_file, BenchRequest};

/// A bench as a Slurm job array.
#[derive(Debug, Clone)]
pub struct SlurmJob {
    /// The experiment.
    pub experiment: String,
    /// One per array task, in array order.
    pub tasks: Vec<Task>,
    /// The text of `request.json`, the request every task runs ([`crate::study::bench::request_file`]).
    pub request: String,
    /// The shared directory (absolute).
    pub out: PathBuf,
    /// Where the tasks start (the directory `--slurm` ran in: relative paths stay valid).
    pub workdir: PathBuf,
    /// The pmemvm the tasks run (`$PMEMVM` overrides it).
    pub pmemvm: PathBuf,
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
        script_head(
            &mut s,
            &format!("pmemvm-{}", self.experiment),
            Some(last),
            &self.workdir,
            &self.out,
            "bench-%A_%a.out",
            &self.pmemvm,
        );
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
        let _ = writeln!(
            s,
            "exec \"$PMEMVM\" bench {} --request {} --only \"$task\" --out {}/\"$dir\"",
            sh_quote(&self.experiment),
            q(&self.out.join(request_file::FILE_NAME)),
            q(&self.out.join("runs")),
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
        script_head(
            &mut s,
            &format!("pmemvm-{}-report", self.experiment),
            None,
            &self.workdir,
            &self.out,
            "report-%j.out",
            &self.pmemvm,
        );
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
            "echo \"the merged report will be in \"{}",
            q(&self.out.join("report"))
        );
        s
    }

    /// Checks that the scripts can carry the job: every path quotable (see [`check_path`]) and
    /// every task its own result directory.
    pub fn check(&self) -> Result<(), SlurmError> {
        check_path("--out", &self.out)?;
        check_path("the working directory", &self.workdir)?;
        check_path("this pmemvm's path", &self.pmemvm)?;
        let mut seen: std::collections::HashMap<String, &Task> = std::collections::HashMap::new();
        for t in &self.tasks {
            // Lower-cased: two names that differ in case only are one directory on a
            // case-insensitive file system.
            let dir = t.dir_name();
            if let Some(other) = seen.insert(dir.to_ascii_lowercase(), t) {
                return Err(SlurmError::SameDirectory {
                    a: other.clone(),
                    b: t.clone(),
                    dir,
                });
            }
        }
        Ok(())
    }

    /// Writes the three scripts (and `logs/`, `runs/`) into `out`; refuses when they exist or
    /// [`SlurmJob::check`] fails.
    pub fn write(&self) -> Result<Vec<PathBuf>, SlurmError> {
        self.check()?;
        write_files(
            &self.out,
            &[
                ("bench.sbatch", self.bench_script()),
                ("report.sbatch", self.report_script()),
                ("submit.sh", self.submit_script()),
                (request_file::FILE_NAME, self.request.clone()),
            ],
            &["logs", "runs"],
        )
    }
}

/// The job of `req` with its `sides`, each task running `req` for one boot of one side,
/// writing into `req.out`: paths made absolute against the working directory.
pub fn job_for(req: &BenchRequest, sides: &[String]) -> Result<SlurmJob, SlurmError> {
    let (workdir, pmemvm) = here()?;
    let job = SlurmJob {
        experiment: req.experiment.clone(),
        tasks: Task::all(sides, req.runs),
        request: request_file::task_text(req, &workdir).map_err(SlurmError::Request)?,
        out: workdir.join(&req.out),
        workdir,
        pmemvm,
    };
    job.check()?;
    Ok(job)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use vmm::exit_status::Classified;

    use super::*;

    fn job() -> SlurmJob {
        SlurmJob {
            experiment: "pmem-verify".into(),
            tasks: Task::all(&["off".into(), "on".into()], 2),
            request: "{\"version\": 1}\n".into(),
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
            s.contains("exec \"$PMEMVM\" bench pmem-verify --request /shared/exp/request.json --only \"$task\" --out /shared/exp/runs/\"$dir\"\n"),
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

    /// What sbatch makes of the word that starts `line` (a port of `_get_argument` in Slurm's
    /// `src/sbatch/opt.c`: quotes group, a backslash escapes the next character in or out of
    /// quotes, an unquoted `#` ends the line).
    fn sbatch_word(line: &str) -> String {
        let (mut out, mut quote, mut escape) = (String::new(), None, false);
        for c in line.chars() {
            if escape {
                escape = false;
            } else if c == '\\' {
                escape = true;
                continue;
            } else if let Some(q) = quote {
                if c == q {
                    quote = None;
                    continue;
                }
            } else if c == '"' || c == '\'' {
                quote = Some(c);
                continue;
            } else if c == '#' || c.is_whitespace() {
                break;
            }
            out.push(c);
        }
        out
    }

    /// What /bin/sh makes of `word`: `printf %s WORD`.
    fn sh_word(word: &str) -> String {
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &format!("printf %s {word}")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{word}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pmemvm-slurm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Runs `script` with /bin/sh in `env`, stdout as lines.
    fn run_sh(script: &str, env: &[(&str, &Path)], path_prefix: Option<&Path>) -> Vec<String> {
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", script]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(p) = path_prefix {
            let path = std::env::var("PATH").unwrap_or_default();
            cmd.env("PATH", format!("{}:{path}", p.display()));
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn executable(path: &Path, text: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn paths_with_spaces_percent_quotes_and_dollars_reach_sbatch_and_sh_unchanged() {
        let root = scratch("quoting");
        let awkward = root.join("100% it's $HOME `x` \"q\" a b");
        let out = awkward.join("exp");
        let workdir = awkward.join("work dir");
        std::fs::create_dir_all(&out).unwrap();
        let bin = root.join("bin $x");
        std::fs::create_dir_all(&bin).unwrap();
        // A stand-in for pmemvm and sbatch: one argument per line.
        let args_printer = "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n";
        executable(&bin.join("pmemvm"), args_printer);
        executable(&bin.join("sbatch"), "#!/bin/sh\necho '42;cluster'\n");
        let j = SlurmJob {
            out: out.clone(),
            workdir: workdir.clone(),
            pmemvm: bin.join("pmemvm"),
            ..job()
        };
        j.check().unwrap();
        for text in [j.bench_script(), j.report_script(), j.submit_script()] {
            for shell in ["bash", "sh"] {
                let status = std::process::Command::new(shell)
                    .args(["-n", "-c", &text])
                    .status()
                    .unwrap();
                assert!(status.success(), "{shell} -n rejected\n{text}");
            }
        }
        for (text, log) in [
            (j.bench_script(), "bench-%A_%a.out"),
            (j.report_script(), "report-%j.out"),
        ] {
            let word = |key: &str| {
                let line = text
                    .lines()
                    .find_map(|l| l.strip_prefix(&format!("#SBATCH {key}=")))
                    .unwrap_or_else(|| panic!("no {key} in\n{text}"));
                (sbatch_word(line), sh_word(line))
            };
            let workdir_text = workdir.display().to_string();
            assert_eq!(word("--chdir"), (workdir_text.clone(), workdir_text));
            // The log pattern: the path with % doubled, then Slurm's own replacement symbols.
            let pattern = format!(
                "{}/logs/{log}",
                out.display().to_string().replace('%', "%%")
            );
            assert_eq!(word("--output"), (pattern.clone(), pattern));
        }
        // The task's command line, run by sh: every argument arrives as one, unchanged.
        let pmemvm: &Path = &bin.join("pmemvm");
        let script = root.join("bench.sbatch");
        std::fs::write(&script, j.bench_script()).unwrap();
        let got = run_sh(
            &format!("SLURM_ARRAY_TASK_ID=3 . {}", q(&script)),
            &[("PMEMVM", pmemvm)],
            None,
        );
        let task_dir = out.join("runs/on-2").display().to_string();
        let request = out.join("request.json").display().to_string();
        let want = [
            "bench",
            "pmem-verify",
            "--request",
            &request,
            "--only",
            "on:2",
            "--out",
            &task_dir,
        ];
        assert_eq!(got, want);
        // Without $PMEMVM the script runs the pmemvm that wrote it.
        std::fs::write(&script, j.report_script()).unwrap();
        let got = run_sh(&format!(". {}", q(&script)), &[], None);
        let runs = out.join("runs").display().to_string();
        let report = out.join("report").display().to_string();
        assert_eq!(got, ["report", runs.as_str(), "--out", report.as_str()]);
        // submit.sh changes into the directory and names the report's.
        let got = run_sh(&j.submit_script(), &[], Some(&bin));
        assert_eq!(
            got.last().map(String::as_str),
            Some(format!("the merged report will be in {report}").as_str()),
            "{got:?}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn paths_no_quoting_carries_are_refused() {
        for (out, why) in [
            ("/shared/a\nb", "a control character"),
            ("/shared/a\\b", "a backslash"),
        ] {
            let j = SlurmJob {
                out: out.into(),
                ..job()
            };
            let e = j.check().unwrap_err();
            assert!(e.is_usage());
            assert!(e.to_string().contains(why), "{e}");
            assert!(e.to_string().starts_with("--out "), "{e}");
        }
    }

    #[test]
    fn sides_that_differ_in_punctuation_get_their_own_directories() {
        let j = SlurmJob {
            tasks: Task::all(&["a.b".into(), "a_b".into()], 2),
            ..job()
        };
        j.check().unwrap();
        let s = j.bench_script();
        let dirs: Vec<&str> = s
            .lines()
            .filter_map(|l| {
                l.split_once(" dir=")
                    .map(|(_, d)| d.trim_end_matches(" ;;"))
            })
            .collect();
        assert_eq!(dirs.len(), 4, "{s}");
        let distinct: std::collections::BTreeSet<&&str> = dirs.iter().collect();
        assert_eq!(distinct.len(), 4, "{dirs:?}");
        assert!(dirs.contains(&"a_b-1"), "{dirs:?}");
        // The same task twice is one directory: refused.
        let twice = SlurmJob {
            tasks: vec![Task::new("a", 1), Task::new("a", 1)],
            ..job()
        };
        let e = twice.check().unwrap_err().to_string();
        assert_eq!(
            e,
            "tasks a:1 and a:1 would both write a-1; rename one of the sides"
        );
    }
}
