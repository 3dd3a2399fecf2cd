//! A GDB remote-protocol stub (`--gdb ADDR`, `--gdb-wait`) on the `gdbstub`
//! crate: gdb (or anything that speaks its protocol) attaches over TCP, a
//! Unix socket or a serial device and debugs the guest kernel — one gdb
//! thread per vCPU, registers, memory by virtual or physical address,
//! software and hardware breakpoints, watchpoints, single step, Ctrl-C.
//!
//! The parts: [`paging`] walks the guest's page tables, [`regs`] maps KVM's
//! registers to gdb's, [`hub`] is where the stub's thread and the vCPU
//! threads meet ([`vcpu_side`] is what a vCPU does there), [`target`] is
//! the guest as `gdbstub` sees it and [`server`] accepts debuggers and runs
//! the protocol. docs/debugging.md says how to use it.

mod breakpoints;
pub mod hub;
pub mod paging;
pub mod regs;
pub mod server;
pub mod target;
pub mod vcpu_side;

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;

use thiserror::Error;

/// What can go wrong with the stub.
#[derive(Debug, Error)]
pub enum GdbError {
    /// A TCP address beyond loopback without `--gdb-any-address`.
    #[error("--gdb {0} is not a loopback address, and whoever reaches the debugger controls the guest: use 127.0.0.1 or ::1 (HOST:PORT, :PORT), a Unix socket path or a serial device, or add --gdb-any-address to open it beyond this machine")]
    NotLoopback(SocketAddr),
    /// `--gdb` is not an address.
    #[error("--gdb '{0}' is not an address: use HOST:PORT (127.0.0.1:1234, localhost:1234, :1234), a Unix socket path (containing '/'), or a serial device under /dev")]
    BadAddress(String),
    /// The TCP port cannot be listened on.
    #[error("--gdb {addr}: cannot listen there: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The socket path exists already.
    #[error("--gdb {0}: the path exists; pmemvm creates the socket and does not replace a file it did not create")]
    SocketExists(PathBuf),
    /// The serial device cannot be opened.
    #[error("--gdb {path}: cannot open the serial device: {source}")]
    Serial {
        /// The device.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A vCPU could not do what gdb asked.
    #[error("gdb: {0}")]
    Vcpu(String),
    /// The debugger's connection failed.
    #[error("gdb connection: {0}")]
    Connection(std::io::Error),
}

impl crate::exit_status::Classified for GdbError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::{self, *};
        match self {
            Self::BadAddress(_) | Self::NotLoopback(_) | Self::SocketExists(_) => Usage,
            Self::Listen { source, .. } | Self::Serial { source, .. } => ErrorKind::of_path(source),
            Self::Vcpu(_) | Self::Connection(_) => Environment,
        }
    }
}

/// Where the stub listens.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GdbAddr {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket, created by pmemvm.
    Unix(PathBuf),
    /// A serial device (a tty), spoken on directly: how `--engine nested`
    /// carries the protocol out of its L1.
    Serial(PathBuf),
}

