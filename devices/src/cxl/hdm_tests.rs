//! HDM decoders programmed as Linux's `cxl_decoder_commit` and
//! `cxl_decoder_reset` do (`drivers/cxl/core/hdm.c`).

use super::*;

const GIB: u64 = 1 << 30;

fn lo(v: u64) -> u32 {
    u32::try_from(v & 0xffff_ffff).unwrap()
}

fn hi(v: u64) -> u32 {
    u32::try_from(v >> 32).unwrap()
}

fn reg(index: usize, r: usize) -> usize {
    0x10 + 0x20 * index + r
}

/// Linux's order: base high/low, size high/low, skip or targets, control.
fn program(h: &mut HdmDecoders, index: usize, base: u64, size: u64, last: u64, control: u32) {
    h.write32(reg(index, 0x04), hi(base));
    h.write32(reg(index, 0x00), lo(base));
    h.write32(reg(index, 0x0c), hi(size));
    h.write32(reg(index, 0x08), lo(size));
    h.write32(reg(index, 0x18), hi(last));
    h.write32(reg(index, 0x14), lo(last));
    h.write32(reg(index, 0x10), control);
}

const COMMIT: u32 = CTRL_COMMIT | CTRL_TYPE;

fn control(h: &HdmDecoders, index: usize) -> u32 {
    h.read32(reg(index, 0x10))
}

fn endpoint() -> HdmDecoders {
    HdmDecoders::new(DecoderSide::Endpoint { capacity: 2 * GIB })
}

#[test]
fn the_capability_says_four_decoders_and_global_control_keeps_two_bits() {
    let mut h = endpoint();
    let cap = h.read32(0);
    assert_eq!(
        cap & 0xf,
        2,
        "count field 2: 4 decoders (Linux's cxl_hdm_decoder_count)"
    );
    assert_eq!(HDM_LEN, 0x90);
    h.write32(0, 0xffff_ffff);
    assert_eq!(h.read32(0), cap, "read-only");
    assert!(!h.enabled());
    h.write32(4, 0xffff_ffff);
    assert_eq!(h.read32(4), 0b11);
    assert!(h.enabled());
    assert_eq!(h.read32(HDM_LEN), 0, "past the capability");
}

#[test]
fn an_endpoint_commit_maps_its_dpa_after_the_decoders_below_and_reset_undoes_it() {
    let mut h = endpoint();
    program(&mut h, 0, 16 * GIB, GIB, 0, COMMIT);
    assert_eq!(
        control(&h, 0) & (CTRL_COMMITTED | CTRL_ERROR),
        CTRL_COMMITTED
    );
    // The second decoder skips 256 MiB of DPA after the first's GiB.
    program(&mut h, 1, 20 * GIB, HDM_UNIT, HDM_UNIT, COMMIT);
    assert_eq!(control(&h, 1) & CTRL_COMMITTED, CTRL_COMMITTED);
    assert_eq!(
        h.take_events(),
        vec![
            DecoderEvent::Committed {
                index: 0,
                hpa: 16 * GIB,
                size: GIB,
                dpa: 0
            },
            DecoderEvent::Committed {
                index: 1,
                hpa: 20 * GIB,
                size: HDM_UNIT,
                dpa: GIB + HDM_UNIT
            },
        ]
    );
    // Registers hold still while committed.
    h.write32(reg(0, 0x00), 0);
    h.write32(reg(0, 0x04), 0);
    assert_eq!(h.read32(reg(0, 0x04)), hi(16 * GIB));
    // Linux's reset: control without Commit, then size and base zeroed.
    h.write32(reg(1, 0x10), CTRL_TYPE);
    for r in [0x0c, 0x08, 0x04, 0x00] {
        h.write32(reg(1, r), 0);
    }
    assert_eq!(control(&h, 1) & (CTRL_COMMITTED | CTRL_ERROR), 0);
    assert_eq!(h.read32(reg(1, 0x08)), 0);
    assert_eq!(h.take_events(), vec![DecoderEvent::Reset { index: 1 }]);
    assert!(h.take_events().is_empty());
}

