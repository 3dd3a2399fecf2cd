//! The options that describe a guest machine and what it boots, shared by
//! `pmemvm boot`, `run`, `acpi` and the lab's request types (clap): the
//! machine, the kernel, the console, the debugger's reach, and their parsers.
//! One spelling of each option: the CLI flattens these structs.

use std::path::PathBuf;

use clap::Args;

use vmm::config::{self, LegacyPmemSpec, NvdimmSpec};

/// Where the guest console (COM1) goes; the same options in `boot` and `run`.
#[derive(Debug, Args, Clone, Default)]
pub struct ConsoleArgs {
    /// Show the guest console on this terminal (the default of `boot`).
    #[arg(long)]
    pub console: bool,
    /// Write the guest console to this file (`boot`: instead of the
    /// terminal unless --console is given too).
    #[arg(long, value_name = "PATH")]
    pub console_log: Option<PathBuf>,
}

/// A size with K, M, G, T suffixes (`--nvdimm` of `bench`, `--size`).
pub fn parse_size_arg(s: &str) -> Result<u64, String> {
    config::parse_size(s).map_err(|e| e.to_string())
}

/// `--nvdimm-slots N`: 0 to the NFIT's limit of DIMMs (acpi::MAX_NVDIMMS).
fn parse_slots(s: &str) -> Result<usize, String> {
    let max = acpi::MAX_NVDIMMS;
    match s.trim().parse::<usize>() {
        Ok(n) if n <= max => Ok(n),
        Ok(_) => Err(format!(
            "--nvdimm-slots '{s}' is more NVDIMMs than a machine can hold; use 0 to {max}"
        )),
        Err(_) => Err(format!(
            "--nvdimm-slots '{s}' is not a whole number; use 0 to {max} (the --nvdimm DIMMs plus empty slots)"
        )),
    }
}

/// `--cpus N`: 1 to the MADT's limit (acpi::MAX_CPUS).
pub fn parse_cpus(s: &str) -> Result<u8, String> {
    // The MADT's 8-bit APIC ids bound the vCPU count (acpi::MAX_CPUS).
    let max = acpi::MAX_CPUS;
    match s.trim().parse::<u32>() {
        Ok(0) => Err(format!(
            "--cpus '{s}' is not valid: a guest needs at least 1 vCPU; use 1 to {max}"
        )),
        Ok(n) if n <= max => {
            u8::try_from(n).map_err(|_| format!("--cpus '{s}' is too large; use 1 to {max}"))
        }
        Ok(_) => Err(format!("--cpus '{s}' is too large; use 1 to {max}")),
        Err(_) => Err(format!(
            "--cpus '{s}' is not a whole number; use 1 to {max}"
        )),
    }
}

/// `--memory SIZE[,hugepages|,thp]`.
pub fn parse_memory(s: &str) -> Result<vmm::memory::hugepages::MemorySpec, String> {
    s.parse()
}

/// `--pin CPULIST`.
pub fn parse_pin(s: &str) -> Result<vmm::memory::placement::Placement, String> {
    vmm::memory::placement::Placement::parse(Some(s), None).map_err(|e| e.to_string())
}

/// `--pin` and `--host-node` (`boot`, `run`, `bench`).
#[derive(Debug, Args, Clone, Default)]
pub struct PlacementArgs {
    /// Pin vCPU i to the i-th host CPU of this list (e.g. 2,3 or 4-7; a CPU
    /// per vCPU); the VMM's other threads then run on the remaining CPUs.
    #[arg(long, value_parser = parse_pin, value_name = "CPULIST")]
    pub pin: Option<vmm::memory::placement::Placement>,
    /// Bind guest RAM and every NVDIMM mapping to this host NUMA node (strict).
    #[arg(long, value_name = "N")]
    pub host_node: Option<u32>,
}

