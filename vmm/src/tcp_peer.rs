//! Who is at the other end of a loopback TCP connection. TCP has no
//! `SO_PEERCRED`, but on loopback both ends are sockets of this host, and the
//! kernel lists each with its owner's uid in `/proc/net/tcp` (IPv4) and
//! `/proc/net/tcp6` (IPv6): the peer's socket is the entry whose local address
//! is our connection's remote one and whose remote address is our local one.
//! This is how `--gdb :PORT` tells its owner from another user of the host.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream};

/// The uid owning the socket at the other end of `stream`, a connection
/// between two loopback addresses of this host.
pub fn loopback_peer_uid(stream: &TcpStream) -> io::Result<u32> {
    let (local, peer) = (stream.local_addr()?, stream.peer_addr()?);
    if !is_loopback(peer.ip()) {
        return Err(io::Error::other(format!(
            "{peer} is not a loopback address: its user cannot be known"
        )));
    }
    let table = match peer {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table)?;
    uid_of(&text, peer, local).ok_or_else(|| {
        io::Error::other(format!(
            "no socket of {peer} connected to {local} in {table}"
        ))
    })
}

/// True for a loopback address of this host, an IPv4-mapped one included.
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.is_loopback()
        || matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()))
}

/// The uid of the entry of `table` (the text of /proc/net/tcp or tcp6) whose
/// local address is `local` and remote address is `remote`.
fn uid_of(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let (want_local, want_remote) = (hex_addr(local), hex_addr(remote));
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (l, r, uid) = (f.get(1)?, f.get(2)?, f.get(7)?);
        (l.eq_ignore_ascii_case(&want_local) && r.eq_ignore_ascii_case(&want_remote))
            .then(|| uid.parse().ok())
            .flatten()
    })
}

/// An address as the kernel prints it there: the IP as 32-bit words in host
/// byte order, each as 8 hex digits, then ":" and the port as 4 hex digits.
fn hex_addr(a: SocketAddr) -> String {
    let words: Vec<u32> = match a.ip() {
        IpAddr::V4(v4) => vec![u32::from_ne_bytes(v4.octets())],
        IpAddr::V6(v6) => v6
            .octets()
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    let ip: String = words.iter().map(|w| format!("{w:08X}")).collect();
    format!("{ip}:{:04X}", a.port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn both_ends_of_a_loopback_connection_are_this_user() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = TcpListener::bind(bind) else {
                continue; // no IPv6 loopback on this host
            };
            let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (served, _) = l.accept().unwrap();
            let me = crate::owner_socket::own_uid();
            assert_eq!(
                loopback_peer_uid(&served).unwrap(),
                me,
                "{bind}: the client"
            );
            assert_eq!(
                loopback_peer_uid(&client).unwrap(),
                me,
                "{bind}: the server"
            );
        }
    }

    #[test]
    fn the_table_is_read_by_both_addresses_and_the_uid_column() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1\n\
   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1001        0 2\n\
   2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000        0 3\n";
        let server: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let client: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        assert_eq!(uid_of(table, client, server), Some(1001));
        assert_eq!(uid_of(table, server, client), Some(1000));
        let other: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(uid_of(table, other, server), None);
        assert_eq!(hex_addr(server), "0100007F:1F90");
        assert_eq!(
            hex_addr("[::1]:8080".parse().unwrap()),
            "00000000000000000000000001000000:1F90"
        );
    }
}
