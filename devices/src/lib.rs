//! Emulated devices of pmemvm: the PIO/MMIO [`bus`], 16550 [`serial`] ports,
//! [`power`] devices (ACPI sleep/reset, i8042 reset, guest-exit port), the VM
//! [`exit`] notifier and the NVDIMM flush-hint device ([`nvdimm`]).
//!
//! Every guest-supplied value reaching these devices is treated as hostile:
//! offsets and lengths are bound-checked and nothing here panics on them.

pub mod bus;
pub mod exit;
pub mod nvdimm;
pub mod nvdimm_dsm;
pub mod power;
pub mod serial;
