//! Locked read-modify-writes on a hole page stay atomic.
//!
//! KVM emulates an access to a hole (a page outside its memory slots) as
//! MMIO: a locked `cmpxchg`, `xadd`, `add` or `xchg` there becomes a read
//! exit and then a write exit ("emulating exchange as write"), and another
//! vCPU's access between the two would make it non-atomic. So a vCPU whose
//! read comes from a locked instruction ([`is_locked_rmw`]) holds its DIMM's
//! [`HoleLock`] until that instruction's write; every other hole access takes
//! the lock for itself alone. A vCPU whose next exit is neither the write
//! nor a kick lets go (the instruction did not write after all).

use std::sync::{Condvar, Mutex, PoisonError};

/// Who holds a DIMM's holes for a locked instruction.
#[derive(Debug, Default)]
pub struct HoleLock {
    owner: Mutex<Option<usize>>,
    free: Condvar,
}

impl HoleLock {
    /// Waits until no other vCPU holds the lock, then holds it for `me`.
    pub fn acquire(&self, me: usize) {
        let mut owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        while owner.is_some_and(|o| o != me) {
            owner = self
                .free
                .wait(owner)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *owner = Some(me);
    }

    /// Lets go when `me` holds it.
    pub fn release(&self, me: usize) {
        let mut owner = self.owner.lock().unwrap_or_else(PoisonError::into_inner);
        if *owner == Some(me) {
            *owner = None;
            self.free.notify_all();
        }
    }
}

/// Whether the instruction starting with `bytes` is a locked
/// read-modify-write: a LOCK prefix among its legacy prefixes, or `xchg`
/// with a memory operand (locked without the prefix).
pub fn is_locked_rmw(bytes: &[u8]) -> bool {
    let mut rest = bytes.iter().copied().take(15);
    for b in rest.by_ref() {
        match b {
            0xf0 => return true,
            0xf2 | 0xf3 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 | 0x66 | 0x67 => {}
            0x40..=0x4f => return rest.next().is_some_and(is_xchg),
            op => return is_xchg(op),
        }
    }
    false
}

fn is_xchg(op: u8) -> bool {
    op == 0x86 || op == 0x87
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn locked_instructions_are_told_apart() {
        assert!(is_locked_rmw(&[0xf0, 0x48, 0x0f, 0xb1, 0x17])); // lock cmpxchg %rdx,(%rdi)
        assert!(is_locked_rmw(&[0x66, 0xf0, 0x0f, 0xc1, 0x07])); // data16 lock xadd
        assert!(is_locked_rmw(&[0x48, 0x87, 0x07])); // xchg %rax,(%rdi)
        assert!(is_locked_rmw(&[0x86, 0x07])); // xchg %al,(%rdi)
        assert!(!is_locked_rmw(&[0x48, 0x8b, 0x07])); // mov (%rdi),%rax
        assert!(!is_locked_rmw(&[0x48, 0x01, 0x07])); // add %rax,(%rdi): not locked
        assert!(!is_locked_rmw(&[0x66; 20]), "prefixes only");
        assert!(!is_locked_rmw(&[]));
    }

    /// Two threads each make 2,000 "read exit, write exit" increments under
    /// the lock, as two vCPUs' locked adds would: none is lost.
    #[test]
    fn a_held_read_to_write_is_atomic() {
        let lock = Arc::new(HoleLock::default());
        let cell = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..2)
            .map(|me| {
                let (lock, cell) = (lock.clone(), cell.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        lock.acquire(me);
                        let v = cell.load(Ordering::SeqCst);
                        std::thread::yield_now();
                        lock.acquire(me); // the write exit, reentrant
                        cell.store(v + 1, Ordering::SeqCst);
                        lock.release(me);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(cell.load(Ordering::SeqCst), 4000);
        lock.release(7); // not the owner: nothing
    }
}
