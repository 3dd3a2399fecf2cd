//! pmemvm's lab: what runs in the guest and what is made of it — guest jobs,
//! the fio model, the upstream threads' experiments, the engines that run
//! them (pmemvm's own VMM core, QEMU), statistics and reports.
//!
//! # Layering
//!
//! The lab sits on top of the VMM core (the `vmm` crate) and uses it only
//! through its public API: a [`vmm::config::VmConfig`] in, a
//! [`vmm::vstate::run_loop::RunOutcome`] out. Nothing in the core depends on the lab.
//! Inside the lab:
//!
//! * [`guest_job`], [`fio`]: what a guest runs and how its output is read
//!   (no VMM, no reports);
//! * [`inference`]: statistics (no I/O);
//! * [`threads`], [`experiments`]: the upstream threads and their plans;
//! * [`engine`] (pmemvm, QEMU, and pmemvm nested in a QEMU L1 — [`nested`] —
//!   behind one trait), [`qemu`] (its command line), [`run`]: one guest run;
//! * [`report`]: text/JSON/CSV/SVG of a set of runs;
//! * [`bench`]: an experiment's runs, sides alternating, each boot in a
//!   child process ([`child`]), and its report;
//! * [`fleet`]: self-describing results, their merge, the Slurm job array;
//! * [`preflight`], [`kconfig`]: host and kernel checks before anything slow;
//! * [`modules`]: the user's own kernel modules (`--modules`), packed for the guest;
//! * [`suite`]: other projects' test suites in the guest (ndctl's), with their table;
//! * [`source_tree`]: the scripts of pmemvm's source tree the binary runs.
//!
//! The `pmemvm` binary (`vmm/cli/`) parses the command line and calls into
//! this crate and the core.

pub mod guest;
pub mod study;
