//! What a result directory says about itself, so that a later merge needs nothing else: the
//! schema and pmemvm versions, how many boots per side the bench was asked for, which of them
//! this directory holds (`--only`), how many finished and how many runs failed. It is the
//! `result` object of `report.json`; the experiment, the engine, the accelerator and the host
//! are beside it in the same file, and each run's kernel hash and image manifest are in its
//! `provenance`.

use serde::{Deserialize, Serialize};

use crate::study::results::task::Task;

/// Version of the result layout (`report.json` with its `result` object). Raised when a field
/// a merge relies on changes meaning; fields added later are read as optional.
pub const SCHEMA_VERSION: u32 = 1;

/// Whether every planned boot of the directory finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultState {
    /// Every planned boot finished (its runs may still have failed: see `failed_runs`).
    Complete,
    /// The bench stopped (or is still running) before its last planned boot.
    Partial,
}

/// The `result` object of `report.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultInfo {
    /// [`SCHEMA_VERSION`] of the pmemvm that wrote it.
    pub schema_version: u32,
    /// The pmemvm version that wrote it.
    pub pmemvm_version: String,
    /// `--runs`: boots per side of the whole bench (of all its tasks).
    pub runs_per_side: u32,
    /// The one boot this directory was asked for (`--only`), or none: every boot.
    pub only: Option<Task>,
    /// Boots this directory was asked for.
    pub boots_planned: u32,
    /// Boots that finished (their figures, or their failure, are in `runs`).
    pub boots_done: u32,
    /// Complete or partial.
    pub state: ResultState,
    /// Runs that failed or reported a fio error.
    pub failed_runs: usize,
    /// Merged results: the directories this report was made from.
    #[serde(default)]
    pub merged_from: Vec<String>,
}

impl ResultInfo {
    /// The record of a bench of `runs_per_side` boots per side, `only` one of them or all
    /// `boots_planned`, after `boots_done` boots.
    pub fn of_bench(
        runs_per_side: u32,
        only: Option<Task>,
        boots_planned: u32,
        boots_done: u32,
        failed_runs: usize,
    ) -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            pmemvm_version: env!("CARGO_PKG_VERSION").to_owned(),
            runs_per_side,
            only,
            boots_planned,
            boots_done,
            state: if boots_done >= boots_planned {
                ResultState::Complete
            } else {
                ResultState::Partial
            },
            failed_runs,
            merged_from: Vec::new(),
        }
    }

    /// `complete`, `complete, 1 failed run`, `partial: 1 of 2 boots`.
    pub fn describe(&self) -> String {
        let mut s = match self.state {
            ResultState::Complete => "complete".to_owned(),
            ResultState::Partial => format!(
                "partial: {} of {} boot(s) finished",
                self.boots_done, self.boots_planned
            ),
        };
        if self.failed_runs > 0 {
            s.push_str(&format!(", {} failed run(s)", self.failed_runs));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_until_the_last_planned_boot() {
        let r = ResultInfo::of_bench(2, None, 4, 3, 0);
        assert_eq!(r.state, ResultState::Partial);
        assert_eq!(r.describe(), "partial: 3 of 4 boot(s) finished");
        let r = ResultInfo::of_bench(2, None, 4, 4, 1);
        assert_eq!(r.state, ResultState::Complete);
        assert_eq!(r.describe(), "complete, 1 failed run(s)");
        assert_eq!(r.schema_version, SCHEMA_VERSION);
    }

    #[test]
    fn round_trips_through_json() {
        let r = ResultInfo::of_bench(2, Some(Task::new("on", 2)), 1, 1, 0);
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""only":{"side":"on","boot":2}"#), "{text}");
        assert_eq!(serde_json::from_str::<ResultInfo>(&text).unwrap(), r);
    }
}
