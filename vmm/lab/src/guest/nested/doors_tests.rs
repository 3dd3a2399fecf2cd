//! The doors on this host: bytes pass both ways through an owner-only socket
//! and a loopback port, QEMU's end closing ends the client's, and another
//! user (a uid the test runs a client as, root only) is refused.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;

use super::*;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmemvm-door-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A stand-in for QEMU's chardev: answers each line with the line upper-cased.
fn fake_qemu(path: &Path) -> std::thread::JoinHandle<()> {
    let l = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().take(2) {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 64];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let up: Vec<u8> = buf[..n].to_ascii_uppercase();
                if s.write_all(&up).is_err() {
                    break;
                }
            }
        }
    })
}

#[test]
fn bytes_pass_both_ways_through_an_owner_only_socket_and_a_loopback_port() {
    let d = tmp("relay");
    let private = d.join("qemu.sock");
    let _qemu = fake_qemu(&private);
    let user = d.join("api.sock");
    let door = Door::unix(&user, private.clone(), "--api test".into()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&user).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut c = UnixStream::connect(&user).unwrap();
    c.write_all(b"ping\n").unwrap();
    let mut got = [0u8; 5];
    c.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"PING\n");
    drop(c);
    drop(door);
    assert!(!user.exists(), "the user's socket goes with the door");

    let tcp = Door::tcp("127.0.0.1:0".parse().unwrap(), private, "--gdb test".into()).unwrap();
    let mut c = TcpStream::connect(&tcp.shown).unwrap();
    c.write_all(b"gdb\n").unwrap();
    let mut got = [0u8; 4];
    c.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"GDB\n");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn another_user_gets_no_byte_through() {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        pmemvm_skip::skip!("running a client as another uid needs root");
    }
    let d = tmp("other");
    let private = d.join("qemu.sock");
    let _qemu = fake_qemu(&private);
    let door = Door::tcp("127.0.0.1:0".parse().unwrap(), private, "--gdb test".into()).unwrap();
    // A client as uid 61234 (no account needed): it prints what it read.
    let script = format!(
        "import socket\ns=socket.create_connection(('127.0.0.1',{port}))\ns.sendall(b'steal\\n')\n\
         s.settimeout(3)\ntry:\n  print(s.recv(16))\nexcept Exception as e:\n  print('closed',e)\n",
        port = door.shown.rsplit(':').next().unwrap()
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .uid(61234)
        .gid(61234)
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("STEAL"),
        "the other user's bytes reached QEMU: {text}"
    );
    assert!(
        text.contains("b''") || text.contains("closed"),
        "{text} {out:?}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}
