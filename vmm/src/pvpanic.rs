//! The pvpanic device: how the guest kernel tells pmemvm it panicked. The
//! DSDT describes it as QEMU does (`QEMU0001`, one I/O port at
//! [`layout::PVPANIC_PORT`](crate::layout::PVPANIC_PORT)); Linux's
//! pvpanic driver (`CONFIG_PVPANIC_MMIO`) reads the events the device
//! supports from the port and, from its panic notifier, writes
//! "panicked" (bit 0) there.
//!
//! pmemvm then writes the guest's memory to the `--dump-on-panic` file
//! (the panicking vCPU's registers as they are at the notifier, the other
//! vCPUs' where the panic stopped them), and names the panic in how the
//! VM ended. A kernel with `panic=-1` (pmemvm's default command line)
//! resets right after; one that would wait (`panic=0`) is ended
//! [`GRACE`] after the event, its console flushed by then.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use devices::exit::{ExitNotifier, ExitRequest};
use kvm_ioctls::VcpuFd;

use crate::debug::dump::Dumper;

/// Event bit: the guest panicked.
pub const PANICKED: u8 = 1;
/// Event bit: the guest panicked with a crash kernel loaded (it will kexec).
pub const CRASH_LOADED: u8 = 2;
/// How long a panicked guest may go on printing before pmemvm ends it.
pub const GRACE: Duration = Duration::from_secs(2);

/// The device's state, shared by the vCPU threads.
#[derive(Debug)]
pub struct PvPanic {
    panicked: AtomicBool,
    dump: OnceLock<(Arc<Dumper>, PathBuf)>,
    exit: Arc<ExitNotifier>,
}

impl PvPanic {
    /// The device; a panic ends the VM through `exit`.
    pub fn new(exit: Arc<ExitNotifier>) -> Self {
        Self {
            panicked: AtomicBool::new(false),
            dump: OnceLock::new(),
            exit,
        }
    }

    /// From now on a panic writes the guest's memory to `path`
    /// (`--dump-on-panic`); the first call wins.
    pub fn dump_to(&self, dumper: Arc<Dumper>, path: PathBuf) {
        let _ = self.dump.set((dumper, path));
    }

    /// True once the guest reported a panic.
    pub fn panicked(&self) -> bool {
        self.panicked.load(Ordering::SeqCst)
    }

    /// A read of the port: the events this device reports (panicked only:
    /// pmemvm does not tell a kexec crash kernel's start from a panic).
    pub fn read(&self, data: &mut [u8]) {
        data.fill(0);
        if let Some(b) = data.first_mut() {
            *b = PANICKED;
        }
    }

    /// A write of `data` to the port by vCPU `index` (on its own thread).
    pub fn write(&self, index: usize, vcpu: &VcpuFd, data: &[u8]) {
        let event = data.first().copied().unwrap_or(0);
        if event & (PANICKED | CRASH_LOADED) == 0 || self.panicked.swap(true, Ordering::SeqCst) {
            return;
        }
        eprintln!("pmemvm: the guest kernel panicked (vCPU {index}, through the pvpanic device)");
        if let Some((dumper, path)) = self.dump.get() {
            match dumper.dump(path, Some((index, vcpu)), false) {
                Ok(info) => eprintln!(
                    "pmemvm: the guest's memory and vCPU registers are in {} ({} MiB of RAM, {} MiB \
                     not zero{}): crash vmlinux {0}, or drgn -c {0} -s vmlinux",
                    path.display(),
                    info.ram_bytes >> 20,
                    info.data_bytes >> 20,
                    match &info.kernel_release {
                        Some(r) => format!("; kernel {r}; VMCOREINFO {}", info.vmcoreinfo_from),
                        None => format!("; {}", info.vmcoreinfo_from),
                    }
                ),
                Err(e) => eprintln!("pmemvm: --dump-on-panic: {e}"),
            }
        }
        let exit = self.exit.clone();
        let ended = std::thread::Builder::new()
            .name("pvpanic".into())
            .spawn(move || {
                std::thread::sleep(GRACE);
                exit.request(ExitRequest::GuestPanic);
            });
        if let Err(e) = ended {
            log::warn!("pvpanic: cannot start the grace timer ({e}); the VM ends now");
            self.exit.request(ExitRequest::GuestPanic);
        }
    }
}
