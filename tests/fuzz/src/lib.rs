// SPDX-License-Identifier: Apache-2.0
//! Fuzz target bodies for pmemvm's guest-facing devices and command-line
//! parsers. Each module is self-contained (it names only `devices`, `vmm`,
//! `vmm_sys_util`, `vm_memory` and `libc`) so the smoke tests in
//! `devices/tests/fuzz_smoke.rs` and `tests/tests/fuzz_smoke_config.rs` can
//! include the same file with `#[path]` and run it under plain `cargo test`.
//!
//! Every body panics (a crash for libFuzzer) when the code under test panics
//! or breaks one of its documented invariants.

pub mod config;
pub mod control;
pub mod cxl_bus;
pub mod cxl_config;
pub mod cxl_mailbox;
pub mod dsm;
pub mod flush_hint;
pub mod get_archive;
pub mod media_dsm;
pub mod pio_bus;
pub mod verify_line;
pub mod virtio_blk;
