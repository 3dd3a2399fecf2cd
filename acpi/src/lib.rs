//! ACPI tables for pmemvm guests.
//!
//! Pure table builders: a [`GuestPlatform`] goes in, table bytes and
//! their guest addresses come out ([`build_tables`]). No KVM, no I/O: the VMM
//! copies [`AcpiTables`] into guest memory, and `pmemvm acpi --out DIR`
//! writes the same bytes to files for `iasl -d`.
//!
//! Tables built: RSDP (revision 2) → XSDT → FADT (hardware-reduced),
//! MADT, SRAT (when an NVDIMM has a proximity domain), NFIT (when there are
//! NVDIMMs) and the NVDIMM SSDT (`\_SB.NVDR`, `ACPI0012`), with the DSDT
//! referenced from the FADT. See `docs/acpi.md`
//! and `docs/nvdimm.md`.
#![forbid(unsafe_code)]

pub mod aml;
pub mod cedt;
pub mod cxl_dsdt;
pub mod dsdt;
pub mod fadt;
pub mod madt;
pub mod mcfg;
pub mod nfit;
pub mod nvdimm_ssdt;
pub mod sdt;
pub mod srat;

pub use nfit::nfit_handle;

/// What the guest machine looks like, as far as ACPI is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestPlatform {
    /// Number of vCPUs; local APIC ids are `0..cpus`.
    pub cpus: u32,
    /// Local APIC base address (normally 0xFEE0_0000).
    pub lapic_addr: u32,
    /// I/O APIC base address (normally 0xFEC0_0000).
    pub ioapic_addr: u32,
    /// I/O APIC id (the first id after the local APICs is fine).
    pub ioapic_id: u8,
    /// FADT `SLEEP_CONTROL_REG`: an 8-bit I/O port.
    pub sleep_control_port: u16,
    /// FADT `SLEEP_STATUS_REG`: an 8-bit I/O port.
    pub sleep_status_port: u16,
    /// FADT `RESET_REG`: an 8-bit I/O port.
    pub reset_port: u16,
    /// Value the guest writes to `RESET_REG` to reset.
    pub reset_value: u8,
    /// SLP_TYP of the DSDT's `_S5_` package (soft-off).
    pub s5_slp_typ: u8,
    /// 16550 serial ports as (base I/O port, ISA IRQ): `PNP0501` devices.
    pub serial_ports: Vec<(u16, u8)>,
    /// virtio-mmio devices as (register base, ISA IRQ): `LNRO0005` devices
    /// (Linux's virtio_mmio driver binds them from ACPI), 4 KiB each.
    pub virtio_mmio: Vec<(u32, u8)>,
    /// The pvpanic device's I/O port (`QEMU0001`, QEMU's ISA pvpanic):
    /// where the guest kernel reports a panic.
    pub pvpanic_port: Option<u16>,
    /// Guest RAM ranges as (base, length), all in proximity domain 0 (SRAT).
    pub ram: Vec<(u64, u64)>,
    /// NVDIMMs, in NFIT order.
    pub nvdimms: Vec<NvdimmDescription>,
    /// NVDIMM devices the SSDT declares (at least `nvdimms.len()`): the
    /// others are empty slots a DIMM can be hot-added into (`_FIT`, 0x80).
    pub nvdimm_slots: usize,
    /// Label transport; `None` emits no `_DSM` methods (all DIMMs label-less).
    pub dsm: Option<DsmTransport>,
    /// The CXL platform (`None`: no CXL device): a CEDT, an MCFG and the
    /// DSDT's CXL root and host bridges.
    pub cxl: Option<CxlDescription>,
}

/// The CXL platform as ACPI describes it: each host bridge (CEDT CHBS and a
/// DSDT `ACPI0016` device), each fixed memory window (CEDT CFMWS) and the
/// ECAM the bridges' buses are reached through (MCFG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CxlDescription {
    /// Host bridges, in `_UID` order.
    pub host_bridges: Vec<cedt::HostBridge>,
    /// Fixed memory windows.
    pub windows: Vec<cedt::FixedWindow>,
    /// The ECAM.
    pub ecam: mcfg::EcamWindow,
}

