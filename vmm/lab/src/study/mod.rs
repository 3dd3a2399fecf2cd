//! Studies made of runs: the upstream experiments and their bench, fio's output, statistics, reports, result directories, fleets, test suites, crash checks.

pub mod bench;
pub mod crash_check;
pub mod experiments;
pub mod fio;
pub mod fleet;
pub mod inference;
pub mod report;
pub mod results;
pub mod source_tree;
pub mod suite;
pub mod threads;
