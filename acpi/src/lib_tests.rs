use super::*;
use crate::sdt::checksum;

const RSDP_ADDR: u64 = 0xe_0000;
const TABLES_ADDR: u64 = 0xe_1000;
const TABLES_MAX: u64 = 0x1_e000;

fn dimm(i: u32) -> NvdimmDescription {
    NvdimmDescription {
        handle: nfit_handle(i),
        spa_base: (4 + u64::from(i)) << 30,
        spa_size: 1 << 30,
        flush_hint_addr: Some(0xfe00_0000 + u64::from(i) * 0x1000),
        readonly: false,
        serial: i,
        label_size: 128 << 10,
        proximity_domain: Some(i + 1),
    }
}

fn desc(cpus: u32, dimms: u32) -> GuestPlatform {
    GuestPlatform {
        serial_ports: vec![(0x3f8, 4), (0x2f8, 3)],
        nvdimms: (0..dimms).map(dimm).collect(),
        dsm: Some(DsmTransport::example()),
        ..GuestPlatform::example(cpus)
    }
}

fn build(d: &GuestPlatform) -> Result<AcpiTables, AcpiBuildError> {
    build_tables(d, RSDP_ADDR, TABLES_ADDR, TABLES_MAX)
}

#[test]
fn rsdp_golden() {
    let r = build_rsdp(0x000e_1580);
    #[rustfmt::skip]
    let expected: [u8; 36] = [
        b'R', b'S', b'D', b' ', b'P', b'T', b'R', b' ', // signature
        r[8],                                           // checksum (below)
        b'P', b'M', b'E', b'M', b'V', b'M',             // OEM id
        0x02,                                           // revision 2
        0x00, 0x00, 0x00, 0x00,                         // RSDT address
        0x24, 0x00, 0x00, 0x00,                         // length 36
        0x80, 0x15, 0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, // XSDT address
        r[32],                                          // extended checksum
        0x00, 0x00, 0x00,                               // reserved
    ];
    assert_eq!(r, expected);
    assert_eq!(checksum(&r[..20]), 0);
    assert_eq!(checksum(&r), 0);
}

#[test]
fn layout_and_xsdt() {
    let t = build(&desc(2, 2)).unwrap();
    let names: Vec<&str> = t.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["DSDT", "FACP", "APIC", "SRAT", "NFIT", "SSDT-1", "XSDT"]
    );
    let mut prev_end = TABLES_ADDR;
    for table in &t.tables {
        assert_eq!(table.addr % TABLE_ALIGN, 0);
        assert!(table.addr >= prev_end, "{} overlaps", table.name);
        prev_end = table.addr + table.bytes.len() as u64;
        assert_eq!(checksum(&table.bytes), 0, "{}", table.name);
        assert_eq!(&table.bytes[..4], &table.signature);
        let len = u32::from_le_bytes(table.bytes[4..8].try_into().unwrap());
        assert_eq!(len as usize, table.bytes.len(), "{}", table.name);
    }
    assert!(prev_end <= TABLES_ADDR + TABLES_MAX);
    // RSDP → XSDT → FACP, APIC, SRAT, NFIT, SSDT; FACP → DSDT.
    let xsdt = t.tables.last().unwrap();
    assert_eq!(t.rsdp[24..32], xsdt.addr.to_le_bytes());
    assert_eq!(t.rsdp_addr, RSDP_ADDR);
    let entries: Vec<u64> = xsdt.bytes[36..]
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let expect: Vec<u64> = t.tables[1..6].iter().map(|t| t.addr).collect();
    assert_eq!(entries, expect);
    let facp = &t.tables[1];
    assert_eq!(facp.bytes[140..148], t.tables[0].addr.to_le_bytes());
}

#[test]
fn no_proximity_no_srat() {
    let mut d = desc(1, 2);
    d.nvdimms.iter_mut().for_each(|n| n.proximity_domain = None);
    let t = build(&d).unwrap();
    let names: Vec<&str> = t.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["DSDT", "FACP", "APIC", "NFIT", "SSDT-1", "XSDT"]);
}

#[test]
fn no_dimms_no_nfit_no_ssdt() {
    let t = build(&desc(1, 0)).unwrap();
    let names: Vec<&str> = t.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["DSDT", "FACP", "APIC", "XSDT"]);
    assert_eq!(t.tables[3].bytes.len(), 36 + 2 * 8);
}

