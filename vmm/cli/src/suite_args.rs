//! The arguments of `pmemvm suite ndctl` (clap), and the lab request they make.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use lab::study::suite::{self, NdctlRequest, SuiteError};

/// `pmemvm suite ...`.
#[derive(Debug, Subcommand)]
pub enum SuiteCommand {
    /// ndctl's own test suite (`meson test` of an ndctl source tree, unmodified) in a
    /// Debian guest: the destructive ACPI.NFIT tests on pmemvm's NVDIMMs, the e820 tests on
    /// legacy pmem, and the nfit_test error scripts pointed at pmemvm's ACPI.NFIT bus; a
    /// table of every test's result, status 1 when one failed or did not run.
    Ndctl(NdctlArgs),
}

/// `pmemvm suite ndctl [--src DIR] [TEST...]`.
#[derive(Debug, Args)]
pub struct NdctlArgs {
    /// The ndctl source tree (e.g. `git clone --branch v81 https://github.com/pmem/ndctl`);
    /// built once on the host with its tests, cached by its content.
    #[arg(long, value_name = "DIR")]
    pub src: PathBuf,
    /// Where the results go: a new or empty directory (each boot's meson logs, JUnit XML,
    /// kernel log and console; summary.json).
    #[arg(long, value_name = "DIR", default_value = "ndctl-suite")]
    pub out: PathBuf,
    /// Which VMM runs the guests (auto: pmemvm where this host's KVM can run Linux,
    /// QEMU otherwise; nested: pmemvm inside a QEMU TCG L1, slow). Several, comma
    /// separated (e.g. `nested,qemu`): every boot on each, one column each in the table.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    pub engine: Vec<lab::guest::run::Engine>,
    /// Guest vCPUs of each boot.
    #[arg(long, default_value = "2", value_parser = lab::guest::args::parse_cpus, value_name = "N")]
    pub cpus: u8,
    /// Guest RAM of each boot.
    #[arg(long, default_value = "2G", value_parser = lab::guest::args::parse_size_arg, value_name = "SIZE")]
    pub memory: u64,
    /// Each boot's time limit in seconds.
    #[arg(long, default_value = "3600", value_parser = lab::guest::args::parse_seconds, value_name = "SECS")]
    pub timeout: u64,
    /// Stream the guests' consoles here (each boot keeps console.log anyway).
    #[arg(long)]
    pub console: bool,
    /// Print the boots (machine, tests, guest command) and exit; builds and boots nothing.
    #[arg(long)]
    pub plan: bool,
    /// Run ndctl's default test set on the kernel's own NVDIMM emulation (nfit_test):
    /// builds tools/testing/nvdimm against the modular kernel of --kernel and --modules
    /// (its build tree: --kernel-tree, default the modules' lib/modules/RELEASE/build) and
    /// boots that kernel with the test modules, as ndctl's maintainers run the suite.
    #[arg(long)]
    pub nfit_test: bool,
    /// The guest kernel of every boot (bzImage or vmlinux; default: the project's guest
    /// image), e.g. the Linux 6.12 variant for ndctl's CXL tests (`guest-images/build.sh
    /// --linux 6.12`); with --nfit-test, the modular kernel the nfit_test modules are built
    /// for.
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,
    /// Its modules for --nfit-test: what `make modules_install INSTALL_MOD_PATH=X` wrote
    /// (X or X/lib/modules/RELEASE); only read.
    #[arg(long, value_name = "DIR")]
    pub modules: Option<PathBuf>,
    /// The kernel's configured and built source tree for --nfit-test (default: the
    /// modules' lib/modules/RELEASE/build); only read.
    #[arg(long, value_name = "DIR")]
    pub kernel_tree: Option<PathBuf>,
    /// meson test names (default: every test the command places; `--plan` lists them;
    /// on `--engine nested` the default leaves out `mmap.sh`, hours on an emulated CPU).
    #[arg(value_name = "TEST")]
    pub tests: Vec<String>,
}

impl NdctlArgs {
    /// The lab's request; `--modules` and `--kernel-tree` go with `--nfit-test`.
    pub fn request(&self) -> Result<NdctlRequest, SuiteError> {
        let nfit_test = match (self.nfit_test, &self.kernel, &self.modules) {
            (true, Some(kernel), Some(modules)) => Some(suite::nfit_test::NfitTestKernel {
                kernel: kernel.clone(),
                modules: modules.clone(),
                tree: self.kernel_tree.clone(),
            }),
            (true, _, _) => return Err(SuiteError::NfitTestArgs(
                "--nfit-test needs --kernel PATH and --modules DIR: the modular kernel the nfit_test modules are built for, and what its make modules_install wrote",
            )),
            (false, _, None) if self.kernel_tree.is_none() => None,
            (false, _, _) => return Err(SuiteError::NfitTestArgs(
                "--modules and --kernel-tree go with --nfit-test (the suite's other tests boot --kernel, or the guest image's kernel, with its drivers built in); add --nfit-test or leave them out",
            )),
        };
        let kernel = match nfit_test {
            Some(_) => None,
            None => self.kernel.clone(),
        };
        Ok(NdctlRequest {
            src: self.src.clone(),
            tests: self.tests.clone(),
            engines: self.engine.clone(),
            cpus: self.cpus,
            memory: self.memory,
            out: self.out.clone(),
            timeout: std::time::Duration::from_secs(self.timeout),
            stream_console: self.console,
            nfit_test,
            kernel,
        })
    }
}
