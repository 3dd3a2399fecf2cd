//! Loading the guest kernel, initrd and command line, and writing the boot
//! information the kernel reads first: the Linux zero page (bzImage, 64-bit
//! boot protocol) or `hvm_start_info` (ELF vmlinux through its PVH note).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use linux_loader::loader::bootparam::boot_params;
use linux_loader::loader::elf::{Elf, PvhBootCapability};
use linux_loader::loader::{BzImage, KernelLoader};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout;
use crate::memory::E820Entry;

/// Errors loading the kernel and boot data.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// Kernel or initrd cannot be opened or read.
    #[error("cannot read {what} {path}: {source}")]
    Read {
        /// "kernel" or "initrd".
        what: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Kernel or initrd path is a directory.
    #[error("{what} {0} is a directory; give the path of a file", what = .1)]
    IsDirectory(PathBuf, &'static str),
    /// Neither ELF nor bzImage.
    #[error("kernel {0} is neither an ELF vmlinux nor a bzImage")]
    UnknownFormat(PathBuf),
    /// linux-loader refused the image.
    #[error("kernel {path} cannot be loaded: {source}")]
    Load {
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: linux_loader::loader::Error,
    },
    /// The kernel (with its decompression space) does not fit in RAM.
    #[error("--memory is too small for kernel {path}: it needs RAM up to {needed:#x}; give more memory (e.g. --memory 512M)")]
    KernelTooBig {
        /// Path.
        path: PathBuf,
        /// Highest address needed.
        needed: u64,
    },
    /// The initrd does not fit below the limit.
    #[error("--memory is too small for initrd {path} ({size} bytes) next to the kernel; give more memory")]
    InitrdTooBig {
        /// Path.
        path: PathBuf,
        /// Initrd bytes.
        size: u64,
    },
    /// Command line too long.
    #[error("the kernel command line is {0} bytes; at most {max} are accepted", max = layout::CMDLINE_MAX_SIZE - 1)]
    CmdlineTooLong(usize),
    /// Writing boot data into guest memory failed.
    #[error("writing boot data into guest memory failed: {0}")]
    GuestMemory(#[from] vm_memory::GuestMemoryError),
}

impl BootError {
    /// True when the user's input is at fault (exit status 2).
    pub fn is_usage(&self) -> bool {
        !matches!(self, Self::GuestMemory(_))
    }
}

/// Kernel image formats pmemvm boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelFormat {
    /// ELF vmlinux (entered through its PVH note, or in 64-bit mode at its entry without one).
    Elf,
    /// bzImage (64-bit Linux boot protocol).
    BzImage,
}

/// Where and how the boot vCPU starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryPoint {
    /// 32-bit protected mode, paging off, `rbx` = start info (PVH).
    Pvh(u64),
    /// 64-bit long mode with identity paging, `rsi` = zero page (bzImage or plain ELF).
    Linux64(u64),
}

/// Opens a file the user named, with messages that say which one.
fn open_input(path: &Path, what: &'static str) -> Result<File, BootError> {
    if path.is_dir() {
        return Err(BootError::IsDirectory(path.into(), what));
    }
    File::open(path).map_err(|source| BootError::Read {
        what,
        path: path.into(),
        source,
    })
}

/// Detects the kernel format from its first bytes.
pub fn detect_format(path: &Path) -> Result<KernelFormat, BootError> {
    let mut f = open_input(path, "kernel")?;
    let mut head = [0u8; 0x206];
    let n = read_up_to(&mut f, &mut head).map_err(|source| BootError::Read {
        what: "kernel",
        path: path.into(),
        source,
    })?;
    if n >= 4 && head[..4] == *b"\x7fELF" {
        return Ok(KernelFormat::Elf);
    }
    if n >= 0x206 && head[0x202..0x206] == *b"HdrS" {
        return Ok(KernelFormat::BzImage);
    }
    Err(BootError::UnknownFormat(path.into()))
}

