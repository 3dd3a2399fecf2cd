// SPDX-License-Identifier: Apache-2.0
//! libFuzzer entry point; the body is in `src/cxl_bus.rs` (shared with
//! the plain `cargo test` smoke run).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devices_fuzz::cxl_bus::run(data));
