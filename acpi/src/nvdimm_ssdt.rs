//! The NVDIMM SSDT: `\_SB.NVDR` (`_HID "ACPI0012"`, the device Linux's nfit
//! driver binds to) with one child per DIMM whose `_ADR` is the DIMM's NFIT
//! device handle, plus (optionally) the `_DSM` methods that carry the Intel
//! NVDIMM label commands to pmemvm.
//!
//! With a [`DsmTransport`] the SSDT is, in ASL:
//!
//! ```text
//! Scope (\_SB) {
//!   Device (NVDR) {
//!     Name (_HID, "ACPI0012")
//!     Method (_DSM, 4, Serialized) {                        // root: ARS, clear, inject
//!       Local0 = NCAL (Arg0, Arg1, Arg2, Arg3, 0xFFFFFFFF)
//!       If (LEqual (NDBR, One)) {       // pmemvm: new media errors (an injection)
//!         Notify (\_SB.NVDR, 0x81)      // "unconsumed uncorrectable memory error"
//!       }
//!       Return (Local0)
//!     }
//!     OperationRegion (NPAG, SystemMemory, page_addr, 0x1000)
//!     Field (NPAG, DWordAcc, NoLock, Preserve) {            // request
//!       NHDL, 32, NREV, 32, NFUN, 32, NLEN, 32, NDAT, 32640 }
//!     Field (NPAG, DWordAcc, NoLock, Preserve) {            // response
//!       RLEN, 32, RDAT, 32736 }
//!     OperationRegion (NDBL, SystemIO, doorbell_port, 4)
//!     Field (NDBL, DWordAcc, NoLock, Preserve) { NDBR, 32 }
//!     Method (NCAL, 5, Serialized) {   // Arg0-3 as _DSM, Arg4 NFIT handle
//!       If (LEqual (Arg4, 0xFFFFFFFF)) {                   // the root device
//!         If (LNot (LEqual (Arg0, ToUUID ("2f10e7a4-9e91-11e4-89d3-123b93f75cba")))) {
//!           Return (Buffer (One) { 0x00 })
//!         }
//!       } Else {                                            // a DIMM: Intel family
//!         If (LNot (LEqual (Arg0, ToUUID ("4309ac30-0d11-11e4-9191-0800200c9a66")))) {
//!           Return (Buffer (One) { 0x00 })
//!         }
//!       }
//!       NHDL = Arg4;  NREV = Arg1;  NFUN = Arg2;  NLEN = Zero
//!       If (LEqual (ObjectType (Arg3), 4)) {                // Package
//!         If (LGreater (SizeOf (Arg3), Zero)) {
//!           Local0 = DerefOf (Index (Arg3, Zero))
//!           If (LEqual (ObjectType (Local0), 3)) {          // Buffer
//!             NLEN = SizeOf (Local0)
//!             NDAT = Local0                                 // truncated to the page
//!           }
//!         }
//!       }
//!       NDBR = page_addr                                    // traps to pmemvm
//!       Local1 = RLEN
//!       If (LGreater (Local1, 4092)) { Local1 = 4092 }
//!       Local2 = RDAT
//!       Return (Mid (Local2, Zero, Local1))
//!     }
//!     Method (_FIT, 0, Serialized) {  // with empty slots: the NFIT's structures now
//!       Local0 = Buffer (Zero) {}                           // the FIT so far
//!       Local1 = Zero                                       // its length
//!       Local4 = Zero
//!       While (LLess (Local4, 1024)) {                      // at most 4 MiB
//!         Local4++
//!         Local3 = Package (One) {}
//!         Local3 [Zero] = ToBuffer (Local1)                 // the offset
//!         Local2 = NCAL (ToUUID (root), One, 0x10000, Local3, 0xFFFFFFFF)
//!         If (LLess (SizeOf (Local2), 4)) { Break }         // no answer
//!         If (LGreater (SizeOf (Local2), 4088)) { Break }   // nobody answered
//!         Local5 = DerefOf (Local2 [Zero])                  // status
//!         If (LEqual (Local5, One)) {                       // changed: again
//!           Local0 = Buffer (Zero) {}
//!           Local1 = Zero
//!         } Else {
//!           If (LNot (LEqual (Local5, Zero))) { Break }
//!           Local6 = SizeOf (Local2) - 4
//!           If (LEqual (Local6, Zero)) { Return (Local0) }  // the end
//!           Concatenate (Local0, Mid (Local2, 4, Local6), Local0)
//!           Local1 += Local6
//!         }
//!       }
//!       Return (Buffer (Zero) {})                           // no answer
//!     }
//!     Device (NV00) {                                       // one per DIMM slot
//!       Name (_ADR, handle)
//!       Method (_DSM, 4) { Return (NCAL (Arg0, Arg1, Arg2, Arg3, handle)) }
//!     }
//!   }
//! }
//! ```
//!
//! `_FIT` is how Linux reads the NVDIMMs when the root device probes and
//! again on notification 0x80 (a DIMM hot-added): pmemvm answers the root
//! function [`FUNC_READ_FIT`] with a status (0, or 1 when the table changed
//! since the read at offset 0 began, and the method starts again) and up to
//! 4,084 bytes of the NFIT's structures from the offset asked (a reply is
//! never as long as a page nothing answered, which `_FIT` then gives up on).
//! Only a machine with empty slots has `_FIT`: there Linux reads the DIMMs
//! through it at the root device's probe too (it takes precedence over the
//! static NFIT); elsewhere the static NFIT is all Linux reads. Every slot a
//! DIMM can be hot-added into has its device (`_ADR`, `_DSM`) from boot, as
//! on platforms that describe their empty slots.
//!
//! With a transport there is also the Generic Event Device through which
//! pmemvm notifies the guest while it runs (a media error injected through
//! the control socket, a DIMM's health set): an edge-triggered GSI, and a
//! read-to-clear event register whose bits `_EVT` turns into notifications:
//!
//! ```text
//! Scope (\_SB) {
//!   Device (NGED) {
//!     Name (_HID, "ACPI0013")
//!     Name (_UID, 0)
//!     Name (_CRS, ResourceTemplate () {
//!       Interrupt (ResourceConsumer, Edge, ActiveHigh, Exclusive) { event_gsi } })
//!     OperationRegion (GEVR, SystemIO, event_port, 4)
//!     Field (GEVR, DWordAcc, NoLock, Preserve) { GEVT, 32 }
//!     Method (_EVT, 1, Serialized) {
//!       Local0 = GEVT
//!       If (Local0 & 1) { Notify (\_SB.NVDR, 0x81) }       // new media errors
//!       If (Local0 & 2) { Notify (\_SB.NVDR, 0x80) }       // NFIT changed
//!       If (Local0 & 4) { Notify (\_SB.NVDR.NV00, 0x81) }  // DIMM 0's health, ...
//!     }
//!   }
//! }
//! ```
//! Without a transport only `_HID`, the children and their `_ADR` are
//! emitted. `NCAL` is `Serialized`, so two CPUs never share the page.

