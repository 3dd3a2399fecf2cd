//! One experiment across many machines: results that describe themselves, the merge of any
//! number of them into one report (`pmemvm report DIR...`), and a Slurm job array that runs one
//! bench task per (side, boot) on whichever node Slurm picks (`pmemvm bench EXP --slurm`).
//!
//! - [`record`] (in [`crate::study::results`]): what every result directory says about itself (`result` in `report.json`:
//!   schema version, pmemvm version, which part of the bench it holds, complete or partial);
//! - [`task`] (in [`crate::study::results`]): `--only SIDE:BOOT`, one boot of one side of a bench;
//! - [`pooling`]: the one place that says what must match before runs may be pooled;
//! - [`inputs`]: what each side ran (kernel, command line, fio jobs, pmemvm), which must match too;
//! - [`merge`]: reading result directories and merging them;
//! - [`select`]: which boot of which result goes in, renumbered or left out;
//! - [`merge_text`]: the merge's own section of the text report (inputs, hosts, left out);
//! - [`crash_array`]: `crash-check --slurm`, one task per flush, and the merge of its results;
//! - [`sbatch`]: quoting, checks and writing shared by the Slurm scripts;
//! - [`slurm`]: the `sbatch` scripts (the command line is in the `pmemvm` crate:
//!   `vmm/cli/src/fleet_commands.rs`).
//!
//! pmemvm schedules nothing itself: Slurm runs the array, `pmemvm report` merges what came back.

pub mod crash_array;
pub mod inputs;
pub mod merge;
// Kept here by name too: the result record and the bench task live in crate::study::results.
pub use crate::study::results::{record, task};
pub mod merge_text;
pub mod pooling;
pub mod sbatch;
pub mod select;
pub mod slurm;
