//! `pmemvm report DIR...`: merges result directories (of one host or many) into one report.
//!
//! Each DIR is a result directory (it holds `report.json`) or holds them up to two levels
//! below (as `bench --slurm` lays out `SHARED/runs/SIDE-BOOT/`); merged reports found that way
//! (they hold `merge.json`) are skipped.
//! All must be of one experiment, and their bench parameters and machines must match
//! ([`super::pooling`]; machines may differ with `--pool-hosts`), and so must what each side
//! ran ([`super::inputs`]: kernel, command line, fio jobs, pmemvm version; pooled anyway only
//! with `--pool-different-inputs`, and then listed in the report). Which boots go in, and under
//! which number, is [`super::select`]: a rerun replaces a failed boot, copies are left out,
//! independent repetitions of two hosts are all taken; what is left out is listed with why,
//! and so is every planned (side, boot) no directory holds. The merged
//! [`BenchReport`] is rendered by the report module exactly as `bench` renders its own, with
//! the same statistics.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::inputs::{self, InputKey};
use super::pooling;
use super::record::{ResultInfo, ResultState, SCHEMA_VERSION};
// The merge's inputs and what it leaves out are the selection's terms.
pub use super::select::{Input, LeftOut};
use crate::study::report::{BenchReport, ReportError};

/// Errors of `pmemvm report`.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// A DIR that does not exist.
    #[error("{0} does not exist; give directories written by `pmemvm bench --out`")]
    Missing(PathBuf),
    /// A DIR without any result.
    #[error("{0} is not a pmemvm result: neither it nor a directory below it holds a report.json written by `pmemvm bench --out`")]
    NotAResult(PathBuf),
    /// A report.json that cannot be read as a bench report.
    #[error("{path} is not a pmemvm bench report ({why})")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Written by a newer pmemvm.
    #[error("{path} has result schema {found}, newer than this pmemvm's {SCHEMA_VERSION}; merge it with the pmemvm that wrote it")]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its schema.
        found: u32,
    },
    /// Results of two experiments.
    #[error(
        "{a_dir} holds experiment {a} and {b_dir} experiment {b}; merge one experiment at a time"
    )]
    Experiments {
        /// First experiment.
        a: String,
        /// Its directory.
        a_dir: PathBuf,
        /// The other.
        b: String,
        /// Its directory.
        b_dir: PathBuf,
    },
    /// Results whose machines or bench parameters differ.
    #[error("cannot pool {} with {}: their {} differs ({} vs {}){}", .0.a_dir.display(), .0.b_dir.display(), .0.key, .0.a, .0.b, .0.hint)]
    Differ(Box<Difference>),
    /// Results whose sides ran different kernels, command lines, fio jobs or pmemvm versions.
    #[error("cannot pool these results: they did not run the same experiment ({n} difference{s}); pass --pool-different-inputs to pool them anyway, or report each separately:\n  {list}", n = .0.len(), s = if .0.len() == 1 { "" } else { "s" }, list = .0.join("\n  "))]
    DifferentInputs(Vec<String>),
    /// `--out` holds files that are not a merged report.
    #[error("{0} already holds a report that `pmemvm report` did not write; choose another --out directory")]
    OutNotMerged(PathBuf),
    /// Writing the report.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// Writing merge.json.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl vmm::exit_status::Classified for MergeError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Report(_) | Self::Write { .. } => Environment,
            _ => Usage,
        }
    }
}

/// Two results that may not be pooled, and why.
#[derive(Debug)]
pub struct Difference {
    /// The first directory.
    pub a_dir: PathBuf,
    /// The other.
    pub b_dir: PathBuf,
    /// The property.
    pub key: &'static str,
    /// Its value in the first.
    pub a: String,
    /// In the other.
    pub b: String,
    /// What to do.
    pub hint: &'static str,
}

/// What `pmemvm report` is asked to pool although it differs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolOptions {
    /// `--pool-hosts`: machines that differ.
    pub hosts: bool,
    /// `--pool-different-inputs`: sides that ran different kernels, command lines, fio jobs
    /// or pmemvm versions.
    pub different_inputs: bool,
}

