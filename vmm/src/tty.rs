//! A serial device opened raw: no echo, no line editing, no signal
//! characters, every byte passed as it is. The gdb stub and the control
//! socket speak their protocols on one when `--engine nested` carries them
//! through a serial port of the L1.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Opens `path` (a tty) for reading and writing, without making it the
/// process's controlling terminal, and puts it in raw mode.
pub fn open_raw(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)?;
    // SAFETY: termios is plain data; tcgetattr fills it for the open fd.
    let mut tio: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a termios to fill.
    if unsafe { libc::tcgetattr(file.as_raw_fd(), &mut tio) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: cfmakeraw only edits the struct it is given.
    unsafe { libc::cfmakeraw(&mut tio) };
    // SAFETY: a valid fd and an initialised termios.
    if unsafe { libc::tcsetattr(file.as_raw_fd(), libc::TCSANOW, &tio) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Waits up to `timeout_ms` for `file` to be readable; true when it is.
pub fn readable(file: &File, timeout_ms: i32) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    match n {
        n if n < 0 => Err(std::io::Error::last_os_error()),
        0 => Ok(false),
        _ => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A pseudo-terminal pair: (controller, the device's path).
    fn pty() -> (File, std::path::PathBuf) {
        use std::os::fd::FromRawFd;
        let (mut main, mut sub) = (0, 0);
        // SAFETY: openpty writes two fds into the ints given; the name,
        // termios and window size are not asked for (null).
        let rc = unsafe {
            libc::openpty(
                &mut main,
                &mut sub,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        let path = std::fs::read_link(format!("/proc/self/fd/{sub}")).unwrap();
        // SAFETY: `main` was just opened by openpty and is owned by nobody else.
        let main = unsafe { File::from_raw_fd(main) };
        // SAFETY: as above; dropping it closes the fd (the path stays valid
        // while the controller is open).
        drop(unsafe { File::from_raw_fd(sub) });
        (main, path)
    }

    #[test]
    fn a_raw_tty_passes_bytes_as_they_are() {
        let (mut main, path) = pty();
        let mut dev = open_raw(&path).unwrap();
        assert!(!readable(&dev, 10).unwrap());
        // Without raw mode the line discipline would echo, turn \n into
        // \r\n and take ^C as a signal.
        main.write_all(b"a\x03b\n").unwrap();
        assert!(readable(&dev, 1000).unwrap());
        let mut got = [0u8; 4];
        dev.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"a\x03b\n");
        dev.write_all(b"ok\n").unwrap();
        let mut back = [0u8; 3];
        main.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"ok\n");
        assert!(open_raw(Path::new("/nonexistent/tty")).is_err());
    }
}
