//! Which boot of which result goes into a merge, under which number, and what is left out.
//!
//! Each input's boots are taken by (side, boot). When two inputs hold the same (side, boot):
//! an identical copy (the same runs) is left out; a failed boot gives way to one with figures
//! (a rerun of a failed task), and a second failed one is left out; two boots that both
//! produced figures are different repetitions (two hosts that each ran a whole bench), so both
//! are taken and the later one is numbered after every boot of its side (its runs renumbered
//! the same way). Planned boots that no input holds are listed too: the tasks of a Slurm array
//! (`--only`) that never wrote a result, and the boots a partial bench did not reach.

use std::path::PathBuf;

use serde::Serialize;

use super::inputs::InputKey;
use super::pooling::MatchKey;
use super::task::Task;
use crate::study::report::{BenchReport, RunRecord};

/// One result directory, read.
#[derive(Debug, Clone)]
pub struct Input {
    /// The directory.
    pub dir: PathBuf,
    /// Its report.
    pub report: BenchReport,
    /// What must match, with its values here.
    pub keys: Vec<MatchKey>,
    /// What each side ran, with its values here.
    pub inputs: Vec<InputKey>,
}

/// A (side, boot) of an input that is not in the merged report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// Where it was (empty for a planned boot that no directory holds).
    pub dir: String,
    /// The side and boot.
    pub task: Task,
    /// Why it was left out.
    pub why: String,
}

/// A boot taken into the merge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Taken {
    /// The input (index into the inputs).
    pub input: usize,
    /// The boot as the input numbers it.
    pub from: Task,
    /// Its number in the merged report (`from.boot` unless renumbered).
    pub boot: u32,
}

impl Taken {
    /// `on:1`, or `on:1 as on:3` when renumbered.
    pub fn describe(&self) -> String {
        if self.boot == self.from.boot {
            self.from.to_string()
        } else {
            format!("{} as {}:{}", self.from, self.from.side, self.boot)
        }
    }
}

/// The outcome of [`select`].
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Boots taken, in the order met.
    pub taken: Vec<Taken>,
    /// Boots left out and planned boots no input holds (`dir` empty), with why.
    pub left_out: Vec<LeftOut>,
    /// How many of `left_out` are planned boots that no input holds.
    pub missing: usize,
}

fn runs_of<'a>(report: &'a BenchReport, task: &Task) -> Vec<&'a RunRecord> {
    report
        .runs
        .iter()
        .filter(|r| r.side == task.side && r.boot == task.boot)
        .collect()
}

/// Whether every run and check of the boot passed.
pub fn boot_ok(report: &BenchReport, task: &Task) -> bool {
    runs_of(report, task)
        .iter()
        .all(|r| r.good_summary().is_some())
        && report
            .checks
            .iter()
            .filter(|c| c.side == task.side && c.boot == task.boot)
            .all(|c| c.error.is_none())
}

/// The boots a report holds, sorted.
pub fn tasks_of(report: &BenchReport) -> Vec<Task> {
    let mut t: Vec<Task> = report
        .runs
        .iter()
        .map(|r| Task::new(&r.side, r.boot))
        .collect();
    t.sort();
    t.dedup();
    t
}

/// Selects the boots of `inputs` (see the module documentation).
pub fn select(inputs: &[Input]) -> Selection {
    let mut sel = Selection::default();
    for (i, input) in inputs.iter().enumerate() {
        for task in tasks_of(&input.report) {
            let clash = sel
                .taken
                .iter()
                .position(|k| k.from.side == task.side && k.boot == task.boot);
            match clash {
                None => sel.taken.push(Taken {
                    input: i,
                    from: task.clone(),
                    boot: task.boot,
                }),
                Some(k) => settle_clash(&mut sel, inputs, k, i, task),
            }
        }
    }
    let missing = missing_boots(inputs);
    sel.missing = missing.len();
    sel.left_out.extend(missing);
    sel
}

