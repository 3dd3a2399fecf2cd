// SPDX-License-Identifier: Apache-2.0
//! libFuzzer entry point; the body is in `src/media_dsm.rs` (shared with the
//! plain `cargo test` smoke run).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devices_fuzz::media_dsm::run(data));