/// One NVDIMM as the guest sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvdimmDescription {
    /// NFIT device handle, equal to the ACPI child's `_ADR` (see [`nfit_handle`]).
    pub handle: u32,
    /// Guest physical base of the persistent-memory range.
    pub spa_base: u64,
    /// Length of the range (the label area is not part of it).
    pub spa_size: u64,
    /// One flush-hint address, on an unmapped MMIO page.
    pub flush_hint_addr: Option<u64>,
    /// Read-only DIMM: the region mapping says "not armed" (flags bit 3).
    pub readonly: bool,
    /// Serial number in the NFIT control region.
    pub serial: u32,
    /// Size of the label area; 0 = label-less (the `_DSM` reports no label functions).
    pub label_size: u32,
    /// NUMA proximity domain: set in the NFIT SPA range (flag "proximity
    /// domain valid") and given a SRAT memory affinity entry; `None` = none.
    pub proximity_domain: Option<u32>,
}

/// Where the NVDIMM `_DSM` AML and pmemvm exchange requests (docs/nvdimm.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DsmTransport {
    /// Guest physical address of a reserved 4 KiB RAM page (below 4 GiB).
    pub page_addr: u64,
    /// I/O port the AML writes the page address (u32) to, trapping to pmemvm.
    pub doorbell_port: u16,
    /// The platform event register (u32, read-to-clear) of the Generic
    /// Event Device that carries pmemvm's notifications while the guest
    /// runs (`\_SB.NGED`, `ACPI0013`).
    pub event_port: u16,
    /// The GED's interrupt: a GSI of the I/O APIC, edge-triggered, active high.
    pub event_gsi: u32,
}

impl GuestPlatform {
    /// A small machine for examples and tests: `cpus` vCPUs, the local and
    /// I/O APIC at their architectural addresses (the I/O APIC's id the first
    /// after the local APICs), the sleep and reset registers at 0x600..0x602,
    /// 512 MiB of RAM at 0, and no devices, NVDIMMs or `_DSM` transport. A VMM
    /// describes its own machine field by field from its layout.
    pub fn example(cpus: u32) -> Self {
        Self {
            cpus,
            lapic_addr: 0xfee0_0000,
            ioapic_addr: 0xfec0_0000,
            ioapic_id: u8::try_from(cpus).unwrap_or(u8::MAX),
            sleep_control_port: 0x600,
            sleep_status_port: 0x601,
            reset_port: 0x602,
            reset_value: 1,
            s5_slp_typ: 5,
            serial_ports: Vec::new(),
            virtio_mmio: Vec::new(),
            pvpanic_port: None,
            ram: vec![(0, 512 << 20)],
            nvdimms: Vec::new(),
            nvdimm_slots: 0,
            dsm: None,
            cxl: None,
        }
    }
}

impl CxlDescription {
    /// One CXL host bridge for examples and tests: `_UID` 12, its component registers at
    /// 0xFE80_0000, buses 0x0C to 0x0F, a 1 MiB BAR window at 0xFE00_0000, and the ECAM at
    /// 0xE000_0000 over buses 0 to 0x0F; no fixed memory window.
    pub fn example() -> Self {
        Self {
            host_bridges: vec![cedt::HostBridge {
                uid: 12,
                registers: 0xfe80_0000,
                buses: (0x0c, 0x0f),
                mmio32: (0xfe00_0000, 0x10_0000),
            }],
            windows: Vec::new(),
            ecam: mcfg::EcamWindow {
                base: 0xe000_0000,
                segment: 0,
                first_bus: 0,
                last_bus: 0x0f,
            },
        }
    }
}

