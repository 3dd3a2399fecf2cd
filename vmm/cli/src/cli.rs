//! The command line of `pmemvm` (clap), turned into validated configurations.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::args::{AcpiArgs, BenchArgs, ReportArgs};
use lab::guest::boot::BootRequest;
use lab::guest::run::RunRequest;

/// pmemvm: a small KVM VMM that gives Linux guests ACPI NFIT-described NVDIMMs backed by host files.
#[derive(Debug, Parser)]
#[command(name = "pmemvm", version, about, long_about = None)]
pub struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Boot a guest kernel with the console on this terminal.
    Boot(Box<BootRequest>),
    /// Run a fio job (--fio) or any command (-- CMD) in the guest and return its results.
    Run(Box<RunRequest>),
    /// Run one of the upstream experiments (A/B where it has two sides) and report.
    Bench(BenchArgs),
    /// Merge the results of `bench` (one host or many, e.g. a Slurm array's) into one report.
    Report(ReportArgs),
    /// Write the ACPI tables pmemvm would give a guest, one file per table.
    Acpi(AcpiArgs),
    /// Print the kernel options pmemvm's guests need, or check a kernel
    /// (vmlinux or bzImage with an embedded config) or a .config against them.
    Kconfig(KconfigArgs),
    /// Look at NVDIMM backing files.
    #[command(subcommand)]
    Nvdimm(NvdimmCommand),
    /// Talk to a running VM's control socket (`--api PATH`): its counters,
    /// pause and resume, a dump of its memory.
    Ctl(CtlArgs),
    /// Write the DIMM file as power loss after each recorded flush would
    /// leave it (`--nvdimm ...,record=DIR`), with torn variants on request.
    CrashImages(crate::crash_args::CrashImagesArgs),
    /// Boot a fresh guest on each crash image of a recording and run a check
    /// there (e.g. `-- xfs_repair -n /dev/pmem0`); status 1 names the first
    /// image that failed it.
    CrashCheck(Box<crate::crash_args::CrashCheckArgs>),
    /// Run another project's test suite in the guest (ndctl's own) and tabulate it.
    #[command(subcommand)]
    Suite(crate::suite_args::SuiteCommand),
    /// Check what a command needs on this host, without running it: prints
    /// `install PACKAGE` and `image` lines (used by the ./pmemvm wrapper).
    Preflight(PreflightArgs),
    /// One boot of a bench, in its own process (internal: `pmemvm bench`
    /// starts it with a run spec and reads the outcome file it writes).
    #[command(name = "__run-job", hide = true)]
    RunJob(RunJobArgs),
}

pub use crate::ctl::CtlArgs;

/// `pmemvm __run-job SPEC OUTCOME` (internal, see `lab::guest::child`).
#[derive(Debug, Args)]
pub struct RunJobArgs {
    /// The run spec (JSON) written by the bench.
    pub spec: PathBuf,
    /// Where to write the outcome (JSON).
    pub outcome: PathBuf,
}

/// `pmemvm nvdimm ...`.
#[derive(Debug, Subcommand)]
pub enum NvdimmCommand {
    /// Print the bad ranges recorded in a backing file (one OFFSET+LENGTH
    /// line each, bytes from the region start: the syntax of
    /// `--nvdimm ...,badblocks=`), after a comment line with the unsafe
    /// shutdown count.
    Badblocks {
        /// The backing file (`--nvdimm ...,file=FILE`).
        file: PathBuf,
    },
}

/// `pmemvm kconfig`.
#[derive(Debug, Args)]
pub struct KconfigArgs {
    /// A kernel image (ELF vmlinux or bzImage built with CONFIG_IKCONFIG) or
    /// a .config to check; exit status 2 when an option is missing.
    #[arg(long, value_name = "KERNEL|.config", conflicts_with = "extract")]
    pub check: Option<PathBuf>,
    /// Print the configuration embedded in a kernel image (like the kernel's
    /// scripts/extract-ikconfig).
    #[arg(long, value_name = "KERNEL")]
    pub extract: Option<PathBuf>,
}

/// `pmemvm preflight`.
#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// The command to check, as it would be typed after `pmemvm`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}