impl PlacementArgs {
    /// The host placement these options ask for.
    pub fn placement(&self) -> vmm::memory::placement::Placement {
        vmm::memory::placement::Placement {
            host_node: self.host_node,
            ..self.pin.clone().unwrap_or_default()
        }
    }
}

impl MachineArgs {
    /// Takes the machine from `--machine FILE` when given (see
    /// [`Self::machine_file`]): [`Self::spec`] is then that machine, as
    /// written, and every later step sees one description.
    pub fn load_machine_file(&mut self) -> Result<(), MachineFileError> {
        let Some(path) = self.machine_file.take() else {
            return Ok(());
        };
        let bad = |why: String| MachineFileError {
            path: path.clone(),
            why,
        };
        let text = std::fs::read(&path).map_err(|e| bad(e.to_string()))?;
        let m: config::MachineSpec =
            serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        self.loaded = Some(m);
        Ok(())
    }

    /// The machine these options describe.
    pub fn spec(&self) -> config::MachineSpec {
        if let Some(m) = &self.loaded {
            return m.clone();
        }
        config::MachineSpec {
            cpus: self.cpus,
            memory: self.memory.size,
            ram_pages: self.memory.pages,
            placement: self.placement.placement(),
            nvdimms: self.nvdimm.clone(),
            disks: self.disk.clone(),
            legacy_pmem: self.pmem_legacy.clone(),
            nvdimm_slots: self.nvdimm_slots,
            cxl_pmem: self.cxl_pmem.clone(),
        }
    }
}

/// `--machine FILE` could not be read as a machine description.
#[derive(Debug, thiserror::Error)]
#[error("--machine {}: not a machine description pmemvm wrote ({why})", path.display())]
pub struct MachineFileError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub why: String,
}

/// `--nvdimm SPEC`.
pub fn parse_nvdimm(s: &str) -> Result<NvdimmSpec, String> {
    s.parse::<NvdimmSpec>().map_err(|e| e.to_string())
}

/// `--disk PATH[,readonly]`.
pub fn parse_disk(s: &str) -> Result<config::DiskSpec, String> {
    s.parse::<config::DiskSpec>().map_err(|e| e.to_string())
}

/// `--pmem-legacy SPEC`.
pub fn parse_pmem_legacy(s: &str) -> Result<LegacyPmemSpec, String> {
    s.parse::<LegacyPmemSpec>().map_err(|e| e.to_string())
}

/// `--cxl-pmem SPEC`.
pub fn parse_cxl_pmem(s: &str) -> Result<config::CxlPmemSpec, String> {
    s.parse::<config::CxlPmemSpec>().map_err(|e| e.to_string())
}