/// What went into the merge and what did not.
#[derive(Debug, Clone, Serialize)]
pub struct MergeInfo {
    /// The result directories, in the order given.
    pub inputs: Vec<InputSummary>,
    /// Whether machines that differ were pooled (`--pool-hosts`).
    pub pooled_hosts: bool,
    /// The differences in what the sides ran that were pooled over
    /// (`--pool-different-inputs`), one sentence each; empty when the inputs are the same.
    pub pooled_inputs: Vec<String>,
    /// Whether the inputs' machines differ in a key that must match.
    pub machines_differ: bool,
    /// Whether the inputs come from more than one host (by name) or machines differ: the text
    /// then breaks the figures down per host.
    pub hosts_differ: bool,
    /// Boots left out, with why; planned boots no directory holds among them.
    pub left_out: Vec<LeftOut>,
}

/// One input in [`MergeInfo`].
#[derive(Debug, Clone, Serialize)]
pub struct InputSummary {
    /// The directory.
    pub dir: String,
    /// Its host name.
    pub hostname: String,
    /// Its CPU model.
    pub cpu_model: String,
    /// Engine and accelerator.
    pub engine: String,
    /// `complete`, `partial: ...`, `not recorded`.
    pub state: String,
    /// The boots taken from it (`on:1`, or `on:1 as on:3` when renumbered).
    pub taken: Vec<String>,
}

/// The merge: the report and what went into it.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The merged report (render it like any bench report).
    pub report: BenchReport,
    /// Inputs and left-outs.
    pub info: MergeInfo,
    /// Hostname of each merged run, index for index with `report.runs`.
    pub run_hosts: Vec<String>,
}

/// How deep below a DIR argument results are looked for: `SHARED/runs/SIDE-BOOT` from `SHARED`.
const SEARCH_DEPTH: usize = 2;

/// The result directories below `dir` (down to `depth` levels), without merged reports
/// (they hold `merge.json`): a merge of merged reports would count their runs twice.
fn results_below(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.filter_map(Result::ok).map(|e| e.path()) {
        if !path.is_dir() || path.join("merge.json").exists() {
            continue;
        }
        if path.join("report.json").is_file() {
            found.push(path);
        } else if depth > 1 {
            results_below(&path, depth - 1, found);
        }
    }
}

/// The result directories `arg` stands for: itself when it holds `report.json`, else the
/// result directories below it (down to two levels: `pmemvm report SHARED` finds
/// `SHARED/runs/*`), sorted.
pub fn expand(arg: &Path) -> Result<Vec<PathBuf>, MergeError> {
    if !arg.exists() {
        return Err(MergeError::Missing(arg.to_owned()));
    }
    if arg.join("report.json").is_file() {
        return Ok(vec![arg.to_owned()]);
    }
    let mut dirs = Vec::new();
    results_below(arg, SEARCH_DEPTH, &mut dirs);
    if dirs.is_empty() {
        return Err(MergeError::NotAResult(arg.to_owned()));
    }
    dirs.sort();
    Ok(dirs)
}

/// Reads one result directory.
pub fn read_input(dir: &Path) -> Result<Input, MergeError> {
    let path = dir.join("report.json");
    let unreadable = |why: String| MergeError::Unreadable {
        path: path.clone(),
        why,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| unreadable(e.to_string()))?;
    let raw: Value = serde_json::from_str(&text).map_err(|e| unreadable(e.to_string()))?;
    let report: BenchReport =
        serde_json::from_value(raw.clone()).map_err(|e| unreadable(e.to_string()))?;
    if let Some(r) = &report.result {
        if r.schema_version > SCHEMA_VERSION {
            return Err(MergeError::NewerSchema {
                path,
                found: r.schema_version,
            });
        }
    }
    let keys = pooling::match_keys(&report, &raw);
    let inputs = inputs::input_keys(&report);
    Ok(Input {
        dir: dir.to_owned(),
        report,
        keys,
        inputs,
    })
}

/// Merges the inputs (already read, in the order given), pooling machines that differ when
/// `pool_hosts` and nothing else that differs.
pub fn merge(inputs: Vec<Input>, pool_hosts: bool) -> Result<Merged, MergeError> {
    merge_with(
        inputs,
        PoolOptions {
            hosts: pool_hosts,
            different_inputs: false,
        },
    )
}

