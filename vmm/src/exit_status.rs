//! pmemvm's exit statuses (documented in README.md, "Exit status").
//!
//! A byte the guest writes to the guest-exit port is passed through verbatim,
//! so a test suite in the guest sets pmemvm's status; pmemvm's own statuses
//! are below. They can coincide with a guest-chosen byte: the last line on
//! stderr (and `run --json`) says which it was.

use devices::exit::ExitRequest;

/// The guest powered off (ACPI S5).
pub const POWER_OFF: u8 = 0;
/// pmemvm failed at run time (host error, KVM failure during setup).
pub const RUNTIME_ERROR: u8 = 1;
/// Bad command line or configuration; nothing was changed.
pub const USAGE: u8 = 2;
/// The guest asked for a reset (reboot).
pub const GUEST_RESET: u8 = 3;
/// The guest triple-faulted (KVM shutdown exit).
pub const TRIPLE_FAULT: u8 = 4;
/// A vCPU stopped on a KVM internal error (e.g. emulation failure) or an unhandled exit.
pub const VCPU_FAILURE: u8 = 5;
/// The guest did not end within `--timeout` (as coreutils' `timeout(1)`).
pub const TIMED_OUT: u8 = 124;
/// A backing file could not store the guest's data (e.g. host disk full, fdatasync failure).
pub const STORAGE_FAILURE: u8 = 6;

/// The process exit status for an exit request.
pub fn for_request(r: &ExitRequest) -> u8 {
    match r {
        ExitRequest::PowerOff => POWER_OFF,
        ExitRequest::GuestExit(n) => *n,
        ExitRequest::Reset => GUEST_RESET,
        ExitRequest::TripleFault => TRIPLE_FAULT,
        ExitRequest::Fatal(_) => VCPU_FAILURE,
        ExitRequest::StorageFailure(_) => STORAGE_FAILURE,
        ExitRequest::Timeout(_) => TIMED_OUT,
        // Shell convention: 128 + signal number.
        ExitRequest::Signal(s) => u8::try_from(128 + s).unwrap_or(RUNTIME_ERROR),
    }
}

/// A one-line description of how the VM ended.
pub fn describe(r: &ExitRequest) -> String {
    match r {
        ExitRequest::PowerOff => "the guest powered off".into(),
        ExitRequest::GuestExit(n) => format!("the guest wrote {n} to the guest-exit port"),
        ExitRequest::Reset => "the guest asked for a reset; pmemvm does not reboot guests".into(),
        ExitRequest::TripleFault => "the guest triple-faulted (KVM shutdown exit)".into(),
        ExitRequest::Fatal(m) => m.clone(),
        ExitRequest::StorageFailure(m) => m.clone(),
        ExitRequest::Timeout(secs) => {
            format!("the guest did not finish within {secs} s (use --timeout to allow more)")
        }
        ExitRequest::Signal(s) => format!("stopped by signal {s}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_distinct_and_documented() {
        let all = [
            for_request(&ExitRequest::PowerOff),
            for_request(&ExitRequest::Reset),
            for_request(&ExitRequest::TripleFault),
            for_request(&ExitRequest::Fatal(String::new())),
            for_request(&ExitRequest::StorageFailure(String::new())),
            for_request(&ExitRequest::Timeout(1)),
            USAGE,
            RUNTIME_ERROR,
        ];
        let mut sorted = all.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len());
        assert_eq!(for_request(&ExitRequest::GuestExit(77)), 77);
        assert_eq!(for_request(&ExitRequest::Signal(libc::SIGTERM)), 143);
        assert_eq!(for_request(&ExitRequest::Signal(libc::SIGINT)), 130);
    }
}
