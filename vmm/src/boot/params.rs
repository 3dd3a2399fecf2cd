//! The boot information a kernel reads first, written with linux-loader's
//! configurators: the Linux zero page (`boot_params` with the E820 map,
//! `LinuxBootConfigurator`), the PVH `hvm_start_info` with its memory map and
//! module list (`PvhBootConfigurator`), the command line (`Cmdline`,
//! `load_cmdline`); and the identity page tables of the 64-bit entry, which
//! no rust-vmm crate writes (Firecracker and Cloud Hypervisor keep their own
//! too). linux-loader has the E820 entry type but no builder: the map itself
//! is `memory::e820_map`, copied into `boot_params` or the PVH memory map
//! here.

use linux_loader::cmdline::Cmdline;
use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{boot_params, setup_header};
use linux_loader::loader::elf::start_info::{
    hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info,
};
use vm_memory::{Bytes, GuestMemoryMmap};

use super::{BootError, Initrd};
use crate::layout;
use crate::memory::E820Entry;

const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xaa55;
const KERNEL_HDR_MAGIC: u32 = 0x5372_6448;
const KERNEL_LOADER_OTHER: u8 = 0xff;
const KERNEL_MIN_ALIGNMENT_BYTES: u32 = 0x0100_0000;
const XEN_HVM_START_MAGIC_VALUE: u32 = 0x336e_c578;
/// Size of one `hvm_memmap_table_entry`.
const PVH_MEMMAP_ENTRY_SIZE: u64 = 24;

/// The command line as the kernel gets it, checked by linux-loader.
pub fn cmdline(text: &str) -> Result<Cmdline, BootError> {
    if text.len() >= layout::CMDLINE_MAX_SIZE {
        return Err(BootError::CmdlineTooLong(text.len()));
    }
    Cmdline::try_from(text, layout::CMDLINE_MAX_SIZE).map_err(|e| match e {
        linux_loader::cmdline::Error::InvalidCapacity | linux_loader::cmdline::Error::TooLarge => {
            BootError::CmdlineTooLong(text.len())
        }
        e => BootError::Cmdline(e),
    })
}

/// Writes the command line at its layout address; returns its length with the NUL.
pub fn write_cmdline(mem: &GuestMemoryMmap, cmdline: &Cmdline) -> Result<usize, BootError> {
    linux_loader::loader::load_cmdline(mem, layout::CMDLINE_START, cmdline)
        .map_err(BootError::CmdlineLoad)?;
    Ok(cmdline
        .as_cstring()
        .map(|c| c.as_bytes_with_nul().len())
        .unwrap_or(1))
}

/// The Linux zero page: the kernel's setup header (bzImage) or a default
/// one (plain ELF), command line, initrd, RSDP and the E820 map.
pub fn write_zero_page(
    mem: &GuestMemoryMmap,
    e820: &[E820Entry],
    initrd: Initrd,
    header: Option<setup_header>,
    cmdline_len: usize,
) -> Result<(), BootError> {
    let mut params = boot_params::default();
    if let Some(h) = header {
        params.hdr = h;
    }
    params.hdr.type_of_loader = KERNEL_LOADER_OTHER;
    params.hdr.boot_flag = KERNEL_BOOT_FLAG_MAGIC;
    params.hdr.header = KERNEL_HDR_MAGIC;
    params.hdr.cmd_line_ptr = u32::try_from(layout::CMDLINE_START.0).unwrap_or(0);
    params.hdr.cmdline_size = u32::try_from(cmdline_len).unwrap_or(0);
    if params.hdr.kernel_alignment == 0 {
        params.hdr.kernel_alignment = KERNEL_MIN_ALIGNMENT_BYTES;
    }
    if let Some((addr, size)) = initrd {
        // load_initrd keeps the initrd below 4 GiB (initrd_addr_max, MMIO hole).
        params.hdr.ramdisk_image =
            u32::try_from(addr).map_err(|_| BootError::InitrdAddress(addr))?;
        params.hdr.ramdisk_size =
            u32::try_from(size).map_err(|_| BootError::InitrdAddress(addr))?;
    }
    params.acpi_rsdp_addr = layout::RSDP_ADDR.0;
    if e820.len() > params.e820_table.len() {
        return Err(BootError::TooManyE820Entries(e820.len()));
    }
    for (slot, e) in params.e820_table.iter_mut().zip(e820) {
        slot.addr = e.addr;
        slot.size = e.size;
        slot.r#type = e.kind as u32;
    }
    params.e820_entries = u8::try_from(e820.len()).unwrap_or(0);
    LinuxBootConfigurator::write_bootparams(&BootParams::new(&params, layout::ZERO_PAGE_START), mem)
        .map_err(BootError::Configure)
}