use crate::aml::{self, FieldAccess, RegionSpace};
use crate::sdt::{Sdt, NVDIMM_SSDT_OEM_TABLE_ID};
use crate::{DsmTransport, NvdimmDescription};

/// SSDT revision 2: 64-bit AML integers.
const SSDT_REVISION: u8 = 2;
/// Intel NVDIMM DSM family UUID.
pub const INTEL_DSM_UUID: &str = "4309ac30-0d11-11e4-9191-0800200c9a66";
/// NVDIMM root device `_DSM` UUID (ACPI 6.4, 9.20.7).
pub const ROOT_DSM_UUID: &str = "2f10e7a4-9e91-11e4-89d3-123b93f75cba";
/// The handle `NCAL` gets for the root device (pmemvm's `ROOT_HANDLE`).
pub const ROOT_DSM_HANDLE: u64 = 0xffff_ffff;
/// Size of the DSM page.
pub const DSM_PAGE_SIZE: usize = 4096;
/// Offset of the request's input bytes in the page.
pub const DSM_IN_DATA_OFFSET: usize = 16;
/// Most input bytes a request can carry.
pub const DSM_IN_DATA_MAX: usize = DSM_PAGE_SIZE - DSM_IN_DATA_OFFSET;
/// Offset of the response's output bytes in the page.
pub const DSM_OUT_DATA_OFFSET: usize = 4;
/// Most output bytes a response can carry.
pub const DSM_OUT_DATA_MAX: usize = DSM_PAGE_SIZE - DSM_OUT_DATA_OFFSET;

/// The root `_DSM` function through which `_FIT` reads the NFIT's structures
/// (pmemvm's own, outside the ACPI-defined 0..31).
pub const FUNC_READ_FIT: u32 = 0x1_0000;
/// Most rounds `_FIT` asks for (restarts included): 4 MiB of structures.
const FIT_ROUNDS_MAX: u64 = 1024;
/// The longest reply pmemvm gives a FIT read (status and 4,084 bytes): a
/// longer one means nothing answered the doorbell (the page still holds the
/// request), and `_FIT` gives up at once.
pub const FIT_REPLY_MAX: u64 = 4088;

