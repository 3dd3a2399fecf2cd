//! The vCPU threads of a VM, to kick out of `KVM_RUN` from another thread:
//! a recording's epoch stops them ([`crate::nvdimm::record::instant`]) and a
//! broadcast machine check reaches them ([`crate::nvdimm::mce::broadcast`]).

use std::sync::Mutex;

/// Each vCPU's thread while its loop runs.
#[derive(Debug)]
pub struct VcpuThreads {
    threads: Mutex<Vec<Option<libc::pthread_t>>>,
    signal: libc::c_int,
}

impl VcpuThreads {
    /// Room for `vcpus` threads, kicked with the vCPU kick signal.
    pub fn new(vcpus: usize) -> Self {
        Self {
            threads: Mutex::new(vec![None; vcpus]),
            signal: crate::signals::kick_signal(),
        }
    }

    /// Registers the calling thread as vCPU `index`'s until the guard drops.
    pub fn enter(&self, index: usize) -> Registered<'_> {
        if let Ok(mut t) = self.threads.lock() {
            if let Some(slot) = t.get_mut(index) {
                // SAFETY: pthread_self has no arguments and cannot fail.
                *slot = Some(unsafe { libc::pthread_self() });
            }
        }
        Registered {
            threads: self,
            index,
        }
    }

    /// Makes the registered threads of `indices` leave `KVM_RUN` soon (or
    /// return at once from their next one).
    pub fn kick(&self, indices: &[usize]) {
        let Ok(threads) = self.threads.lock() else {
            return;
        };
        for &i in indices {
            if let Some(Some(t)) = threads.get(i) {
                // SAFETY: `t` is a vCPU thread still inside its loop: its
                // `Registered` guard removes it under this same lock before
                // the thread can end, so the thread exists. The kick signal's
                // handler only sets that thread's `immediate_exit`.
                let rc = unsafe { libc::pthread_kill(*t, self.signal) };
                if rc != 0 {
                    log::debug!("kicking vCPU {i} failed: {rc}");
                }
            }
        }
    }

    /// True while vCPU `index`'s thread is in its loop.
    pub fn registered(&self, index: usize) -> bool {
        self.threads
            .lock()
            .is_ok_and(|t| t.get(index).is_some_and(Option::is_some))
    }
}

/// Unregisters a vCPU thread when its loop ends.
#[derive(Debug)]
pub struct Registered<'a> {
    threads: &'a VcpuThreads,
    index: usize,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Ok(mut t) = self.threads.threads.lock() {
            if let Some(slot) = t.get_mut(self.index) {
                *slot = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_registered_while_its_guard_lives() {
        let t = VcpuThreads::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _r = t.enter(1);
                assert!(t.registered(1) && !t.registered(0));
                t.kick(&[0, 5]); // unregistered and out of range: nothing
            });
        });
        assert!(!t.registered(1));
    }
}
