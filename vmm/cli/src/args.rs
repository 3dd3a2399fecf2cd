//! The arguments of `pmemvm bench`, `report` and `acpi` (clap). The machine,
//! the kernel, the console and their parsers are the lab's
//! ([`lab::guest::args`]), and `pmemvm boot`'s and `run`'s arguments are the
//! lab's [`lab::guest::boot::BootRequest`] and [`lab::guest::run::RunRequest`]
//! themselves. A leaf: it uses no other module of
//! the binary.

use std::path::PathBuf;

use clap::Args;

use lab::guest::args::{parse_cpus, parse_memory, parse_seconds, parse_size_arg, MachineArgs};
use lab::guest::run::Engine;

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

fn parse_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err(format!("'{s}' is not valid: use a whole number above 0")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number above 0")),
    }
}

/// `bench --cxl-pmem SIZE`: a size `run --cxl-pmem` accepts, and nothing else (each
/// boot's device is a temporary file with the default label area).
fn parse_bench_cxl_size(s: &str) -> Result<u64, String> {
    if s.contains(',') {
        return Err(format!(
            "--cxl-pmem '{s}': bench takes a size only (each boot's device is a temporary file); use e.g. 1G"
        ));
    }
    s.parse::<vmm::config::CxlPmemSpec>()
        .map(|spec| spec.size)
        .map_err(|e| e.to_string())
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
    /// Where each boot's guest runs on the host.
    #[command(flatten)]
    pub placement: lab::guest::args::PlacementArgs,
    /// fio jobs of the many-job phases (default: the thread's 48, at most one per vCPU).
    #[arg(long, value_parser = parse_count, value_name = "N")]
    pub jobs: Option<u32>,
    /// NVDIMM size (default: the experiment's).
    #[arg(long, value_parser = parse_size_arg, value_name = "SIZE")]
    pub nvdimm: Option<u64>,
    /// The persistent memory on a CXL Type-3 device instead of an NVDIMM (SIZE: a multiple
    /// of 256M; default: the experiment's, rounded up to one): the guest makes its region
    /// and a raw namespace, /dev/pmem0, before the experiment's setup.
    #[arg(long = "cxl-pmem", value_parser = parse_bench_cxl_size, value_name = "SIZE",
          num_args = 0..=1, conflicts_with = "nvdimm")]
    pub cxl_pmem: Option<Option<u64>>,
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
    pub engine: Engine,
    /// Per-boot timeout in seconds.
    #[arg(long, default_value = "3600", value_parser = parse_seconds, value_name = "SECS")]
    pub timeout: u64,
    /// The kernel, initrd and modules of every side without its own.
    #[command(flatten)]
    pub files: lab::guest::args::KernelFiles,
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
