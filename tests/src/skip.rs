//! Skipping a test with a visible reason.
//!
//! A test whose tier needs something the machine lacks (QEMU, hardware
//! virtualization, a built guest image, the `pmemvm` binary) prints
//! `SKIP: <reason>` to stderr and returns. It never pretends to pass
//! silently, and real failures of the harness still fail the test.
//!
//! ```no_run
//! use pmemvm_tests::{nested::NestedVm, require};
//!
//! #[test]
//! fn example() {
//!     let vm = require!(NestedVm::new());
//!     let out = vm.run(&["true"]).expect("run in L1");
//!     assert_eq!(out.status, 0, "{}", out.dump());
//! }
//! ```

use std::fmt;

/// Why a test cannot run on this machine: a missing requirement, not a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    reason: String,
}

impl Skip {
    /// A skip with a reason a reader of the test log understands.
    pub fn new(reason: impl Into<String>) -> Self {
        Skip {
            reason: reason.into(),
        }
    }

    /// The reason, without the `SKIP:` prefix.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Prints `SKIP: <reason>` to stderr.
    pub fn print(&self) {
        eprintln!("SKIP: {}", self.reason);
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.reason)
    }
}

/// An error that may stand for a missing requirement rather than a failure.
pub trait MaybeSkip: fmt::Display {
    /// `Some(reason)` if the test should be skipped instead of failed.
    fn skip_reason(&self) -> Option<&str>;
}

impl MaybeSkip for Skip {
    fn skip_reason(&self) -> Option<&str> {
        Some(&self.reason)
    }
}

/// Unwraps a `Result<T, E: MaybeSkip>` inside a test function: on a skip
/// reason prints `SKIP: <reason>` and returns from the test; on any other
/// error fails the test with the error's message.
#[macro_export]
macro_rules! require {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => {
                if let Some(reason) = $crate::skip::MaybeSkip::skip_reason(&e) {
                    eprintln!("SKIP: {reason}");
                    return;
                }
                panic!("{e}");
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_returns_early_on_skip() {
        let mut reached = false;
        let mut body = || {
            require!(Err::<(), Skip>(Skip::new("no QEMU")));
            reached = true;
        };
        body();
        assert!(!reached);
    }

    #[test]
    fn require_unwraps_ok() {
        let mut got = 0;
        let mut body = || {
            got = require!(Ok::<u32, Skip>(5));
        };
        body();
        assert_eq!(got, 5);
    }

    #[test]
    #[should_panic(expected = "broken")]
    fn require_panics_on_real_error() {
        #[derive(Debug)]
        struct Broken;
        impl fmt::Display for Broken {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "broken")
            }
        }
        impl MaybeSkip for Broken {
            fn skip_reason(&self) -> Option<&str> {
                None
            }
        }
        let body = || {
            require!(Err::<(), Broken>(Broken));
        };
        body();
    }

    #[test]
    fn skip_displays_its_reason() {
        let s = Skip::new("QEMU not found");
        assert_eq!(s.to_string(), "QEMU not found");
        assert_eq!(s.skip_reason(), Some("QEMU not found"));
    }
}
