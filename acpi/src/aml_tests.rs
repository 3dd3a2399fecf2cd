use super::*;

#[test]
fn pkg_length_boundaries() {
    assert_eq!(pkg_length(0), vec![0x01]);
    assert_eq!(pkg_length(62), vec![0x3f]);
    // 63 content bytes + 2 length bytes = 65 = 0x41.
    assert_eq!(pkg_length(63), vec![0x41, 0x04]);
    assert_eq!(pkg_length(4093), vec![0x4f, 0xff]);
    // 4094 + 3 = 4097 = 0x1001.
    assert_eq!(pkg_length(4094), vec![0x81, 0x00, 0x01]);
}

#[test]
fn name_strings() {
    assert_eq!(name_string("_HID"), b"_HID".to_vec());
    assert_eq!(name_string("_S5"), b"_S5_".to_vec());
    assert_eq!(
        name_string("\\_SB.NVDR"),
        b"\\.\x5f\x53\x42\x5fNVDR".to_vec()
    );
    assert_eq!(
        name_string("\\_SB.NVDR.NV00"),
        b"\\/\x03_SB_NVDRNV00".to_vec()
    );
    assert_eq!(name_string("^NCAL"), b"^NCAL".to_vec());
    assert_eq!(name_string("\\"), vec![b'\\', 0]);
}

#[test]
fn integers() {
    assert_eq!(integer(0), vec![0x00]);
    assert_eq!(integer(1), vec![0x01]);
    assert_eq!(integer(5), vec![0x0a, 5]);
    assert_eq!(integer(0x3f8), vec![0x0b, 0xf8, 0x03]);
    assert_eq!(integer(0xff000), vec![0x0c, 0x00, 0xf0, 0x0f, 0x00]);
    assert_eq!(integer(0x1_0000_0000), vec![0x0e, 0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(integer(u64::MAX), vec![0xff]);
}

#[test]
fn eisa_ids() {
    // iasl: EisaId ("PNP0501") == 0x0105D041.
    assert_eq!(eisa_id("PNP0501"), Some(0x0105_d041));
    // EisaId ("PNP0A03") == 0x030AD041.
    assert_eq!(eisa_id("PNP0A03"), Some(0x030a_d041));
    assert_eq!(eisa_id("pnp0501"), None);
    assert_eq!(eisa_id("PNP05"), None);
}

#[test]
fn uuids() {
    // ToUUID ("4309AC30-0D11-11E4-9191-0800200C9A66")
    assert_eq!(
        uuid("4309ac30-0d11-11e4-9191-0800200c9a66"),
        Some([
            0x30, 0xac, 0x09, 0x43, 0x11, 0x0d, 0xe4, 0x11, 0x91, 0x91, 0x08, 0x00, 0x20, 0x0c,
            0x9a, 0x66
        ])
    );
    assert_eq!(uuid("4309ac30-0d11-11e4-9191"), None);
    assert_eq!(uuid("4309ac3x-0d11-11e4-9191-0800200c9a66"), None);
}

#[test]
fn small_terms() {
    // Name (_S5, Package () { 5, 5, 0, 0 })
    assert_eq!(
        name(
            "_S5",
            &package(&[integer(5), integer(5), integer(0), integer(0)])
        ),
        vec![0x08, b'_', b'S', b'5', b'_', 0x12, 0x08, 0x04, 0x0a, 5, 0x0a, 5, 0, 0]
    );
    // Method (_STA, 0, NotSerialized) { Return (0x0F) }
    assert_eq!(
        method("_STA", 0, false, &[ret(&integer(0x0f))]),
        vec![0x14, 0x09, b'_', b'S', b'T', b'A', 0x00, 0xa4, 0x0a, 0x0f]
    );
    // Field (NPAG, DWordAcc, NoLock, Preserve) { NHDL, 32, , 32, NDAT, 32640 }
    assert_eq!(
        field(
            "NPAG",
            FieldAccess::DWord,
            &[("NHDL", 32), ("", 32), ("NDAT", 32640)]
        ),
        vec![
            0x5b, 0x81, 0x14, b'N', b'P', b'A', b'G', 0x03, b'N', b'H', b'D', b'L', 0x20, 0x00,
            0x20, b'N', b'D', b'A', b'T', 0x80, 0xf8, 0x07
        ]
    );
    // ResourceTemplate () { IO (Decode16, 0x3F8, 0x3F8, 0x01, 0x08) IRQNoFlags () {4} }
    assert_eq!(
        resource::template(&[resource::io16(0x3f8, 8), resource::irq_no_flags(4)]),
        vec![
            0x11, 0x10, 0x0a, 0x0d, 0x47, 0x01, 0xf8, 0x03, 0xf8, 0x03, 0x01, 0x08, 0x22, 0x10,
            0x00, 0x79, 0x00
        ]
    );
}

#[test]
fn buffer_field_and_logic_terms() {
    // CreateDWordField (Arg3, 0x08, CDW3)
    assert_eq!(
        create_dword_field(&arg(3), 8, "CDW3"),
        vec![0x8a, 0x6b, 0x0a, 0x08, b'C', b'D', b'W', b'3']
    );
    // Or (CDW1, 0x10, CDW1)
    assert_eq!(
        or_into(&path("CDW1"), &integer(0x10), &path("CDW1")),
        vec![0x7d, b'C', b'D', b'W', b'1', 0x0a, 0x10, b'C', b'D', b'W', b'1']
    );
    // And (CDW3, 0x10, Local0)
    assert_eq!(
        and_into(&path("CDW3"), &integer(0x10), &local(0)),
        vec![0x7b, b'C', b'D', b'W', b'3', 0x0a, 0x10, 0x60]
    );
    // LOr (Arg0, One)
    assert_eq!(lor(&arg(0), &integer(1)), vec![0x91, 0x68, 0x01]);
}