/// The child device name of the DIMM at `index` (`NV00` .. `NVFF`).
pub fn child_name(index: usize) -> String {
    format!("NV{index:02X}")
}

/// `NCAL`: the shared `_DSM` worker (see the module docs).
fn ncal(t: &DsmTransport) -> Vec<u8> {
    let uuid = aml::uuid(INTEL_DSM_UUID).unwrap_or([0; 16]);
    let root_uuid = aml::uuid(ROOT_DSM_UUID).unwrap_or([0; 16]);
    let page = aml::integer(t.page_addr);
    let wrong_uuid = |u: &[u8; 16]| {
        aml::if_(
            &aml::lnot(&aml::lequal(&aml::arg(0), &aml::buffer(u))),
            &[aml::ret(&aml::buffer(&[0]))],
        )
    };
    let body = vec![
        aml::if_(
            &aml::lequal(&aml::arg(4), &aml::integer(ROOT_DSM_HANDLE)),
            &[wrong_uuid(&root_uuid)],
        ),
        aml::else_(&[wrong_uuid(&uuid)]),
        aml::store(&aml::arg(4), &aml::path("NHDL")),
        aml::store(&aml::arg(1), &aml::path("NREV")),
        aml::store(&aml::arg(2), &aml::path("NFUN")),
        aml::store(&aml::integer(0), &aml::path("NLEN")),
        aml::if_(
            &aml::lequal(&aml::object_type(&aml::arg(3)), &aml::integer(4)),
            &[aml::if_(
                &aml::lgreater(&aml::size_of(&aml::arg(3)), &aml::integer(0)),
                &[
                    aml::store(
                        &aml::deref_of(&aml::index(&aml::arg(3), &aml::integer(0))),
                        &aml::local(0),
                    ),
                    aml::if_(
                        &aml::lequal(&aml::object_type(&aml::local(0)), &aml::integer(3)),
                        &[
                            aml::store(&aml::size_of(&aml::local(0)), &aml::path("NLEN")),
                            aml::store(&aml::local(0), &aml::path("NDAT")),
                        ],
                    ),
                ],
            )],
        ),
        aml::store(&page, &aml::path("NDBR")),
        aml::store(&aml::path("RLEN"), &aml::local(1)),
        aml::if_(
            &aml::lgreater(&aml::local(1), &aml::integer(DSM_OUT_DATA_MAX as u64)),
            &[aml::store(
                &aml::integer(DSM_OUT_DATA_MAX as u64),
                &aml::local(1),
            )],
        ),
        aml::store(&aml::path("RDAT"), &aml::local(2)),
        aml::ret(&aml::mid(&aml::local(2), &aml::integer(0), &aml::local(1))),
    ];
    aml::method("NCAL", 5, true, &body)
}

/// `_FIT` (see the module docs).
fn fit_method() -> Vec<u8> {
    let root_uuid = aml::uuid(ROOT_DSM_UUID).unwrap_or([0; 16]);
    let (fit, offset, reply, args, rounds, status, len) = (
        aml::local(0),
        aml::local(1),
        aml::local(2),
        aml::local(3),
        aml::local(4),
        aml::local(5),
        aml::local(6),
    );
    let restart = vec![
        aml::store(&aml::buffer(&[]), &fit),
        aml::store(&aml::integer(0), &offset),
    ];
    let body = vec![
        aml::store(&aml::buffer(&[]), &fit),
        aml::store(&aml::integer(0), &offset),
        aml::store(&aml::integer(0), &rounds),
        aml::while_(
            &aml::lless(&rounds, &aml::integer(FIT_ROUNDS_MAX)),
            &[
                aml::add(&rounds, &aml::integer(1), &rounds),
                aml::store(&aml::empty_package(1), &args),
                aml::store(
                    &aml::to_buffer(&offset),
                    &aml::index(&args, &aml::integer(0)),
                ),
                aml::store(
                    &aml::call(
                        "NCAL",
                        &[
                            aml::buffer(&root_uuid),
                            aml::integer(1),
                            aml::integer(u64::from(FUNC_READ_FIT)),
                            args.clone(),
                            aml::integer(ROOT_DSM_HANDLE),
                        ],
                    ),
                    &reply,
                ),
                aml::if_(
                    &aml::lless(&aml::size_of(&reply), &aml::integer(4)),
                    &[aml::break_()],
                ),
                aml::if_(
                    &aml::lgreater(&aml::size_of(&reply), &aml::integer(FIT_REPLY_MAX)),
                    &[aml::break_()],
                ),
                aml::store(
                    &aml::deref_of(&aml::index(&reply, &aml::integer(0))),
                    &status,
                ),
                aml::if_(&aml::lequal(&status, &aml::integer(1)), &restart),
                aml::else_(&[
                    aml::if_(
                        &aml::lnot(&aml::lequal(&status, &aml::integer(0))),
                        &[aml::break_()],
                    ),
                    aml::subtract(&aml::size_of(&reply), &aml::integer(4), &len),
                    aml::if_(&aml::lequal(&len, &aml::integer(0)), &[aml::ret(&fit)]),
                    aml::concatenate(&fit, &aml::mid(&reply, &aml::integer(4), &len), &fit),
                    aml::add(&offset, &len, &offset),
                ]),
            ],
        ),
        // Nothing (or nothing sensible) answered: no structures.
        aml::ret(&aml::buffer(&[])),
    ];
    aml::method("_FIT", 0, true, &body)
}

