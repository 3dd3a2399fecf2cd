//! The VM and its vCPUs: building it, running it, ending it.

pub mod cpu;
pub mod cpu_state;
pub mod exit_owner;
pub mod exit_sync;
pub mod lost_interrupt;
mod run_end;
pub mod run_loop;
pub(crate) mod services;
pub mod vcpu;
mod vcpu_exits;
mod vcpu_failure;
pub mod vcpu_status;
pub mod vcpu_threads;
pub mod vm;