/// Input `i`'s boot `task` has the number of taken boot `k`: a copy is left
/// out, a failed boot gives way to one with figures, and a second boot with
/// figures is taken under the next free number of its side.
fn settle_clash(sel: &mut Selection, inputs: &[Input], k: usize, i: usize, task: Task) {
    let dir = |i: usize| inputs[i].dir.display().to_string();
    let input = &inputs[i];
    let other = sel.taken[k].clone();
    let other_report = &inputs[other.input].report;
    let ok = boot_ok(&input.report, &task);
    let other_ok = boot_ok(other_report, &other.from);
    let mut leave = |from: usize, task: &Task, why: String| {
        sel.left_out.push(LeftOut {
            dir: dir(from),
            task: task.clone(),
            why,
        });
    };
    if runs_of(&input.report, &task) == runs_of(other_report, &other.from) {
        leave(
            i,
            &task,
            format!("a copy of the same boot in {}", dir(other.input)),
        );
    } else if ok && !other_ok {
        let why = format!(
            "failed; {} holds the same boot with figures (a rerun)",
            dir(i)
        );
        leave(other.input, &other.from, why);
        sel.taken[k] = Taken {
            input: i,
            from: task.clone(),
            boot: task.boot,
        };
    } else if !ok {
        let why = format!("failed; the same boot is taken from {}", dir(other.input));
        leave(i, &task, why);
    } else {
        // Renumbered boots go after every boot any input numbers on that side.
        let highest = inputs
            .iter()
            .flat_map(|i| i.report.runs.iter())
            .filter(|r| r.side == task.side)
            .map(|r| r.boot)
            .max()
            .unwrap_or(0);
        let taken_max = sel
            .taken
            .iter()
            .filter(|t| t.from.side == task.side)
            .map(|t| t.boot)
            .max()
            .unwrap_or(0);
        let boot = highest.max(taken_max) + 1;
        sel.taken.push(Taken {
            input: i,
            from: task,
            boot,
        });
    }
}

/// Planned boots nobody holds: an array's tasks no result directory has,
/// and the boots a whole bench stopped before.
fn missing_boots(inputs: &[Input]) -> Vec<LeftOut> {
    let held_by = |only: bool, task: &Task| {
        inputs.iter().any(|i| {
            i.report.result.as_ref().is_some_and(|r| r.only.is_some()) == only
                && tasks_of(&i.report).contains(task)
        })
    };
    let sides = inputs
        .first()
        .map(|i| i.report.sides.clone())
        .unwrap_or_default();
    let array_runs = inputs
        .iter()
        .filter_map(|i| i.report.result.as_ref())
        .filter(|r| r.only.is_some())
        .map(|r| r.runs_per_side)
        .max();
    let mut missing = Vec::new();
    if let Some(runs) = array_runs {
        let why = "no result directory holds it (its task did not finish or was not run)";
        missing.extend(
            Task::all(&sides, runs)
                .into_iter()
                .filter(|task| !held_by(true, task))
                .map(|task| LeftOut {
                    dir: String::new(),
                    task,
                    why: why.to_owned(),
                }),
        );
    }
    for input in inputs {
        let Some(r) = input.report.result.as_ref().filter(|r| r.only.is_none()) else {
            continue;
        };
        let held = tasks_of(&input.report);
        for task in Task::all(&sides, r.runs_per_side) {
            if !held.contains(&task) {
                let why = format!(
                    "{} stopped before it ({})",
                    input.dir.display(),
                    r.describe()
                );
                missing.push(LeftOut {
                    dir: String::new(),
                    task,
                    why,
                });
            }
        }
    }
    missing
}

/// The runs and checks of a taken boot, numbered as the merge numbers it.
pub fn renumbered(
    report: &BenchReport,
    t: &Taken,
) -> (Vec<RunRecord>, Vec<crate::study::report::CheckRecord>) {
    let runs = runs_of(report, &t.from);
    let per_boot = u32::try_from(runs.len()).unwrap_or(u32::MAX);
    let shift = |run: u32| {
        let k = run.saturating_sub(t.from.boot.saturating_sub(1).saturating_mul(per_boot));
        t.boot
            .saturating_sub(1)
            .saturating_mul(per_boot)
            .saturating_add(k)
    };
    let runs = runs
        .into_iter()
        .map(|r| {
            let mut r = r.clone();
            r.run = shift(r.run);
            r.boot = t.boot;
            r
        })
        .collect();
    let checks = report
        .checks
        .iter()
        .filter(|c| c.side == t.from.side && c.boot == t.from.boot)
        .map(|c| {
            let mut c = c.clone();
            c.boot = t.boot;
            c
        })
        .collect();
    (runs, checks)
}
