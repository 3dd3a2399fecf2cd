//! Pseudo-terminals for the tests that check what pmemvm does to a terminal
//! (`durability_terminal`, `boot --engine nested` in `engine_nested`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::skip::Skip;

/// A pseudo-terminal pair: (master, slave).
pub fn openpty() -> Result<(OwnedFd, OwnedFd), Skip> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds into the out-parameters; name, termios
    // and winsize may be null.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(Skip::new(format!(
            "no pseudo-terminal: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both fds were just opened by openpty and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) })
}

/// The settings `stty -g` shows, as a comparable tuple.
pub fn term_settings(fd: &OwnedFd) -> (u32, u32, u32, u32, Vec<u8>) {
    // SAFETY: a zeroed termios is a valid out-parameter.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: fd is an open terminal; t is a valid termios.
    let rc = unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) };
    assert_eq!(rc, 0, "tcgetattr: {}", std::io::Error::last_os_error());
    (t.c_iflag, t.c_oflag, t.c_cflag, t.c_lflag, t.c_cc.to_vec())
}
