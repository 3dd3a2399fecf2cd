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
/// The guest kernel panicked (pvpanic), whether it then asked for a reset or not.
pub const GUEST_PANIC: u8 = 7;

/// What a triple fault's description says when the guest's RIP lies in the
/// code of one of the host kernel's modules (`/proc/modules`): the guest's
/// kernel cannot be there, the host's KVM can — evidence that the CPU (or the
/// emulator running this host) mixed the two levels' state.
pub const HOST_MODULE_RIP: &str = "that RIP lies in the host kernel's module";

/// Whose fault a failure is. Every error type of pmemvm says it of each of
/// its cases ([`Classified::kind`]); the exit status follows from it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// The user's input: a value, a path, a combination of options, a host
    /// that cannot do what was asked. [`USAGE`]; nothing the user owns was changed.
    Usage,
    /// The host failed under a valid request: I/O, memory, KVM, a tool
    /// pmemvm ran. [`RUNTIME_ERROR`].
    Environment,
    /// What the guest wrote or left is not what the run needs (a job's
    /// archive, a suite's output). [`RUNTIME_ERROR`].
    Guest,
    /// pmemvm broke its own rule (a layout it computed does not fit, a
    /// description it wrote cannot be read back). [`RUNTIME_ERROR`].
    Internal,
}

impl ErrorKind {
    /// The exit status of a failure of this kind.
    pub fn exit_status(self) -> u8 {
        match self {
            Self::Usage => USAGE,
            Self::Environment | Self::Guest | Self::Internal => RUNTIME_ERROR,
        }
    }

    /// [`Self::Usage`] for a failure at a path the user named that is the
    /// path's fault ([`is_path_fault`]), else [`Self::Environment`].
    pub fn of_path(e: &std::io::Error) -> Self {
        match is_path_fault(e) {
            true => Self::Usage,
            false => Self::Environment,
        }
    }
}

/// An error that says whose fault it is.
pub trait Classified {
    /// Whose fault it is.
    fn kind(&self) -> ErrorKind;

    /// True when the user's input is at fault (exit status 2).
    fn is_usage(&self) -> bool {
        self.kind() == ErrorKind::Usage
    }
}

/// True when a failed open, read or bind at a path the user named is the
/// path's fault (missing, no permission, a directory, taken, a file system
/// that holds no socket): the user's to fix, [`USAGE`]. False for the host's
/// own failures (no file descriptor or memory left, I/O errors):
/// [`RUNTIME_ERROR`].
pub fn is_path_fault(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENOENT
                | libc::ENOTDIR
                | libc::EACCES
                | libc::EPERM
                | libc::EROFS
                | libc::EEXIST
                | libc::EADDRINUSE
                | libc::EADDRNOTAVAIL
                | libc::ENXIO
                | libc::ENODEV
                | libc::EOPNOTSUPP
                | libc::ENAMETOOLONG
                | libc::ELOOP
                | libc::EISDIR
                | libc::EINVAL
        )
    )
}

/// The process exit status for an exit request.
pub fn for_request(r: &ExitRequest) -> u8 {
    match r {
        ExitRequest::PowerOff => POWER_OFF,
        ExitRequest::GuestExit(n) => *n,
        ExitRequest::Reset => GUEST_RESET,
        ExitRequest::GuestPanic => GUEST_PANIC,
        ExitRequest::TripleFault(_) => TRIPLE_FAULT,
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
        ExitRequest::GuestPanic => {
            "the guest kernel panicked (its pvpanic device said so; the console shows why)".into()
        }
        ExitRequest::TripleFault(t) => {
            let mut s = format!(
                "the guest triple-faulted (KVM shutdown exit) on vCPU {}",
                t.vcpu
            );
            if let Some(rip) = t.rip {
                s.push_str(&format!(" at RIP {rip:#x}"));
                if let Some(name) = &t.symbol {
                    s.push_str(&format!(" ({name})"));
                }
            }
            if let Some(module) = &t.host_module {
                s.push_str(&format!(
                    "; {HOST_MODULE_RIP} {module}: the CPU virtualization below pmemvm ran the \
                     guest with the host's state"
                ));
            }
            if !t.state.is_empty() {
                s.push_str(&format!("; {}", t.state));
            }
            s
        }
        ExitRequest::Fatal(m) => m.clone(),
        ExitRequest::StorageFailure(m) => m.clone(),
        ExitRequest::Timeout(secs) => {
            format!("the guest did not finish within {secs} s (use --timeout to allow more)")
        }
        ExitRequest::Signal(s) => format!("stopped by signal {s}"),
    }
}

