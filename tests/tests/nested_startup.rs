//! Startup figures of `pmemvm boot` on a KVM with two-dimensional paging (the
//! nested L1's kvm-amd with NPT, or the host's own KVM in direct mode): time
//! from `main` to the first KVM_RUN with a 1G and a 128G NVDIMM, and their
//! ratio. On this workplace's PVM host the memslot setup cost grows with the
//! slot size (shadow paging); with TDP it must not. Absolute times under TCG
//! are functional only; the ratio is the figure.
//!
//! `cargo test -p pmemvm-tests --test nested_startup -- --nocapture` prints them.

use std::time::Duration;

use pmemvm_tests::nested::NestedVm;
use pmemvm_tests::require;
use pmemvm_tests::tiny::guest;

#[test]
fn nvdimm_size_does_not_slow_startup_on_tdp_kvm() {
    let hello = require!(guest("hello"));
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let runs = 7;
    let script = format!(
        "for i in $(seq {runs}); do for s in 1G 128G; do \
           pmemvm -v boot --kernel hello.elf --nvdimm $s --console-log /dev/null 2>&1 \
           | sed -n \"s/.*startup: first KVM_RUN \\([0-9]*\\) us.*/$s \\1/p\"; \
         done; done"
    );
    let out = vm
        .deadline(Duration::from_secs(300))
        .file("hello.elf", hello)
        .run(&["sh", "-c", &script])
        .expect("run pmemvm in the harness");
    assert_eq!(out.status, 0, "{}", out.dump());
    let mut small = Vec::new();
    let mut large = Vec::new();
    for line in out.stdout.lines() {
        let mut f = line.split_whitespace();
        let (Some(size), Some(us)) = (f.next(), f.next().and_then(|v| v.parse::<u64>().ok()))
        else {
            continue;
        };
        match size {
            "1G" => small.push(us),
            "128G" => large.push(us),
            _ => {}
        }
    }
    assert_eq!((small.len(), large.len()), (runs, runs), "{}", out.dump());
    small.sort_unstable();
    large.sort_unstable();
    let (m1, m128) = (small[runs / 2], large[runs / 2]);
    let ratio = m128 as f64 / m1 as f64;
    eprintln!(
        "{} mode: main -> first KVM_RUN median {m1} us (1G), {m128} us (128G), ratio {ratio:.2}",
        out.mode
    );
    // TDP KVM allocates no per-4K-page metadata when a slot is registered (only
    // small huge-page tables): a 128x larger NVDIMM must not make startup
    // proportionally slower. Measured here: 1.43 (TCG noise included), versus
    // 4.2 on this host's shadow-paging PVM.
    assert!(
        ratio < 2.0,
        "128G/1G startup ratio {ratio:.2}: {small:?} vs {large:?}"
    );
}
