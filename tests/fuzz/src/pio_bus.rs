// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: the port-I/O bus with every port device pmemvm puts on it —
//! COM1 and COM2 (16550), the ACPI sleep/reset registers, the i8042 reset
//! port and the guest-exit port — fed arbitrary sequences of accesses.
//!
//! One access is up to 11 bytes: a control byte (bits 0-1: length 1/2/4/8,
//! bit 2: write, bit 3: raw 16-bit port from the next two bytes instead of
//! a device base plus a small offset, bits 5-7 = 7: queue the following
//! bytes as console input on COM1 instead), two port bytes and the data.
//!
//! Checked: nothing panics; a read nobody decodes fails and reads all ones;
//! the only ways the VM may end are power-off, reset and a guest-exit byte.

use std::io::Write;
use std::sync::{Arc, Mutex};

use devices::bus::{Bus, SharedDevice};
use devices::exit::{ExitNotifier, ExitRequest};
use devices::power::{AcpiPowerDevice, GuestExitDevice, I8042Device};
use devices::serial::SerialDevice;
use vmm_sys_util::eventfd::EventFd;

// The ports pmemvm uses (mirrors vmm/src/layout.rs; the fuzz crate only
// depends on `devices` here so the smoke test can include this file).
const COM1: u16 = 0x3f8;
const COM2: u16 = 0x2f8;
const ACPI_PM: u16 = 0x600;
const I8042: u16 = 0x60;
const GUEST_EXIT: u16 = 0x501;
const BASES: [u16; 5] = [COM1, COM2, ACPI_PM, I8042, GUEST_EXIT];

/// Discards guest console output.
struct Sink;

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn serial() -> Arc<Mutex<SerialDevice>> {
    let irq = EventFd::new(libc::EFD_NONBLOCK).expect("eventfd");
    Arc::new(Mutex::new(SerialDevice::new(irq, Box::new(Sink))))
}

/// The bus as pmemvm wires it, the console UART and the exit notifier.
pub fn bus() -> (Bus, Arc<Mutex<SerialDevice>>, Arc<ExitNotifier>) {
    let exit = Arc::new(ExitNotifier::new().expect("eventfd"));
    let com1 = serial();
    let mut bus = Bus::new();
    let devices: [(SharedDevice, u16, u64); 5] = [
        (com1.clone(), COM1, 8),
        (serial(), COM2, 8),
        (
            Arc::new(Mutex::new(AcpiPowerDevice::new(exit.clone(), 5, 1))),
            ACPI_PM,
            AcpiPowerDevice::LEN,
        ),
        (
            Arc::new(Mutex::new(I8042Device::new(exit.clone()))),
            I8042,
            I8042Device::LEN,
        ),
        (
            Arc::new(Mutex::new(GuestExitDevice::new(exit.clone()))),
            GUEST_EXIT,
            1,
        ),
    ];
    for (dev, base, len) in devices {
        bus.insert(dev, u64::from(base), len).expect("no overlap");
    }
    (bus, com1, exit)
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let (bus, com1, exit) = bus();
    let mut rest = data;
    while let Some((&ctl, tail)) = rest.split_first() {
        if ctl >> 5 == 7 {
            let n = tail.len().min(usize::from(ctl & 0x1f) + 1);
            let (input, after) = tail.split_at(n);
            com1.lock()
                .unwrap_or_else(|e| e.into_inner())
                .enqueue_input(input);
            rest = after;
            continue;
        }
        let len = 1usize << (ctl & 3);
        let (p0, p1) = (
            tail.first().copied().unwrap_or(0),
            tail.get(1).copied().unwrap_or(0),
        );
        let port = if ctl & 8 != 0 {
            u16::from_le_bytes([p0, p1])
        } else {
            BASES[usize::from(p0) % BASES.len()].wrapping_add(u16::from(p1 % 8))
        };
        let payload = tail.get(2..).unwrap_or(&[]);
        let mut buf = [0u8; 8];
        let n = payload.len().min(len);
        buf[..n].copy_from_slice(&payload[..n]);
        let buf = &mut buf[..len];
        if ctl & 4 != 0 {
            let _ = bus.write(u64::from(port), buf);
        } else if bus.read(u64::from(port), buf).is_err() {
            assert!(
                buf.iter().all(|b| *b == 0xff),
                "undecoded read not all ones"
            );
        }
        rest = tail.get(2 + n..).unwrap_or(&[]);
    }
    match exit.get() {
        None | Some(ExitRequest::PowerOff | ExitRequest::Reset | ExitRequest::GuestExit(_)) => {}
        Some(other) => panic!("port I/O ended the VM with {other:?}"),
    }
}