/// The PVH start info with the memory map and the initrd as module 0.
pub fn write_pvh_info(
    mem: &GuestMemoryMmap,
    e820: &[E820Entry],
    initrd: Initrd,
) -> Result<(), BootError> {
    if e820.len() as u64 * PVH_MEMMAP_ENTRY_SIZE > layout::PVH_MEMMAP_SIZE {
        return Err(BootError::TooManyE820Entries(e820.len()));
    }
    let memmap: Vec<hvm_memmap_table_entry> = e820
        .iter()
        .map(|e| hvm_memmap_table_entry {
            addr: e.addr,
            size: e.size,
            type_: e.kind as u32,
            reserved: 0,
        })
        .collect();
    let modules: Vec<hvm_modlist_entry> = initrd
        .iter()
        .map(|&(paddr, size)| hvm_modlist_entry {
            paddr,
            size,
            ..Default::default()
        })
        .collect();
    let info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC_VALUE,
        version: 1,
        nr_modules: u32::try_from(modules.len()).unwrap_or(0),
        modlist_paddr: if modules.is_empty() {
            0
        } else {
            layout::PVH_MODLIST_START.0
        },
        cmdline_paddr: layout::CMDLINE_START.0,
        rsdp_paddr: layout::RSDP_ADDR.0,
        memmap_paddr: layout::PVH_MEMMAP_START.0,
        memmap_entries: u32::try_from(memmap.len()).unwrap_or(0),
        ..Default::default()
    };
    let mut params = BootParams::new(&info, layout::PVH_INFO_START);
    params.set_sections(&memmap, layout::PVH_MEMMAP_START);
    if !modules.is_empty() {
        params.set_modules(&modules, layout::PVH_MODLIST_START);
    }
    PvhBootConfigurator::write_bootparams(&params, mem).map_err(BootError::Configure)
}

