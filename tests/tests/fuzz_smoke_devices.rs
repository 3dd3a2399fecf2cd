//! Smoke run of the fuzz targets in `tests/fuzz` under plain `cargo test`
//! (no libFuzzer, no nightly): each target's body — the very same source
//! file — runs over a deterministic pseudo-random corpus of 10,000 inputs.
//! A panic is a failure, reported with the seed and input index to replay.
//! The long runs (≥ 1M executions per target with libFuzzer) are described
//! in docs/robustness.md.

#[path = "../fuzz/src/cxl_bus.rs"]
mod cxl_bus;
#[path = "../fuzz/src/cxl_config.rs"]
mod cxl_config;
#[path = "../fuzz/src/cxl_mailbox.rs"]
mod cxl_mailbox;
#[path = "../fuzz/src/dsm.rs"]
mod dsm;
#[path = "../fuzz/src/flush_hint.rs"]
mod flush_hint;
#[path = "../fuzz/src/media_dsm.rs"]
mod media_dsm;
#[path = "../fuzz/src/pio_bus.rs"]
mod pio_bus;
#[path = "../fuzz/src/virtio_blk.rs"]
mod virtio_blk;

/// Inputs per target.
const INPUTS: usize = 10_000;

/// splitmix64: a small deterministic generator (no dependency needed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap_or(0)
    }

    /// Bytes with a bias towards the values parsers and bounds care about.
    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = match self.below(4) {
            0 => self.below(16),
            _ => self.below(max_len + 1),
        };
        (0..len)
            .map(|_| match self.below(8) {
                0 => 0,
                1 => 0xff,
                2 => 1 << self.below(8),
                _ => self.next().to_le_bytes()[0],
            })
            .collect()
    }
}

/// Runs `body` over the corpus of `seed`; a panic names the input.
fn smoke(name: &str, seed: u64, max_len: usize, body: fn(&[u8])) {
    let mut rng = Rng(seed);
    for i in 0..INPUTS {
        let input = rng.bytes(max_len);
        let r = std::panic::catch_unwind(|| body(&input));
        assert!(
            r.is_ok(),
            "fuzz target {name} panicked on input {i} of seed {seed:#x} ({} bytes): {:02x?}",
            input.len(),
            &input[..input.len().min(64)]
        );
    }
}

#[test]
fn dsm_handler_survives_hostile_pages() {
    smoke("dsm", 0xd5a1, 2 * 4097, dsm::run);
}

#[test]
fn pio_bus_survives_hostile_port_io() {
    smoke("pio_bus", 0x9105, 512, pio_bus::run);
}

#[test]
fn flush_hint_survives_hostile_offsets() {
    smoke("flush_hint", 0xf1a5, 512, flush_hint::run);
}

#[test]
fn dsm_corpus_reaches_successful_label_reads_and_writes() {
    // A corpus that only ever hits rejections would prove little.
    let (h, ro) = dsm::handler();
    let mut rng = Rng(0xd5a1);
    for _ in 0..INPUTS {
        dsm::run_on(&h, &ro, &rng.bytes(2 * 4097));
    }
    let s = h.stats();
    let read = s
        .label_bytes_read
        .load(std::sync::atomic::Ordering::Relaxed);
    let written = s
        .label_bytes_written
        .load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("dsm smoke: {read} label bytes read, {written} written");
    assert!(read > 0 && written > 0, "read {read}, written {written}");
}

#[test]
fn media_dsm_survives_hostile_calls_and_reaches_injection_and_clear() {
    smoke("media_dsm", 0x3ed1, 43 * 6, media_dsm::run);
    // One long sequence on one handler: the corpus must inject, scrub and
    // clear for real, not only be refused.
    let s = media_dsm::setup();
    let mut rng = Rng(0x3ed1);
    let mut most = 0;
    for _ in 0..INPUTS / 5 {
        media_dsm::run_on(&s, &rng.bytes(43 * 6));
        most = most.max(s.media[0].state().bad_ranges.len());
    }
    let st = s.handler.root().map(|r| r.stats());
    let (injected, cleared, scrubs) = st.map_or((0, 0, 0), |r| {
        use std::sync::atomic::Ordering::Relaxed;
        (
            r.injected.load(Relaxed),
            r.cleared_bytes.load(Relaxed),
            r.scrubs.load(Relaxed),
        )
    });
    eprintln!("media_dsm smoke: {injected} injections, {cleared} bytes cleared, {scrubs} scrubs, at most {most} ranges");
    assert!(
        injected > 0 && cleared > 0 && scrubs > 0 && most > 1,
        "{injected} {cleared} {scrubs} {most}"
    );
}

#[test]
fn virtio_blk_survives_a_hostile_driver() {
    smoke("virtio_blk", 0xb1c5, 0x3000 + 7 * 64, virtio_blk::run);
}

#[test]
fn cxl_mailbox_survives_a_hostile_driver_and_reaches_labels_and_poison() {
    smoke("cxl_mailbox", 0xc71, 600, cxl_mailbox::run);
    // One long sequence on one device: the corpus must get past the
    // refusals — labels written, poison injected, commands answered.
    let (mut mb, labels) = cxl_mailbox::device();
    let mut rng = Rng(0xc71);
    let mut most_poison = 0;
    for _ in 0..INPUTS / 5 {
        cxl_mailbox::run_on(&mut mb, &rng.bytes(600));
        most_poison = most_poison.max(mb.commands().poisoned().count());
    }
    let run = mb.commands_run();
    let label_bytes = labels.0.lock().unwrap().iter().filter(|&&b| b != 0).count();
    eprintln!("cxl_mailbox smoke: {run} commands, at most {most_poison} poisoned units, {label_bytes} label bytes set");
    assert!(
        run > 1000 && most_poison > 0 && label_bytes > 0,
        "{run} commands, {most_poison} poisoned, {label_bytes} label bytes"
    );
}

#[test]
fn cxl_config_space_and_decoders_survive_a_hostile_driver_and_commit_for_real() {
    smoke("cxl_config", 0xc0f, 12 * 40, cxl_config::run);
    let mut dev = cxl_config::device();
    let mut rng = Rng(0xc0f);
    for _ in 0..INPUTS / 5 {
        cxl_config::run_on(&mut dev, &rng.bytes(12 * 40));
    }
    let (commits, resets) = dev.counts();
    let ports = dev.port_id_reads();
    eprintln!("cxl_config smoke: {commits} commits, {resets} resets, {ports} id reads by port");
    assert!(
        commits > 0 && resets > 0,
        "{commits} commits, {resets} resets"
    );
    assert!(ports > 0, "ports 0xCF8/0xCFC never reached the device");
}

#[test]
fn the_cxl_platform_bus_survives_a_hostile_driver_and_maps_only_inside_the_window() {
    smoke("cxl_bus", 0xcb5, 12 * 40, cxl_bus::run);
    // Each input on a fresh platform (a random write may lock a decoder for good).
    let mut rng = Rng(0xcb5);
    let (mut maps, mut refusals) = (0, 0);
    for _ in 0..INPUTS / 5 {
        let mut p = cxl_bus::platform();
        cxl_bus::run_on(&mut p, &rng.bytes(12 * 40));
        let (m, r) = p.counts();
        (maps, refusals) = (maps + m, refusals + r);
    }
    eprintln!("cxl_bus smoke: {maps} mappings, {refusals} refused commits");
    assert!(
        maps > 0 && refusals > 0,
        "{maps} mappings, {refusals} refused"
    );
}
