#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every fuzz target of tests/fuzz for RUNS executions (default 1M)
# with libFuzzer, AddressSanitizer and debug assertions (overflow checks),
# and prints one line per target: executions, crashes, seconds.
# cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP=1 enables them on the
# installed stable toolchain (no other toolchain can be fetched here).
set -eu -o pipefail

RUNS="${RUNS:-1000000}"
cd "$(dirname "$0")"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
mkdir -p logs
cargo fuzz build -O -a
for target in dsm media_dsm pio_bus flush_hint config get_archive virtio_blk control verify_line cxl_mailbox cxl_config cxl_bus; do
    max_len=4096
    [ "$target" = dsm ] && max_len=16400 # up to four request pages per input
    [ "$target" = get_archive ] && max_len=8192 # a few tar entries
    [ "$target" = virtio_blk ] && max_len=16384 # the rings and a few hundred operations
    [ "$target" = control ] && max_len=70000 # past the longest request line
    start=$(date +%s)
    status=0
    cargo fuzz run -O -a "$target" -- -runs="$RUNS" -max_len="$max_len" -timeout=10 \
        -print_final_stats=1 >"logs/$target.log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "logs/$target.log")
    crashes=$(find "artifacts/$target" -type f 2>/dev/null | wc -l)
    echo "$target: executions ${execs:-?}, crashes/timeouts $crashes, exit $status, $(($(date +%s) - start)) s"
done
