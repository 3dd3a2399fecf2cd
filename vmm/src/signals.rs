//! Host signals, without process-global mutable state.
//!
//! * **Stop signals** (SIGINT, SIGTERM, SIGHUP) are blocked on the thread
//!   that runs a VM before its vCPU threads start (they inherit the mask) and
//!   read from a `signalfd` by the VM's event loop, which turns each into an
//!   orderly stop. Nothing runs in signal context for them, so there is no
//!   handler state to reset between VMs, no fd for a handler to outlive and no
//!   errno to save. When the run ends, signals of the set still pending are
//!   read (they were meant for that VM) and the thread's previous mask comes
//!   back, so the next VM in the same process starts clean.
//! * **The kick signal** (SIGRTMIN) interrupts a vCPU thread's `KVM_RUN`. Its
//!   handler (installed with vmm-sys-util's `register_signal_handler`, sent
//!   with its `Killable`) sets the interrupted thread's own `immediate_exit`
//!   through a thread-local pointer to its `kvm_run` (see [`crate::vstate::vcpu`]), so
//!   a kick that lands just before the thread enters `KVM_RUN` still makes it
//!   return at once — one kick is enough, there is no re-kick loop.
//!
//! vmm-sys-util 0.15 has no `signalfd` wrapper, so [`StopSignals`] is a small
//! one over libc.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The signals that ask pmemvm for an orderly stop.
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The signal that asks where each vCPU is, without stopping the guest
/// (read from the same signalfd as the stop signals).
pub const DESCRIBE_SIGNAL: libc::c_int = libc::SIGQUIT;

/// The real-time signal used to kick vCPU threads out of KVM_RUN.
pub fn kick_signal() -> libc::c_int {
    vmm_sys_util::signal::SIGRTMIN()
}

extern "C" fn describe_before_a_vm(_: libc::c_int) {}

/// Makes [`DESCRIBE_SIGNAL`] harmless while no VM runs: its default action
/// would end the process (with a core dump), so a SIGQUIT that arrives before
/// a run blocks it — at start-up, while the image or the L1 is prepared — would
/// kill pmemvm instead of asking where its vCPUs are. A no-op handler with
/// `SA_RESTART` (reset to the default in programs pmemvm executes, unlike an
/// ignored disposition); once a run blocks the signal it is read from that
/// run's signalfd as before. Call once at start-up.
pub fn calm_describe_signal() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is a valid value; every field is set below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = describe_before_a_vm as extern "C" fn(libc::c_int) as usize;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid sigset owned by this frame.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: installs a handler that does nothing (async-signal-safe) for one
    // valid signal number; the old action is not needed.
    let rc = unsafe { libc::sigaction(DESCRIBE_SIGNAL, &action, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn stop_set() -> std::io::Result<libc::sigset_t> {
    let mut all = STOP_SIGNALS.to_vec();
    all.push(DESCRIBE_SIGNAL);
    vmm_sys_util::signal::create_sigset(&all)
        .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))
}

/// The stop signals blocked on this thread and readable from a signalfd;
/// dropping it drains what is still pending and restores the previous mask.
#[derive(Debug)]
pub struct StopSignals {
    fd: OwnedFd,
    previous: libc::sigset_t,
    /// Not `Send`: the mask it restores belongs to the thread that made it.
    _thread_bound: std::marker::PhantomData<*const ()>,
}

impl StopSignals {
    /// Blocks [`STOP_SIGNALS`] and [`DESCRIBE_SIGNAL`] on the calling thread (threads it starts
    /// afterwards inherit that) and opens a non-blocking signalfd for them.
    pub fn block() -> std::io::Result<Self> {
        let set = stop_set()?;
        // SAFETY: a zeroed sigset_t is a valid value; pthread_sigmask fills it.
        let mut previous: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` and `previous` are valid sigsets owned by this frame.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous) };
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        // SAFETY: -1 asks for a new fd; `set` is a valid sigset; the flags are valid.
        let raw = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
        if raw < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: restores the mask saved above on this same thread.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut()) };
            return Err(e);
        }
        // SAFETY: `raw` is a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            fd,
            previous,
            _thread_bound: std::marker::PhantomData,
        })
    }

    /// The next pending stop signal, if any (never blocks).
    pub fn read(&self) -> Option<libc::c_int> {
        // SAFETY: a zeroed signalfd_siginfo is a valid out-buffer.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads at most `size` bytes into `info`, which is that large.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                std::ptr::addr_of_mut!(info).cast(),
                size,
            )
        };
        (usize::try_from(n).ok() == Some(size))
            .then(|| libc::c_int::try_from(info.ssi_signo).ok())
            .flatten()
    }
}

impl AsRawFd for StopSignals {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        // Signals that arrived for this VM must not hit the next one, nor
        // kill the process with their default action once unblocked.
        while self.read().is_some() {}
        // SAFETY: restores the mask saved by `block` on this thread (a
        // `StopSignals` is not Send: its owner thread drops it).
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut()) };
    }
}

/// Whether `signal` is blocked on the calling thread.
pub fn is_blocked(signal: libc::c_int) -> bool {
    vmm_sys_util::signal::get_blocked_signals().is_ok_and(|s| s.contains(&signal))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signals_are_read_not_delivered_and_the_mask_comes_back() {
        // Run on a fresh thread: the test harness's threads keep their masks.
        std::thread::spawn(|| {
            assert!(!is_blocked(libc::SIGHUP));
            let s = StopSignals::block().unwrap();
            assert!(STOP_SIGNALS.iter().all(|&sig| is_blocked(sig)));
            assert_eq!(s.read(), None);
            // Directed at this thread: without the block, SIGHUP's default
            // action would end the test process.
            // SAFETY: tgkill on this process and thread with a valid signal.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    libc::gettid(),
                    libc::SIGHUP,
                )
            };
            assert_eq!(rc, 0);
            assert_eq!(s.read(), Some(libc::SIGHUP));
            assert_eq!(s.read(), None);
            // A second VM in the same process starts with nothing pending.
            // SAFETY: as above.
            unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    libc::gettid(),
                    libc::SIGTERM,
                );
            }
            drop(s);
            assert!(!is_blocked(libc::SIGHUP));
            let s2 = StopSignals::block().unwrap();
            assert_eq!(
                s2.read(),
                None,
                "a signal of the first run leaked into the second"
            );
            drop(s2);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn sigquit_before_a_vm_does_not_end_the_process() {
        calm_describe_signal().expect("install");
        // SAFETY: raise(3) sends SIGQUIT to this thread; with the default
        // action the whole test process would end here.
        assert_eq!(unsafe { libc::raise(DESCRIBE_SIGNAL) }, 0);
    }
}
