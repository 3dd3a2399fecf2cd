//! The user's doors of a nested run (`--gdb ADDR`, `--api PATH` with `--engine
//! nested`), served by this pmemvm as its own are: a Unix socket made
//! owner-only at its creation, a loopback TCP port, and every connection's
//! user checked ([`vmm::owner_socket::Gate`]) before a byte is passed. QEMU
//! listens on a private socket in the run's L1 directory; each admitted
//! connection is relayed to it, both ways, until either end closes.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vmm::owner_socket::Gate;

/// How often the accept loop looks at its stop flag.
const POLL: Duration = Duration::from_millis(50);

/// Where the user's side listens.
enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// A connection of the user's side.
enum Client {
    Unix(UnixStream),
    Tcp(TcpStream),
}

/// One door: the user's listener, relaying to QEMU's private socket.
#[derive(Debug)]
pub struct Door {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The user's socket file, removed when the door closes.
    user_path: Option<PathBuf>,
    /// Where it listens (a TCP port 0 resolved).
    pub shown: String,
}

impl Door {
    /// Opens the user's Unix socket `user` (owner-only from its creation) for
    /// QEMU's socket at `private`; `name` names it in refusals (`--api PATH`).
    pub fn unix(user: &Path, private: PathBuf, name: String) -> io::Result<Self> {
        let l = vmm::owner_socket::bind(user)?;
        l.set_nonblocking(true)?;
        let shown = user.display().to_string();
        let mut door = Self::start(Listener::Unix(l), private, name)?;
        door.user_path = Some(user.to_path_buf());
        door.shown = shown;
        Ok(door)
    }

    /// Opens TCP `addr` for QEMU's socket at `private`; a loopback peer must
    /// be the owner (or root), as on pmemvm's own `--gdb HOST:PORT`.
    pub fn tcp(addr: SocketAddr, private: PathBuf, name: String) -> io::Result<Self> {
        let l = TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        let shown = l.local_addr()?.to_string();
        let mut door = Self::start(Listener::Tcp(l), private, name)?;
        door.shown = shown;
        Ok(door)
    }

    fn start(listener: Listener, private: PathBuf, name: String) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nested-door".into())
            .spawn(move || serve(&listener, &private, &mut Gate::new(name), &flag))?;
        Ok(Self {
            stop,
            thread: Some(thread),
            user_path: None,
            shown: String::new(),
        })
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(p) = &self.user_path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Accepts, checks and relays until `stop`.
fn serve(listener: &Listener, private: &Path, gate: &mut Gate, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let accepted = match listener {
            Listener::Unix(l) => l.accept().map(|(s, _)| Client::Unix(s)),
            Listener::Tcp(l) => l.accept().map(|(s, _)| Client::Tcp(s)),
        };
        let client = match accepted {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => {
                log::warn!("a nested door: accepting failed: {e}");
                std::thread::sleep(POLL);
                continue;
            }
        };
        let admitted = match &client {
            Client::Unix(s) => gate.admit(s),
            Client::Tcp(s) => gate.admit_tcp(s),
        };
        if !admitted {
            continue;
        }
        if let Err(e) = relay(client, private, stop) {
            log::warn!(
                "a nested door: relaying to QEMU's {}: {e}",
                private.display()
            );
        }
    }
}

/// Copies between `client` and QEMU's socket both ways until one closes
/// (or `stop`); one connection at a time, as QEMU's chardev takes them.
fn relay(client: Client, private: &Path, stop: &AtomicBool) -> io::Result<()> {
    let qemu = UnixStream::connect(private)?;
    type Half = Box<dyn io::Read + Send>;
    type Closer = Box<dyn Fn() + Send>;
    let (mut c_read, mut c_write, close_client): (Half, Box<dyn io::Write + Send>, Closer) =
        match client {
            Client::Unix(s) => {
                s.set_nonblocking(false)?;
                let c = s.try_clone()?;
                let close = move || {
                    let _ = c.shutdown(std::net::Shutdown::Both);
                };
                (Box::new(s.try_clone()?), Box::new(s), Box::new(close))
            }
            Client::Tcp(s) => {
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                let c = s.try_clone()?;
                let close = move || {
                    let _ = c.shutdown(std::net::Shutdown::Both);
                };
                (Box::new(s.try_clone()?), Box::new(s), Box::new(close))
            }
        };
    let (mut q_read, mut q_write) = (qemu.try_clone()?, qemu.try_clone()?);
    let up = std::thread::Builder::new()
        .name("nested-door-up".into())
        .spawn(move || {
            let _ = io::copy(&mut c_read, &mut q_write);
            let _ = q_write.shutdown(std::net::Shutdown::Both);
        })?;
    // QEMU to the client here; when the client goes, the thread above ends
    // and shuts QEMU's side, which ends this copy too.
    qemu.set_read_timeout(Some(POLL))?;
    let mut buf = [0u8; 16 << 10];
    loop {
        match io::Read::read(&mut q_read, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if io::Write::write_all(&mut c_write, &buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::Relaxed) || up.is_finished() {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let _ = qemu.shutdown(std::net::Shutdown::Both);
    close_client();
    drop(c_write);
    let _ = up.join();
    Ok(())
}

#[cfg(test)]
#[path = "doors_tests.rs"]
mod tests;

/// The doors of one nested run, and what QEMU is given instead of the user's
/// addresses: its private sockets in the run's L1 directory.
#[derive(Debug, Default)]
pub struct NestedDoors {
    /// QEMU's chardev (without its id) for the L1's gdb port.
    pub gdb_chardev: Option<String>,
    /// QEMU's socket for the L1's control port.
    pub api_private: Option<PathBuf>,
    doors: Vec<Door>,
}

/// Opens the user's `--gdb` and `--api` doors of a nested run whose L1
/// directory is `l1`. A serial `--gdb` device is QEMU's own (nothing to relay).
pub fn open(
    l1: &Path,
    gdb: Option<&vmm::debug::gdb::GdbAddr>,
    api: Option<&Path>,
) -> io::Result<NestedDoors> {
    use vmm::debug::gdb::GdbAddr;
    let mut out = NestedDoors::default();
    let chardev = |p: &Path| format!("socket,path={},server=on,wait=off", p.display());
    match gdb {
        Some(GdbAddr::Unix(user)) => {
            let private = l1.join("gdb.sock");
            out.gdb_chardev = Some(chardev(&private));
            let name = format!("--gdb {}", user.display());
            out.doors.push(Door::unix(user, private, name)?);
        }
        Some(GdbAddr::Tcp(addr)) => {
            let private = l1.join("gdb.sock");
            out.gdb_chardev = Some(chardev(&private));
            out.doors
                .push(Door::tcp(*addr, private, format!("--gdb {addr}"))?);
        }
        Some(serial @ GdbAddr::Serial(_)) => {
            out.gdb_chardev = Some(super::l1::gdb_chardev(serial));
        }
        None => {}
    }
    if let Some(user) = api {
        let private = l1.join("api.sock");
        let name = format!("--api {}", user.display());
        out.doors.push(Door::unix(user, private.clone(), name)?);
        out.api_private = Some(private);
    }
    Ok(out)
}