/// True when the kernel is Linux: a bzImage, or an ELF carrying Linux's
/// ELF notes (name "Linux"). Used to warn on hosts that cannot run it.
pub fn looks_like_linux(path: &Path) -> bool {
    match detect_format(path) {
        Ok(KernelFormat::BzImage) => true,
        Ok(KernelFormat::Elf) => elf_has_linux_note(path).unwrap_or(false),
        Err(_) => false,
    }
}

/// Scans the ELF's PT_NOTE segments for a note named "Linux".
fn elf_has_linux_note(path: &Path) -> std::io::Result<bool> {
    const PT_NOTE: u32 = 4;
    let mut f = File::open(path)?;
    let mut ehdr = [0u8; 64];
    f.read_exact(&mut ehdr)?;
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let phoff = u64_at(&ehdr, 0x20);
    let phentsize = u64::from(u16_at(&ehdr, 0x36));
    let phnum = u64::from(u16_at(&ehdr, 0x38)).min(256);
    if phentsize < 56 {
        return Ok(false);
    }
    for i in 0..phnum {
        let mut ph = [0u8; 56];
        f.seek(SeekFrom::Start(phoff.saturating_add(i * phentsize)))?;
        f.read_exact(&mut ph)?;
        if u32_at(&ph, 0) != PT_NOTE {
            continue;
        }
        let (off, size) = (u64_at(&ph, 0x08), u64_at(&ph, 0x20).min(1 << 16));
        let mut notes = vec![0u8; usize::try_from(size).unwrap_or(0)];
        f.seek(SeekFrom::Start(off))?;
        let n = read_up_to(&mut f, &mut notes)?;
        if notes[..n].windows(6).any(|w| w == b"Linux\0") {
            return Ok(true);
        }
    }
    Ok(false)
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read(&mut buf[done..])? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// Boot inputs.
#[derive(Debug)]
pub struct BootInputs<'a> {
    /// Kernel path.
    pub kernel: &'a Path,
    /// Initrd path.
    pub initrd: Option<&'a Path>,
    /// Bytes appended to the initrd (a second cpio archive).
    pub initrd_append: &'a [u8],
    /// Command line.
    pub cmdline: &'a str,
    /// E820 map.
    pub e820: &'a [E820Entry],
    /// End of RAM below the MMIO hole.
    pub low_ram_end: u64,
}

/// Loads everything and returns where the boot vCPU starts.
pub fn load(mem: &GuestMemoryMmap, inputs: &BootInputs) -> Result<EntryPoint, BootError> {
    let format = detect_format(inputs.kernel)?;
    if inputs.cmdline.len() >= layout::CMDLINE_MAX_SIZE {
        return Err(BootError::CmdlineTooLong(inputs.cmdline.len()));
    }
    let mut kernel = open_input(inputs.kernel, "kernel")?;
    let load_err = |source| BootError::Load {
        path: inputs.kernel.into(),
        source,
    };
    let too_big = |needed| BootError::KernelTooBig {
        path: inputs.kernel.into(),
        needed,
    };
    // Check the fit before writing anything, so a small --memory gets a clear message.
    let (entry, kernel_end, setup_header) = match format {
        KernelFormat::Elf => {
            let r = Elf::load(mem, None, &mut kernel, Some(layout::HIGH_RAM_START)).map_err(
                |e| match e {
                    linux_loader::loader::Error::Elf(
                        linux_loader::loader::elf::Error::ReadKernelImage,
                    ) => too_big(inputs.low_ram_end + 1),
                    e => load_err(e),
                },
            )?;
            let entry = match r.pvh_boot_cap {
                PvhBootCapability::PvhEntryPresent(a) => EntryPoint::Pvh(a.0),
                _ => EntryPoint::Linux64(elf_entry(&mut kernel).map_err(|source| {
                    BootError::Read {
                        what: "kernel",
                        path: inputs.kernel.into(),
                        source,
                    }
                })?),
            };
            (entry, r.kernel_end, None)
        }
        KernelFormat::BzImage => {
            let hdr = bz_header(&mut kernel).map_err(|source| BootError::Read {
                what: "kernel",
                path: inputs.kernel.into(),
                source,
            })?;
            let needed = u64::from(hdr.0).saturating_add(u64::from(hdr.1));
            if needed > inputs.low_ram_end {
                return Err(too_big(needed));
            }
            let r = BzImage::load(mem, None, &mut kernel, Some(layout::HIGH_RAM_START))
                .map_err(load_err)?;
            let header = r.setup_header.unwrap_or_default();
            (
                EntryPoint::Linux64(r.kernel_load.0 + 0x200),
                r.kernel_end.max(needed),
                Some(header),
            )
        }
    };
    if kernel_end > inputs.low_ram_end {
        return Err(too_big(kernel_end));
    }

    let initrd = load_initrd(
        mem,
        inputs,
        kernel_end,
        setup_header.map(|h| h.initrd_addr_max),
    )?;

    let mut cmdline = inputs.cmdline.as_bytes().to_vec();
    cmdline.push(0);
    mem.write_slice(&cmdline, layout::CMDLINE_START)?;

    match entry {
        EntryPoint::Pvh(_) => write_pvh_info(mem, inputs, initrd)?,
        EntryPoint::Linux64(_) => {
            write_zero_page(mem, inputs, initrd, setup_header, cmdline.len())?;
            write_page_tables(mem)?;
        }
    }
    Ok(entry)
}