#[test]
fn bad_commits_set_error_not_committed_and_report_nothing() {
    // (an error bit set, commits reported) after `setup`.
    let bad = |setup: &dyn Fn(&mut HdmDecoders)| {
        let mut h = endpoint();
        setup(&mut h);
        let errored = (0..DECODERS).any(|i| control(&h, i) & CTRL_ERROR != 0);
        let commits = h
            .take_events()
            .iter()
            .filter(|e| matches!(e, DecoderEvent::Committed { .. }))
            .count();
        (errored, commits)
    };
    // Out of order: decoder 1 before 0.
    assert_eq!(bad(&|h| program(h, 1, 16 * GIB, GIB, 0, COMMIT)), (true, 0));
    // Size 0.
    assert_eq!(bad(&|h| program(h, 0, 16 * GIB, 0, 0, COMMIT)), (true, 0));
    // Two-way interleave at the endpoint.
    assert_eq!(
        bad(&|h| program(h, 0, 16 * GIB, GIB, 0, COMMIT | 1 << 4)),
        (true, 0)
    );
    // IG 32 KiB.
    assert_eq!(
        bad(&|h| program(h, 0, 16 * GIB, GIB, 0, COMMIT | 7)),
        (true, 0)
    );
    // Past the 2 GiB capacity, by size or by skip.
    assert_eq!(
        bad(&|h| program(h, 0, 16 * GIB, 3 * GIB, 0, COMMIT)),
        (true, 0)
    );
    assert_eq!(
        bad(&|h| program(h, 0, 16 * GIB, GIB, 2 * GIB, COMMIT)),
        (true, 0)
    );
    // Wrapping past the top of the address space.
    assert_eq!(
        bad(&|h| program(h, 0, !(HDM_UNIT - 1), GIB, 0, COMMIT)),
        (true, 0)
    );
    // Overlapping the committed decoder 0.
    assert_eq!(
        bad(&|h| {
            program(h, 0, 16 * GIB, GIB, 0, COMMIT);
            h.take_events();
            program(h, 1, 16 * GIB + HDM_UNIT, HDM_UNIT, 0, COMMIT);
        }),
        (true, 0)
    );
}

#[test]
fn addresses_sizes_and_skips_are_kept_in_256m_units() {
    let mut h = endpoint();
    h.write32(reg(0, 0x00), 0xffff_ffff);
    h.write32(reg(0, 0x08), 0x1234_5678);
    h.write32(reg(0, 0x14), 0xffff_ffff);
    assert_eq!(h.read32(reg(0, 0x00)), 0xf000_0000);
    assert_eq!(h.read32(reg(0, 0x08)), 0x1000_0000);
    assert_eq!(h.read32(reg(0, 0x14)), 0xf000_0000);
    // A bridge's target list is whole bytes of port numbers.
    let mut b = HdmDecoders::new(DecoderSide::Bridge);
    b.write32(reg(0, 0x14), 0x0302_0100);
    assert_eq!(b.read32(reg(0, 0x14)), 0x0302_0100);
}

#[test]
fn a_bridge_commits_interleaved_decoders_and_lock_on_commit_holds() {
    let mut b = HdmDecoders::new(DecoderSide::Bridge);
    program(
        &mut b,
        0,
        16 * GIB,
        2 * GIB,
        0x0100,
        COMMIT | 1 << 4 | CTRL_LOCK,
    );
    assert_eq!(control(&b, 0) & CTRL_COMMITTED, CTRL_COMMITTED);
    assert_eq!(
        b.take_events(),
        vec![DecoderEvent::Committed {
            index: 0,
            hpa: 16 * GIB,
            size: 2 * GIB,
            dpa: 0
        }]
    );
    // Locked: uncommitting is ignored.
    b.write32(reg(0, 0x10), 0);
    assert_eq!(control(&b, 0) & CTRL_COMMITTED, CTRL_COMMITTED);
    assert!(b.take_events().is_empty());
}
