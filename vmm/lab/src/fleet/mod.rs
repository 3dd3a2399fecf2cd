//! One experiment across many machines: results that describe themselves, the merge of any
//! number of them into one report (`pmemvm report DIR...`), and a Slurm job array that runs one
//! bench task per (side, boot) on whichever node Slurm picks (`pmemvm bench EXP --slurm`).
//!
//! - [`record`]: what every result directory says about itself (`result` in `report.json`:
//!   schema version, pmemvm version, which part of the bench it holds, complete or partial);
//! - [`task`]: `--only SIDE:BOOT`, one boot of one side of a bench;
//! - [`pooling`]: the one place that says what must match before runs may be pooled;
//! - [`merge`]: reading result directories and merging them;
//! - [`select`]: which boot of which result goes in, renumbered or left out;
//! - [`merge_text`]: the merge's own section of the text report (inputs, hosts, left out);
//! - [`slurm`]: the `sbatch` scripts (the command line is in the `pmemvm` crate:
//!   `vmm/cli/src/fleet_commands.rs`).
//!
//! pmemvm schedules nothing itself: Slurm runs the array, `pmemvm report` merges what came back.

pub mod merge;
pub mod merge_text;
pub mod pooling;
pub mod record;
pub mod select;
pub mod slurm;
pub mod task;
