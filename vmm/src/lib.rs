//! pmemvm's VMM core: from a validated configuration to a running KVM guest
//! with file-backed NVDIMMs described by ACPI.
//!
//! The flow (see docs/design.md): [`config`] → [`memory`] layout →
//! [`backing`] files → [`boot`] (kernel, initrd, boot params) → [`acpi_setup`]
//! → [`cpu`] setup → [`vm`] build → [`run_loop`] with [`vcpu`] threads →
//! [`exit_status`].
//!
//! # Layering
//!
//! This crate is the VMM and nothing else. It may use the `acpi` (table
//! builders) and `devices` (device models) crates, rust-vmm crates and libc;
//! it knows nothing of fio, experiments, reports, statistics or QEMU. Those
//! live in the `lab` crate (`vmm/lab/`), which talks to this one only through
//! the public API below ([`config::VmConfig`] → [`vm::Vm::build`] →
//! [`vm::Vm::run_with`] → [`run_loop::RunOutcome`]). `cargo tree -p vmm`
//! shows the boundary: no lab crate and no report/CLI dependency appears in it.

pub mod acpi_setup;
pub mod api;
pub mod boot;
pub mod config;
pub mod console;
pub mod cxl;
pub mod debug;
pub mod disk;
pub mod exit_status;
pub mod fault;
pub mod host;
pub mod launch;
pub mod layout;
pub mod memory;
pub mod nvdimm;
pub mod owner_socket;
pub mod pvpanic;
pub mod signals;
pub mod stats;
pub mod tcp_peer;
pub mod tty;
pub mod vstate;

/// Unit tests that map and touch megabytes, or measure this process's RSS,
/// take this lock, so one's allocation does not show in another's figures.
#[cfg(test)]
pub(crate) static MEMORY_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A fresh, empty directory for one unit test: `pmemvm-{what}-{pid}` under
/// the temporary directory, emptied first if an earlier run left it.
#[cfg(test)]
pub(crate) fn fresh_test_dir(what: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pmemvm-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("a unit test's directory can be made");
    d
}

#[cfg(test)]
pub(crate) fn memory_test_lock() -> std::sync::MutexGuard<'static, ()> {
    MEMORY_TESTS.lock().unwrap_or_else(|e| e.into_inner())
}
