//! How a running VM asks to end: devices and vCPUs post an [`ExitRequest`] to
//! one shared [`ExitNotifier`]; the first request wins and wakes the VMM's main
//! thread through an eventfd.

use std::sync::Mutex;

use vmm_sys_util::eventfd::EventFd;

/// Why the VM ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitRequest {
    /// ACPI soft-off (S5) through the sleep control register.
    PowerOff,
    /// Guest reset request (ACPI reset register, i8042 0xfe, or KVM system event).
    Reset,
    /// The guest kernel panicked (it said so through the pvpanic device).
    GuestPanic,
    /// A byte written to the guest-exit port: becomes pmemvm's exit status.
    GuestExit(u8),
    /// Triple fault or other KVM shutdown exit.
    TripleFault(TripleFault),
    /// A host signal (SIGINT, SIGTERM, SIGHUP) asked for an orderly stop.
    Signal(i32),
    /// The watchdog (`--timeout`, in seconds) ran out before the guest ended.
    Timeout(u64),
    /// The host could not store what the guest wrote (e.g. disk full).
    StorageFailure(String),
    /// An unrecoverable error in a vCPU or device; the text explains it.
    Fatal(String),
}

/// Where the vCPU that shut down was: its registers as KVM left them (the
/// state of the fault the CPU could not deliver).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TripleFault {
    /// The vCPU's index.
    pub vcpu: usize,
    /// Its RIP, when KVM gave the registers (named from the kernel's
    /// symbols by the VMM).
    pub rip: Option<u64>,
    /// The function at `rip` ("native_write_msr+0x4"), when the VMM found it.
    pub symbol: Option<String>,
    /// The host kernel's module whose code holds `rip` ("kvm_amd at
    /// 0x...+0x..."), when the VMM found one: an address of the host, not of
    /// the guest.
    pub host_module: Option<String>,
    /// The rest of its state, one phrase ("RSP 0x..., CR0 0x..., ...");
    /// empty when KVM gave none.
    pub state: String,
}

/// Collects the first exit request and wakes whoever waits for it.
#[derive(Debug)]
pub struct ExitNotifier {
    request: Mutex<Option<ExitRequest>>,
    event: EventFd,
}

impl ExitNotifier {
    /// A notifier with no request yet.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            request: Mutex::new(None),
            event: EventFd::new(libc::EFD_CLOEXEC)?,
        })
    }

    /// Records `request` unless one is already recorded, then wakes the waiter.
    pub fn request(&self, request: ExitRequest) {
        let mut slot = self.request.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(request);
        }
        drop(slot);
        // A full counter (impossible in practice) still leaves it readable.
        let _ = self.event.write(1);
    }

    /// The recorded request, if any.
    pub fn get(&self) -> Option<ExitRequest> {
        self.request
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The eventfd signalled on every request (for poll/read by the main thread).
    pub fn event(&self) -> &EventFd {
        &self.event
    }

    /// Blocks until some request was made and returns it.
    pub fn wait(&self) -> ExitRequest {
        loop {
            if let Some(r) = self.get() {
                return r;
            }
            // An error here (EINTR) just loops back to the check.
            let _ = self.event.read();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_request_wins() {
        let n = ExitNotifier::new().unwrap();
        assert_eq!(n.get(), None);
        n.request(ExitRequest::GuestExit(3));
        n.request(ExitRequest::PowerOff);
        assert_eq!(n.wait(), ExitRequest::GuestExit(3));
    }

    #[test]
    fn wakes_a_waiting_thread() {
        let n = std::sync::Arc::new(ExitNotifier::new().unwrap());
        let n2 = n.clone();
        let t = std::thread::spawn(move || n2.wait());
        std::thread::sleep(std::time::Duration::from_millis(20));
        n.request(ExitRequest::Reset);
        assert_eq!(t.join().unwrap(), ExitRequest::Reset);
    }
}