impl DsmTransport {
    /// The transport of [`GuestPlatform::example`]'s machines when they have
    /// NVDIMMs: the page at 0xF_F000, the doorbell at 0x510, the event
    /// register at 0x514 on GSI 16.
    pub fn example() -> Self {
        Self {
            page_addr: 0xf_f000,
            doorbell_port: 0x510,
            event_port: 0x514,
            event_gsi: 16,
        }
    }
}

/// One built table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// File stem for dumps: "DSDT", "FACP", "APIC", "SRAT", "NFIT", "SSDT-1", "XSDT".
    pub name: String,
    /// The table signature.
    pub signature: [u8; 4],
    /// Guest physical address of the table.
    pub addr: u64,
    /// The table bytes (checksummed).
    pub bytes: Vec<u8>,
}

/// All tables of a guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpiTables {
    /// Guest physical address of the RSDP.
    pub rsdp_addr: u64,
    /// The 36-byte revision 2 RSDP.
    pub rsdp: Vec<u8>,
    /// The tables in address order; the XSDT is last.
    pub tables: Vec<Table>,
}

/// Why the tables could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcpiBuildError {
    /// No vCPU.
    #[error("the guest needs at least one vCPU, got 0")]
    NoCpus,
    /// More vCPUs than 8-bit xAPIC ids allow.
    #[error("{0} vCPUs requested; the MADT describes at most {MAX_CPUS} (8-bit APIC ids)")]
    TooManyCpus(u32),
    /// The I/O APIC id collides with a local APIC id.
    #[error("I/O APIC id {ioapic_id} collides with the local APIC ids 0..{cpus}")]
    IoapicIdCollision {
        /// The requested I/O APIC id.
        ioapic_id: u8,
        /// Number of vCPUs.
        cpus: u32,
    },
    /// Too many serial ports.
    #[error("{0} serial ports requested; at most {MAX_SERIAL_PORTS} are described")]
    TooManySerialPorts(usize),
    /// A serial port IRQ outside the ISA range.
    #[error("serial port {port:#x} uses IRQ {irq}; ISA IRQs are 0..=15")]
    BadSerialIrq {
        /// Base port.
        port: u16,
        /// The IRQ.
        irq: u8,
    },
    /// Too many NVDIMMs.
    #[error("{0} NVDIMMs requested; at most {MAX_NVDIMMS} are supported")]
    TooManyNvdimms(usize),
    /// Two NVDIMMs with the same handle.
    #[error("two NVDIMMs share the NFIT device handle {0:#x}")]
    DuplicateNvdimmHandle(u32),
    /// An NVDIMM of size 0, or one whose range wraps around the address space.
    #[error("NVDIMM {index} has an invalid range: base {base:#x}, size {size:#x}")]
    BadNvdimmRange {
        /// Position in `nvdimms`.
        index: usize,
        /// Base address.
        base: u64,
        /// Size.
        size: u64,
    },
    /// A RAM range that wraps around the address space.
    #[error("RAM range {index} has an invalid range: base {base:#x}, size {size:#x}")]
    BadRamRange {
        /// Position in `ram`.
        index: usize,
        /// Base address.
        base: u64,
        /// Size.
        size: u64,
    },
    /// The DSM page is not a 4 KiB aligned page below 4 GiB.
    #[error("the NVDIMM DSM page at {0:#x} must be 4 KiB aligned and below 4 GiB")]
    BadDsmPage(u64),
    /// The CXL description cannot be a CEDT.
    #[error(transparent)]
    Cedt(#[from] cedt::CedtError),
    /// The table area wraps around the address space.
    #[error("the ACPI table area at {addr:#x} of {size:#x} bytes wraps around the address space")]
    TablesAreaOutOfRange {
        /// Start of the area.
        addr: u64,
        /// Size of the area.
        size: u64,
    },
    /// The tables do not fit the reserved area.
    #[error("the ACPI tables need {needed} bytes but only {available} are reserved at {addr:#x}")]
    TablesTooLarge {
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
        /// Start of the area.
        addr: u64,
    },
}

