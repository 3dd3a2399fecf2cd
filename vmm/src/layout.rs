//! Guest physical memory and I/O port layout of a pmemvm guest (x86_64).
//!
//! Every guest address and port number pmemvm uses is defined here, ordered by
//! address. Nothing else in the VMM writes a literal guest address.

use vm_memory::GuestAddress;

// ---- Low memory (below 1 MiB) -------------------------------------------

/// GDT used at entry: null, 64-bit code, flat data, 32-bit code (PVH), TSS.
pub const BOOT_GDT_START: GuestAddress = GuestAddress(0x0000_0500);
/// Number of 8-byte descriptors in the boot GDT (`cpu.rs` builds exactly these).
pub const BOOT_GDT_ENTRIES: usize = 5;
/// Size of the boot GDT.
pub const BOOT_GDT_SIZE: u64 = 8 * BOOT_GDT_ENTRIES as u64;
/// IDT (one empty gate) used at entry, right after the GDT.
pub const BOOT_IDT_START: GuestAddress = GuestAddress(BOOT_GDT_START.0 + BOOT_GDT_SIZE);
/// Size of the boot IDT.
pub const BOOT_IDT_SIZE: u64 = 8;
/// PVH `hvm_start_info` for ELF kernels entered through the PVH note.
pub const PVH_INFO_START: GuestAddress = GuestAddress(0x0000_6000);
/// Room for `hvm_start_info` (56 bytes).
pub const PVH_INFO_SIZE: u64 = 0x40;
/// PVH memory map (array of `hvm_memmap_table_entry`), right after the start info.
pub const PVH_MEMMAP_START: GuestAddress = GuestAddress(PVH_INFO_START.0 + PVH_INFO_SIZE);
/// Room for the PVH memory map (24-byte entries, up to the module list).
pub const PVH_MEMMAP_SIZE: u64 = PVH_MODLIST_START.0 - PVH_MEMMAP_START.0;
/// PVH module list (one `hvm_modlist_entry`: the initrd).
pub const PVH_MODLIST_START: GuestAddress = GuestAddress(0x0000_6fc0);
/// Room for the PVH module list.
pub const PVH_MODLIST_SIZE: u64 = ZERO_PAGE_START.0 - PVH_MODLIST_START.0;
/// Linux `boot_params` ("zero page") for the 64-bit boot protocol.
pub const ZERO_PAGE_START: GuestAddress = GuestAddress(0x0000_7000);
/// Size of the zero page.
pub const ZERO_PAGE_SIZE: u64 = 0x1000;
/// Lowest address of the boot vCPU's initial stack.
pub const BOOT_STACK_START: GuestAddress = GuestAddress(0x0000_8000);
/// Initial stack pointer for the boot vCPU (grows down towards `BOOT_STACK_START`).
pub const BOOT_STACK_POINTER: GuestAddress = GuestAddress(0x0000_8ff0);
/// Identity-mapped page tables for the 64-bit entry: PML4, PDPT, PD.
pub const PML4_START: GuestAddress = GuestAddress(0x0000_9000);
/// Page-directory-pointer table.
pub const PDPTE_START: GuestAddress = GuestAddress(0x0000_a000);
/// Page directory (first 1 GiB as 2 MiB pages).
pub const PDE_START: GuestAddress = GuestAddress(0x0000_b000);
/// Size of each boot page table.
pub const PAGE_TABLE_SIZE: u64 = 0x1000;
/// Kernel command line.
pub const CMDLINE_START: GuestAddress = GuestAddress(0x0002_0000);
/// Longest kernel command line accepted, including the terminating NUL.
pub const CMDLINE_MAX_SIZE: usize = 4096;
/// Start of the legacy EBDA/BIOS area, reserved in E820 up to 1 MiB.
pub const EBDA_START: GuestAddress = GuestAddress(0x0009_fc00);
/// ACPI Root System Description Pointer (also found by the legacy BIOS-area scan).
pub const RSDP_ADDR: GuestAddress = GuestAddress(0x000e_0000);
/// First ACPI table after the RSDP.
pub const ACPI_TABLES_START: GuestAddress = GuestAddress(0x000e_1000);
/// One page of guest RAM shared with the VMM for NVDIMM `_DSM` calls (label access).
pub const NVDIMM_DSM_PAGE_START: GuestAddress = GuestAddress(0x000f_f000);
/// Bytes available for ACPI tables (up to the DSM page).
pub const ACPI_TABLES_MAX_SIZE: u64 = NVDIMM_DSM_PAGE_START.0 - ACPI_TABLES_START.0;
/// End of the low reserved area; RAM above is usable.
pub const HIGH_RAM_START: GuestAddress = GuestAddress(0x0010_0000);