impl GdbAddr {
    /// Parses `--gdb`'s value: `HOST:PORT` (`:PORT` is 127.0.0.1; a
    /// `tcp:` prefix as in QEMU's `-gdb tcp::1234` is accepted), a path
    /// under /dev (serial), or any other path with a '/' (Unix socket).
    pub fn parse(s: &str) -> Result<Self, GdbError> {
        let bad = || GdbError::BadAddress(s.to_string());
        if s.starts_with("/dev/") {
            return Ok(Self::Serial(PathBuf::from(s)));
        }
        if s.contains('/') {
            return Ok(Self::Unix(PathBuf::from(s)));
        }
        let hostport = s.strip_prefix("tcp:").unwrap_or(s);
        let (host, port) = hostport.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let host = match host.trim_start_matches('[').trim_end_matches(']') {
            "" => "127.0.0.1",
            h => h,
        };
        (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(Self::Tcp)
            .ok_or_else(bad)
    }
}

impl GdbAddr {
    /// Refuses a TCP address beyond loopback unless `any_address`
    /// (`--gdb-any-address`): the stub has no password, and whoever connects
    /// reads and writes guest memory and can end the VM. The command line
    /// asks this before anything else, so a refusal changes nothing.
    pub fn check_reach(&self, any_address: bool) -> Result<(), GdbError> {
        match self {
            Self::Tcp(a) if !a.ip().is_loopback() && !any_address => Err(GdbError::NotLoopback(*a)),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for GdbAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "{a}"),
            Self::Unix(p) | Self::Serial(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A bound `--gdb` endpoint, made before the VM so a busy port or an
/// existing path is refused before anything starts.
#[derive(Debug)]
pub struct GdbListener {
    pub(crate) endpoint: server::Endpoint,
    /// Hold the vCPUs until a debugger attaches.
    pub wait: bool,
    /// What the user gave, for messages.
    pub addr: GdbAddr,
}

impl GdbListener {
    /// Listens at `addr`.
    pub fn bind(addr: &GdbAddr, wait: bool) -> Result<Self, GdbError> {
        let endpoint = match addr {
            GdbAddr::Tcp(a) => {
                if !a.ip().is_loopback() {
                    log::warn!("--gdb {a} (--gdb-any-address): the debugger's port is open beyond this machine; whoever connects controls the guest");
                }
                let l = TcpListener::bind(a).map_err(|source| GdbError::Listen {
                    addr: a.to_string(),
                    source,
                })?;
                server::Endpoint::Tcp(l)
            }
            GdbAddr::Unix(p) => {
                if p.symlink_metadata().is_ok() {
                    return Err(GdbError::SocketExists(p.clone()));
                }
                let l = crate::owner_socket::bind(p).map_err(|source| GdbError::Listen {
                    addr: p.display().to_string(),
                    source,
                })?;
                server::Endpoint::Unix(l, p.clone())
            }
            GdbAddr::Serial(p) => server::Endpoint::Serial(server::open_serial(p)?),
        };
        Ok(Self {
            endpoint,
            wait,
            addr: addr.clone(),
        })
    }

    /// The TCP port listened on (for `:0`).
    pub fn port(&self) -> Option<u16> {
        match &self.endpoint {
            server::Endpoint::Tcp(l) => l.local_addr().ok().map(|a| a.port()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_status::Classified;

    #[test]
    fn addresses_parse_as_users_write_them() {
        let tcp = |s: &str| match GdbAddr::parse(s).unwrap() {
            GdbAddr::Tcp(a) => a.to_string(),
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(tcp("127.0.0.1:1234"), "127.0.0.1:1234");
        assert_eq!(tcp(":1234"), "127.0.0.1:1234");
        assert_eq!(tcp("tcp::1234"), "127.0.0.1:1234", "QEMU's -gdb spelling");
        assert_eq!(tcp("[::1]:1234"), "[::1]:1234");
        assert!(tcp("localhost:1234").ends_with(":1234"));
        assert_eq!(
            GdbAddr::parse("/tmp/g.sock").unwrap(),
            GdbAddr::Unix("/tmp/g.sock".into())
        );
        assert_eq!(
            GdbAddr::parse("./g.sock").unwrap(),
            GdbAddr::Unix("./g.sock".into())
        );
        assert_eq!(
            GdbAddr::parse("/dev/ttyS2").unwrap(),
            GdbAddr::Serial("/dev/ttyS2".into())
        );
        for bad in [
            "1234",
            "127.0.0.1",
            "127.0.0.1:99999",
            "127.0.0.1:x",
            "no.such.host.invalid:1",
            "",
        ] {
            let e = GdbAddr::parse(bad).unwrap_err();
            assert!(e.is_usage(), "{bad}");
            assert!(e.to_string().contains(&format!("'{bad}'")), "{e}");
        }
    }

    #[test]
    fn an_address_beyond_loopback_needs_its_own_option() {
        for open in ["0.0.0.0:1234", "192.0.2.7:1234", "[::]:1234"] {
            let a = GdbAddr::parse(open).unwrap();
            let e = a.check_reach(false).unwrap_err();
            assert!(e.is_usage(), "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("--gdb {a} is not a loopback address"))
                    && e.to_string().contains("--gdb-any-address"),
                "{e}"
            );
            a.check_reach(true).unwrap();
        }
        for near in [
            ":1234",
            "127.0.0.1:1",
            "[::1]:1",
            "/tmp/g.sock",
            "/dev/ttyS2",
        ] {
            GdbAddr::parse(near).unwrap().check_reach(false).unwrap();
        }
    }

    #[test]
    fn a_listen_the_host_cannot_do_is_not_the_users_mistake() {
        let listen = |errno| GdbError::Listen {
            addr: ":1234".into(),
            source: std::io::Error::from_raw_os_error(errno),
        };
        assert!(!listen(libc::EMFILE).is_usage());
        assert!(!listen(libc::ENOBUFS).is_usage());
        assert!(listen(libc::EADDRINUSE).is_usage());
        assert!(listen(libc::EACCES).is_usage());
    }

    #[test]
    fn a_busy_port_and_an_existing_path_are_refused() {
        let first = GdbListener::bind(&GdbAddr::parse("127.0.0.1:0").unwrap(), false).unwrap();
        let port = first.port().unwrap();
        let e = GdbListener::bind(
            &GdbAddr::parse(&format!("127.0.0.1:{port}")).unwrap(),
            false,
        )
        .unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("cannot listen"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("pmemvm-gdb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("taken");
        std::fs::write(&path, b"mine").unwrap();
        let e = GdbListener::bind(&GdbAddr::Unix(path.clone()), false).unwrap_err();
        assert!(matches!(e, GdbError::SocketExists(_)), "{e}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"mine",
            "nothing of the user's changed"
        );
        let sock = dir.join("g.sock");
        let l = GdbListener::bind(&GdbAddr::Unix(sock.clone()), true).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
            0o600
        );
        drop(l);
        assert!(!sock.exists(), "the socket goes with the listener");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
