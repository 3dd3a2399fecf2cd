//! The primary mailbox register block of a CXL memory device (CXL 2.0
//! 8.2.8.4), as the guest reaches it through MMIO:
//!
//! | offset | width | register |
//! |---|---|---|
//! | 0x00 | 32 | Capabilities: payload size 2^[4:0]; no interrupts (bits 5, 6 clear) |
//! | 0x04 | 32 | Control: bit 0 doorbell (the rest reads 0) |
//! | 0x08 | 64 | Command: opcode [15:0], payload length in bytes [36:16] |
//! | 0x10 | 64 | Status: return code [47:32] (read-only) |
//! | 0x18 | 64 | Background command status (read-only, 0: no background command) |
//! | 0x20 | [`PAYLOAD_SIZE`] | Payload |
//!
//! Linux writes the input into the payload, the opcode and input length into
//! Command, then sets the doorbell, and polls it. Here the command runs
//! within that write: the doorbell reads clear again at once, Status holds
//! the return code, Command's length field the output length and the payload
//! the output. Any access width from 1 to 8 bytes at any offset is taken
//! (`memcpy_toio` uses 1, 2 and 4); bytes outside the block read as 0 and
//! writes there are dropped.

use super::{CommandSet, ReturnCode};

/// Payload bytes (2^11, as QEMU's devices: Get/Set LSA move 2 KiB − 8 at a time).
pub const PAYLOAD_SIZE: usize = 1 << PAYLOAD_SHIFT;
const PAYLOAD_SHIFT: u32 = 11;
/// Where the payload starts in the block.
pub const PAYLOAD_OFFSET: usize = 0x20;
/// Bytes of the whole block (the capability header's length).
pub const MAILBOX_LEN: usize = PAYLOAD_OFFSET + PAYLOAD_SIZE;

const CAPABILITIES: usize = 0x00;
const CONTROL: usize = 0x04;
const COMMAND: usize = 0x08;
const STATUS: usize = 0x10;
const DOORBELL: u8 = 1;
/// Command's payload length field: bits 36:16.
const LENGTH_SHIFT: u32 = 16;
const LENGTH_MASK: u64 = (1 << 21) - 1;

/// The register block and the commands behind it.
#[derive(Debug)]
pub struct Mailbox<C> {
    commands: C,
    /// Capabilities to Background status, as the guest reads them.
    registers: [u8; PAYLOAD_OFFSET],
    payload: Box<[u8]>,
    /// Commands run (the doorbell rung).
    rung: u64,
}

impl<C: CommandSet> Mailbox<C> {
    /// An idle mailbox in front of `commands`.
    pub fn new(commands: C) -> Self {
        let mut registers = [0u8; PAYLOAD_OFFSET];
        registers[CAPABILITIES..CAPABILITIES + 4].copy_from_slice(&PAYLOAD_SHIFT.to_le_bytes());
        Self {
            commands,
            registers,
            payload: vec![0u8; PAYLOAD_SIZE].into_boxed_slice(),
            rung: 0,
        }
    }

    /// The commands behind the mailbox.
    pub fn commands(&self) -> &C {
        &self.commands
    }

    /// The commands behind the mailbox, to change them from the host side.
    pub fn commands_mut(&mut self) -> &mut C {
        &mut self.commands
    }

    /// How many commands the guest has run.
    pub fn commands_run(&self) -> u64 {
        self.rung
    }