/// Every range pmemvm writes below 1 MiB before the guest runs, by address:
/// (start, size, what). Checked at compile time to be ordered and disjoint.
pub const BOOT_AREA: [(u64, u64, &str); 14] = [
    (BOOT_GDT_START.0, BOOT_GDT_SIZE, "boot GDT"),
    (BOOT_IDT_START.0, BOOT_IDT_SIZE, "boot IDT"),
    (PVH_INFO_START.0, PVH_INFO_SIZE, "PVH start info"),
    (PVH_MEMMAP_START.0, PVH_MEMMAP_SIZE, "PVH memory map"),
    (PVH_MODLIST_START.0, PVH_MODLIST_SIZE, "PVH module list"),
    (ZERO_PAGE_START.0, ZERO_PAGE_SIZE, "zero page"),
    (
        BOOT_STACK_START.0,
        BOOT_STACK_POINTER.0 + 0x10 - BOOT_STACK_START.0,
        "boot stack",
    ),
    (PML4_START.0, PAGE_TABLE_SIZE, "PML4"),
    (PDPTE_START.0, PAGE_TABLE_SIZE, "PDPT"),
    (PDE_START.0, PAGE_TABLE_SIZE, "PD"),
    (
        CMDLINE_START.0,
        CMDLINE_MAX_SIZE as u64,
        "kernel command line",
    ),
    (RSDP_ADDR.0, ACPI_TABLES_START.0 - RSDP_ADDR.0, "RSDP"),
    (ACPI_TABLES_START.0, ACPI_TABLES_MAX_SIZE, "ACPI tables"),
    (
        NVDIMM_DSM_PAGE_START.0,
        HIGH_RAM_START.0 - NVDIMM_DSM_PAGE_START.0,
        "NVDIMM _DSM page",
    ),
];

/// The index of the first range of `ranges` that overlaps its predecessor
/// or comes before it, or `None` when they are ordered and disjoint.
pub const fn first_overlap(ranges: &[(u64, u64, &str)]) -> Option<usize> {
    let mut i = 1;
    while i < ranges.len() {
        let (prev_start, prev_size, _) = ranges[i - 1];
        if prev_start + prev_size > ranges[i].0 {
            return Some(i);
        }
        i += 1;
    }
    None
}

const _: () = assert!(
    first_overlap(&BOOT_AREA).is_none(),
    "boot-area ranges overlap"
);
const _: () = assert!(
    BOOT_AREA[BOOT_AREA.len() - 1].0 + BOOT_AREA[BOOT_AREA.len() - 1].1 <= HIGH_RAM_START.0
);

// ---- 32-bit MMIO hole [3 GiB, 4 GiB) --------------------------------------

/// Start of the 32-bit MMIO hole; RAM beyond this continues at 4 GiB.
pub const MMIO_HOLE_START: GuestAddress = GuestAddress(0xc000_0000);
/// Size of the 32-bit MMIO hole.
pub const MMIO_HOLE_SIZE: u64 = 1 << 30;
/// virtio-mmio devices (the `--disk` files, the root file system and the
/// transfer disks), one 4 KiB page of registers each.
pub const VIRTIO_MMIO_START: GuestAddress = GuestAddress(0xd000_0000);
/// ISA interrupt lines of the virtio disks, in disk order: the legacy lines
/// nothing else here uses (0 timer, 1 keyboard, 2 cascade, 3 and 4 COM2 and
/// COM1, 8 RTC, 9 ACPI SCI, 12 mouse, 14 and 15 IDE are left alone).
pub const VIRTIO_IRQS: [u32; 5] = [5, 6, 7, 10, 11];
/// NVDIMM flush-hint pages, one unmapped 4 KiB page per DIMM: a guest write
/// there exits to pmemvm, which fdatasyncs that DIMM's backing file.
pub const NVDIMM_FLUSH_HINT_START: GuestAddress = GuestAddress(0xfe00_0000);
/// Size of one flush-hint page.
pub const NVDIMM_FLUSH_HINT_SIZE: u64 = 0x1000;
/// Most NVDIMMs the flush-hint window holds.
pub const NVDIMM_FLUSH_HINT_MAX: u64 = 256;
/// IOAPIC registers.
pub const IOAPIC_START: GuestAddress = GuestAddress(0xfec0_0000);
/// Local APIC registers.
pub const LAPIC_START: GuestAddress = GuestAddress(0xfee0_0000);
/// First address above the 32-bit MMIO hole.
pub const RAM_64BIT_START: GuestAddress = GuestAddress(1 << 32);

