//! The shared arguments of `pmemvm boot`, `run`, `bench`, `report` and `acpi` (clap): the
//! machine, the kernel, the console, the engine, and their parsers. A leaf: it uses no other
//! module of the binary.

use std::path::PathBuf;

use clap::Args;

use lab::guest::run::Engine;
use vmm::config::{self, LegacyPmemSpec, NvdimmSpec};

/// `pmemvm report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Result directories (written by `bench --out`), or directories of them (e.g. the
    /// runs/ of a `bench --slurm` directory).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Also write report.txt, report.json, runs.csv, summary.csv, upstream.csv, chart.svg and
    /// merge.json here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Pool runs of machines that differ (engine, accelerator, CPU model, page sizes).
    #[arg(long)]
    pub pool_hosts: bool,
    /// Pool runs whose sides ran different inputs (kernel or initrd SHA-256, kernel command
    /// line, fio jobs and parameters, pmemvm version); the report lists every difference.
    #[arg(long)]
    pub pool_different_inputs: bool,
}

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

pub(crate) fn parse_size_arg(s: &str) -> Result<u64, String> {
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

pub(crate) fn parse_cpus(s: &str) -> Result<u8, String> {
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

fn parse_memory(s: &str) -> Result<vmm::memory::hugepages::MemorySpec, String> {
    s.parse()
}

fn parse_pin(s: &str) -> Result<vmm::memory::placement::Placement, String> {
    vmm::memory::placement::Placement::parse(Some(s), None).map_err(|e| e.to_string())
}

impl MachineArgs {
    /// The host placement these options ask for.
    pub fn placement(&self) -> vmm::memory::placement::Placement {
        vmm::memory::placement::Placement {
            host_node: self.host_node,
            ..self.pin.clone().unwrap_or_default()
        }
    }

    /// Takes the machine from `--machine FILE` when given (see
    /// [`Self::machine_file`]), so every later step sees one description.
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
        self.memory = m.memory_spec();
        // Every field by name: a field added to the machine and not taken
        // here does not compile (the L1 once lost its empty NVDIMM slots so).
        let config::MachineSpec {
            cpus,
            memory: _,
            ram_pages: _,
            placement,
            nvdimms,
            disks,
            legacy_pmem,
            nvdimm_slots,
        } = m;
        self.cpus = cpus;
        self.host_node = placement.host_node;
        self.pin = (!placement.pin.is_empty()).then_some(vmm::memory::placement::Placement {
            host_node: None,
            ..placement
        });
        self.nvdimm = nvdimms;
        self.disk = disks;
        self.pmem_legacy = legacy_pmem;
        self.nvdimm_slots = nvdimm_slots;
        Ok(())
    }

    /// The machine these options describe.
    pub fn spec(&self) -> config::MachineSpec {
        config::MachineSpec {
            cpus: self.cpus,
            memory: self.memory.size,
            ram_pages: self.memory.pages,
            placement: self.placement(),
            nvdimms: self.nvdimm.clone(),
            disks: self.disk.clone(),
            legacy_pmem: self.pmem_legacy.clone(),
            nvdimm_slots: self.nvdimm_slots,
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

fn parse_nvdimm(s: &str) -> Result<NvdimmSpec, String> {
    s.parse::<NvdimmSpec>().map_err(|e| e.to_string())
}

fn parse_disk(s: &str) -> Result<config::DiskSpec, String> {
    s.parse::<config::DiskSpec>().map_err(|e| e.to_string())
}

fn parse_pmem_legacy(s: &str) -> Result<LegacyPmemSpec, String> {
    s.parse::<LegacyPmemSpec>().map_err(|e| e.to_string())
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
    /// Pin vCPU i to the i-th host CPU of this list (e.g. 2,3 or 4-7); the
    /// VMM's other threads then run on the remaining CPUs.
    #[arg(long, value_parser = parse_pin, value_name = "CPULIST")]
    pub pin: Option<vmm::memory::placement::Placement>,
    /// Bind guest RAM and every NVDIMM mapping to this host NUMA node (strict).
    #[arg(long, value_name = "N")]
    pub host_node: Option<u32>,
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
}

/// What the machine boots (`boot` and `run`).
#[derive(Debug, Args, Clone)]
pub struct KernelArgs {
    /// Guest kernel: ELF vmlinux (PVH) or bzImage. Default: the project's guest image.
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
    /// Initial ramdisk (default: the guest image's initramfs).
    #[arg(long, value_name = "PATH")]
    pub initrd: Option<PathBuf>,
    /// The kernel's modules: what `make modules_install INSTALL_MOD_PATH=X` wrote (X or
    /// X/lib/modules/RELEASE, of the kernel's release); the NVDIMM, DAX and file-system
    /// modules and their dependencies go into the initrd and the guest's init loads them.
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// Whole kernel command line (replaces the default, a console on ttyS0).
    #[arg(long, value_name = "STR")]
    pub cmdline: Option<String>,
    /// Appended to the kernel command line (e.g. nd_pmem.nowait=0); repeatable.
    #[arg(long = "append", value_name = "STR")]
    pub append: Vec<String>,
}

impl KernelArgs {
    /// What the machine boots, as given.
    pub fn files(&self) -> config::BootFiles {
        config::BootFiles {
            kernel: self.kernel.clone(),
            initrd: self.initrd.clone(),
            modules: self.modules.clone(),
            cmdline: self.cmdline.clone(),
            append: self.append.clone(),
        }
    }
}

/// `pmemvm boot`.
#[derive(Debug, Args)]
pub struct BootArgs {
    /// What it boots.
    #[command(flatten)]
    pub boot: KernelArgs,
    /// The machine.
    #[command(flatten)]
    pub machine: MachineArgs,
    /// The console.
    #[command(flatten)]
    pub console: ConsoleArgs,
    /// Write the guest's data channel (COM2) to this file.
    #[arg(long, value_name = "PATH")]
    pub channel: Option<PathBuf>,
    /// End the guest after this many seconds (exit status 124, with where each vCPU was).
    /// Default: no limit.
    #[arg(long, value_parser = parse_seconds, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Where the guest runs: pmemvm on this host's KVM, or nested (pmemvm
    /// inside a QEMU TCG L1 with emulated SVM, for hosts without hardware
    /// virtualization).
    #[arg(long, value_enum, default_value = "pmemvm")]
    pub engine: BootEngineArg,
    /// The debugger: serve gdb's remote protocol at ADDR (`target remote
    /// ADDR` in gdb): HOST:PORT on loopback (127.0.0.1:1234, :1234), a Unix
    /// socket path (owner-only), or a serial device under /dev.
    #[arg(long, value_name = "ADDR", value_parser = parse_gdb)]
    pub gdb: Option<vmm::debug::gdb::GdbAddr>,
    /// With --gdb: hold the vCPUs until a debugger attaches (QEMU's -S).
    #[arg(long, requires = "gdb")]
    pub gdb_wait: bool,
    /// With --gdb HOST:PORT: let HOST be beyond loopback (0.0.0.0, a LAN
    /// address). The stub has no password: whoever reaches it controls the guest.
    #[arg(long, requires = "gdb")]
    pub gdb_any_address: bool,
    /// The control socket and the panic dump.
    #[command(flatten)]
    pub control: ControlArgs,
}

/// `--api` and `--dump-on-panic` (boot and run).
#[derive(Debug, Clone, Default, Args)]
pub struct ControlArgs {
    /// Serve the control socket at PATH (a new Unix socket, owner-only,
    /// removed at the end): `pmemvm ctl PATH stats|pause|resume|dump FILE`
    /// (docs/api.md).
    #[arg(long, value_name = "PATH")]
    pub api: Option<PathBuf>,
    /// When the guest kernel panics (it says so through the pvpanic
    /// device), write its memory and vCPU registers to FILE, a new file:
    /// an ELF core for `crash vmlinux FILE` and `drgn -c FILE`.
    #[arg(long, value_name = "FILE")]
    pub dump_on_panic: Option<PathBuf>,
}

fn parse_gdb(s: &str) -> Result<vmm::debug::gdb::GdbAddr, String> {
    vmm::debug::gdb::GdbAddr::parse(s).map_err(|e| e.to_string())
}

/// Refuses `--gdb HOST:PORT` beyond loopback without `--gdb-any-address`;
/// asked first, so a refusal changes nothing.
pub fn check_gdb(
    gdb: Option<&vmm::debug::gdb::GdbAddr>,
    any_address: bool,
) -> Result<(), vmm::debug::gdb::GdbError> {
    gdb.map_or(Ok(()), |a| a.check_reach(any_address))
}

/// `pmemvm acpi`.
#[derive(Debug, Args)]
pub struct AcpiArgs {
    /// The machine.
    #[command(flatten)]
    pub machine: MachineArgs,
    /// Directory to write `<NAME>.aml` files into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub(crate) fn parse_seconds(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err(format!(
            "--timeout '{s}' is not valid: use a number of seconds above 0"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("--timeout '{s}' is not a whole number of seconds")),
    }
}

/// `--engine`: which VMM runs the guest (the lab's [`Engine`], spelled for clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineArg {
    /// pmemvm itself.
    Pmemvm,
    /// qemu-system-x86_64 with its own NVDIMM.
    Qemu,
    /// pmemvm where this host's KVM can run Linux, QEMU otherwise.
    Auto,
    /// pmemvm itself inside a QEMU TCG L1 with emulated SVM (hosts without
    /// hardware virtualization; slow, functional only).
    Nested,
}

impl From<EngineArg> for Engine {
    fn from(e: EngineArg) -> Self {
        match e {
            EngineArg::Pmemvm => Engine::Pmemvm,
            EngineArg::Qemu => Engine::Qemu,
            EngineArg::Auto => Engine::Auto,
            EngineArg::Nested => Engine::Nested,
        }
    }
}

/// `boot --engine`: where `pmemvm boot` runs the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BootEngineArg {
    /// pmemvm on this host's KVM.
    Pmemvm,
    /// pmemvm inside a QEMU TCG L1 with emulated SVM, the guest's console on
    /// this terminal through both levels (slow, functional only).
    Nested,
}