/// Merges the inputs (already read, in the order given), pooling what `pool` allows.
pub fn merge_with(inputs: Vec<Input>, pool: PoolOptions) -> Result<Merged, MergeError> {
    let Some(first) = inputs.first() else {
        return Err(MergeError::NotAResult(PathBuf::from(".")));
    };
    check_poolable(&inputs, pool.hosts)?;
    let ran: Vec<(&Path, &[InputKey])> = inputs
        .iter()
        .map(|i| (i.dir.as_path(), i.inputs.as_slice()))
        .collect();
    let pooled_inputs = inputs::differences(&ran);
    if !pooled_inputs.is_empty() && !pool.different_inputs {
        return Err(MergeError::DifferentInputs(pooled_inputs));
    }
    let machines_differ = inputs[1..]
        .iter()
        .any(|i| pooling::machines_differ(&first.keys, &i.keys));
    let sel = super::select::select(&inputs);
    let (mut report, run_hosts) = pooled_runs(&inputs, &sel);
    if machines_differ {
        describe_machines(&mut report, &inputs);
    }
    let runs_per_side = sel.taken.iter().map(|t| t.boot).max().unwrap_or(0);
    let done = u32::try_from(sel.taken.len()).unwrap_or(u32::MAX);
    let missing = u32::try_from(sel.missing).unwrap_or(u32::MAX);
    let failed = report.failed_runs().len();
    let mut result = ResultInfo::of_bench(
        runs_per_side,
        None,
        done.saturating_add(missing),
        done,
        failed,
    );
    result.merged_from = inputs.iter().map(|i| i.dir.display().to_string()).collect();
    report.result = Some(result);
    let hosts_differ = machines_differ
        || inputs
            .iter()
            .any(|i| i.report.host.identity.hostname != first.report.host.identity.hostname);
    let info = MergeInfo {
        inputs: summaries(&inputs, &sel),
        pooled_hosts: pool.hosts && machines_differ,
        pooled_inputs,
        machines_differ,
        hosts_differ,
        left_out: sel.left_out,
    };
    Ok(Merged {
        report,
        info,
        run_hosts,
    })
}

/// Every input is of the first one's experiment, and of its bench parameters
/// and machine (machines may differ with `pool_hosts`).
fn check_poolable(inputs: &[Input], pool_hosts: bool) -> Result<(), MergeError> {
    let Some((first, others)) = inputs.split_first() else {
        return Ok(());
    };
    for other in others {
        if other.report.experiment != first.report.experiment {
            return Err(MergeError::Experiments {
                a: first.report.experiment.clone(),
                a_dir: first.dir.clone(),
                b: other.report.experiment.clone(),
                b_dir: other.dir.clone(),
            });
        }
    }
    for other in others {
        let Some((key, a, b)) = pooling::first_difference(&first.keys, &other.keys, pool_hosts)
        else {
            continue;
        };
        let machine = first
            .keys
            .iter()
            .any(|k| k.name == key && k.kind == pooling::KeyKind::Machine);
        return Err(MergeError::Differ(Box::new(Difference {
            a_dir: first.dir.clone(),
            b_dir: other.dir.clone(),
            key,
            a,
            b,
            hint: if machine {
                "; pass --pool-hosts to pool them anyway, or report each machine separately"
            } else {
                "; runs of different bench parameters are never pooled"
            },
        })));
    }
    Ok(())
}

/// The first input's report with the selected runs and checks of every
/// input, renumbered, in side order then run number as bench writes them;
/// and the host each run came from, in the same order.
fn pooled_runs(inputs: &[Input], sel: &super::select::Selection) -> (BenchReport, Vec<String>) {
    let mut report = inputs[0].report.clone();
    report.runs.clear();
    report.checks.clear();
    let mut run_hosts = Vec::new();
    for t in &sel.taken {
        let src = &inputs[t.input].report;
        let (runs, checks) = super::select::renumbered(src, t);
        run_hosts.extend(runs.iter().map(|_| src.host.identity.hostname.clone()));
        report.runs.extend(runs);
        report.checks.extend(checks);
    }
    let order = |side: &str| report.sides.iter().position(|s| s == side);
    let mut idx: Vec<usize> = (0..report.runs.len()).collect();
    idx.sort_by_key(|&k| (order(&report.runs[k].side), report.runs[k].run));
    report.runs = idx.iter().map(|&k| report.runs[k].clone()).collect();
    let run_hosts = idx.iter().map(|&k| run_hosts[k].clone()).collect();
    (report, run_hosts)
}