// ---- NVDIMMs ---------------------------------------------------------------

/// NVDIMM ranges are aligned to this (and the first starts at or above 4 GiB).
pub const NVDIMM_ALIGN: u64 = 1 << 30;
/// NVDIMM region sizes must be a multiple of this: since Linux 5.7 a
/// region's default `align` is 16 MiB, and ndctl refuses namespaces on a
/// region whose size is not a multiple of it.
pub const NVDIMM_REGION_ALIGN: u64 = 16 << 20;
/// Default size of the label storage area (ndctl's default), which follows
/// the region in the backing file.
pub const NVDIMM_DEFAULT_LABEL_SIZE: u64 = 128 << 10;
/// pmemvm's identity block at the end of each backing file (magic, DIMM
/// serial number, geometry): one 4 KiB page after the label area.
pub const NVDIMM_IDENTITY_SIZE: u64 = 4096;

// ---- Legacy persistent memory (E820 type 12) ------------------------------

/// Each `--pmem-legacy` range starts at a boundary of this, after the last
/// NVDIMM: Linux's fsdax/devdax info block places the data at an offset
/// aligned *in physical addresses* to the namespace's align (up to 1 GiB,
/// `ndctl create-namespace -m devdax -a 1g`), and ndctl falls back to 4 KiB
/// pages when the region's start is not aligned to the align asked for
/// (docs/nvdimm.md, "Legacy persistent memory").
pub const LEGACY_PMEM_ALIGN: u64 = 1 << 30;
/// `--pmem-legacy` sizes must be a multiple of this: Linux gives an e820
/// region (no mappings) the 16 MiB default `align` of every region of at
/// least 16 MiB, and ndctl refuses to reconfigure its namespace otherwise.
/// It also covers `memremap_pages`' 2 MiB subsection rule.
pub const LEGACY_PMEM_SIZE_ALIGN: u64 = NVDIMM_REGION_ALIGN;

// ---- CXL persistent memory (`--cxl-pmem`) ---------------------------------

/// A CXL device's capacity is a whole number of these (Identify reports it in
/// 256 MiB units; a fixed memory window and a region are 256 MiB aligned).
pub const CXL_CAPACITY_UNIT: u64 = 256 << 20;
/// Default label storage area of a CXL memory device (ndctl's and
/// `cxl_test`'s 128 KiB), after the capacity in the backing file.
pub const CXL_DEFAULT_LABEL_SIZE: u64 = 128 << 10;
/// Smallest label area accepted.
pub const CXL_MIN_LABEL_SIZE: u64 = 128 << 10;
/// Largest label area accepted.
pub const CXL_MAX_LABEL_SIZE: u64 = 16 << 20;
/// Most `--cxl-pmem` devices: one host bridge, root port and window each.
pub const CXL_MAX_DEVICES: usize = 16;
/// The first host bridge's root bus; host bridge *n* has buses
/// `CXL_FIRST_BUS + CXL_BUSES_PER_HOST_BRIDGE * n` and the next three (its
/// root port on the first, the device on the second).
pub const CXL_FIRST_BUS: u8 = 0x0c;
/// Buses each CXL host bridge decodes.
pub const CXL_BUSES_PER_HOST_BRIDGE: u8 = 4;
/// PCIe enhanced configuration space (ECAM, the MCFG's window) of segment 0,
/// 1 MiB per bus from bus 0, E820-reserved; Linux takes a window below 4 GiB
/// only when there is no DMI.
pub const CXL_ECAM_START: GuestAddress = GuestAddress(0xe000_0000);
/// Room for the ECAM: 128 buses.
pub const CXL_ECAM_MAX_SIZE: u64 = 128 << 20;
/// Each CXL host bridge's memory window below 4 GiB (its `_CRS`), where its
/// devices' BARs go: host bridge *n* at `CXL_HOST_BRIDGE_MMIO_START + n *
/// CXL_HOST_BRIDGE_MMIO_SIZE`.
pub const CXL_HOST_BRIDGE_MMIO_START: GuestAddress = GuestAddress(0xe800_0000);
/// Size of one host bridge's window (a bridge window is at least 1 MiB; the
/// device's register BAR is 128 KiB).
pub const CXL_HOST_BRIDGE_MMIO_SIZE: u64 = 4 << 20;
/// The host bridges' component registers (CHBCR, 64 KiB each, the CEDT's
/// CHBS), in no `_CRS` and not in E820.
pub const CXL_CHBCR_START: GuestAddress = GuestAddress(0xf000_0000);