/// Most vCPUs (local APIC ids 0..=253; 0xff is the broadcast id and one id
/// is left for the I/O APIC).
pub const MAX_CPUS: u32 = 254;
/// Most NVDIMMs (child names `NV00`..`NVFF`).
pub const MAX_NVDIMMS: usize = 256;
/// Most serial ports (`COM1`..`COM9`).
pub const MAX_SERIAL_PORTS: usize = 9;
/// Alignment of each table in guest memory.
pub const TABLE_ALIGN: u64 = 16;

/// Length of a revision 2 RSDP.
pub const RSDP_LEN: usize = 36;

fn validate(desc: &GuestPlatform) -> Result<(), AcpiBuildError> {
    if desc.cpus == 0 {
        return Err(AcpiBuildError::NoCpus);
    }
    if desc.cpus > MAX_CPUS {
        return Err(AcpiBuildError::TooManyCpus(desc.cpus));
    }
    if u32::from(desc.ioapic_id) < desc.cpus {
        return Err(AcpiBuildError::IoapicIdCollision {
            ioapic_id: desc.ioapic_id,
            cpus: desc.cpus,
        });
    }
    if desc.serial_ports.len() > MAX_SERIAL_PORTS {
        return Err(AcpiBuildError::TooManySerialPorts(desc.serial_ports.len()));
    }
    if let Some((port, irq)) = desc.serial_ports.iter().find(|(_, irq)| *irq > 15) {
        return Err(AcpiBuildError::BadSerialIrq {
            port: *port,
            irq: *irq,
        });
    }
    if desc.nvdimms.len().max(desc.nvdimm_slots) > MAX_NVDIMMS {
        return Err(AcpiBuildError::TooManyNvdimms(
            desc.nvdimms.len().max(desc.nvdimm_slots),
        ));
    }
    let mut handles = std::collections::BTreeSet::new();
    for (index, d) in desc.nvdimms.iter().enumerate() {
        if !handles.insert(d.handle) {
            return Err(AcpiBuildError::DuplicateNvdimmHandle(d.handle));
        }
        if d.spa_size == 0 || d.spa_base.checked_add(d.spa_size).is_none() {
            return Err(AcpiBuildError::BadNvdimmRange {
                index,
                base: d.spa_base,
                size: d.spa_size,
            });
        }
    }
    for (index, &(base, size)) in desc.ram.iter().enumerate() {
        if size == 0 || base.checked_add(size).is_none() {
            return Err(AcpiBuildError::BadRamRange { index, base, size });
        }
    }
    if let Some(t) = &desc.dsm {
        if t.page_addr % 4096 != 0 || t.page_addr > (1 << 32) - 4096 {
            return Err(AcpiBuildError::BadDsmPage(t.page_addr));
        }
    }
    Ok(())
}

/// Rounds `v` up to a multiple of `a` (used on small relative offsets only).
fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// Builds the RSDP pointing at the XSDT.
pub fn build_rsdp(xsdt_addr: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(RSDP_LEN);
    r.extend_from_slice(b"RSD PTR "); // 0 signature
    r.push(0); // 8 checksum (first 20 bytes)
    r.extend_from_slice(&sdt::OEM_ID); // 9 OEM id
    r.push(2); // 15 revision
    r.extend_from_slice(&0u32.to_le_bytes()); // 16 RSDT address (none)
    r.extend_from_slice(&36u32.to_le_bytes()); // 20 length
    r.extend_from_slice(&xsdt_addr.to_le_bytes()); // 24 XSDT address
    r.push(0); // 32 extended checksum
    r.extend_from_slice(&[0; 3]); // 33 reserved
    r[8] = sdt::checksum(&r[..20]);
    r[32] = sdt::checksum(&r);
    r
}

