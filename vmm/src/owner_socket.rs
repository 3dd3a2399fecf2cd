//! Unix sockets only their owner opens: the ones pmemvm serves (`--gdb PATH`,
//! `--api PATH`) and the one its client speaks to (`pmemvm ctl SOCKET`).
//!
//! A served socket is bound under umask 0177, so it is mode 0600 from the
//! moment its file exists (no chmod after the bind, no moment when it is
//! wider). Each accepted connection's peer credentials (`SO_PEERCRED`) are
//! checked as well — the second lock, for a socket whose mode someone widened
//! or a directory that was — and a uid other than pmemvm's own (effective) uid
//! or root is refused: the connection is closed and a warning names the uid.
//! Root is let in on purpose: it can read and change pmemvm's memory through
//! ptrace or /proc anyway, so refusing it protects nothing and would break
//! `sudo pmemvm ctl` for a VM started by root.
//!
//! The client checks the other way round: the socket file is owned by the
//! caller or root ([`check_owner`]), and so is the process that listens on it
//! (the peer credentials of the connected socket, [`peer_uid`]), so a socket
//! another user put at the path, or swapped in between the check and the
//! connection, is never spoken to.
//!
//! The umask is the process's, not the thread's: pmemvm's umask users take
//! one lock, and the old umask is back right after the bind. Another thread
//! that creates a file in that moment gets a stricter mode, never a wider one.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Serializes pmemvm's own changes of the process's umask.
static UMASK: Mutex<()> = Mutex::new(());

/// The least time between two refusal warnings of one door (another user's
/// connections must not flood pmemvm's stderr).
const WARN_EVERY: Duration = Duration::from_secs(1);

/// pmemvm's effective uid.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// True for the uids that may use pmemvm's sockets: its own and root's.
pub fn may_connect(uid: u32) -> bool {
    uid == own_uid() || uid == 0
}

/// Creates a listening Unix socket at `path`, mode 0600 from its creation.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    let _one = UMASK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: umask only swaps the process's file mode mask and cannot fail.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above; this puts the previous mask back.
    unsafe { libc::umask(old) };
    bound
}

/// The uid of the process at the other end of `stream` (for a client: the
/// process that listens; for a server: the one that connected).
pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len =
        libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>()).map_err(io::Error::other)?;
    // SAFETY: the fd is a Unix socket owned by `stream`, open for the call;
    // `cred` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::from_mut(&mut cred).cast(),
            &mut len,
        )
    };
    match rc {
        0 => Ok(cred.uid),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The owner of the socket file at `path` (the file a link points to) when it
/// is not the caller or root: `Some(uid)` is a socket the client must not use.
pub fn check_owner(path: &Path) -> io::Result<Option<u32>> {
    let uid = std::fs::metadata(path)?.uid();
    Ok((!may_connect(uid)).then_some(uid))
}

/// One served socket's gate: admits the owner's connections and refuses the
/// others, with a warning that names the uid (at most one a second; the
/// ones left unsaid are counted in the next).
#[derive(Debug)]
pub struct Gate {
    door: String,
    last_said: Option<Instant>,
    unsaid: u64,
}

impl Gate {
    /// The gate of `door` (`--api PATH`, `--gdb PATH`: how warnings name it).
    pub fn new(door: String) -> Self {
        Self {
            door,
            last_said: None,
            unsaid: 0,
        }
    }

    /// True when `stream`'s peer may use the socket; false (and a warning)
    /// when it is another user, or its credentials cannot be read. The caller
    /// closes a refused stream.
    pub fn admit(&mut self, stream: &UnixStream) -> bool {
        self.admit_uid(peer_uid(stream))
    }

    /// [`Self::admit`] for a TCP connection (`--gdb HOST:PORT`): a peer on a
    /// loopback address is a user of this host, checked by its uid from the
    /// kernel's socket table ([`crate::tcp_peer`]); a peer from beyond is let in
    /// (only `--gdb-any-address` listens where one can reach); a peer whose
    /// address cannot be read is refused.
    pub fn admit_tcp(&mut self, stream: &std::net::TcpStream) -> bool {
        let from_here = stream
            .peer_addr()
            .map_or(true, |a| crate::tcp_peer::is_loopback(a.ip()));
        !from_here || self.admit_uid(crate::tcp_peer::loopback_peer_uid(stream))
    }

    /// True when `peer` (a uid, or why it cannot be known) may connect.
    fn admit_uid(&mut self, peer: io::Result<u32>) -> bool {
        if peer.as_ref().is_ok_and(|&uid| may_connect(uid)) {
            return true;
        }
        if self.last_said.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            self.unsaid += 1;
            return false;
        }
        let who = match peer {
            Ok(uid) => format!("uid {uid}"),
            Err(e) => format!("a peer whose credentials cannot be read ({e})"),
        };
        let more = match self.unsaid {
            0 => String::new(),
            n => format!(" ({n} more refused since the last warning)"),
        };
        log::warn!(
            "{}: refused and closed a connection from {who}: only uid {} (pmemvm's own) and root may connect{more}",
            self.door,
            own_uid()
        );
        self.last_said = Some(Instant::now());
        self.unsaid = 0;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_bound_socket_is_owner_only_at_once_and_the_umask_comes_back() {
        let dir = std::env::temp_dir().join(format!("pmemvm-owner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("s.sock");
        let _ = std::fs::remove_file(&sock);
        // SAFETY: umask swaps the process's mask and cannot fail; this test
        // sets the usual one (a plain bind makes 0755 under it) and restores
        // the one it found.
        let before = unsafe { libc::umask(0o022) };
        let l = bind(&sock);
        // SAFETY: as above.
        let during = unsafe { libc::umask(before) };
        let _l = l.unwrap();
        assert_eq!(during, 0o022, "bind restored the caller's umask");
        // Nothing chmods after bind: this is the mode the bind gave.
        let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
        assert_eq!(check_owner(&sock).unwrap(), None, "the caller's own");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_peer_is_this_user_and_is_admitted() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), own_uid());
        assert!(Gate::new("test".into()).admit(&a));
        assert!(may_connect(0), "root is let in");
        assert!(may_connect(own_uid()));
        let other = if own_uid() == 1 { 2 } else { 1 };
        assert!(!may_connect(other), "another user is not");
    }
}