/// Prints a failure on stderr as pmemvm's programs do, Cloud Hypervisor
/// style: `pmemvm: error: MESSAGE`, then each cause whose text the message
/// does not already hold, numbered.
pub fn print_error(error: &dyn std::error::Error) {
    let message = error.to_string();
    eprintln!("pmemvm: error: {message}");
    let mut source = error.source();
    let mut n = 1;
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            eprintln!("  {n}: {text}");
            n += 1;
        }
        source = s.source();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_users_fault_is_status_2_and_a_path_fault_is_the_users() {
        assert_eq!(ErrorKind::Usage.exit_status(), USAGE);
        for k in [
            ErrorKind::Environment,
            ErrorKind::Guest,
            ErrorKind::Internal,
        ] {
            assert_eq!(k.exit_status(), RUNTIME_ERROR, "{k:?}");
        }
        let io = std::io::Error::from_raw_os_error;
        assert_eq!(ErrorKind::of_path(&io(libc::ENOENT)), ErrorKind::Usage);
        assert_eq!(
            ErrorKind::of_path(&io(libc::EMFILE)),
            ErrorKind::Environment
        );
    }

    #[test]
    fn a_layered_error_takes_the_kind_of_its_cause() {
        use crate::boot::BootError;
        use crate::vstate::vm::VmError;
        let internal = VmError::Boot(BootError::TooManyE820Entries(200));
        assert_eq!(internal.kind(), ErrorKind::Internal);
        assert!(!internal.is_usage());
        let launch = crate::launch::LaunchError::from(VmError::NoKvm);
        assert_eq!(launch.kind(), ErrorKind::Usage);
    }

    #[test]
    fn statuses_are_distinct_and_documented() {
        let all = [
            for_request(&ExitRequest::PowerOff),
            for_request(&ExitRequest::Reset),
            for_request(&ExitRequest::GuestPanic),
            for_request(&ExitRequest::TripleFault(Default::default())),
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

    #[test]
    fn a_triple_fault_says_which_vcpu_and_where() {
        use devices::exit::TripleFault;
        let bare = ExitRequest::TripleFault(TripleFault::default());
        assert_eq!(
            describe(&bare),
            "the guest triple-faulted (KVM shutdown exit) on vCPU 0"
        );
        let full = ExitRequest::TripleFault(TripleFault {
            vcpu: 1,
            rip: Some(0xffff_ffff_8100_2fad),
            symbol: Some("native_write_msr+0x4".into()),
            state: "CR2 0x0, IDT 0x0 limit 0x0".into(),
            host_module: None,
        });
        assert_eq!(
            describe(&full),
            "the guest triple-faulted (KVM shutdown exit) on vCPU 1 at RIP 0xffffffff81002fad \
             (native_write_msr+0x4); CR2 0x0, IDT 0x0 limit 0x0"
        );
        let host = ExitRequest::TripleFault(TripleFault {
            vcpu: 0,
            rip: Some(0xffff_ffff_c047_d20c),
            symbol: None,
            state: String::new(),
            host_module: Some("kvm_amd at 0xffffffffc0470000+0x26000".into()),
        });
        assert_eq!(
            describe(&host),
            "the guest triple-faulted (KVM shutdown exit) on vCPU 0 at RIP 0xffffffffc047d20c; \
             that RIP lies in the host kernel's module kvm_amd at 0xffffffffc0470000+0x26000: \
             the CPU virtualization below pmemvm ran the guest with the host's state"
        );
    }
}