/// (code32_start, init_size) of a bzImage.
fn bz_header(f: &mut File) -> std::io::Result<(u32, u32)> {
    let mut b = [0u8; 4];
    f.seek(SeekFrom::Start(0x214))?;
    f.read_exact(&mut b)?;
    let code32 = u32::from_le_bytes(b);
    f.seek(SeekFrom::Start(0x260))?;
    f.read_exact(&mut b)?;
    Ok((code32, u32::from_le_bytes(b)))
}

fn elf_entry(f: &mut File) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    f.seek(SeekFrom::Start(0x18))?;
    f.read_exact(&mut b)?;
    // Linux vmlinux entry addresses are virtual (0xffffffff8...): take the physical alias.
    Ok(u64::from_le_bytes(b) & 0x7fff_ffff)
}

/// (address, size) of the loaded initrd.
type Initrd = Option<(u64, u64)>;

fn load_initrd(
    mem: &GuestMemoryMmap,
    inputs: &BootInputs,
    kernel_end: u64,
    addr_max: Option<u32>,
) -> Result<Initrd, BootError> {
    let Some(path) = inputs.initrd else {
        return Ok(None);
    };
    let mut data = Vec::new();
    open_input(path, "initrd")?
        .read_to_end(&mut data)
        .map_err(|source| BootError::Read {
            what: "initrd",
            path: path.into(),
            source,
        })?;
    // A second cpio archive must start 4-byte aligned after the first.
    if !inputs.initrd_append.is_empty() {
        data.resize(data.len().next_multiple_of(4), 0);
        data.extend_from_slice(inputs.initrd_append);
    }
    let size = data.len() as u64;
    // Highest page-aligned spot below both the end of low RAM and initrd_addr_max.
    let limit = inputs
        .low_ram_end
        .min(addr_max.map_or(u64::MAX, |m| u64::from(m) + 1))
        .min(layout::MMIO_HOLE_START.0);
    let too_big = || BootError::InitrdTooBig {
        path: path.into(),
        size,
    };
    let addr = limit.checked_sub(size).ok_or_else(too_big)? & !0xfff;
    if addr < kernel_end.max(layout::HIGH_RAM_START.0) {
        return Err(too_big());
    }
    mem.write_slice(&data, GuestAddress(addr))?;
    Ok(Some((addr, size)))
}

fn write_zero_page(
    mem: &GuestMemoryMmap,
    inputs: &BootInputs,
    initrd: Initrd,
    header: Option<linux_loader::loader::bootparam::setup_header>,
    cmdline_len: usize,
) -> Result<(), BootError> {
    const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xaa55;
    const KERNEL_HDR_MAGIC: u32 = 0x5372_6448;
    const KERNEL_LOADER_OTHER: u8 = 0xff;
    const KERNEL_MIN_ALIGNMENT_BYTES: u32 = 0x0100_0000;

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
        params.hdr.ramdisk_image = u32::try_from(addr).unwrap_or(0);
        params.hdr.ramdisk_size = u32::try_from(size).unwrap_or(0);
    }
    params.acpi_rsdp_addr = layout::RSDP_ADDR.0;
    let n = inputs.e820.len().min(params.e820_table.len());
    for (slot, e) in params.e820_table.iter_mut().zip(inputs.e820) {
        slot.addr = e.addr;
        slot.size = e.size;
        slot.r#type = e.kind as u32;
    }
    params.e820_entries = u8::try_from(n).unwrap_or(0);
    mem.write_obj(params, layout::ZERO_PAGE_START)?;
    Ok(())
}

