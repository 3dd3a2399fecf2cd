//! Loading the guest kernel, initrd and command line, and writing the boot
//! information the kernel reads first: the Linux zero page (bzImage, 64-bit
//! boot protocol) or `hvm_start_info` (ELF vmlinux through its PVH note).
//!
//! linux-loader loads the images (`Elf`, `BzImage`) and writes the boot
//! information ([`params`]); pmemvm reads the headers itself only to name
//! the real cause of a failure before loading ([`elf`], the bzImage setup
//! header fields below).

mod elf;
mod params;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use linux_loader::loader::elf::{Elf, PvhBootCapability};
use linux_loader::loader::{BzImage, KernelLoader};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout;
use crate::memory::E820Entry;

pub use elf::ElfHeaderError;

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
    /// The ELF headers are unusable.
    #[error("kernel {path} cannot be loaded: {source}")]
    ElfHeaders {
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: ElfHeaderError,
    },
    /// The file ends before a part the kernel needs.
    #[error("kernel {path} is truncated: {what}")]
    Truncated {
        /// Path.
        path: PathBuf,
        /// Which part is missing.
        what: String,
    },
    /// A bzImage without the 64-bit entry point pmemvm uses.
    #[error("kernel {path} is a bzImage without a 64-bit entry point (boot protocol {version:#06x}, XLF_KERNEL_64 not set); pmemvm enters bzImages in 64-bit mode, so give an x86_64 kernel")]
    NotKernel64 {
        /// Path.
        path: PathBuf,
        /// Boot protocol version of its setup header.
        version: u16,
    },
    /// Command line too long.
    #[error("the kernel command line is {0} bytes; at most {max} are accepted", max = layout::CMDLINE_MAX_SIZE - 1)]
    CmdlineTooLong(usize),
    /// linux-loader refused the command line.
    #[error("the kernel command line is not accepted: {0}")]
    Cmdline(linux_loader::cmdline::Error),
    /// Writing the command line into guest memory failed.
    #[error("writing the kernel command line into guest memory failed: {0}")]
    CmdlineLoad(#[source] linux_loader::loader::Error),
    /// Writing the zero page or PVH start info failed.
    #[error("writing the boot parameters into guest memory failed: {0}")]
    Configure(#[source] linux_loader::configurator::Error),
    /// The initrd was placed where the boot protocol cannot point.
    #[error("the initrd at {0:#x} is out of the boot protocol's 32-bit reach")]
    InitrdAddress(u64),
    /// More E820 entries than the boot protocol holds.
    #[error("the memory map has {0} entries, more than the boot protocol holds")]
    TooManyE820Entries(usize),
    /// Writing boot data into guest memory failed.
    #[error("writing boot data into guest memory failed: {0}")]
    GuestMemory(#[from] vm_memory::GuestMemoryError),
}

impl crate::exit_status::Classified for BootError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::{self, *};
        match self {
            Self::Read { source, .. } => ErrorKind::of_path(source),
            Self::GuestMemory(_)
            | Self::CmdlineLoad(_)
            | Self::Configure(_)
            | Self::InitrdAddress(_)
            | Self::TooManyE820Entries(_) => Internal,
            _ => Usage,
        }
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
    let mut f = File::open(path)?;
    match elf::read_info(&mut f)? {
        Ok(info) => info.has_linux_note(&mut f),
        Err(_) => Ok(false),
    }
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
    let cmdline = params::cmdline(inputs.cmdline)?;
    let (k, mut kernel) = KernelFile::open(inputs.kernel, inputs.low_ram_end)?;
    // Each checks the fit before writing anything, so a small --memory gets a clear message.
    let (entry, kernel_end, setup_header) = match format {
        KernelFormat::Elf => k.load_elf(mem, &mut kernel)?,
        KernelFormat::BzImage => k.load_bzimage(mem, &mut kernel)?,
    };
    if kernel_end > inputs.low_ram_end {
        return Err(k.too_big(kernel_end));
    }
    let initrd = load_initrd(
        mem,
        inputs,
        kernel_end,
        setup_header.map(|h| h.initrd_addr_max),
    )?;
    let cmdline_len = params::write_cmdline(mem, &cmdline)?;
    match entry {
        EntryPoint::Pvh(_) => params::write_pvh_info(mem, inputs.e820, initrd)?,
        EntryPoint::Linux64(_) => {
            params::write_zero_page(mem, inputs.e820, initrd, setup_header, cmdline_len)?;
            params::write_page_tables(mem)?;
        }
    }
    Ok(entry)
}

/// The kernel being loaded: its path and length, and where low RAM ends.
struct KernelFile<'a> {
    path: &'a Path,
    len: u64,
    low_ram_end: u64,
}

/// Where a loaded kernel is entered, where it ends, and a bzImage's setup header.
type Loaded = (
    EntryPoint,
    u64,
    Option<linux_loader::loader::bootparam::setup_header>,
);

impl<'a> KernelFile<'a> {
    /// Opens the kernel at `path`, with its length, for RAM ending at `low_ram_end`.
    fn open(path: &'a Path, low_ram_end: u64) -> Result<(Self, File), BootError> {
        let file = open_input(path, "kernel")?;
        let mut k = Self {
            path,
            len: 0,
            low_ram_end,
        };
        k.len = file.metadata().map_err(|e| k.read_err(e))?.len();
        Ok((k, file))
    }

    fn read_err(&self, source: std::io::Error) -> BootError {
        BootError::Read {
            what: "kernel",
            path: self.path.into(),
            source,
        }
    }