/// Identity map of the first 1 GiB with 2 MiB pages for the 64-bit entry.
pub fn write_page_tables(mem: &GuestMemoryMmap) -> Result<(), BootError> {
    const PRESENT_RW: u64 = 0x3;
    const PAGE_SIZE_2M: u64 = 0x80;
    mem.write_obj(layout::PDPTE_START.0 | PRESENT_RW, layout::PML4_START)?;
    mem.write_obj(layout::PDE_START.0 | PRESENT_RW, layout::PDPTE_START)?;
    let mut pd = Vec::with_capacity(4096);
    for i in 0..512u64 {
        pd.extend_from_slice(&((i << 21) | PRESENT_RW | PAGE_SIZE_2M).to_le_bytes());
    }
    mem.write_slice(&pd, layout::PDE_START)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::E820Type;
    use vm_memory::GuestAddress;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 2 << 20)]).unwrap()
    }

    fn map() -> Vec<E820Entry> {
        vec![
            E820Entry {
                addr: 0,
                size: 0x9fc00,
                kind: E820Type::Ram,
            },
            E820Entry {
                addr: 0x10_0000,
                size: 0x10_0000,
                kind: E820Type::Ram,
            },
        ]
    }

    #[test]
    fn pvh_info_memmap_and_module_land_at_their_layout_addresses() {
        let m = mem();
        write_pvh_info(&m, &map(), Some((0x18_0000, 0x1234))).unwrap();
        let info: hvm_start_info = m.read_obj(layout::PVH_INFO_START).unwrap();
        assert_eq!(info.magic, XEN_HVM_START_MAGIC_VALUE);
        assert_eq!((info.nr_modules, info.memmap_entries), (1, 2));
        let e1: hvm_memmap_table_entry = m
            .read_obj(GuestAddress(
                layout::PVH_MEMMAP_START.0 + PVH_MEMMAP_ENTRY_SIZE,
            ))
            .unwrap();
        assert_eq!((e1.addr, e1.size, e1.type_), (0x10_0000, 0x10_0000, 1));
        let module: hvm_modlist_entry = m.read_obj(layout::PVH_MODLIST_START).unwrap();
        assert_eq!((module.paddr, module.size), (0x18_0000, 0x1234));
    }

    #[test]
    fn zero_page_has_the_e820_map_and_the_initrd() {
        let m = mem();
        write_zero_page(&m, &map(), Some((0x18_0000, 0x1234)), None, 10).unwrap();
        let p: boot_params = m.read_obj(layout::ZERO_PAGE_START).unwrap();
        assert_eq!(p.e820_entries, 2);
        assert_eq!({ p.e820_table[1].addr }, 0x10_0000);
        assert_eq!({ p.hdr.ramdisk_image }, 0x18_0000);
        assert_eq!({ p.hdr.boot_flag }, KERNEL_BOOT_FLAG_MAGIC);
        assert_eq!({ p.acpi_rsdp_addr }, layout::RSDP_ADDR.0);
    }

    /// The map of `--memory 512M --pmem-legacy 256M` (no NVDIMM): the range
    /// at 4 GiB, type 12.
    fn map_with_legacy_pmem() -> Vec<E820Entry> {
        let ram = crate::memory::ram_regions(512 << 20).unwrap();
        let bases = crate::memory::legacy_pmem_bases(&ram, &[], &[256 << 20], 46).unwrap();
        assert_eq!(bases, vec![1 << 32]);
        crate::memory::e820_map(&ram, &[(bases[0], 256 << 20)], &[])
    }

    #[test]
    fn pvh_memmap_lists_legacy_pmem_as_type_12() {
        let m = mem();
        let map = map_with_legacy_pmem();
        write_pvh_info(&m, &map, None).unwrap();
        let info: hvm_start_info = m.read_obj(layout::PVH_INFO_START).unwrap();
        assert_eq!(info.memmap_entries, 4);
        let entry = |i: u64| -> hvm_memmap_table_entry {
            m.read_obj(GuestAddress(
                layout::PVH_MEMMAP_START.0 + i * PVH_MEMMAP_ENTRY_SIZE,
            ))
            .unwrap()
        };
        let last = entry(3);
        assert_eq!(
            (last.addr, last.size, last.type_),
            (0x1_0000_0000, 256 << 20, 12)
        );
        // Everything before it is RAM or reserved, below 4 GiB.
        for i in 0..3 {
            let e = entry(i);
            assert!(matches!(e.type_, 1 | 2) && e.addr + e.size <= 0xc000_0000);
        }
    }

    #[test]
    fn zero_page_e820_lists_legacy_pmem_as_type_12() {
        let m = mem();
        let map = map_with_legacy_pmem();
        write_zero_page(&m, &map, None, None, 10).unwrap();
        let p: boot_params = m.read_obj(layout::ZERO_PAGE_START).unwrap();
        assert_eq!(p.e820_entries, 4);
        let e = p.e820_table[3];
        assert_eq!(
            ({ e.addr }, { e.size }, { e.r#type }),
            (0x1_0000_0000, 256 << 20, 12)
        );
        assert_eq!({ p.e820_table[2].r#type }, E820Type::Ram as u32);
    }

    #[test]
    fn command_line_is_checked_and_written() {
        assert!(matches!(
            cmdline(&"x".repeat(layout::CMDLINE_MAX_SIZE)),
            Err(BootError::CmdlineTooLong(_))
        ));
        let m = mem();
        let c = cmdline("console=ttyS0 panic=-1").unwrap();
        assert_eq!(write_cmdline(&m, &c).unwrap(), 23);
        let mut b = [0u8; 23];
        m.read_slice(&mut b, layout::CMDLINE_START).unwrap();
        assert_eq!(&b, b"console=ttyS0 panic=-1\0");
    }
}
