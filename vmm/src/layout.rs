//! Guest physical memory and I/O port layout of a pmemvm guest (x86_64).
//!
//! Every guest address and port number pmemvm uses is defined here, ordered by
//! address. Nothing else in the VMM writes a literal guest address.

use vm_memory::GuestAddress;

// ---- Low memory (below 1 MiB) -------------------------------------------

/// Initial stack pointer for the boot vCPU (grows down from the zero page).
pub const BOOT_STACK_POINTER: GuestAddress = GuestAddress(0x0000_8ff0);
/// Linux `boot_params` ("zero page") for the 64-bit boot protocol.
pub const ZERO_PAGE_START: GuestAddress = GuestAddress(0x0000_7000);
/// PVH `hvm_start_info` for ELF kernels entered through the PVH note.
pub const PVH_INFO_START: GuestAddress = GuestAddress(0x0000_6000);
/// PVH memory map (array of `hvm_memmap_table_entry`), right after the start info.
pub const PVH_MEMMAP_START: GuestAddress = GuestAddress(0x0000_6040);
/// Identity-mapped page tables for the 64-bit entry: PML4, PDPT, PD.
pub const PML4_START: GuestAddress = GuestAddress(0x0000_9000);
/// Page-directory-pointer table.
pub const PDPTE_START: GuestAddress = GuestAddress(0x0000_a000);
/// Page directory (first 1 GiB as 2 MiB pages).
pub const PDE_START: GuestAddress = GuestAddress(0x0000_b000);
/// GDT used at entry.
pub const BOOT_GDT_START: GuestAddress = GuestAddress(0x0000_0500);
/// IDT (empty) used at entry.
pub const BOOT_IDT_START: GuestAddress = GuestAddress(0x0000_0520);
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

// ---- 32-bit MMIO hole [3 GiB, 4 GiB) --------------------------------------

/// Start of the 32-bit MMIO hole; RAM beyond this continues at 4 GiB.
pub const MMIO_HOLE_START: GuestAddress = GuestAddress(0xc000_0000);
/// Size of the 32-bit MMIO hole.
pub const MMIO_HOLE_SIZE: u64 = 1 << 30;
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

// ---- I/O ports ---------------------------------------------------------------

/// i8042 command port: a write of 0xfe resets the machine.
pub const I8042_PORT: u16 = 0x64;
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
/// NVDIMM `_DSM` doorbell: the guest writes the DSM page address (u32) here.
pub const NVDIMM_DSM_PORT: u16 = 0x510;
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
