//! Shared test infrastructure for pmemvm's integration tests.
//!
//! Every harness here skips with a visible reason when the tier it needs
//! (KVM, QEMU, a built guest image) is missing on the machine.

pub mod core_file;
pub mod durable;
pub mod gdb;
pub mod guest_inputs;
pub mod host_kind;
pub mod image;
pub mod label_trace;
pub mod mounts;
pub mod ndctl;
pub mod nested;
pub mod own_kernel;
pub mod pmemvm;
pub mod process;
pub mod rng;
pub mod shell_scripts;
pub mod skip_lint;
pub mod slurm_cluster;
pub mod source_tree;
pub mod stock_kernel;
pub mod tcg;
pub mod terminal;

/// The one skip path of the suite (see the `pmemvm-skip` crate).
pub use pmemvm_skip as skip;
pub use pmemvm_skip::{require, skip};
pub mod tiny;
