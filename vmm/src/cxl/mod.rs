//! The CXL platform pmemvm builds for its `--cxl-pmem` devices: where each
//! device, its host bridge and its fixed memory window are, and the ACPI that
//! describes them to Linux (`cxl_acpi`, the ACPI PCI root driver, MMCONFIG).
//!
//! Each device sits alone behind its own host bridge, on a root port of its
//! own, with a fixed memory window of exactly its capacity that targets only
//! that bridge: one interleave way, so a region the guest commits on it is
//! one contiguous range of the backing file — one KVM memory slot, no exit
//! per access. Host bridge *n* decodes buses `B = CXL_FIRST_BUS + 4n` to
//! `B + 3`: its root port is `B:00.0`, the device `(B+1):00.0`; its `_UID` is
//! `B` (as QEMU's `pxb-cxl` numbers them). The ECAM covers every bus from 0
//! to the last one used, so MMCONFIG reaches the devices' extended
//! configuration space where the CXL DVSECs are.

pub mod assemble;
pub mod machine;
pub mod memory;
pub mod platform;

pub use platform::{CxlError, CxlPlatform, PlacedCxlDevice};
