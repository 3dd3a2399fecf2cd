//! The terminal as the guest's console: raw mode while the VM runs (only when
//! stdin is a tty, restored on every exit path), and a thread feeding stdin to
//! COM1. `Ctrl-A x` stops the VM, as in QEMU.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use devices::serial::SerialDevice;

/// The terminal settings to restore, saved once.
static SAVED: OnceLock<libc::termios> = OnceLock::new();

/// Restores the terminal on drop.
#[derive(Debug)]
pub struct RawTerminal {
    active: bool,
}

/// Puts stdin in raw mode when it is a terminal.
pub fn raw_terminal() -> RawTerminal {
    // SAFETY: isatty only inspects fd 0.
    if unsafe { libc::isatty(0) } != 1 {
        return RawTerminal { active: false };
    }
    // SAFETY: a zeroed termios is a valid out-parameter; tcgetattr fills it.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd 0 is a tty (checked) and `t` is a valid termios.
    if unsafe { libc::tcgetattr(0, &mut t) } != 0 {
        return RawTerminal { active: false };
    }
    let _ = SAVED.set(t);
    let mut raw = t;
    // SAFETY: cfmakeraw only edits the struct.
    unsafe { libc::cfmakeraw(&mut raw) };
    // Keep output post-processing so host-side messages still start at column 0.
    raw.c_oflag |= libc::OPOST;
    // SAFETY: fd 0 is a tty and `raw` is a valid termios.
    let ok = unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) } == 0;
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
    }));
    RawTerminal { active: ok }
}

/// Restores the saved terminal settings, if any were saved.
pub fn restore_terminal() {
    if let Some(t) = SAVED.get() {
        // SAFETY: `t` came from tcgetattr on fd 0.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, t) };
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if self.active {
            restore_terminal();
        }
    }
}

const CTRL_A: u8 = 0x01;

/// Feeds stdin to the console UART until EOF or `stop`; `Ctrl-A x` calls `on_quit`.
pub fn spawn_input_thread(
    com1: Arc<Mutex<SerialDevice>>,
    stop: Arc<AtomicBool>,
    on_quit: impl Fn() + Send + 'static,
) {
    let spawned = std::thread::Builder::new()
        .name("console-in".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 64];
            let mut escape = false;
            while !stop.load(Ordering::Relaxed) {
                let n = match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let mut pending: Vec<u8> = Vec::with_capacity(n);
                for &b in &buf[..n] {
                    if escape {
                        escape = false;
                        match b {
                            b'x' | b'X' => {
                                on_quit();
                                return;
                            }
                            CTRL_A => pending.push(CTRL_A),
                            other => pending.extend_from_slice(&[CTRL_A, other]),
                        }
                    } else if b == CTRL_A {
                        escape = true;
                    } else {
                        pending.push(b);
                    }
                }
                let mut rest = &pending[..];
                while !rest.is_empty() && !stop.load(Ordering::Relaxed) {
                    let done = com1
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .enqueue_input(rest);
                    rest = &rest[done..];
                    if !rest.is_empty() {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("console input is unavailable: {e}");
    }
}
