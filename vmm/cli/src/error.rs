//! The one error type of the subcommands, and which of its cases are the user's input
//! (exit status 2).

use std::path::PathBuf;

use lab::guest::run::RunError;
use lab::study::bench::BenchError;
use vmm::vstate::vm::VmError;

/// Errors of a subcommand.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
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

/// What building or running a VM meets (the VM, the guest image, the
/// debugger's endpoint, `--api`, `--dump-on-panic`) is a run's error
/// ([`RunError`]), whichever command meets it.
macro_rules! through_a_run {
    ($($from:ty),*) => {$(
        impl From<$from> for CommandError {
            fn from(e: $from) -> Self {
                Self::Run(RunError::from(e))
            }
        }
    )*};
}
through_a_run!(
    VmError,
    lab::guest::guest_job::ImageUnavailable,
    vmm::debug::gdb::GdbError,
    vmm::api::ApiError,
    vmm::debug::dump::DumpError
);

impl vmm::exit_status::Classified for CommandError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::Run(e) => e.kind(),
            Self::Bench(e) => e.kind(),
            Self::Kconfig(e) => e.kind(),
            Self::Merge(e) => e.kind(),
            Self::Slurm(e) => e.kind(),
            Self::Media(e) => e.kind(),
            Self::CrashCheck(e) => e.kind(),
            Self::Suite(e) => e.kind(),
            Self::Output { .. } => Usage,
        }
    }
}