/// Builds the XSDT listing `entries`.
pub fn build_xsdt(entries: &[u64]) -> Vec<u8> {
    let mut t = sdt::Sdt::new(*b"XSDT", 1, sdt::OEM_TABLE_ID);
    for e in entries {
        t.u64(*e);
    }
    t.finish()
}

/// Builds every table for `desc`: the tables are laid out one after another
/// from `tables_addr` (each 16-byte aligned) in the order DSDT, FACP, APIC,
/// SRAT, NFIT, SSDT-1, XSDT, and must end within `tables_max_size` bytes; the RSDP
/// goes to `rsdp_addr` (the caller keeps it outside the tables area).
pub fn build_tables(
    desc: &GuestPlatform,
    rsdp_addr: u64,
    tables_addr: u64,
    tables_max_size: u64,
) -> Result<AcpiTables, AcpiBuildError> {
    validate(desc)?;
    // Lay the tables out at offsets relative to the (aligned) start of the
    // area; sizes do not depend on addresses, so the size check below holds
    // before any absolute address is trusted.
    let start = tables_addr
        .checked_next_multiple_of(TABLE_ALIGN)
        .filter(|s| {
            tables_addr
                .checked_add(tables_max_size)
                .is_some_and(|end| *s <= end)
        })
        .ok_or(AcpiBuildError::TablesAreaOutOfRange {
            addr: tables_addr,
            size: tables_max_size,
        })?;
    let mut tables: Vec<Table> = Vec::new();
    let mut rel: u64 = 0; // offset of the next table from `start`
    let mut used: u64 = 0; // end of the last table, relative to `start`
    let mut place = |tables: &mut Vec<Table>, name: &str, bytes: Vec<u8>| -> u64 {
        let addr = start.wrapping_add(rel);
        used = rel + bytes.len() as u64;
        rel = align_up(used, TABLE_ALIGN);
        let mut signature = [0u8; 4];
        signature.copy_from_slice(&bytes[..4]);
        tables.push(Table {
            name: name.to_string(),
            signature,
            addr,
            bytes,
        });
        addr
    };
    let dsdt_addr = place(&mut tables, "DSDT", dsdt::build(desc));
    let mut xsdt_entries = vec![place(&mut tables, "FACP", fadt::build(desc, dsdt_addr))];
    xsdt_entries.push(place(&mut tables, "APIC", madt::build(desc)));
    if desc.nvdimms.iter().any(|d| d.proximity_domain.is_some()) {
        xsdt_entries.push(place(&mut tables, "SRAT", srat::build(desc)));
    }
    if !desc.nvdimms.is_empty() {
        xsdt_entries.push(place(&mut tables, "NFIT", nfit::build(&desc.nvdimms)));
    }
    // Without a DIMM at boot but with slots, the root device is there for
    // Linux to read `_FIT` from when one arrives.
    if !desc.nvdimms.is_empty() || desc.nvdimm_slots > 0 {
        xsdt_entries.push(place(
            &mut tables,
            "SSDT-1",
            nvdimm_ssdt::build(&desc.nvdimms, desc.nvdimm_slots, desc.dsm.as_ref()),
        ));
    }
    if let Some(cxl) = &desc.cxl {
        let cedt = cedt::build(&cxl.host_bridges, &cxl.windows)?;
        xsdt_entries.push(place(&mut tables, "CEDT", cedt));
        xsdt_entries.push(place(&mut tables, "MCFG", mcfg::build(&[cxl.ecam])));
    }
    let xsdt_addr = place(&mut tables, "XSDT", build_xsdt(&xsdt_entries));
    let needed = (start - tables_addr) + used;
    if needed > tables_max_size {
        return Err(AcpiBuildError::TablesTooLarge {
            needed,
            available: tables_max_size,
            addr: tables_addr,
        });
    }
    Ok(AcpiTables {
        rsdp_addr,
        rsdp: build_rsdp(xsdt_addr),
        tables,
    })
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