#[test]
fn limits_fit() {
    // The largest machine fits the default area.
    let mut d = desc(MAX_CPUS, u32::try_from(MAX_NVDIMMS).unwrap());
    d.ioapic_id = 254;
    let t = build(&d).unwrap();
    let last = t.tables.last().unwrap();
    assert!(last.addr + last.bytes.len() as u64 <= TABLES_ADDR + TABLES_MAX);
}

#[test]
fn errors() {
    assert_eq!(build(&desc(0, 0)), Err(AcpiBuildError::NoCpus));
    assert_eq!(build(&desc(255, 0)), Err(AcpiBuildError::TooManyCpus(255)));
    let mut d = desc(4, 0);
    d.ioapic_id = 3;
    assert_eq!(
        build(&d),
        Err(AcpiBuildError::IoapicIdCollision {
            ioapic_id: 3,
            cpus: 4
        })
    );
    let mut d = desc(1, 0);
    d.serial_ports = vec![(0x3f8, 4); 10];
    assert_eq!(build(&d), Err(AcpiBuildError::TooManySerialPorts(10)));
    let mut d = desc(1, 0);
    d.serial_ports = vec![(0x3f8, 16)];
    assert_eq!(
        build(&d),
        Err(AcpiBuildError::BadSerialIrq {
            port: 0x3f8,
            irq: 16
        })
    );
    assert_eq!(
        build(&desc(1, 257)),
        Err(AcpiBuildError::TooManyNvdimms(257))
    );
    let mut d = desc(1, 2);
    d.nvdimms[1].handle = d.nvdimms[0].handle;
    assert_eq!(build(&d), Err(AcpiBuildError::DuplicateNvdimmHandle(1)));
    let mut d = desc(1, 1);
    d.nvdimms[0].spa_size = 0;
    assert!(matches!(
        build(&d),
        Err(AcpiBuildError::BadNvdimmRange { index: 0, .. })
    ));
    let mut d = desc(1, 1);
    d.nvdimms[0].spa_base = u64::MAX - 10;
    assert!(matches!(
        build(&d),
        Err(AcpiBuildError::BadNvdimmRange { .. })
    ));
    let mut d = desc(1, 1);
    d.ram.push((u64::MAX - 10, 100));
    assert_eq!(
        build(&d),
        Err(AcpiBuildError::BadRamRange {
            index: 1,
            base: u64::MAX - 10,
            size: 100
        })
    );
    for page in [0xf_f001, 0xffff_f000 + 0x1000, !0xfff] {
        let mut d = desc(1, 1);
        d.dsm = Some(DsmTransport {
            page_addr: page,
            doorbell_port: 0x510,
            event_port: 0x514,
            event_gsi: 16,
        });
        assert_eq!(build(&d), Err(AcpiBuildError::BadDsmPage(page)));
    }
    let e = build_tables(&desc(2, 1), RSDP_ADDR, TABLES_ADDR, 256).unwrap_err();
    assert!(
        matches!(e, AcpiBuildError::TablesTooLarge { available: 256, .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("only 256 are reserved at 0xe1000"),
        "{e}"
    );
    // An area at the very top of the address space fails cleanly.
    let e = build_tables(&desc(1, 0), RSDP_ADDR, u64::MAX - 100, 1 << 20).unwrap_err();
    assert!(
        matches!(e, AcpiBuildError::TablesAreaOutOfRange { .. }),
        "{e}"
    );
    let e = build_tables(&desc(1, 0), RSDP_ADDR, u64::MAX - 1000, 300).unwrap_err();
    assert!(matches!(e, AcpiBuildError::TablesTooLarge { .. }), "{e}");
    // The exact size fits; one byte less does not.
    let t = build(&desc(2, 1)).unwrap();
    let last = t.tables.last().unwrap();
    let exact = last.addr + last.bytes.len() as u64 - TABLES_ADDR;
    assert!(build_tables(&desc(2, 1), RSDP_ADDR, TABLES_ADDR, exact).is_ok());
    let e = build_tables(&desc(2, 1), RSDP_ADDR, TABLES_ADDR, exact - 1).unwrap_err();
    assert_eq!(
        e,
        AcpiBuildError::TablesTooLarge {
            needed: exact,
            available: exact - 1,
            addr: TABLES_ADDR
        }
    );
}
