//! pmemvm's VMM library: from a validated configuration to a running KVM
//! guest with file-backed NVDIMMs described by ACPI.
//!
//! The flow (see docs/design.md): [`config`] → [`memory`] layout →
//! [`backing`] files → [`boot`] (kernel, initrd, boot params) → [`acpi_setup`]
//! → [`cpu`] setup → [`vm`] build → [`run_loop`] with [`vcpu`] threads →
//! [`exit_status`].

pub mod acpi_setup;
pub mod backing;
pub mod bench;
pub mod boot;
pub mod cli;
pub mod commands;
pub mod config;
pub mod console;
pub mod cpu;
pub mod exit_status;
pub mod experiments;
pub mod fault;
pub mod fio;
pub mod fleet;
pub mod guest_job;
pub mod host;
pub mod identity;
pub mod inference;
pub mod kconfig;
pub mod label_index;
pub mod layout;
pub mod memory;
pub mod preflight;
pub mod qemu;
pub mod report;
pub mod run;
pub mod run_loop;
pub mod signals;
pub mod stats;
pub mod threads;
pub mod vcpu;
pub mod vm;