/// `pmemvm run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The fio job file to run in the guest (or give a command after `--`).
    #[arg(long, value_name = "JOBFILE")]
    pub fio: Option<PathBuf>,
    /// A host file or directory tree to put into the guest before the
    /// command, at GUEST (default: /job/NAME; the command runs in /job);
    /// served from a read-only virtio disk, off the NVDIMM bus. Repeatable.
    #[arg(long, value_name = "HOST[:GUEST]", value_parser = parse_put)]
    pub put: Vec<lab::guest::transfer::PutSpec>,
    /// A guest file or directory (relative to /job, or absolute) to copy
    /// back into --out DIR after the command, SHA-256 checked. Repeatable.
    #[arg(long, value_name = "GUEST", value_parser = parse_get)]
    pub get: Vec<lab::guest::transfer::GetSpec>,
    /// Where --get files come back (created; existing entries of the same
    /// name are never overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Size of the transfer area for --put and for --get (a multiple of 16M).
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = parse_transfer_size)]
    pub transfer_size: u64,
    /// Run the command in this root file system instead of the guest image's
    /// busybox: `debian` (built from Debian bookworm packages on first use,
    /// cached by the package list) or an ext4 image (a multiple of 16M).
    #[arg(long, value_name = "debian|IMAGE")]
    pub rootfs: Option<String>,
    /// Packages of `--rootfs debian`, comma-separated (default python3,stress-ng,fio,xfsprogs,ndctl).
    #[arg(long, value_name = "LIST")]
    pub packages: Option<String>,
    /// The command to run in the guest instead of fio: `-- CMD [ARGS...]`;
    /// its exit status becomes pmemvm's.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
    /// Shell commands run in the guest before fio (cwd /job; `@FILE` reads them from FILE).
    #[arg(long, value_name = "CMDS")]
    pub setup: Option<String>,
    /// Extra fio arguments (one line).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub fio_args: Option<String>,
    /// Write fio's JSON and the run's metadata to this file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Which VMM runs the guest (auto: pmemvm where this host's KVM can run
    /// Linux, QEMU otherwise; nested: pmemvm inside a QEMU TCG L1, slow).
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: EngineArg,
    /// The console (hidden by default; its last lines are shown on failure).
    #[command(flatten)]
    pub console: ConsoleArgs,
    /// Give up (and keep partial results) after this many seconds.
    #[arg(long, default_value = "600", value_parser = parse_seconds, value_name = "SECS")]
    pub timeout: u64,
    /// What it boots.
    #[command(flatten)]
    pub boot: KernelArgs,
    /// The machine.
    #[command(flatten)]
    pub machine: MachineArgs,
    /// The debugger, as for `boot` (on --engine qemu: QEMU's own gdbstub).
    #[arg(long, value_name = "ADDR", value_parser = parse_gdb)]
    pub gdb: Option<vmm::debug::gdb::GdbAddr>,
    /// With --gdb: hold the vCPUs until a debugger attaches.
    #[arg(long, requires = "gdb")]
    pub gdb_wait: bool,
    /// With --gdb HOST:PORT: let HOST be beyond loopback, as for `boot`.
    #[arg(long, requires = "gdb")]
    pub gdb_any_address: bool,
    /// The control socket and the panic dump, as for `boot` (engine pmemvm).
    #[command(flatten)]
    pub control: ControlArgs,
}

