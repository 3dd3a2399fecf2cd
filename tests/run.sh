#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The whole test suite, on a fresh Debian 12 machine (as root) or a prepared one:
#   1. installs what the tests need (apt: acpica-tools for iasl, qemu-system-x86
#      for the TCG and nested tiers, binutils for the tiny guests, fio for the
#      fixture check) — skipped when already there;
#   2. builds the guest image (guest-images/build.sh, cached by input hash);
#   3. checks formatting and clippy;
#   4. runs every test (unit, golden, iasl, tiny guests on this host's KVM,
#      QEMU TCG, nested KVM end to end). Tests whose tier cannot run here print
#      "SKIP: <reason>".
set -eu -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[tests %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

need=""
for p in acpica-tools qemu-system-x86 binutils fio cpio gzip xz-utils busybox-static zstd libxml2-utils; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
done
if [ -n "$need" ]; then
    log "apt-get install:$need"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi

log "guest image"
guest-images/build.sh

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy"
cargo clippy --workspace --all-targets -q -- -D warnings

log "cargo build"
cargo build --workspace --all-targets -q
export PMEMVM_BIN="$PWD/target/debug/pmemvm"

log "cargo test"
cargo test --workspace --no-fail-fast -- --test-threads="${PMEMVM_TEST_THREADS:-2}"
