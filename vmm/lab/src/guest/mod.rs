//! Running one guest: the engines (pmemvm in-process, QEMU, nested), what it boots and runs, its transfers, the checks before it.

pub mod args;
pub mod boot;
pub mod child;
pub mod engine;
pub mod guest_job;
pub mod host_cpus;
pub mod kconfig;
pub mod modules;
pub mod nested;
pub mod preflight;
pub mod qemu;
pub mod rootfs;
pub mod run;
pub mod transfer;
