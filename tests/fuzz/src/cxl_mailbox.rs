// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: a CXL memory device's primary mailbox, driven as a hostile
//! guest driver would: arbitrary MMIO reads and writes of 1 to 8 bytes over
//! the register block and past it, doorbells on any Command value.
//!
//! One input is a sequence of operations on one 1 GiB device with a 128 KiB
//! label storage area. Each operation is a control byte and its data: bits
//! 0-1 pick the kind — a payload write (offset byte, length byte, bytes), a
//! command (opcode selector, input length: when bit 2 is set the opcode is one
//! of the device's own and the length is plausible for it; half of Inject
//! Poison's put a plausible address in the payload first, and half of those
//! also have the host record a media error there, which adds a Failure event
//! record; half of Clear Event Records' first run Get Event Records on a log
//! and ask to clear the handles it returned, as Linux does), a raw write
//! (offset u16, width, 8 value bytes) or a read (offset u16, width).
//!
//! Checked after every operation: the doorbell reads clear, the return code
//! is one Linux can index (≤ 0x16), a failed command has no output, an output
//! length fits the payload, the label storage is touched only inside its area
//! (the in-memory store panics otherwise), Clear Poison's writes stay inside
//! the capacity, every poisoned unit is aligned and inside the capacity, no
//! event log holds more than its capacity, and the event status bits are
//! those of the non-empty logs.

use std::io;
use std::sync::{Arc, Mutex};

use devices::cxl::events::{LOG_CAPACITY, RECORD_LEN};
use devices::cxl::mailbox::{Mailbox, MAILBOX_LEN, PAYLOAD_OFFSET, PAYLOAD_SIZE};
use devices::cxl::memdev::{MediaWrite, Memdev, POISON_UNIT};
use devices::cxl::CommandSet;
use devices::nvdimm_labels::LabelStorage;

/// Capacity of the device.
pub const CAPACITY: u64 = 1 << 30;
/// Label storage area.
pub const LSA: usize = 128 << 10;

/// The device's opcodes and the input lengths they take.
const INJECT_POISON: u16 = 0x4301;
const GET_EVENT_RECORDS: u16 = 0x0100;
const CLEAR_EVENT_RECORDS: u16 = 0x0101;

const OPCODES: [(u16, usize); 19] = [
    (0x0200, 0),
    (0x0300, 0),
    (0x0301, 8),
    (0x0400, 0),
    (0x0401, 0x18),
    (0x4000, 0),
    (0x4100, 0),
    (0x4102, 8),
    (0x4103, 8 + 64),
    (0x4200, 0),
    (0x4201, 0),
    (0x4202, 0x0c),
    (0x4300, 0x10),
    (INJECT_POISON, 8),
    (0x4302, 0x48),
    (GET_EVENT_RECORDS, 1),
    (CLEAR_EVENT_RECORDS, 6 + 2),
    (0x0102, 0),
    (0x0103, 4),
];

/// Label storage in memory that panics on an access outside the area.
#[derive(Debug, Clone)]
pub struct Labels(pub Arc<Mutex<Vec<u8>>>);

impl LabelStorage for Labels {
    fn label_size(&self) -> u32 {
        u32::try_from(LSA).unwrap_or(0)
    }
    fn read_label(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let off = usize::try_from(off).expect("a label offset fits");
        let data = self.0.lock().unwrap_or_else(|e| e.into_inner());
        buf.copy_from_slice(&data[off..off + buf.len()]);
        Ok(())
    }
    fn write_label(&self, off: u64, data: &[u8]) -> io::Result<()> {
        let off = usize::try_from(off).expect("a label offset fits");
        let mut area = self.0.lock().unwrap_or_else(|e| e.into_inner());
        area[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn sync_labels(&self) -> io::Result<()> {
        Ok(())
    }
    fn readonly(&self) -> bool {
        false
    }
}

/// Media that only checks Clear Poison's writes stay in the capacity.
#[derive(Debug)]
pub struct Media;

impl MediaWrite for Media {
    fn write_media(&self, dpa: u64, data: &[u8]) -> io::Result<()> {
        let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
        assert!(
            dpa.checked_add(len).is_some_and(|end| end <= CAPACITY),
            "a media write outside the capacity: {dpa:#x}+{len}"
        );
        Ok(())
    }
}

/// A fresh device behind its mailbox, and its label storage.
pub fn device() -> (Mailbox<Memdev>, Labels) {
    let labels = Labels(Arc::new(Mutex::new(vec![0u8; LSA])));
    let dev =
        Memdev::new(CAPACITY, Box::new(labels.clone()), Box::new(Media)).expect("a valid device");
    (Mailbox::new(dev), labels)
}

/// Runs one input on a fresh device.
pub fn run(data: &[u8]) {
    run_on(&mut device().0, data);
}

/// Runs one input's operations on `mb`.
pub fn run_on(mb: &mut Mailbox<Memdev>, data: &[u8]) {
    let mut rest = data;
    while let Some((&control, tail)) = rest.split_first() {
        rest = tail;
        let before = mb.commands_run();
        match control & 3 {
            0 => rest = payload_write(mb, rest),
            1 => rest = command(mb, control, rest),
            2 => rest = raw_write(mb, rest),
            _ => rest = read(mb, rest),
        }
        check(mb, mb.commands_run() > before);
    }
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, tail) = rest.split_at(n.min(rest.len()));
    *rest = tail;
    head
}

fn payload_write<'a>(mb: &mut Mailbox<Memdev>, mut rest: &'a [u8]) -> &'a [u8] {
    let head = take(&mut rest, 2);
    let offset = u64::from(head.first().copied().unwrap_or(0)) * 8;
    let bytes = take(
        &mut rest,
        usize::from(head.get(1).copied().unwrap_or(0)) % 80,
    );
    mb.write(PAYLOAD_OFFSET as u64 + offset, bytes);
    rest
}

