//! The I/O thread: a notification is served off the notifying thread, and
//! while a chain is in the device model (file I/O) the registers and the
//! lost-interrupt watch answer at once; a reset waits for that chain; the
//! thread stops on request, or says it could not while a chain is in flight.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use virtio_queue::DescriptorChain;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};
use vmm_sys_util::eventfd::EventFd;

use super::dma::{DmaMemory, DmaView};
use super::mmio::MmioTransport;
use super::queues::IoThread;
use super::test_driver::{reg_read, reg_write, AVAIL, DESC, QSIZE, USED};
use super::{Unservable, VirtioDevice};
use crate::interrupt_line::InterruptLine;

/// A device whose every chain waits until the test lets it go.
struct Gate {
    entered: Sender<()>,
    release: Mutex<Receiver<()>>,
    sizes: [u16; 1],
}

impl VirtioDevice for Gate {
    fn device_id(&self) -> u32 {
        2
    }
    fn features(&self) -> u64 {
        0
    }
    fn queue_max_sizes(&self) -> &[u16] {
        &self.sizes
    }
    fn read_config(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }
    fn serve(
        &mut self,
        _index: usize,
        _chain: DescriptorChain<&GuestMemoryMmap>,
        _mem: &DmaMemory,
    ) -> Result<u32, Unservable> {
        let _ = self.entered.send(());
        let _ = self.release.lock().unwrap().recv();
        Ok(0)
    }
}

/// Runs `f` on another thread; panics unless it returns within a second.
fn at_once<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(1))
        .unwrap_or_else(|_| panic!("{what} waited for the chain in flight"))
}

struct Rig {
    dev: Arc<Mutex<MmioTransport<Gate>>>,
    mem: GuestMemoryMmap,
    irq: EventFd,
    io: IoThread,
    entered: Receiver<()>,
    release: Sender<()>,
}

/// A live device on its I/O thread with one chain made available.
fn rig() -> Rig {
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    let (entered_tx, entered) = channel();
    let (release, release_rx) = channel();
    let gate = Gate {
        entered: entered_tx,
        release: Mutex::new(release_rx),
        sizes: [QSIZE],
    };
    let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
    let view = DmaView::new(DmaMemory::ram(&mem));
    let mut t = MmioTransport::new(gate, view, irq.try_clone().unwrap()).unwrap();
    let io = IoThread::start("test-io", t.shared()).unwrap();
    t.set_kick(io.kick().try_clone().unwrap());
    for v in [1, 3] {
        reg_write(&mut t, 0x70, v);
    }
    reg_write(&mut t, 0x24, 1);
    reg_write(&mut t, 0x20, 1);
    reg_write(&mut t, 0x70, 11);
    reg_write(&mut t, 0x38, QSIZE.into());
    for (off, addr) in [(0x80, DESC), (0x90, AVAIL), (0xa0, USED)] {
        reg_write(&mut t, off, u32::try_from(addr).unwrap());
    }
    reg_write(&mut t, 0x44, 1);
    reg_write(&mut t, 0x70, 15);
    mem.write_obj(0x8000u64, GuestAddress(DESC)).unwrap();
    mem.write_obj(16u32, GuestAddress(DESC + 8)).unwrap();
    mem.write_obj(1u16, GuestAddress(AVAIL + 2)).unwrap();
    Rig {
        dev: Arc::new(Mutex::new(t)),
        mem,
        irq,
        io,
        entered,
        release,
    }
}

#[test]
fn a_chain_in_flight_keeps_neither_the_vcpu_nor_the_registers_nor_the_watch_waiting() {
    let mut r = rig();
    let dev = r.dev.clone();
    at_once("the notify write", move || {
        reg_write(&mut *dev.lock().unwrap(), 0x50, 0);
    });
    r.entered
        .recv_timeout(Duration::from_secs(5))
        .expect("the I/O thread took the chain");
    let dev = r.dev.clone();
    let status = at_once("a status read", move || {
        reg_read(&mut *dev.lock().unwrap(), 0x70)
    });
    assert_eq!(status, 15);
    let shared = r.dev.lock().unwrap().shared();
    assert_eq!(at_once("the watch", move || shared.unanswered()), None);
    assert!(
        !r.io.stop(Duration::from_millis(50)),
        "a chain is still in flight"
    );
    r.release.send(()).unwrap();
    let mut used = 0u16;
    for _ in 0..200 {
        used = r.mem.read_obj(GuestAddress(USED + 2)).unwrap();
        if used == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(used, 1, "the chain came back");
    assert_eq!(r.irq.read().unwrap(), 1, "and the interrupt with it");
    assert!(
        r.io.stop(Duration::from_secs(5)),
        "the thread ends once idle"
    );
}

#[test]
fn a_reset_waits_for_the_chain_in_flight() {
    let r = rig();
    reg_write(&mut *r.dev.lock().unwrap(), 0x50, 0);
    r.entered.recv_timeout(Duration::from_secs(5)).unwrap();
    let dev = r.dev.clone();
    let (done_tx, done) = channel();
    std::thread::spawn(move || {
        reg_write(&mut *dev.lock().unwrap(), 0x70, 0);
        let _ = done_tx.send(());
    });
    assert!(
        done.recv_timeout(Duration::from_millis(100)).is_err(),
        "the reset did not wait for the chain in flight"
    );
    r.release.send(()).unwrap();
    done.recv_timeout(Duration::from_secs(5))
        .expect("the reset ended");
    assert_eq!(reg_read(&mut *r.dev.lock().unwrap(), 0x70), 0);
}