const _: () = assert!(
    CXL_ECAM_START.0 + CXL_ECAM_MAX_SIZE <= CXL_HOST_BRIDGE_MMIO_START.0
        && CXL_HOST_BRIDGE_MMIO_START.0 + CXL_MAX_DEVICES as u64 * CXL_HOST_BRIDGE_MMIO_SIZE
            <= CXL_CHBCR_START.0
        && CXL_CHBCR_START.0 + CXL_MAX_DEVICES as u64 * 0x1_0000 <= NVDIMM_FLUSH_HINT_START.0
        && VIRTIO_MMIO_START.0 + 0x1000_0000 <= CXL_ECAM_START.0
        && (CXL_FIRST_BUS as usize + CXL_MAX_DEVICES * CXL_BUSES_PER_HOST_BRIDGE as usize) <= 256,
    "CXL ranges overlap each other or the MMIO hole's other ranges"
);
const _: () = assert!(
    (CXL_FIRST_BUS as u64 + CXL_MAX_DEVICES as u64 * CXL_BUSES_PER_HOST_BRIDGE as u64) << 20
        <= CXL_ECAM_MAX_SIZE,
    "the ECAM does not cover every CXL bus"
);

// ---- I/O ports ---------------------------------------------------------------

/// i8042 keyboard controller: data port 0x60, command port 0x64 (a write of
/// 0xfe there resets the machine).
pub const I8042_PORT: u16 = 0x60;
/// COM2 (16550): the host/guest data channel (fio JSON).
pub const COM2_PORT: u16 = 0x2f8;
/// COM1 (16550): the console.
pub const COM1_PORT: u16 = 0x3f8;
/// Number of ports of one 16550.
pub const SERIAL_PORT_SIZE: u16 = 8;
/// Legacy IRQ of COM1.
pub const COM1_IRQ: u32 = 4;
/// Legacy IRQ of COM2.
pub const COM2_IRQ: u32 = 3;
/// Guest-exit port (like QEMU's isa-debug-exit): a byte written here ends the
/// VM and becomes pmemvm's exit status.
pub const GUEST_EXIT_PORT: u16 = 0x501;
/// The pvpanic device (QEMU's ISA port, `QEMU0001` in the DSDT): the guest
/// kernel writes 1 here when it panics.
pub const PVPANIC_PORT: u16 = 0x505;
/// NVDIMM `_DSM` doorbell: the guest writes the DSM page address (u32) here.
pub const NVDIMM_DSM_PORT: u16 = 0x510;
/// The platform event register of the ACPI Generic Event Device (u32,
/// read-to-clear): which notifications the GED's `_EVT` sends.
pub const PLATFORM_EVENT_PORT: u16 = 0x514;
/// The GED's interrupt: the I/O APIC's first pin past the ISA lines (edge,
/// active high), so no legacy line changes meaning.
pub const PLATFORM_EVENT_GSI: u32 = 16;
/// ACPI sleep control register (FADT `SLEEP_CONTROL_REG`, 8 bit).
pub const ACPI_SLEEP_CONTROL_PORT: u16 = 0x600;
/// ACPI sleep status register (FADT `SLEEP_STATUS_REG`, 8 bit).
pub const ACPI_SLEEP_STATUS_PORT: u16 = 0x601;
/// ACPI reset register (FADT `RESET_REG`, 8 bit).
pub const ACPI_RESET_PORT: u16 = 0x602;
/// Value written to the reset register to reset the machine.
pub const ACPI_RESET_VALUE: u8 = 0x1;
/// SLP_TYP value of the `_S5_` (soft-off) package in the DSDT.
pub const ACPI_S5_SLP_TYP: u8 = 5;
/// PCI configuration mechanism #1: address register 0xCF8, data 0xCFC
/// (only with legacy persistent memory; see `devices::pci_host`).
pub const PCI_CONFIG_PORT: u16 = 0xcf8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_area_is_ordered_and_disjoint() {
        assert_eq!(first_overlap(&BOOT_AREA), None);
        // The IDT at 0x520 used to sit on the GDT's fifth (TSS) descriptor.
        let old = [
            (0x500, BOOT_GDT_SIZE, "boot GDT"),
            (0x520, BOOT_IDT_SIZE, "boot IDT"),
        ];
        assert_eq!(first_overlap(&old), Some(1));
        assert_eq!(BOOT_IDT_START.0, 0x528);
    }
}