    fn load_err(&self, source: linux_loader::loader::Error) -> BootError {
        BootError::Load {
            path: self.path.into(),
            source,
        }
    }

    fn too_big(&self, needed: u64) -> BootError {
        BootError::KernelTooBig {
            path: self.path.into(),
            needed,
        }
    }

    fn truncated(&self, what: String) -> BootError {
        BootError::Truncated {
            path: self.path.into(),
            what,
        }
    }

    /// An ELF kernel's headers, checked against the file's length.
    fn elf_info(&self, kernel: &mut File) -> Result<elf::ElfInfo, BootError> {
        let file_len = self.len;
        let info = elf::read_info(kernel)
            .map_err(|e| self.read_err(e))?
            .map_err(|source| match source {
                ElfHeaderError::Truncated(part) => self.truncated(format!(
                    "its {part} extends past the end of the file ({file_len} bytes)"
                )),
                source => BootError::ElfHeaders {
                    path: self.path.into(),
                    source,
                },
            })?;
        if let Some(i) = info.truncated_segment(file_len) {
            return Err(self.truncated(format!(
                "its loadable segment {i} extends past the end of the file ({file_len} bytes)"
            )));
        }
        Ok(info)
    }

    /// A bzImage's setup header, of a boot protocol with the 64-bit entry.
    fn bz_setup(&self, kernel: &mut File) -> Result<BzHeader, BootError> {
        let hdr = bz_header(kernel)
            .map_err(|e| self.read_err(e))?
            .ok_or_else(|| {
                self.truncated(format!(
                    "its setup header extends past the end of the file ({} bytes)",
                    self.len
                ))
            })?;
        if hdr.version < BZ_PROTOCOL_XLOADFLAGS || hdr.xloadflags & XLF_KERNEL_64 == 0 {
            return Err(BootError::NotKernel64 {
                path: self.path.into(),
                version: hdr.version,
            });
        }
        Ok(hdr)
    }

    /// An ELF kernel: its segments, entered at its PVH note or its 64-bit entry.
    fn load_elf(&self, mem: &GuestMemoryMmap, kernel: &mut File) -> Result<Loaded, BootError> {
        let info = self.elf_info(kernel)?;
        let needed = info.load_end();
        if needed > self.low_ram_end {
            return Err(self.too_big(needed));
        }
        let r = Elf::load(mem, None, kernel, Some(layout::HIGH_RAM_START))
            .map_err(|e| self.load_err(e))?;
        let entry = match r.pvh_boot_cap {
            PvhBootCapability::PvhEntryPresent(a) => EntryPoint::Pvh(a.0),
            _ => EntryPoint::Linux64(info.physical_entry()),
        };
        Ok((entry, r.kernel_end, None))
    }

    /// A bzImage (boot protocol with the 64-bit entry), entered 0x200 past
    /// the protected-mode kernel's start.
    fn load_bzimage(&self, mem: &GuestMemoryMmap, kernel: &mut File) -> Result<Loaded, BootError> {
        let hdr = self.bz_setup(kernel)?;
        let needed = u64::from(hdr.code32_start).saturating_add(u64::from(hdr.init_size));
        if needed > self.low_ram_end {
            return Err(self.too_big(needed));
        }
        let r = BzImage::load(mem, None, kernel, Some(layout::HIGH_RAM_START))
            .map_err(|e| self.load_err(e))?;
        let header = r.setup_header.unwrap_or_default();
        let entry = EntryPoint::Linux64(r.kernel_load.0 + 0x200);
        Ok((entry, r.kernel_end.max(needed), Some(header)))
    }
}

/// Whether `path` is a kernel pmemvm can load, by its headers alone (what
/// [`load`] checks before it writes guest memory, short of the fit in RAM):
/// an ELF whose segments are in the file, or a bzImage with the 64-bit entry.
pub fn check_kernel(path: &Path) -> Result<KernelFormat, BootError> {
    let format = detect_format(path)?;
    let (k, mut kernel) = KernelFile::open(path, u64::MAX)?;
    match format {
        KernelFormat::Elf => k.elf_info(&mut kernel).map(|_| format),
        KernelFormat::BzImage => k.bz_setup(&mut kernel).map(|_| format),
    }
}

/// Boot protocol 2.12: the first with `xloadflags`.
const BZ_PROTOCOL_XLOADFLAGS: u16 = 0x020c;
/// `xloadflags` bit: the kernel has the 64-bit entry at +0x200.
const XLF_KERNEL_64: u16 = 1 << 0;

/// The bzImage setup header fields pmemvm checks before loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BzHeader {
    version: u16,
    code32_start: u32,
    xloadflags: u16,
    init_size: u32,
}

/// The setup header's fields, or `None` when the file ends inside it.
fn bz_header(f: &mut File) -> std::io::Result<Option<BzHeader>> {
    let mut h = [0u8; 0x264];
    f.seek(SeekFrom::Start(0))?;
    if read_up_to(f, &mut h)? < h.len() {
        return Ok(None);
    }
    let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    Ok(Some(BzHeader {
        version: u16::from_le_bytes([h[0x206], h[0x207]]),
        code32_start: u32_at(0x214),
        xloadflags: u16::from_le_bytes([h[0x236], h[0x237]]),
        init_size: u32_at(0x260),
    }))
}

/// (address, size) of the loaded initrd.
pub(crate) type Initrd = Option<(u64, u64)>;

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

#[cfg(test)]
mod tests;