fn command<'a>(mb: &mut Mailbox<Memdev>, control: u8, mut rest: &'a [u8]) -> &'a [u8] {
    let head = take(&mut rest, 3);
    let pick = |i: usize| head.get(i).copied().unwrap_or(0);
    let (opcode, length) = if control & 4 != 0 {
        let (op, mut len) = OPCODES[usize::from(pick(0)) % OPCODES.len()];
        if op == INJECT_POISON && pick(1) & 8 != 0 {
            // Half the injections at a plausible address (4 KiB steps in
            // the first MiB), so poison is there often enough to matter;
            // half of those found by the host too, with an event record.
            let dpa = u64::from(pick(2)) << 12;
            mb.write(PAYLOAD_OFFSET as u64, &dpa.to_le_bytes());
            if pick(1) & 0x10 != 0 {
                // A refusal (poison limit) is the device's answer, not a bug.
                let _ = mb.commands_mut().record_media_error(dpa);
            }
        }
        if op == CLEAR_EVENT_RECORDS && pick(1) & 8 != 0 {
            len = handles_just_read(mb, pick(2) % 4);
        }
        // Now and then the right length but for one byte.
        let len = match pick(1) % 8 {
            0 => len.saturating_sub(1),
            1 => len + 1,
            2 => usize::from(pick(2)) * 16,
            _ => len,
        };
        (op, len)
    } else {
        let op = u16::from_le_bytes([pick(0), pick(1)]);
        (op, usize::from(pick(2)) << (control >> 5))
    };
    let command = u64::from(opcode) | (u64::try_from(length).unwrap_or(0) << 16);
    mb.write(0x08, &command.to_le_bytes());
    mb.write(0x04, &[1]);
    rest
}

/// Linux's `cxl_mem_get_records_log` step: Get Event Records of `log`, then
/// the Clear Event Records input of the handles it returned, in the
/// payload; its length.
fn handles_just_read(mb: &mut Mailbox<Memdev>, log: u8) -> usize {
    mb.write(PAYLOAD_OFFSET as u64, &[log]);
    mb.write(
        0x08,
        &(u64::from(GET_EVENT_RECORDS) | 1 << 16).to_le_bytes(),
    );
    mb.write(0x04, &[1]);
    let mut count = [0u8; 2];
    mb.read(PAYLOAD_OFFSET as u64 + 20, &mut count);
    let count = if (reg64(mb, 0x10) >> 32) & 0xffff == 0 {
        u16::from_le_bytes(count)
    } else {
        0
    };
    let mut input = vec![log, 0, u8::try_from(count).unwrap_or(u8::MAX), 0, 0, 0];
    for i in 0..usize::from(count.min(u16::from(u8::MAX))) {
        let mut handle = [0u8; 2];
        let at = PAYLOAD_OFFSET + 0x20 + RECORD_LEN * i + 0x14;
        mb.read(at as u64, &mut handle);
        input.extend_from_slice(&handle);
    }
    mb.write(PAYLOAD_OFFSET as u64, &input);
    input.len()
}

fn raw_write<'a>(mb: &mut Mailbox<Memdev>, mut rest: &'a [u8]) -> &'a [u8] {
    let head = take(&mut rest, 3);
    let pick = |i: usize| head.get(i).copied().unwrap_or(0);
    let offset = u64::from(u16::from_le_bytes([pick(0), pick(1)])) % (MAILBOX_LEN as u64 + 64);
    let width = usize::from(pick(2) % 8) + 1;
    let value = take(&mut rest, width);
    mb.write(offset, value);
    rest
}

fn read<'a>(mb: &mut Mailbox<Memdev>, mut rest: &'a [u8]) -> &'a [u8] {
    let head = take(&mut rest, 3);
    let pick = |i: usize| head.get(i).copied().unwrap_or(0);
    let offset = u64::from(u16::from_le_bytes([pick(0), pick(1)]));
    let mut buf = vec![0u8; usize::from(pick(2) % 8) + 1];
    mb.read(offset, &mut buf);
    rest
}

fn reg64(mb: &Mailbox<Memdev>, at: u64) -> u64 {
    let mut b = [0u8; 8];
    mb.read(at, &mut b);
    u64::from_le_bytes(b)
}

/// The invariants after every operation; those of a command's answer when
/// the operation rang the doorbell (a raw write to Command may put any
/// length there).
fn check(mb: &Mailbox<Memdev>, rang: bool) {
    let mut control = [0u8; 4];
    mb.read(0x04, &mut control);
    assert_eq!(control, [0; 4], "the doorbell stays clear");
    let code = (reg64(mb, 0x10) >> 32) & 0xffff;
    assert!(code <= 0x16, "return code {code:#x} beyond Linux's table");
    let out_len = (reg64(mb, 0x08) >> 16) & ((1 << 21) - 1);
    if rang {
        assert!(out_len <= PAYLOAD_SIZE as u64, "output length {out_len}");
        if code != 0 {
            assert_eq!(out_len, 0, "a failed command has no output");
        }
    }
    let counts = mb.commands().events().counts();
    let mut status = 0;
    for (i, &n) in counts.iter().enumerate() {
        assert!(n <= usize::from(LOG_CAPACITY), "log {i} holds {n} records");
        if n > 0 {
            status |= 1 << i;
        }
    }
    assert_eq!(
        mb.commands().event_status(),
        status,
        "event status of {counts:?}"
    );
    for (dpa, _) in mb.commands().poisoned() {
        assert!(
            dpa % POISON_UNIT == 0 && dpa < CAPACITY,
            "poisoned unit {dpa:#x} out of the device"
        );
    }
}