/// Options shared by every command that describes a machine.
#[derive(Debug, Args, Clone)]
pub struct MachineArgs {
    /// Number of vCPUs.
    #[arg(long, default_value = "1", value_parser = parse_cpus, value_name = "N")]
    pub cpus: u8,
    /// Guest RAM (K, M, G, T suffixes); `,hugepages` backs it with 2 MiB
    /// hugetlb pages (reserved up front), `,thp` asks for transparent huge pages.
    #[arg(long, default_value = "512M", value_parser = parse_memory, value_name = "SIZE[,hugepages|,thp]")]
    pub memory: vmm::memory::hugepages::MemorySpec,
    /// Where the guest runs on the host.
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// An NVDIMM: SIZE[,file=PATH][,readonly][,label-size=SIZE][,prealloc][,hugepages][,node=N][,badblocks=OFF+LEN[:...]][,record=DIR][,mce=on]. Repeat for more.
    ///
    /// SIZE is the guest's persistent-memory region, a multiple of 16 MiB. The
    /// backing file holds the region, then the label area (label-size, default
    /// 128K; 0 = label-less), then a 4 KiB identity page with the DIMM's serial:
    /// SIZE + label-size + 4K bytes. node=N puts the DIMM in guest NUMA node N
    /// (default: DIMM i in node i+1; the vCPUs and RAM are node 0). prealloc
    /// allocates the file's blocks up front; hugepages maps a file on hugetlbfs;
    /// badblocks= starts the DIMM with those byte ranges bad (media errors);
    /// record=DIR logs every guest flush for crash images (docs/crash-consistency.md);
    /// mce=on makes a guest load from a bad range a machine check (docs/nvdimm.md).
    #[arg(long, value_parser = parse_nvdimm, value_name = "SPEC")]
    pub nvdimm: Vec<NvdimmSpec>,
    /// A disk image the guest sees as a virtio block device (/dev/vda, /dev/vdb, ... in
    /// order), off the NVDIMM bus: PATH[,readonly]. The file is used as it is (never
    /// created or resized). Repeat for more (at most 5, fewer with --rootfs/--put/--get,
    /// which take disks of their own).
    #[arg(long, value_parser = parse_disk, value_name = "PATH[,readonly]")]
    pub disk: Vec<config::DiskSpec>,
    /// Legacy persistent memory: SIZE[,file=PATH][,readonly]. Repeat for more.
    ///
    /// An E820 type 12 range (what `memmap=nn!ss` makes on real machines),
    /// which Linux's nd_e820 driver turns into a region of the `e820` bus.
    /// SIZE is a multiple of 16 MiB; the backing file is exactly SIZE bytes
    /// (created sparse if missing, never resized). Each range starts at a
    /// 1 GiB boundary after the NVDIMMs. Not with --engine qemu.
    #[arg(long = "pmem-legacy", value_parser = parse_pmem_legacy, value_name = "SPEC")]
    pub pmem_legacy: Vec<LegacyPmemSpec>,
    /// A CXL Type-3 memory device, all of it persistent:
    /// SIZE[,file=PATH][,label-size=SIZE]. Repeat for more (at most 16).
    ///
    /// Each device sits behind its own CXL host bridge and root port with a
    /// fixed memory window of exactly SIZE (a multiple of 256 MiB) above the
    /// NVDIMMs; a region the guest makes there (`cxl create-region`) is the
    /// backing file mapped into the guest, no exit per access. The file is
    /// SIZE, then the label storage area (default 128K; 128K to 16M), then
    /// pmemvm's 4 KiB identity page (the device's serial number); created
    /// sparse if missing, never resized. --engine qemu runs QEMU's own CXL
    /// devices on a q35 machine over the file's first SIZE bytes (its label
    /// area there lasts one run).
    #[arg(long = "cxl-pmem", value_parser = parse_cxl_pmem, value_name = "SPEC")]
    pub cxl_pmem: Vec<config::CxlPmemSpec>,
    /// NVDIMM slots in all: the --nvdimm DIMMs plus empty slots that `pmemvm ctl
    /// SOCKET nvdimm add SPEC` fills while the guest runs (hot-add, with --api;
    /// docs/api.md). Default: one per --nvdimm, none empty. Engines pmemvm and nested.
    #[arg(long, default_value = "0", value_parser = parse_slots, value_name = "N")]
    pub nvdimm_slots: usize,
    /// The whole machine from a file pmemvm wrote (the serialized machine
    /// description the nested engine hands to `pmemvm boot` in its L1): it
    /// replaces --cpus, --memory, --pin, --host-node, --nvdimm, --disk,
    /// --pmem-legacy and --nvdimm-slots.
    #[arg(long = "machine", value_name = "FILE", hide = true)]
    pub machine_file: Option<PathBuf>,
    /// The machine `--machine FILE` held, once loaded.
    #[arg(skip)]
    pub loaded: Option<config::MachineSpec>,
}