/// Pooled machines: the report names them all, and is performance only when
/// every input is.
fn describe_machines(report: &mut BenchReport, inputs: &[Input]) {
    let distinct = |f: &dyn Fn(&BenchReport) -> String| {
        let mut v: Vec<String> = inputs.iter().map(|i| f(&i.report)).collect();
        v.sort();
        v.dedup();
        v.join(" / ")
    };
    report.host.identity.cpu_model = distinct(&|r| r.host.identity.cpu_model.clone());
    report.host.identity.host_kernel = distinct(&|r| r.host.identity.host_kernel.clone());
    report.host.identity.hostname = distinct(&|r| r.host.identity.hostname.clone());
    report.engine = distinct(&|r| r.engine.clone());
    if let Some(i) = inputs
        .iter()
        .find(|i| !i.report.accelerator.is_performance())
    {
        report.accelerator = i.report.accelerator;
    }
}

/// What each input was and what was taken from it.
fn summaries(inputs: &[Input], sel: &super::select::Selection) -> Vec<InputSummary> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| InputSummary {
            dir: input.dir.display().to_string(),
            hostname: input.report.host.identity.hostname.clone(),
            cpu_model: input.report.host.identity.cpu_model.clone(),
            engine: format!(
                "{} ({})",
                input.report.engine,
                input.report.accelerator.name()
            ),
            state: input
                .report
                .result
                .as_ref()
                .map_or_else(|| "not recorded".to_owned(), ResultInfo::describe),
            taken: sel
                .taken
                .iter()
                .filter(|t| t.input == i)
                .map(super::select::Taken::describe)
                .collect(),
        })
        .collect()
}

/// Reads every DIR (each a result or a directory of results) and merges them, pooling
/// machines that differ when `pool_hosts`.
pub fn merge_dirs(dirs: &[PathBuf], pool_hosts: bool) -> Result<Merged, MergeError> {
    merge_dirs_with(
        dirs,
        PoolOptions {
            hosts: pool_hosts,
            different_inputs: false,
        },
    )
}

/// Reads every DIR (each a result or a directory of results) and merges them, pooling what
/// `pool` allows.
pub fn merge_dirs_with(dirs: &[PathBuf], pool: PoolOptions) -> Result<Merged, MergeError> {
    let mut inputs = Vec::new();
    for d in dirs {
        for dir in expand(d)? {
            inputs.push(read_input(&dir)?);
        }
    }
    merge_with(inputs, pool)
}

impl Merged {
    /// Whether every planned boot is in and every run produced figures.
    pub fn all_good(&self) -> bool {
        // A failed verify is a result of the experiment (see `BenchReport::verify_failures`).
        self.report.exit_failures(false).is_empty()
            && self
                .report
                .result
                .as_ref()
                .is_some_and(|r| r.state == ResultState::Complete)
    }

    /// Writes the report files (as `bench` does, `report.txt` with the merge's section) and
    /// `merge.json` into `dir`. A directory that already holds a report is overwritten only
    /// when `pmemvm report` wrote it (it has `merge.json`), so a rerun refreshes it.
    pub fn write_files(&self, dir: &Path) -> Result<Vec<PathBuf>, MergeError> {
        let merge_json = dir.join("merge.json");
        let ours = merge_json.is_file();
        if !ours && dir.join("report.json").exists() {
            return Err(MergeError::OutNotMerged(dir.to_owned()));
        }
        let mut files = self.report.write_files(dir, ours)?;
        let txt = dir.join("report.txt");
        let write = |path: &Path, text: String| {
            std::fs::write(path, text).map_err(|source| MergeError::Write {
                path: path.to_owned(),
                source,
            })
        };
        write(&txt, self.render_text())?;
        let mut doc = serde_json::to_value(&self.info).map_err(ReportError::Json)?;
        if self.info.hosts_differ {
            doc["per_host"] = self
                .per_host()
                .into_iter()
                .map(|(host, analysis)| serde_json::json!({"host": host, "analysis": analysis}))
                .collect();
        }
        let json = serde_json::to_string_pretty(&doc).map_err(ReportError::Json)?;
        write(&merge_json, json)?;
        files.push(merge_json);
        Ok(files)
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
