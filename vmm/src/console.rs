//! The terminal as the guest's console, for `pmemvm boot` and `pmemvm run
//! --console` alike: [`RawTerminal`] puts stdin in raw, non-blocking mode
//! while the VM runs and restores it on every exit path, and
//! [`ConsoleInput`] is the event-loop subscriber that feeds stdin to COM1.
//! `Ctrl-A x` stops the VM, as in QEMU.
//!
//! Raw and non-blocking mode come from vmm-sys-util's `Terminal` (as in
//! Firecracker: ICANON, ECHO and ISIG off, so Ctrl-C reaches the guest);
//! saving and restoring the exact previous settings is ours, because
//! `Terminal` only knows how to switch canonical mode back on, which would
//! not give a user back what they had.

use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use devices::exit::{ExitNotifier, ExitRequest};
use devices::serial::SerialDevice;
use event_manager::{EventOps, EventSet, Events, MutEventSubscriber};
use vmm_sys_util::terminal::Terminal;
use vmm_sys_util::timerfd::TimerFd;

/// Stdin as a `Terminal` (vmm-sys-util implements it only for `StdinLock`,
/// which would hold the lock for the whole run).
#[derive(Debug)]
struct Stdin;

// SAFETY: fd 0 stays open for the life of the process.
unsafe impl Terminal for Stdin {
    fn tty_fd(&self) -> RawFd {
        libc::STDIN_FILENO
    }
}

/// The settings and file flags of stdin, saved when it is a terminal and put
/// back on drop, also when a panic unwinds through it; for a child process
/// that changes the terminal itself (QEMU's `-serial stdio`) and may be
/// killed before it restores it.
#[derive(Debug)]
pub struct SavedTerminal {
    saved: Option<(libc::termios, libc::c_int)>,
}

impl SavedTerminal {
    /// Saves stdin's settings and flags (nothing when it is not a terminal).
    pub fn save() -> Self {
        let Some(termios) = termios_of_stdin() else {
            return Self { saved: None };
        };
        // SAFETY: F_GETFL on fd 0 has no other argument.
        let flags = unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_GETFL) };
        Self {
            saved: (flags >= 0).then_some((termios, flags)),
        }
    }

    /// Whether stdin is a terminal whose settings were saved.
    pub fn is_saved(&self) -> bool {
        self.saved.is_some()
    }

    /// Restores what was saved (idempotent).
    fn restore(&self) {
        if let Some((termios, flags)) = &self.saved {
            // SAFETY: `termios` came from tcgetattr on fd 0.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, termios) };
            // SAFETY: F_SETFL on fd 0 with the flags it had.
            unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_SETFL, *flags) };
        }
    }
}

impl Drop for SavedTerminal {
    fn drop(&mut self) {
        self.restore();
    }
}

/// Stdin in raw, non-blocking mode while it lives (only when stdin is a
/// tty); the previous settings and file flags are restored on drop, also
/// when a panic unwinds through it.
#[derive(Debug)]
pub struct RawTerminal {
    _saved: SavedTerminal,
}

/// The terminal settings of stdin, if it is a terminal.
fn termios_of_stdin() -> Option<libc::termios> {
    // SAFETY: isatty only inspects fd 0.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } != 1 {
        return None;
    }
    // SAFETY: a zeroed termios is a valid out-parameter that tcgetattr fills.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd 0 is a tty and `t` is a valid termios.
    (unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut t) } == 0).then_some(t)
}

impl RawTerminal {
    /// Switches stdin to raw, non-blocking mode when it is a terminal.
    pub fn new() -> Self {
        let saved = SavedTerminal::save();
        if saved.is_saved() {
            if let Err(e) = Stdin
                .set_raw_mode()
                .and_then(|()| Stdin.set_non_block(true))
            {
                log::warn!("the terminal cannot be put in raw mode: {e}");
            }
        }
        Self { _saved: saved }
    }
}

impl Default for RawTerminal {
    fn default() -> Self {
        Self::new()
    }
}

const CTRL_A: u8 = 0x01;

/// True for event-manager's error for an fd epoll refuses (a regular file).
fn is_eperm(e: &event_manager::Error) -> bool {
    matches!(e, event_manager::Error::Epoll(errno) if errno.errno() == libc::EPERM)
}
/// How often queued input is offered again while the UART's FIFO is full.
const FIFO_RETRY: Duration = Duration::from_millis(2);

/// Token of stdin's events.
const STDIN_EVENT: u32 = 0;
/// Token of the FIFO retry timer's events.
const RETRY_EVENT: u32 = 1;

/// Event-loop subscriber: stdin → COM1, with QEMU's `Ctrl-A x` escape.
/// While the UART's FIFO is full, stdin is taken out of the loop and a
/// timer offers the queued bytes again.
#[derive(Debug)]
pub struct ConsoleInput {
    com1: Arc<Mutex<SerialDevice>>,
    exit: Arc<ExitNotifier>,
    retry: TimerFd,
    pending: Vec<u8>,
    escape: bool,
    reading: bool,
    /// Stdin cannot be polled (a regular file): read it on the timer.
    polled_by_timer: bool,
}