    /// A guest read of `data.len()` bytes at `offset` in the block.
    pub fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = usize::try_from(offset)
                .ok()
                .and_then(|o| o.checked_add(i))
                .map_or(0, |at| self.byte(at));
        }
    }

    fn byte(&self, at: usize) -> u8 {
        match at.checked_sub(PAYLOAD_OFFSET) {
            Some(p) => self.payload.get(p).copied().unwrap_or(0),
            None => self.registers[at],
        }
    }

    /// A guest write of `data` at `offset` in the block; a write that sets
    /// the doorbell runs the command before it returns.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let Ok(offset) = usize::try_from(offset) else {
            return;
        };
        let mut ring = false;
        for (i, &b) in data.iter().enumerate() {
            let Some(at) = offset.checked_add(i) else {
                return;
            };
            if let Some(p) = at.checked_sub(PAYLOAD_OFFSET) {
                if let Some(slot) = self.payload.get_mut(p) {
                    *slot = b;
                }
                continue;
            }
            match at {
                // Control: the doorbell is the one writable bit.
                CONTROL => ring |= b & DOORBELL != 0,
                a if (COMMAND..COMMAND + 8).contains(&a) => self.registers[a] = b,
                // Capabilities, the rest of Control, Status and Background
                // status are read-only.
                _ => {}
            }
        }
        if ring {
            self.ring();
        }
    }

    fn register64(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.registers[at..at + 8]);
        u64::from_le_bytes(b)
    }

    fn set_register64(&mut self, at: usize, value: u64) {
        self.registers[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }

    /// Runs the command in Command on the payload.
    fn ring(&mut self) {
        self.rung += 1;
        let command = self.register64(COMMAND);
        let opcode = u16::try_from(command & 0xffff).unwrap_or(0);
        let length = usize::try_from((command >> LENGTH_SHIFT) & LENGTH_MASK).unwrap_or(usize::MAX);
        let outcome = match self.payload.get(..length) {
            None => Err(ReturnCode::InvalidPayloadLength),
            Some(input) => {
                let input = input.to_vec();
                let mut output = vec![0u8; PAYLOAD_SIZE];
                self.commands.execute(opcode, &input, &mut output).map(|n| {
                    let n = n.min(PAYLOAD_SIZE);
                    self.payload[..n].copy_from_slice(&output[..n]);
                    n
                })
            }
        };
        let (code, out_len) = match outcome {
            Ok(n) => (ReturnCode::Success, n),
            Err(code) => (code, 0),
        };
        let out_len = u64::try_from(out_len).unwrap_or(0);
        let command = (command & !(LENGTH_MASK << LENGTH_SHIFT)) | (out_len << LENGTH_SHIFT);
        self.set_register64(COMMAND, command);
        self.set_register64(STATUS, u64::from(code as u16) << 32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl::CommandResult;

    /// Echoes its input reversed; opcode 0xffff fails, 0xfffe claims more
    /// output than the payload holds.
    #[derive(Debug, Default)]
    struct Echo {
        seen: Vec<(u16, Vec<u8>)>,
    }

    impl CommandSet for Echo {
        fn execute(&mut self, opcode: u16, input: &[u8], output: &mut [u8]) -> CommandResult {
            self.seen.push((opcode, input.to_vec()));
            match opcode {
                0xffff => Err(ReturnCode::Unsupported),
                0xfffe => Ok(usize::MAX),
                _ => {
                    for (o, i) in output.iter_mut().zip(input.iter().rev()) {
                        *o = *i;
                    }
                    Ok(input.len())
                }
            }
        }
    }

    fn read64(m: &Mailbox<Echo>, at: u64) -> u64 {
        let mut b = [0u8; 8];
        m.read(at, &mut b);
        u64::from_le_bytes(b)
    }

    /// What Linux does: payload, Command (opcode, length), doorbell.
    fn send(m: &mut Mailbox<Echo>, opcode: u16, input: &[u8]) -> (u16, Vec<u8>) {
        for (i, chunk) in input.chunks(4).enumerate() {
            m.write(PAYLOAD_OFFSET as u64 + 4 * i as u64, chunk);
        }
        let len = input.len() as u64;
        m.write(
            COMMAND as u64,
            &(u64::from(opcode) | len << 16).to_le_bytes(),
        );
        m.write(CONTROL as u64, &1u32.to_le_bytes());
        let mut control = [0u8; 4];
        m.read(CONTROL as u64, &mut control);
        assert_eq!(
            control, [0; 4],
            "the doorbell is clear once the command ran"
        );
        let status = read64(m, STATUS as u64);
        let out_len = usize::try_from((read64(m, COMMAND as u64) >> 16) & LENGTH_MASK).unwrap();
        let mut out = vec![0u8; out_len];
        m.read(PAYLOAD_OFFSET as u64, &mut out);
        (u16::try_from(status >> 32 & 0xffff).unwrap(), out)
    }

    #[test]
    fn capabilities_say_a_2k_payload_and_no_interrupts() {
        let m = Mailbox::new(Echo::default());
        let mut caps = [0u8; 4];
        m.read(0, &mut caps);
        assert_eq!(u32::from_le_bytes(caps), 11);
        assert_eq!(MAILBOX_LEN, 0x820);
    }

    #[test]
    fn a_command_runs_in_the_doorbell_write_and_answers_in_place() {
        let mut m = Mailbox::new(Echo::default());
        let (rc, out) = send(&mut m, 0x4000, &[1, 2, 3, 4, 5]);
        assert_eq!((rc, out), (0, vec![5, 4, 3, 2, 1]));
        assert_eq!(m.commands().seen, vec![(0x4000, vec![1, 2, 3, 4, 5])]);
        assert_eq!(m.commands_run(), 1);
        let (rc, out) = send(&mut m, 0xffff, &[9]);
        assert_eq!((rc, out.len()), (3, 0), "a failure has no output");
    }

    #[test]
    fn a_length_beyond_the_payload_is_refused_without_running_the_command() {
        let mut m = Mailbox::new(Echo::default());
        let command = 0x4000u64 | ((PAYLOAD_SIZE as u64 + 1) << 16);
        m.write(COMMAND as u64, &command.to_le_bytes());
        m.write(CONTROL as u64, &[1]);
        assert_eq!(read64(&m, STATUS as u64) >> 32, 0x16);
        assert!(m.commands().seen.is_empty());
        // A command that claims more output than the payload is cut to it.
        let (rc, out) = send(&mut m, 0xfffe, &[]);
        assert_eq!((rc, out.len()), (0, PAYLOAD_SIZE));
    }

    #[test]
    fn read_only_registers_keep_their_values_and_outside_bytes_read_zero() {
        let mut m = Mailbox::new(Echo::default());
        m.write(0, &[0xff; 4]);
        m.write(STATUS as u64, &[0xff; 16]);
        m.write(CONTROL as u64, &[0xfe, 0xff, 0xff, 0xff]);
        let mut b = [0u8; 0x20];
        m.read(0, &mut b);
        assert_eq!(&b[..4], &11u32.to_le_bytes());
        assert_eq!(&b[4..8], &[0; 4], "control reads 0: no doorbell rung");
        assert_eq!(&b[0x10..0x20], &[0; 16]);
        assert_eq!(m.commands_run(), 0);
        let mut past = [0xaau8; 8];
        m.read(MAILBOX_LEN as u64 - 4, &mut past);
        assert_eq!(&past[4..], &[0; 4]);
        m.read(u64::MAX - 2, &mut past);
        assert_eq!(past, [0; 8]);
        m.write(u64::MAX - 2, &[1; 8]);
        m.write(MAILBOX_LEN as u64, &[1; 8]);
    }
}
