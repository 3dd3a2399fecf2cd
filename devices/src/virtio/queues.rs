//! The part of a virtio-mmio device that the vCPUs and the device's I/O thread
//! share: the device model, its queues, the device status and interrupt
//! state, the guest memory views. Each has its own lock, held briefly, except
//! the device model's, which a notification holds while it serves chains (file
//! I/O): only the I/O thread and a device reset take that one, so the bus (the
//! vCPUs' register accesses) and the VMM's lost-interrupt watch never wait for
//! a disk.
//!
//! A reset waits for the chain being served, as a reset of a real device waits
//! for its DMA in flight: nothing is written to guest memory after it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use virtio_bindings::virtio_config::VIRTIO_CONFIG_S_DRIVER_OK;
use virtio_bindings::virtio_mmio::{VIRTIO_MMIO_INT_CONFIG, VIRTIO_MMIO_INT_VRING};
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryBackend};
use vmm_sys_util::eventfd::EventFd;

use super::dma::{DmaMemory, DmaView};
use super::{Unservable, VirtioDevice};

/// DEVICE_NEEDS_RESET (virtio 1.2 §2.1).
pub const STATUS_NEEDS_RESET: u32 = 64;

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The device status and the interrupt the guest has not acknowledged.
#[derive(Debug, Default)]
pub(crate) struct Link {
    /// The device status register.
    pub status: u32,
    /// The interrupt status register.
    pub interrupt_status: u32,
    /// When `interrupt_status` last went from clear to set.
    pub raised_at: Option<Instant>,
}

impl Link {
    /// DRIVER_OK set and no reset needed: the queues may be used.
    pub fn live(&self) -> bool {
        self.status & VIRTIO_CONFIG_S_DRIVER_OK != 0 && self.status & STATUS_NEEDS_RESET == 0
    }
}

/// What the vCPUs and the I/O thread share.
pub struct Shared<D> {
    device: Mutex<D>,
    queues: Mutex<Vec<Queue>>,
    link: Mutex<Link>,
    irq: EventFd,
    mem: DmaView,
}

impl<D> std::fmt::Debug for Shared<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("link", &*self.link())
            .finish_non_exhaustive()
    }
}

impl<D> Shared<D> {
    pub(crate) fn link(&self) -> MutexGuard<'_, Link> {
        lock(&self.link)
    }
}

impl<D: VirtioDevice> Shared<D> {
    pub(crate) fn new(device: D, queues: Vec<Queue>, irq: EventFd, mem: DmaView) -> Self {
        Self {
            device: Mutex::new(device),
            queues: Mutex::new(queues),
            link: Mutex::new(Link::default()),
            irq,
            mem,
        }
    }

    /// The device model (waits for a chain being served).
    pub fn device(&self) -> MutexGuard<'_, D> {
        lock(&self.device)
    }

    pub(crate) fn queues(&self) -> MutexGuard<'_, Vec<Queue>> {
        lock(&self.queues)
    }

    /// Resets queues, status and interrupt state, after the chain in flight.
    pub(crate) fn reset(&self) {
        let _served = self.device();
        for q in self.queues().iter_mut() {
            q.reset();
        }
        *self.link() = Link::default();
    }

    /// Sets `bit` in the interrupt status and signals the guest.
    pub(crate) fn raise(&self, bit: u32) {
        {
            let mut link = self.link();
            if link.interrupt_status == 0 {
                link.raised_at = Some(Instant::now());
            }
            link.interrupt_status |= bit;
        }
        if let Err(e) = self.irq.write(1) {
            log::warn!("virtio-mmio: raising the interrupt failed: {e}");
        }
    }

    /// The driver broke the protocol: the device stops using its queues until
    /// the driver resets it, says so in DEVICE_NEEDS_RESET and, once the driver
    /// had set DRIVER_OK, with a configuration change interrupt (§2.1.2).
    pub(crate) fn needs_reset(&self, why: &str) {
        log::warn!("virtio-mmio: {why}; the device needs a reset");
        let tell = {
            let mut link = self.link();
            link.status |= STATUS_NEEDS_RESET;
            link.status & VIRTIO_CONFIG_S_DRIVER_OK != 0
        };
        if tell {
            self.raise(VIRTIO_MMIO_INT_CONFIG);
        }
    }

    /// Serves what the driver made available on every queue.
    pub fn process_all(&self) {
        let count = self.queues().len();
        for i in 0..count {
            self.process(i);
        }
    }

    /// Serves the chains available on queue `index` (at most one queue's
    /// worth: a guest whose data buffers overwrite its own available ring
    /// cannot keep the device here; a driver notifies again for more).
    pub fn process(&self, index: usize) {
        let mut device = self.device();
        if !self.link().live() {
            return;
        }
        let mem = self.mem.current();
        let size = {
            let queues = self.queues();
            let Some(queue) = queues.get(index) else {
                return;
            };
            if !rings_reachable(queue, &mem) {
                drop(queues);
                self.needs_reset(&format!(
                    "queue {index} was notified but its rings do not lie in guest memory the device may use"
                ));
                return;
            }
            usize::from(queue.size())
        };
        let mut used = 0;
        while used < size {
            let popped = self
                .queues()
                .get_mut(index)
                .and_then(|q| q.pop_descriptor_chain(&mem.readable));
            let Some(chain) = popped else {
                break;
            };
            let head = chain.head_index();
            let len = match device.serve(index, chain, &mem) {
                Ok(len) => len,
                Err(Unservable(why)) => {
                    self.needs_reset(&format!(
                        "queue {index}: a request cannot be completed ({why})"
                    ));
                    break;
                }
            };
            let added = self
                .queues()
                .get_mut(index)
                .map(|q| q.add_used(&mem.writable, head, len));
            if !matches!(added, Some(Ok(()))) {
                self.needs_reset(&format!("queue {index}: its used ring cannot be written"));
                break;
            }
            used += 1;
        }
        let notify = used > 0
            && self
                .queues()
                .get_mut(index)
                .is_some_and(|q| q.needs_notification(&mem.readable).unwrap_or(true));
        if notify {
            self.raise(VIRTIO_MMIO_INT_VRING);
        }
        // A reset waits until here: nothing of this notification comes after it.
        drop(device);
    }
}