/// Builds the NVDIMM SSDT: `dimms` present, `slots` devices in all (at
/// least `dimms.len()`; the others are empty slots a DIMM can be hot-added into).
pub fn build(dimms: &[NvdimmDescription], slots: usize, dsm: Option<&DsmTransport>) -> Vec<u8> {
    let mut t = Sdt::new(*b"SSDT", SSDT_REVISION, NVDIMM_SSDT_OEM_TABLE_ID);
    let mut root = vec![aml::name("_HID", &aml::string("ACPI0012"))];
    if let Some(tr) = dsm {
        root.extend(root_dsm(tr));
        // Only a machine with empty slots has `_FIT`: without one the
        // static NFIT is all there ever is, and Linux reads it directly.
        if slots > dimms.len() {
            root.push(fit_method());
        }
    }
    let handles = dimms
        .iter()
        .map(|d| d.handle)
        .chain((dimms.len()..slots).map(|i| crate::nfit_handle(u32::try_from(i).unwrap_or(0))));
    for (i, handle) in handles.enumerate() {
        let handle = aml::integer(u64::from(handle));
        let mut body = vec![aml::name("_ADR", &handle)];
        if dsm.is_some() {
            let args = [
                aml::arg(0),
                aml::arg(1),
                aml::arg(2),
                aml::arg(3),
                handle.clone(),
            ];
            body.push(aml::method(
                "_DSM",
                4,
                false,
                &[aml::ret(&aml::call("NCAL", &args))],
            ));
        }
        root.push(aml::device(&child_name(i), &body));
    }
    let mut sb = vec![aml::device("NVDR", &root)];
    if let Some(tr) = dsm {
        sb.push(ged(tr, slots.max(dimms.len())));
    }
    t.append(&aml::scope("\\_SB", &sb));
    t.finish()
}

/// The root device's `_DSM` and the transport under it: the DSM page's
/// fields, the doorbell and `NCAL`. A read of the doorbell tells whether the
/// call found new media errors (an error injection asking for notification);
/// then the root device gets the notification a platform sends for them
/// (ACPI 6.4, 5.6.6: 0x81 on an NVDIMM root device).
fn root_dsm(tr: &DsmTransport) -> Vec<Vec<u8>> {
    let page_bits = DSM_PAGE_SIZE * 8;
    let args = [
        aml::arg(0),
        aml::arg(1),
        aml::arg(2),
        aml::arg(3),
        aml::integer(ROOT_DSM_HANDLE),
    ];
    let dsm = aml::method(
        "_DSM",
        4,
        true,
        &[
            aml::store(&aml::call("NCAL", &args), &aml::local(0)),
            aml::if_(
                &aml::lequal(&aml::path("NDBR"), &aml::integer(1)),
                &[aml::notify("\\_SB.NVDR", 0x81)],
            ),
            aml::ret(&aml::local(0)),
        ],
    );
    let page = tr.page_addr;
    vec![
        dsm,
        aml::op_region(
            "NPAG",
            RegionSpace::SystemMemory,
            page,
            DSM_PAGE_SIZE as u64,
        ),
        aml::field(
            "NPAG",
            FieldAccess::DWord,
            &[
                ("NHDL", 32),
                ("NREV", 32),
                ("NFUN", 32),
                ("NLEN", 32),
                ("NDAT", page_bits - DSM_IN_DATA_OFFSET * 8),
            ],
        ),
        aml::field(
            "NPAG",
            FieldAccess::DWord,
            &[("RLEN", 32), ("RDAT", page_bits - DSM_OUT_DATA_OFFSET * 8)],
        ),
        aml::op_region(
            "NDBL",
            RegionSpace::SystemIo,
            u64::from(tr.doorbell_port),
            4,
        ),
        aml::field("NDBL", FieldAccess::DWord, &[("NDBR", 32)]),
        ncal(tr),
    ]
}

