//! The control socket (`--api PATH`): a Unix socket on which a running
//! VM takes commands — its counters, pause and resume, a dump of its
//! memory — in the JSON-lines protocol of [`protocol`] (docs/api.md).
//! `pmemvm ctl PATH COMMAND` is its client.
//!
//! The socket is the user's: created owner-only (mode 0600 from the bind,
//! [`crate::owner_socket`]), a connection from another user refused by its
//! credentials, never over an existing path, removed when the VM ends. A
//! connection that sends nothing for [`server::IDLE_LIMIT`] is closed, so
//! silent clients cannot keep `pmemvm ctl` out. A serial device (a tty) named instead is
//! spoken on directly, raw, as one connection: how `--engine nested`
//! carries the socket through a serial port of its L1.

pub mod client;
pub mod cxl_media;
pub mod media;
pub mod protocol;
pub mod server;

use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// What pmemvm prints (before the path) once the socket takes commands.
pub const READY: &str = "control socket at ";

/// Errors of the control socket's setup.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Something is at the path already.
    #[error("--api {0}: the path exists; pmemvm creates the socket itself and replaces nothing (remove it, or name another path)")]
    Exists(PathBuf),
    /// The directory is missing or the socket cannot be made.
    #[error("--api {path}: cannot listen there ({source}){hint}")]
    Listen {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
        /// What to do, when the error says more than itself.
        hint: &'static str,
    },
    /// The path is too long for a Unix socket.
    #[error("--api {0}: a Unix socket path must be shorter than 108 bytes")]
    TooLong(PathBuf),
}

impl crate::exit_status::Classified for ApiError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::{self, *};
        match self {
            Self::Exists(_) | Self::TooLong(_) => Usage,
            Self::Listen { source, .. } => ErrorKind::of_path(source),
        }
    }
}

/// What to do after a failed bind, for the errors whose text does not say:
/// a file system that cannot hold a socket (QEMU's 9p shares answer ENXIO,
/// others EOPNOTSUPP or EPERM).
fn listen_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENXIO | libc::EOPNOTSUPP | libc::EPERM) => {
            "; this file system cannot hold a Unix socket (QEMU's 9p shares and some \
             network file systems cannot): name a path on a local one, such as /tmp"
        }
        _ => "",
    }
}

/// Where the commands come from.
#[derive(Debug)]
pub(crate) enum Endpoint {
    /// A Unix socket pmemvm made.
    Unix(UnixListener),
    /// A serial device, one stream of request lines.
    Serial(File),
}

/// A bound control socket; the file goes when this does.
#[derive(Debug)]
pub struct ApiListener {
    pub(crate) endpoint: Endpoint,
    path: PathBuf,
}

impl ApiListener {
    /// Creates the socket at `path`, or opens `path` raw when it is a serial
    /// device (a tty: the control socket's protocol spoken on it directly).
    pub fn bind(path: &Path) -> Result<Self, ApiError> {
        if path
            .metadata()
            .is_ok_and(|m| m.file_type().is_char_device())
        {
            let file = crate::tty::open_raw(path).map_err(|source| ApiError::Listen {
                path: path.to_path_buf(),
                source,
                hint: "",
            })?;
            return Ok(Self {
                endpoint: Endpoint::Serial(file),
                path: path.to_path_buf(),
            });
        }
        if path.as_os_str().len() >= 108 {
            return Err(ApiError::TooLong(path.to_path_buf()));
        }
        if path.symlink_metadata().is_ok() {
            return Err(ApiError::Exists(path.to_path_buf()));
        }
        let listener = crate::owner_socket::bind(path).map_err(|source| ApiError::Listen {
            path: path.to_path_buf(),
            hint: listen_hint(&source),
            source,
        })?;
        Ok(Self {
            endpoint: Endpoint::Unix(listener),
            path: path.to_path_buf(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ApiListener {
    fn drop(&mut self) {
        if matches!(self.endpoint, Endpoint::Serial(_)) {
            return;
        }
        // Still a socket: ours (a file put there since is left alone). The
        // inode is not compared: on 9p (a shared directory in a VM) a
        // socket's inode number is not stable between two stat calls.
        let still_socket = self
            .path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_socket());
        if still_socket {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_status::Classified;

    #[test]
    fn the_socket_is_owner_only_refuses_an_existing_path_and_goes_at_the_end() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("pmemvm-api-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let taken = dir.join("taken");
        std::fs::write(&taken, b"mine").unwrap();
        let e = ApiListener::bind(&taken).unwrap_err();
        assert!(matches!(e, ApiError::Exists(_)) && e.is_usage(), "{e}");
        assert_eq!(std::fs::read(&taken).unwrap(), b"mine");
        let e = ApiListener::bind(&dir.join("no/such/dir/api.sock")).unwrap_err();
        assert!(e.to_string().contains("cannot listen there"), "{e}");
        assert!(
            !e.to_string().contains("cannot hold"),
            "ENOENT says enough: {e}"
        );
        assert!(e.is_usage(), "a missing directory is the path's fault: {e}");
        let nxio = std::io::Error::from_raw_os_error(libc::ENXIO);
        assert!(listen_hint(&nxio).contains("cannot hold a Unix socket"));
        let long = dir.join("x".repeat(120));
        assert!(matches!(
            ApiListener::bind(&long),
            Err(ApiError::TooLong(_))
        ));
        let sock = dir.join("api.sock");
        let l = ApiListener::bind(&sock).unwrap();
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(l);
        assert!(!sock.exists(), "the socket goes with the listener");
        // A path someone else took over after the bind is left alone.
        let l = ApiListener::bind(&sock).unwrap();
        std::fs::remove_file(&sock).unwrap();
        std::fs::write(&sock, b"theirs").unwrap();
        drop(l);
        assert_eq!(std::fs::read(&sock).unwrap(), b"theirs");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bind_the_host_cannot_do_is_not_the_users_mistake() {
        let listen = |errno| ApiError::Listen {
            path: "/tmp/api.sock".into(),
            source: std::io::Error::from_raw_os_error(errno),
            hint: "",
        };
        for errno in [
            libc::EMFILE,
            libc::ENFILE,
            libc::ENOMEM,
            libc::ENOBUFS,
            libc::EIO,
        ] {
            assert!(!listen(errno).is_usage(), "{}", listen(errno));
        }
        for errno in [libc::ENOENT, libc::EACCES, libc::EADDRINUSE, libc::ENXIO] {
            assert!(listen(errno).is_usage(), "{}", listen(errno));
        }
    }
}
