//! Errors of the end-to-end harness.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::Mode;
use crate::skip::{MaybeSkip, Skip};

/// Errors of the end-to-end harness.
#[derive(Debug, thiserror::Error)]
pub enum NestedError {
    /// A requirement of the tier is missing on this machine; the test skips.
    #[error("{0}")]
    Unavailable(Skip),
    /// A file operation of the harness failed.
    #[error("cannot {what}: {source}")]
    Io {
        /// What the harness was doing.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// `guest-images/l1/prepare.sh` failed for a reason other than a missing tool.
    #[error("preparing the L1 VM failed ({status}); prepare.sh said:\n{stderr}")]
    Prepare {
        /// Exit status of prepare.sh.
        status: String,
        /// Its standard error.
        stderr: String,
    },
    /// The product's L1 code failed (copying a binary's libraries, writing the command).
    #[error(transparent)]
    Product(#[from] lab::guest::nested::NestedError),
    /// The deadline passed; QEMU (or the direct command) was killed.
    #[error(
        "the command did not finish within {deadline:?} and was killed \
         (files kept in {}); its stderr, last lines:\n{stderr}\n{} console, last lines:\n{console}",
        run_dir.display(), mode
    )]
    Deadline {
        /// The deadline that passed.
        deadline: Duration,
        /// Time from starting QEMU (or the command) until it was killed.
        killed_after: Duration,
        /// Mode the command ran in.
        mode: Mode,
        /// Kept run directory (share, console log).
        run_dir: PathBuf,
        /// Tail of the L1 console (nested: followed by where the L1's vCPUs
        /// were before the kill, from QEMU's monitor) or of stderr (direct).
        console: String,
        /// Tail of the command's stderr (what pmemvm said so far).
        stderr: String,
    },
    /// The L1 kernel stopped running (no heartbeat from its init): an
    /// emulation failure of the L1, not of the command. Run again, up to
    /// `BREAKDOWN_TRIES` runs in all.
    #[error(
        "the L1 VM stopped running ({reason}) and was killed (files kept in {}); \
         what it was doing:\n{state}\nthe command's stderr, last lines:\n{stderr}\nL1 console, last lines:\n{console}",
        run_dir.display()
    )]
    L1Stalled {
        /// What the heartbeat watch saw.
        reason: String,
        /// Its vCPUs and QEMU's threads when it was found stopped.
        state: String,
        /// Kept run directory.
        run_dir: PathBuf,
        /// Tail of the L1 console.
        console: String,
        /// Tail of the command's stderr.
        stderr: String,
    },
    /// The L1 init could not set up (module load, 9p mount).
    #[error(
        "the L1 VM failed to set up: {message} (files kept in {}); L1 console, last lines:\n{console}",
        run_dir.display()
    )]
    L1Setup {
        /// The init's error line.
        message: String,
        /// Kept run directory.
        run_dir: PathBuf,
        /// Tail of the L1 console.
        console: String,
    },
    /// L1 stopped (panic, crash, QEMU error) without reporting a status.
    #[error(
        "the L1 VM stopped without reporting the command's exit status (QEMU {qemu_status}; \
         files kept in {}); QEMU said: {qemu_log}\nL1 console, last lines:\n{console}",
        run_dir.display()
    )]
    NoStatus {
        /// QEMU's exit status, and what ended the L1 when QEMU logged it (a triple fault).
        qemu_status: String,
        /// QEMU's own stdout/stderr.
        qemu_log: String,
        /// Kept run directory.
        run_dir: PathBuf,
        /// Tail of the L1 console.
        console: String,
    },
}

impl MaybeSkip for NestedError {
    fn skip_reason(&self) -> Option<&str> {
        match self {
            NestedError::Unavailable(skip) => Some(skip.reason()),
            _ => None,
        }
    }
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> NestedError {
    let what = what.into();
    move |source| NestedError::Io { what, source }
}

pub(crate) fn unavailable(reason: impl Into<String>) -> NestedError {
    NestedError::Unavailable(Skip::new(reason))
}