impl ConsoleInput {
    /// A subscriber feeding COM1 that ends the VM on `Ctrl-A x`.
    pub fn new(com1: Arc<Mutex<SerialDevice>>, exit: Arc<ExitNotifier>) -> std::io::Result<Self> {
        Ok(Self {
            com1,
            exit,
            retry: TimerFd::new()?,
            pending: Vec::new(),
            escape: false,
            reading: false,
            polled_by_timer: false,
        })
    }

    /// Applies the escape sequence to `input`; true when `Ctrl-A x` was typed.
    fn filter(&mut self, input: &[u8]) -> bool {
        for &b in input {
            if self.escape {
                self.escape = false;
                match b {
                    b'x' | b'X' => return true,
                    CTRL_A => self.pending.push(CTRL_A),
                    other => self.pending.extend_from_slice(&[CTRL_A, other]),
                }
            } else if b == CTRL_A {
                self.escape = true;
            } else {
                self.pending.push(b);
            }
        }
        false
    }

    /// Offers the queued bytes to the UART; true when all were taken.
    fn flush_pending(&mut self) -> bool {
        let done = self
            .com1
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .enqueue_input(&self.pending);
        self.pending.drain(..done);
        self.pending.is_empty()
    }

    fn read_stdin(&mut self, ops: &mut EventOps) {
        let mut buf = [0u8; 64];
        match Stdin.read_raw(&mut buf) {
            Ok(0) => self.stop_reading(ops),
            Ok(n) => {
                if self.filter(&buf[..n]) {
                    self.exit.request(ExitRequest::Signal(libc::SIGINT));
                    return;
                }
                if !self.flush_pending() && !self.polled_by_timer {
                    // FIFO full: pause stdin, retry on the timer.
                    self.stop_reading(ops);
                    if let Err(e) = self.retry.reset(FIFO_RETRY, Some(FIFO_RETRY)) {
                        log::warn!("console input stops: its retry timer failed: {e}");
                    }
                }
            }
            Err(e) if e.errno() == libc::EAGAIN || e.errno() == libc::EINTR => {}
            Err(e) => {
                log::warn!("console input stops: reading stdin failed: {e}");
                self.stop_reading(ops);
            }
        }
    }

    fn stop_reading(&mut self, ops: &mut EventOps) {
        if self.polled_by_timer {
            self.polled_by_timer = false;
            let _ = self.retry.clear();
            return;
        }
        if self.reading {
            let _ = ops.remove(Events::with_data_raw(
                libc::STDIN_FILENO,
                STDIN_EVENT,
                EventSet::IN,
            ));
            self.reading = false;
        }
    }

    fn start_reading(&mut self, ops: &mut EventOps) {
        match ops.add(Events::with_data_raw(
            libc::STDIN_FILENO,
            STDIN_EVENT,
            EventSet::IN,
        )) {
            Ok(()) => self.reading = true,
            // A regular file cannot be polled (EPERM), but is always
            // readable: feed it at the timer's pace until its end.
            Err(_) if self.polled_by_timer => {}
            Err(e) if is_eperm(&e) => {
                self.polled_by_timer = true;
                if let Err(e) = self.retry.reset(FIFO_RETRY, Some(FIFO_RETRY)) {
                    log::debug!("console input is unavailable: {e}");
                    self.polled_by_timer = false;
                }
            }
            Err(e) => log::debug!("console input is unavailable: {e}"),
        }
    }
}

impl MutEventSubscriber for ConsoleInput {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::with_data(&self.retry, RETRY_EVENT, EventSet::IN)) {
            log::warn!("console input is unavailable: {e}");
            return;
        }
        self.start_reading(ops);
    }

    fn process(&mut self, events: Events, ops: &mut EventOps) {
        match events.data() {
            STDIN_EVENT if events.event_set().contains(EventSet::IN) => self.read_stdin(ops),
            // Hang-up or error without data: the terminal is gone.
            STDIN_EVENT => self.stop_reading(ops),
            _ => {
                let _ = self.retry.wait();
                if !self.flush_pending() {
                    return;
                }
                if self.polled_by_timer {
                    self.read_stdin(ops);
                } else {
                    let _ = self.retry.clear();
                    self.start_reading(ops);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm_sys_util::eventfd::EventFd;

    fn input() -> ConsoleInput {
        let com1 = Arc::new(Mutex::new(SerialDevice::new(
            EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            Box::new(std::io::sink()),
        )));
        ConsoleInput::new(com1, Arc::new(ExitNotifier::new().unwrap())).unwrap()
    }

    #[test]
    fn ctrl_a_escapes() {
        let mut c = input();
        assert!(!c.filter(b"ab\x01\x01c\x01d"));
        assert_eq!(c.pending, b"ab\x01c\x01d");
        assert!(c.filter(b"\x01x"));
    }

    #[test]
    fn a_full_fifo_keeps_the_rest_queued() {
        let mut c = input();
        c.pending = vec![b'z'; 100];
        assert!(!c.flush_pending(), "a 16550 FIFO holds 64 bytes");
        assert_eq!(c.pending.len(), 100 - 64);
    }
}
