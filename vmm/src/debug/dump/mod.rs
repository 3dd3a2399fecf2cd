//! Guest memory dumps: an ELF core of guest RAM with every vCPU's
//! registers and the guest kernel's `VMCOREINFO`, for `crash vmlinux FILE`
//! and `drgn -c FILE -s vmlinux` (docs/debugging.md). Taken on request
//! (`pmemvm ctl SOCKET dump FILE`) or when the guest kernel panics
//! (`--dump-on-panic FILE`, through the pvpanic device). NVDIMM contents
//! are in their files; `ctl dump FILE --nvdimms` puts their ranges (and the
//! legacy pmem ranges, hot-added DIMMs too) in the dump as well.
//!
//! The vCPUs are held (kicked out of `KVM_RUN` and parked) while the dump
//! is written, so registers and memory are one moment of the guest; a
//! vCPU that was already paused stays paused (the dump holds and releases
//! by its own name, [`crate::debug::gdb::hub::Holder::Dump`]).

pub mod elf;
pub mod kernel_note;
pub mod vmcoreinfo;

use std::fs::OpenOptions;
use std::io::{self, BufWriter};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvm_ioctls::VcpuFd;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::debug::gdb::hub::{DebugHub, Holder, Request};

/// How long the dump waits for the vCPUs to park.
const HOLD_DEADLINE: Duration = Duration::from_secs(5);

/// Errors of a dump.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The file exists (a dump never replaces a file).
    #[error("dump file {0} exists; pmemvm does not overwrite files — name a new one")]
    Exists(PathBuf),
    /// The file's directory does not exist.
    #[error("dump file {0}: its directory does not exist")]
    NoDirectory(PathBuf),
    /// The file could not be created or written.
    #[error("writing the dump to {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A vCPU did not stop for the dump.
    #[error("vCPU(s) {0:?} did not stop within 5 s for the dump")]
    Busy(Vec<usize>),
    /// A vCPU's registers could not be read.
    #[error("reading vCPU {vcpu}'s registers for the dump: {reason}")]
    Registers {
        /// The vCPU.
        vcpu: usize,
        /// Why.
        reason: String,
    },
    /// Another dump is being written.
    #[error("a dump is being written already; try again when it is done")]
    InProgress,
}

impl crate::exit_status::Classified for DumpError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::Exists(_) | Self::NoDirectory(_) => Usage,
            _ => Environment,
        }
    }
}

/// What a dump wrote, for the user and the control socket.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DumpInfo {
    /// The file.
    pub file: PathBuf,
    /// Bytes of guest RAM in it.
    pub ram_bytes: u64,
    /// Bytes of NVDIMM and legacy pmem ranges in it (`--nvdimms`; else 0).
    pub nvdimm_bytes: u64,
    /// Bytes of it that were not zero (the rest are holes in the file).
    pub data_bytes: u64,
    /// vCPUs whose registers are in it.
    pub vcpus: usize,
    /// The guest kernel's release from its VMCOREINFO, when found.
    pub kernel_release: Option<String>,
    /// Where VMCOREINFO was (guest-physical), when found.
    pub vmcoreinfo_gpa: Option<u64>,
    /// How it was found, or why there is none, in a sentence for the user.
    pub vmcoreinfo_from: String,
}

/// How a dump's VMCOREINFO was found.
const FROM_KERNEL: &str = "read through the kernel's own vmcoreinfo_note pointer";
/// ... when the kernel file gives no way to the kernel's own.
const FROM_SCAN: &str = "found by a scan of guest RAM: the --kernel file has no symbols \
    (a bzImage or a stripped vmlinux), and a note a guest user planted could be taken; \
    boot the vmlinux for one read through the kernel's own pointer";

/// Refuses `path` when something is there already, or its directory is not.
pub fn check_new_file(path: &Path) -> Result<(), DumpError> {
    if path.symlink_metadata().is_ok() {
        return Err(DumpError::Exists(path.to_path_buf()));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(DumpError::NoDirectory(path.to_path_buf()));
    }
    Ok(())
}

/// Guest RAM as the ELF writer reads it.
struct GuestRam<'a>(&'a GuestMemoryMmap);

impl elf::Ram for GuestRam<'_> {
    fn ranges(&self) -> Vec<(u64, u64)> {
        self.0.iter().map(|r| (r.start_addr().0, r.len())).collect()
    }
    fn read(&self, gpa: u64, buf: &mut [u8]) -> io::Result<()> {
        self.0
            .read_slice(buf, GuestAddress(gpa))
            .map_err(|e| io::Error::other(format!("guest memory at {gpa:#x}: {e}")))
    }
}

/// Takes dumps of one VM.
#[derive(Debug)]
pub struct Dumper {
    mem: GuestMemoryMmap,
    hub: Arc<DebugHub>,
    /// The kernel file's symbols that lead to its note (none for a bzImage).
    anchors: Option<kernel_note::Anchors>,
    kick: libc::c_int,
    busy: Mutex<()>,
    /// RAM and the NVDIMM ranges, for a dump that asks for them.
    nvdimms: Option<devices::virtio::dma::DmaView>,
}

impl Dumper {
    /// A dumper of `mem`, stopping vCPUs through `hub`, of a guest booted
    /// from the kernel file `kernel`.
    pub fn new(mem: GuestMemoryMmap, hub: Arc<DebugHub>, kernel: &Path) -> Self {
        Self {
            mem,
            hub,
            anchors: kernel_note::Anchors::of(kernel),
            kick: crate::signals::kick_signal(),
            busy: Mutex::new(()),
            nvdimms: None,
        }
    }

    /// Dumps that ask for them get the ranges of `view` beyond RAM.
    pub fn with_nvdimms(mut self, view: devices::virtio::dma::DmaView) -> Self {
        self.nvdimms = Some(view);
        self
    }

