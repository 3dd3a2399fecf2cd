//! The one error type of the subcommands, and which of its cases are the user's input
//! (exit status 2).

use std::path::PathBuf;

use lab::guest::run::RunError;
use lab::study::bench::BenchError;
use vmm::vstate::vm::VmError;

/// Errors of a subcommand.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Building or running the VM.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// The guest image was needed (no `--kernel`, or `--modules` without `--initrd`) and is
    /// not there.
    #[error(transparent)]
    Image(#[from] lab::guest::guest_job::ImageUnavailable),
    /// A job run.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A benchmark.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// Merging results.
    #[error(transparent)]
    Merge(#[from] lab::study::fleet::merge::MergeError),
    /// Writing the Slurm scripts.
    #[error(transparent)]
    Slurm(#[from] lab::study::fleet::slurm::SlurmError),
    /// Reading a kernel configuration.
    #[error(transparent)]
    Kconfig(#[from] lab::guest::kconfig::KconfigError),
    /// Reading a backing file's media state.
    #[error(transparent)]
    Media(#[from] vmm::nvdimm::media::MediaSetupError),
    /// The debugger's endpoint.
    #[error(transparent)]
    Gdb(#[from] vmm::debug::gdb::GdbError),
    /// `--api`.
    #[error(transparent)]
    Api(#[from] vmm::api::ApiError),
    /// `--dump-on-panic`.
    #[error(transparent)]
    Dump(#[from] vmm::debug::dump::DumpError),
    /// `crash-check`'s inputs.
    #[error(transparent)]
    CrashCheck(#[from] lab::study::crash_check::CrashCheckError),
    /// `pmemvm suite`.
    #[error(transparent)]
    Suite(#[from] lab::study::suite::SuiteError),
    /// Writing output files.
    #[error("cannot write {path}: {source}")]
    Output {
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl vmm::exit_status::Classified for CommandError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Vm(e) => e.kind(),
            Self::Run(e) => e.kind(),
            Self::Bench(e) => e.kind(),
            Self::Kconfig(e) => e.kind(),
            Self::Merge(e) => e.kind(),
            Self::Slurm(e) => e.kind(),
            Self::Media(e) => e.kind(),
            Self::Gdb(e) => e.kind(),
            Self::Api(e) => e.kind(),
            Self::Dump(e) => e.kind(),
            Self::CrashCheck(e) => e.kind(),
            Self::Suite(e) => e.kind(),
            Self::Image(_) | Self::Output { .. } => Usage,
        }
    }
}