/// Little-endian serialisation of the PVH start info (48 bytes), memory map
/// entries (24 bytes each) and the initrd module entry (32 bytes).
fn write_pvh_info(
    mem: &GuestMemoryMmap,
    inputs: &BootInputs,
    initrd: Initrd,
) -> Result<(), BootError> {
    const XEN_HVM_START_MAGIC_VALUE: u32 = 0x336e_c578;

    let mut memmap = Vec::new();
    for e in inputs.e820 {
        memmap.extend_from_slice(&e.addr.to_le_bytes());
        memmap.extend_from_slice(&e.size.to_le_bytes());
        memmap.extend_from_slice(&(e.kind as u32).to_le_bytes());
        memmap.extend_from_slice(&0u32.to_le_bytes());
    }
    let memmap_addr = layout::PVH_MEMMAP_START.0;
    let modlist_addr = memmap_addr + memmap.len() as u64;
    let mut info = Vec::with_capacity(48);
    info.extend_from_slice(&XEN_HVM_START_MAGIC_VALUE.to_le_bytes());
    info.extend_from_slice(&1u32.to_le_bytes()); // version
    info.extend_from_slice(&0u32.to_le_bytes()); // flags
    info.extend_from_slice(&u32::from(initrd.is_some()).to_le_bytes()); // nr_modules
    info.extend_from_slice(&(if initrd.is_some() { modlist_addr } else { 0 }).to_le_bytes());
    info.extend_from_slice(&layout::CMDLINE_START.0.to_le_bytes());
    info.extend_from_slice(&layout::RSDP_ADDR.0.to_le_bytes());
    info.extend_from_slice(&memmap_addr.to_le_bytes());
    info.extend_from_slice(&u32::try_from(inputs.e820.len()).unwrap_or(0).to_le_bytes());
    info.extend_from_slice(&0u32.to_le_bytes());
    mem.write_slice(&info, layout::PVH_INFO_START)?;
    mem.write_slice(&memmap, GuestAddress(memmap_addr))?;
    if let Some((addr, size)) = initrd {
        let mut m = Vec::with_capacity(32);
        m.extend_from_slice(&addr.to_le_bytes());
        m.extend_from_slice(&size.to_le_bytes());
        m.extend_from_slice(&[0u8; 16]);
        mem.write_slice(&m, GuestAddress(modlist_addr))?;
    }
    Ok(())
}

/// Identity map of the first 1 GiB with 2 MiB pages for the 64-bit entry.
fn write_page_tables(mem: &GuestMemoryMmap) -> Result<(), BootError> {
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

    #[test]
    fn detects_formats() {
        let d = std::env::temp_dir().join(format!("pmemvm-boot-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let elf = d.join("elf");
        std::fs::write(&elf, b"\x7fELF\x02\x01\x01").unwrap();
        assert_eq!(detect_format(&elf).unwrap(), KernelFormat::Elf);
        let mut bz = vec![0u8; 0x300];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        let bzp = d.join("bz");
        std::fs::write(&bzp, &bz).unwrap();
        assert_eq!(detect_format(&bzp).unwrap(), KernelFormat::BzImage);
        let junk = d.join("junk");
        std::fs::write(&junk, b"#!/bin/sh\n").unwrap();
        assert!(matches!(
            detect_format(&junk),
            Err(BootError::UnknownFormat(_))
        ));
        assert!(matches!(detect_format(&d), Err(BootError::IsDirectory(..))));
        assert!(matches!(
            detect_format(&d.join("missing")),
            Err(BootError::Read { .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