/// Event bit of the root's 0x81 (new media errors) in the GED register.
pub const EVENT_MEDIA_ERRORS: u64 = 1;
/// Event bit of the root's 0x80 (NFIT changed).
pub const EVENT_NFIT_CHANGED: u64 = 2;
/// First event bit of the DIMMs' health notifications (DIMM `i` at bit
/// `EVENT_HEALTH_SHIFT + i`, for the first 30 DIMMs).
pub const EVENT_HEALTH_SHIFT: usize = 2;

/// `\_SB.NGED`: the Generic Event Device that carries pmemvm's
/// notifications while the guest runs (see the module docs).
fn ged(tr: &DsmTransport, dimms: usize) -> Vec<u8> {
    let bit = |b: u64| aml::and(&aml::local(0), &aml::integer(b));
    let mut evt = vec![
        aml::store(&aml::path("GEVT"), &aml::local(0)),
        aml::if_(&bit(EVENT_MEDIA_ERRORS), &[aml::notify("\\_SB.NVDR", 0x81)]),
        aml::if_(&bit(EVENT_NFIT_CHANGED), &[aml::notify("\\_SB.NVDR", 0x80)]),
    ];
    for i in 0..dimms.min(32 - EVENT_HEALTH_SHIFT) {
        evt.push(aml::if_(
            &bit(1 << (EVENT_HEALTH_SHIFT + i)),
            &[aml::notify(&format!("\\_SB.NVDR.{}", child_name(i)), 0x81)],
        ));
    }
    aml::device(
        "NGED",
        &[
            aml::name("_HID", &aml::string("ACPI0013")),
            aml::name("_UID", &aml::integer(0)),
            aml::name(
                "_CRS",
                &aml::resource::template(&[aml::resource::interrupt_edge_high(tr.event_gsi)]),
            ),
            aml::op_region("GEVR", RegionSpace::SystemIo, u64::from(tr.event_port), 4),
            aml::field("GEVR", FieldAccess::DWord, &[("GEVT", 32)]),
            aml::method("_EVT", 1, true, &evt),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdt::checksum;

    fn dimm(handle: u32) -> NvdimmDescription {
        NvdimmDescription {
            handle,
            spa_base: 1 << 32,
            spa_size: 1 << 30,
            flush_hint_addr: None,
            readonly: false,
            serial: 0,
            label_size: 0,
            proximity_domain: None,
        }
    }

    #[test]
    fn without_dsm_golden() {
        let t = build(&[dimm(1)], 1, None);
        assert_eq!(checksum(&t), 0);
        assert_eq!(&t[0..4], b"SSDT");
        assert_eq!(&t[16..24], b"NVDIMM  ");
        #[rustfmt::skip]
        let body: Vec<u8> = vec![
            // Scope (\_SB) {
            0x10, 0x29, b'\\', b'_', b'S', b'B', b'_',
            //   Device (NVDR) {
            0x5b, 0x82, 0x21, b'N', b'V', b'D', b'R',
            //     Name (_HID, "ACPI0012")
            0x08, b'_', b'H', b'I', b'D', 0x0d, b'A', b'C', b'P', b'I', b'0', b'0', b'1', b'2', 0x00,
            //     Device (NV00) { Name (_ADR, One) }
            0x5b, 0x82, 0x0b, b'N', b'V', b'0', b'0', 0x08, b'_', b'A', b'D', b'R', 0x01,
        ];
        assert_eq!(t[36..], body[..]);
    }

    fn count(hay: &[u8], needle: &[u8]) -> usize {
        hay.windows(needle.len()).filter(|w| *w == needle).count()
    }

    #[test]
    fn with_dsm_has_transport_objects() {
        let tr = DsmTransport::example();
        let t = build(&[dimm(1), dimm(2), dimm(0x100)], 3, Some(&tr));
        assert_eq!(checksum(&t), 0);
        // OperationRegion (NPAG, SystemMemory, 0x000FF000, 0x1000)
        assert_eq!(
            count(
                &t,
                &[
                    0x5b, 0x80, b'N', b'P', b'A', b'G', 0x00, 0x0c, 0x00, 0xf0, 0x0f, 0x00, 0x0b,
                    0x00, 0x10
                ]
            ),
            1
        );
        // OperationRegion (NDBL, SystemIO, 0x0510, 0x04)
        assert_eq!(
            count(
                &t,
                &[0x5b, 0x80, b'N', b'D', b'B', b'L', 0x01, 0x0b, 0x10, 0x05, 0x0a, 0x04]
            ),
            1
        );
        // Method (NCAL, 5, Serialized): flags 0x0D right after the name.
        assert_eq!(count(&t, &[b'N', b'C', b'A', b'L', 0x0d]), 1);
        // The Intel and root UUID buffers once each (in NCAL).
        assert_eq!(count(&t, &aml::uuid(INTEL_DSM_UUID).unwrap()), 1);
        assert_eq!(count(&t, &aml::uuid(ROOT_DSM_UUID).unwrap()), 1);
        // The root handle twice: the root's NCAL call and NCAL's test.
        assert_eq!(count(&t, &[0x0c, 0xff, 0xff, 0xff, 0xff]), 2);
        // No empty slot, no _FIT: the static NFIT is all there is.
        assert_eq!(count(&t, b"_FIT"), 0);
        // One _DSM per DIMM plus the root's; NCAL called with each handle.
        assert_eq!(count(&t, b"_DSM"), 4);
        // Each DIMM's device, and the GED's notification of its health.
        for n in ["NV00", "NV01", "NV02"] {
            assert_eq!(count(&t, n.as_bytes()), 2);
        }
        // The GED: its _HID, its GSI 16 (edge, active high), its register at
        // 0x514, and _EVT (1 argument, Serialized).
        assert_eq!(count(&t, b"ACPI0013\0"), 1);
        assert_eq!(count(&t, &[0x89, 0x06, 0x00, 0x03, 0x01, 16, 0, 0, 0]), 1);
        assert_eq!(
            count(
                &t,
                &[0x5b, 0x80, b'G', b'E', b'V', b'R', 0x01, 0x0b, 0x14, 0x05, 0x0a, 0x04]
            ),
            1
        );
        assert_eq!(count(&t, &[b'_', b'E', b'V', b'T', 0x09]), 1);
        // Notify (\_SB.NVDR, 0x81) in the root's _DSM and in _EVT; 0x80 in _EVT.
        assert_eq!(count(&t, b"\\._SB_NVDR\x0a\x81"), 2);
        assert_eq!(count(&t, b"\\._SB_NVDR\x0a\x80"), 1);
        assert_eq!(count(&t, b"\\/\x03_SB_NVDRNV02\x0a\x81"), 1);
        // Name (_ADR, 0x0100) and the matching NCAL (..., 0x0100) call.
        assert_eq!(count(&t, &[0x0b, 0x00, 0x01]), 2);
    }

    #[test]
    fn empty_slots_have_their_devices_from_boot() {
        let tr = DsmTransport::example();
        let t = build(&[dimm(1)], 3, Some(&tr));
        assert_eq!(checksum(&t), 0);
        // _FIT (no argument, Serialized) asks for the root function 0x10000
        // with the root's UUID and handle.
        assert_eq!(count(&t, &[b'_', b'F', b'I', b'T', 0x08]), 1);
        assert_eq!(count(&t, &[0x0c, 0x00, 0x00, 0x01, 0x00]), 1);
        assert_eq!(count(&t, &aml::uuid(ROOT_DSM_UUID).unwrap()), 2);
        assert_eq!(count(&t, &[0x0c, 0xff, 0xff, 0xff, 0xff]), 3);
        // Three children with _DSM besides the root's, the empty ones with
        // the handles a hot-added DIMM gets (crate::nfit_handle).
        assert_eq!(count(&t, b"_DSM"), 4);
        for (i, n) in ["NV00", "NV01", "NV02"].iter().enumerate() {
            assert_eq!(count(&t, n.as_bytes()), 2, "{n}");
            let handle = crate::nfit_handle(u32::try_from(i).unwrap());
            assert!(count(&t, &aml::integer(u64::from(handle))) >= 2, "{n}");
        }
        // Without DIMMs or slots beyond them, no empty slot.
        let t = build(&[dimm(1)], 0, Some(&tr));
        assert_eq!(count(&t, b"NV01"), 0);
    }
}
