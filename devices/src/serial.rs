//! 16550 UART (vm-superio) on the PIO bus, its interrupt raised through an
//! eventfd registered with KVM as an irqfd.

use std::io::Write;

use vm_superio::{Serial, Trigger};
use vmm_sys_util::eventfd::EventFd;

use crate::bus::BusDevice;

/// Raises the UART's interrupt line by signalling an irqfd.
#[derive(Debug)]
pub struct EventFdTrigger(EventFd);

impl EventFdTrigger {
    /// Wraps `evt`.
    pub fn new(evt: EventFd) -> Self {
        Self(evt)
    }
}

impl Trigger for EventFdTrigger {
    type E = std::io::Error;

    fn trigger(&self) -> std::io::Result<()> {
        self.0.write(1)
    }
}

/// A sink for guest serial output that flushes after every write, so an
/// interactive prompt shows up at once.
pub struct FlushingWriter(Box<dyn Write + Send>);

impl std::fmt::Debug for FlushingWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlushingWriter")
    }
}

impl FlushingWriter {
    /// Wraps `w`.
    pub fn new(w: Box<dyn Write + Send>) -> Self {
        Self(w)
    }
}

impl Write for FlushingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        self.0.flush()?;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// One 16550 UART.
pub struct SerialDevice {
    uart: Serial<EventFdTrigger, vm_superio::serial::NoEvents, FlushingWriter>,
}

impl std::fmt::Debug for SerialDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SerialDevice").finish_non_exhaustive()
    }
}

impl SerialDevice {
    /// A UART that raises `irq` and writes guest output to `out`.
    pub fn new(irq: EventFd, out: Box<dyn Write + Send>) -> Self {
        Self {
            uart: Serial::new(EventFdTrigger::new(irq), FlushingWriter::new(out)),
        }
    }

    /// Queues host input for the guest; returns how many bytes fit in the FIFO.
    pub fn enqueue_input(&mut self, input: &[u8]) -> usize {
        let n = input.len().min(self.uart.fifo_capacity());
        match self.uart.enqueue_raw_bytes(&input[..n]) {
            Ok(done) => done,
            Err(e) => {
                log::debug!("serial input dropped: {e:?}");
                0
            }
        }
    }
}

impl BusDevice for SerialDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if let (Ok(off), Some(first)) = (u8::try_from(offset), data.first_mut()) {
            *first = self.uart.read(off);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let (Ok(off), Some(&value)) = (u8::try_from(offset), data.first()) {
            if let Err(e) = self.uart.write(off, value) {
                // Host output failing (e.g. a closed pipe) must not stop the guest.
                log::debug!("serial output failed: {e:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn output_and_input_with_interrupts() {
        let out = Shared::default();
        let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
        let mut s = SerialDevice::new(irq.try_clone().unwrap(), Box::new(out.clone()));
        for b in b"hi" {
            s.write(0, &[*b]);
        }
        assert_eq!(&*out.0.lock().unwrap(), b"hi");
        // Enable the "received data available" interrupt (IER bit 0), then feed input.
        s.write(1, &[1]);
        assert_eq!(s.enqueue_input(b"ok"), 2);
        assert!(irq.read().unwrap() >= 1);
        let mut b = [0u8];
        s.read(0, &mut b);
        assert_eq!(b[0], b'o');
        // Out-of-range offsets are ignored, not a panic.
        s.write(0x1_0000, &[1]);
        s.read(0x1_0000, &mut b);
        s.write(0, &[]);
    }
}