fn parse_put(s: &str) -> Result<lab::guest::transfer::PutSpec, String> {
    s.parse()
        .map_err(|e: lab::guest::transfer::TransferError| e.to_string())
}

fn parse_get(s: &str) -> Result<lab::guest::transfer::GetSpec, String> {
    s.parse()
        .map_err(|e: lab::guest::transfer::TransferError| e.to_string())
}

fn parse_transfer_size(s: &str) -> Result<u64, String> {
    let align = vmm::layout::NVDIMM_REGION_ALIGN;
    match vmm::config::parse_size(s) {
        Ok(n) if n > 0 && n % align == 0 => Ok(n),
        Ok(_) => Err(format!(
            "--transfer-size '{s}' is not valid: use a multiple of 16M above 0, e.g. 512M"
        )),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err(format!("'{s}' is not valid: use a whole number above 0")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number above 0")),
    }
}

/// `pmemvm bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// pmem-nowait, pmem-randwrite, pmem-verify, bcache-nowait, bcache-verify or xfs-dax-write.
    pub experiment: String,
    /// Boots per side; each boot runs the thread's whole script for that side, so
    /// pmem-nowait and bcache-nowait give 3 randread runs per boot (the thread's repetitions).
    #[arg(long, default_value = "1", value_parser = parse_count, value_name = "N")]
    pub runs: u32,
    /// Guest vCPUs (default: the thread's 48, at most one per host CPU).
    #[arg(long, value_parser = parse_cpus, value_name = "N")]
    pub cpus: Option<u8>,
    /// Guest RAM, raised to what the experiment needs (default: the experiment's minimum plus
    /// 8 MiB per fio job, at least 1G); `,hugepages` backs it with 2 MiB hugetlb pages
    /// (reserved up front), `,thp` asks for transparent huge pages. Every boot.
    #[arg(long, value_parser = parse_memory, value_name = "SIZE[,hugepages|,thp]")]
    pub memory: Option<vmm::memory::hugepages::MemorySpec>,
    /// Pin vCPU i to the i-th host CPU of this list (e.g. 2,3 or 4-7), every boot; the
    /// list needs a CPU per guest vCPU.
    #[arg(long, value_parser = parse_pin, value_name = "CPULIST")]
    pub pin: Option<vmm::memory::placement::Placement>,
    /// Bind guest RAM and the NVDIMM mapping of every boot to this host NUMA node (strict).
    #[arg(long, value_name = "N")]
    pub host_node: Option<u32>,
    /// fio jobs of the many-job phases (default: the thread's 48, at most one per vCPU).
    #[arg(long, value_parser = parse_count, value_name = "N")]
    pub jobs: Option<u32>,
    /// NVDIMM size (default: the experiment's).
    #[arg(long, value_parser = parse_size_arg, value_name = "SIZE")]
    pub nvdimm: Option<u64>,
    /// Seconds of the time-bound phases (default: the thread's 60).
    #[arg(long, value_parser = parse_count, value_name = "SECS")]
    pub runtime: Option<u32>,
    /// io_uring queue depth of the many-job phases (default: the thread's 2; xfs-dax-write 1).
    #[arg(long, value_parser = parse_count, value_name = "N")]
    pub iodepth: Option<u32>,
    /// The thread's fio --size (pmem: 896M; bcache: 1G, also each null_blk device;
    /// xfs-dax-write: each file, 256M).
    #[arg(long, value_parser = parse_size_arg, value_name = "SIZE")]
    pub size: Option<u64>,
    /// A side of an A/B between two kernels or command lines:
    /// NAME:kernel=PATH[,initrd=PATH][,modules=DIR][,as=off|on][,append=ARGS] (append last;
    /// twice, instead of the experiment's own sides; as= declares the thread's side it
    /// repeats, without which upstream's figures are not shown beside it).
    #[arg(long = "side", value_name = "SPEC")]
    pub sides: Vec<String>,
    /// Print each side's boot, phase by phase with the complete fio jobs, and the deviations
    /// from the thread; boot nothing.
    #[arg(long)]
    pub plan: bool,
    /// With --plan: the plan as JSON.
    #[arg(long, requires = "plan")]
    pub json: bool,
    /// Directory for report.txt, report.json, runs.csv, summary.csv, chart.svg.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Which VMM runs the guest (auto: pmemvm where this host's KVM can run
    /// Linux, QEMU otherwise; nested: pmemvm inside a QEMU TCG L1, slow).
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: EngineArg,
    /// Per-boot timeout in seconds.
    #[arg(long, default_value = "3600", value_parser = parse_seconds, value_name = "SECS")]
    pub timeout: u64,
    /// Guest kernel of every side without its own (default: the guest image's).
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
    /// Initrd of every side without its own (default: the guest image's initramfs).
    #[arg(long, value_name = "PATH")]
    pub initrd: Option<PathBuf>,
    /// Modules of every side's kernel without its own modules=: what `make modules_install INSTALL_MOD_PATH=X` wrote (X or
    /// X/lib/modules/RELEASE, of the kernel's release); the NVDIMM, DAX and file-system
    /// modules and their dependencies go into the initrd and the guest's init loads them.
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// Run only this boot of this side, e.g. on:2 (what one Slurm array task runs; reruns one
    /// failed task by hand).
    #[arg(long, value_name = "SIDE:BOOT", value_parser = lab::study::fleet::task::parse_arg, conflicts_with_all = ["plan", "slurm"])]
    pub only: Option<lab::study::fleet::task::Task>,
    /// Write SHARED_DIR/bench.sbatch (a Slurm job array: one task per side and boot),
    /// report.sbatch (the merge), submit.sh and request.json (the bench every task runs)
    /// instead of running anything; needs --out.
    #[arg(long, requires = "out", conflicts_with = "plan")]
    pub slurm: bool,
    /// Exit 1 when the experiment's verify job fails (fio found other data than it wrote).
    /// Without it that outcome is a result of the experiment, reported per side and boot,
    /// and the exit status stays 0.
    #[arg(long)]
    pub fail_on_check: bool,
    /// Serve the control socket at PATH during each boot (`pmemvm ctl PATH
    /// stats`, `media inject ...`; docs/api.md): the boots are one after
    /// another, each makes the socket and removes it at its end. Engines
    /// pmemvm and nested.
    #[arg(long, value_name = "PATH")]
    pub api: Option<PathBuf>,
    /// (Internal: what a Slurm array task runs.) The bench request `--slurm` wrote: it
    /// replaces every option but `--only` and `--out`.
    #[arg(long, hide = true, value_name = "FILE", conflicts_with = "slurm")]
    pub request: Option<PathBuf>,
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