/// The guest kernel's files (`boot`, `run`, and `bench` for every side
/// without its own `kernel=`, `initrd=`, `modules=`).
#[derive(Debug, Args, Clone, Default)]
pub struct KernelFiles {
    /// Guest kernel: ELF vmlinux (PVH) or bzImage. Default: the project's guest image;
    /// a bench side's own kernel= replaces it.
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
    /// Initial ramdisk (default: the guest image's initramfs; a bench side's initrd=
    /// replaces it).
    #[arg(long, value_name = "PATH")]
    pub initrd: Option<PathBuf>,
    /// The kernel's modules: what `make modules_install INSTALL_MOD_PATH=X` wrote (X or
    /// X/lib/modules/RELEASE, of the kernel's release); the NVDIMM, DAX and file-system
    /// modules and their dependencies go into the initrd and the guest's init loads them.
    /// A bench side's modules= replaces them.
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
}

/// What the machine boots (`boot` and `run`).
#[derive(Debug, Args, Clone)]
pub struct KernelArgs {
    /// The kernel, initrd and modules.
    #[command(flatten)]
    pub files: KernelFiles,
    /// Whole kernel command line (replaces the default, a console on ttyS0).
    #[arg(long, value_name = "STR")]
    pub cmdline: Option<String>,
    /// Appended to the kernel command line (e.g. nd_pmem.nowait=0); repeatable.
    #[arg(long = "append", value_name = "STR")]
    pub append: Vec<String>,
}

impl KernelFiles {
    /// The files as the run's boot description (no command line).
    pub fn boot_files(&self) -> config::BootFiles {
        config::BootFiles {
            kernel: self.kernel.clone(),
            initrd: self.initrd.clone(),
            modules: self.modules.clone(),
            ..Default::default()
        }
    }
}

impl KernelArgs {
    /// What the machine boots, as given.
    pub fn files(&self) -> config::BootFiles {
        config::BootFiles {
            cmdline: self.cmdline.clone(),
            append: self.append.clone(),
            ..self.files.boot_files()
        }
    }
}

/// `--gdb ADDR`.
pub fn parse_gdb(s: &str) -> Result<vmm::debug::gdb::GdbAddr, String> {
    vmm::debug::gdb::GdbAddr::parse(s).map_err(|e| e.to_string())
}

/// The debugger's options (`boot` and `run`).
#[derive(Debug, Clone, Default, Args)]
pub struct GdbArgs {
    /// The debugger: serve gdb's remote protocol at ADDR (`target remote
    /// ADDR` in gdb): HOST:PORT on loopback (127.0.0.1:1234, :1234), a Unix
    /// socket path (owner-only), or a serial device under /dev (`run --engine
    /// qemu`: QEMU's own gdbstub).
    #[arg(long, value_name = "ADDR", value_parser = parse_gdb)]
    pub gdb: Option<vmm::debug::gdb::GdbAddr>,
    /// With --gdb: hold the vCPUs until a debugger attaches (QEMU's -S).
    #[arg(long, requires = "gdb")]
    pub gdb_wait: bool,
    /// With --gdb HOST:PORT: let HOST be beyond loopback (0.0.0.0, a LAN
    /// address). The stub has no password: whoever reaches it controls the guest.
    #[arg(long, requires = "gdb")]
    pub gdb_any_address: bool,
}

impl GdbArgs {
    /// `--gdb` and `--gdb-wait`, after refusing `--gdb HOST:PORT` beyond
    /// loopback without `--gdb-any-address` (asked first, so a refusal changes
    /// nothing).
    pub fn checked(
        &self,
    ) -> Result<Option<(vmm::debug::gdb::GdbAddr, bool)>, vmm::debug::gdb::GdbError> {
        match &self.gdb {
            Some(a) => a
                .check_reach(self.gdb_any_address)
                .map(|()| Some((a.clone(), self.gdb_wait))),
            None => Ok(None),
        }
    }
}

/// `--timeout SECS`: a whole number of seconds above 0.
pub fn parse_seconds(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err(format!(
            "--timeout '{s}' is not valid: use a number of seconds above 0"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("--timeout '{s}' is not a whole number of seconds")),
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