/// Whether `queue`'s descriptor table and available ring lie in what the
/// device may read and its used ring in what it may write.
fn rings_reachable(queue: &Queue, mem: &DmaMemory) -> bool {
    // The used ring: flags, index, 8 bytes an entry, avail_event (the length
    // virtio-queue checks).
    let used_len = 6 + 8 * usize::from(queue.size());
    queue.is_valid(&mem.readable)
        && mem
            .writable
            .check_range(GuestAddress(queue.used_ring()), used_len)
}

impl<D: VirtioDevice> crate::interrupt_line::InterruptLine for Shared<D> {
    fn unanswered(&self) -> Option<Duration> {
        let link = self.link();
        (link.interrupt_status != 0)
            .then_some(link.raised_at)
            .flatten()
            .map(|t| t.elapsed())
    }

    fn raise_again(&self) -> std::io::Result<()> {
        self.irq.write(1)
    }
}

/// The thread that serves a device's queues when the driver notifies them
/// (through `kick`: a KVM ioeventfd on the notify register, or the transport
/// when the guest's write exits to the VMM).
pub struct IoThread {
    kick: EventFd,
    stop: EventFd,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl IoThread {
    /// Starts thread `name` serving `shared` on each write to the returned
    /// thread's `kick` eventfd.
    pub fn start<D: VirtioDevice + 'static>(
        name: &str,
        shared: Arc<Shared<D>>,
    ) -> std::io::Result<Self> {
        let kick = EventFd::new(libc::EFD_NONBLOCK)?;
        let stop = EventFd::new(libc::EFD_NONBLOCK)?;
        let (k, s) = (kick.try_clone()?, stop.try_clone()?);
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || serve_kicks(&k, &s, &shared))?;
        Ok(Self {
            kick,
            stop,
            handle: Some(handle),
        })
    }

    /// The eventfd a notification writes.
    pub fn kick(&self) -> &EventFd {
        &self.kick
    }

    /// Asks the thread to end after the chain it serves, without waiting.
    pub fn request_stop(&self) {
        let _ = self.stop.write(1);
    }

    /// Asks the thread to end and waits up to `deadline` for it (a request
    /// still in the kernel may keep it longer). True when it ended.
    pub fn stop(&mut self, deadline: Duration) -> bool {
        self.request_stop();
        let Some(handle) = self.handle.take() else {
            return true;
        };
        let start = Instant::now();
        while !handle.is_finished() {
            if start.elapsed() >= deadline {
                self.handle = Some(handle);
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = handle.join();
        true
    }
}

impl std::fmt::Debug for IoThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoThread")
            .field("running", &self.handle.is_some())
            .finish_non_exhaustive()
    }
}

/// The I/O thread's loop: waits for a kick or the stop, serves every queue.
fn serve_kicks<D: VirtioDevice>(kick: &EventFd, stop: &EventFd, shared: &Shared<D>) {
    use std::os::fd::AsRawFd;
    let mut fds = [
        libc::pollfd {
            fd: kick.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is an array of two initialised pollfd structs that
        // lives across the call; poll writes only their `revents`.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            log::warn!(
                "virtio I/O thread: poll failed: {}",
                std::io::Error::last_os_error()
            );
            return;
        }
        if fds[1].revents != 0 {
            return;
        }
        if fds[0].revents != 0 {
            let _ = kick.read();
            shared.process_all();
        }
    }
}
