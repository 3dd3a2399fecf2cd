//! Host signals: SIGINT/SIGTERM ask for an orderly stop (the handler only
//! records the signal and wakes the main thread through the exit eventfd), and
//! a real-time "kick" signal interrupts KVM_RUN so vCPU threads see the stop.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, Ordering};

use devices::exit::ExitNotifier;

/// The signal that was received (0 = none).
static PENDING: AtomicI32 = AtomicI32::new(0);
/// The eventfd the handler writes to (-1 = none).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_stop_signal(signum: libc::c_int) {
    PENDING.store(signum, Ordering::SeqCst);
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: write(2) is async-signal-safe; the buffer is a live local.
        unsafe {
            libc::write(fd, std::ptr::addr_of!(one).cast(), 8);
        }
    }
}

extern "C" fn on_kick(_: libc::c_int) {}

/// Routes SIGINT and SIGTERM to `notifier`'s eventfd. The notifier must outlive
/// the process's use of it (it is kept in an `Arc` by the VM for its whole run).
pub fn install_stop_handlers(notifier: &ExitNotifier) -> std::io::Result<()> {
    WAKE_FD.store(notifier.event().as_raw_fd(), Ordering::SeqCst);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
        // the handler only touches atomics and calls write(2).
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The stop signal received so far, if any.
pub fn pending() -> Option<i32> {
    match PENDING.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The real-time signal used to kick vCPU threads out of KVM_RUN.
pub fn kick_signal() -> libc::c_int {
    vmm_sys_util::signal::SIGRTMIN()
}

/// Installs the (empty) kick handler; without SA_RESTART so KVM_RUN returns EINTR.
pub fn install_kick_handler() -> std::io::Result<()> {
    // SAFETY: as above; the handler does nothing.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_kick as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(kick_signal(), &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