    /// The hub the vCPUs park at.
    pub fn hub(&self) -> &Arc<DebugHub> {
        &self.hub
    }

    /// Writes a dump to `path` (which must not exist). `own` is the calling
    /// vCPU thread's index and vCPU when a vCPU takes the dump (a panic):
    /// its registers are read directly, the others' through the hub.
    /// With `nvdimms`, the NVDIMM and legacy pmem ranges are in it too.
    pub fn dump(
        &self,
        path: &Path,
        own: Option<(usize, &VcpuFd)>,
        nvdimms: bool,
    ) -> Result<DumpInfo, DumpError> {
        let _one = self.busy.try_lock().map_err(|_| DumpError::InProgress)?;
        check_new_file(path)?;
        let me = own.map(|(i, _)| i);
        let held = self.hold_others(me)?;
        let result = self.write(path, own, nvdimms);
        for i in held {
            self.hub.release(Holder::Dump, i);
        }
        result
    }

    /// Holds every vCPU but `me` for the dump; returns them (to be released
    /// after). Its release is the dump's own: a vCPU paused by `ctl pause`
    /// or the debugger stays held by them.
    fn hold_others(&self, me: Option<usize>) -> Result<Vec<usize>, DumpError> {
        let others: Vec<usize> = (0..self.hub.vcpus()).filter(|&i| Some(i) != me).collect();
        match self
            .hub
            .hold_some(Holder::Dump, &others, self.kick, HOLD_DEADLINE)
        {
            Ok(()) => {
                self.hub.drain_stops();
                Ok(others)
            }
            Err(running) => {
                for &i in &others {
                    self.hub.release(Holder::Dump, i);
                }
                Err(DumpError::Busy(running))
            }
        }
    }

    fn registers(&self, own: Option<(usize, &VcpuFd)>) -> Result<Vec<elf::VcpuState>, DumpError> {
        let mut states = Vec::with_capacity(self.hub.vcpus());
        for i in 0..self.hub.vcpus() {
            let read = match own {
                Some((me, fd)) if me == i => fd
                    .get_regs()
                    .and_then(|regs| fd.get_sregs().map(|sregs| elf::VcpuState { regs, sregs }))
                    .map_err(|e| e.to_string()),
                _ if !self.hub.alive(i) => Ok(elf::VcpuState::default()),
                _ => {
                    // A vCPU thread that entered its loop after the hold
                    // parks at its first check of it.
                    let end = std::time::Instant::now() + HOLD_DEADLINE;
                    while self.hub.alive(i)
                        && !self.hub.is_parked(i)
                        && std::time::Instant::now() < end
                    {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    let (tx, rx) = channel();
                    self.hub.send(i, Request::Read(tx)).and_then(|()| {
                        rx.recv_timeout(HOLD_DEADLINE)
                            .map_err(|_| "the vCPU did not answer".to_string())?
                            .map(|r| elf::VcpuState {
                                regs: r.regs,
                                sregs: r.sregs,
                            })
                    })
                }
            };
            states.push(read.map_err(|reason| DumpError::Registers { vcpu: i, reason })?);
        }
        Ok(states)
    }

    fn write(
        &self,
        path: &Path,
        own: Option<(usize, &VcpuFd)>,
        nvdimms: bool,
    ) -> Result<DumpInfo, DumpError> {
        let io_err = |source| DumpError::Write {
            path: path.to_path_buf(),
            source,
        };
        let vcpus = self.registers(own)?;
        let ram = GuestRam(&self.mem);
        // RAM and every pmem range, read as the devices read them.
        let with_pmem = self
            .nvdimms
            .as_ref()
            .filter(|_| nvdimms)
            .map(|v| v.current().readable.clone());
        let contents = with_pmem.as_ref().map_or(GuestRam(&self.mem), GuestRam);
        let (info, from) = match self.anchors {
            Some(a) => match kernel_note::locate(&ram, &vcpus, a) {
                Ok(f) => (Some(f), FROM_KERNEL.to_string()),
                Err(why) => (None, format!("no VMCOREINFO in the dump: {why}")),
            },
            None => match vmcoreinfo::find(&ram).map_err(io_err)? {
                Some(f) => (Some(f), FROM_SCAN.to_string()),
                None => (
                    None,
                    "no VMCOREINFO in guest memory: the guest kernel lacks CONFIG_CRASH_CORE, \
                     which crash and drgn need"
                        .to_string(),
                ),
            },
        };
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err)?;
        let mut out = BufWriter::new(file);
        let written = elf::write_core(
            &mut out,
            &contents,
            &vcpus,
            info.as_ref().map(|f| f.desc.as_slice()),
        );
        let finished = written.and_then(|s| {
            let file = out.into_inner().map_err(|e| e.into_error())?;
            file.set_len(s.file_bytes)?;
            file.sync_all()?;
            Ok(s)
        });
        let summary = match finished {
            Ok(s) => s,
            Err(e) => {
                // A partial dump would mislead crash; nothing else of the
                // user's is touched (the file was created here).
                let _ = std::fs::remove_file(path);
                return Err(io_err(e));
            }
        };
        let ram_bytes: u64 = self.mem.iter().map(|r| r.len()).sum();
        Ok(DumpInfo {
            file: path.to_path_buf(),
            ram_bytes,
            nvdimm_bytes: summary.ram_bytes.saturating_sub(ram_bytes),
            data_bytes: summary.data_bytes,
            vcpus: summary.vcpus,
            kernel_release: info.as_ref().and_then(|f| f.value("OSRELEASE")),
            vmcoreinfo_gpa: info.map(|f| f.gpa),
            vmcoreinfo_from: from,
        })
    }
}
