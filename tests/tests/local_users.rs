//! Another local user cannot use pmemvm's doors, on this host's KVM with a
//! tiny guest: each test creates a second user (`useradd`, removed at its
//! end) and runs programs as it. The gdb stub's Unix socket and the control
//! socket are owner-only (0600) from their creation, and when their mode is
//! widened behind pmemvm's back, pmemvm still refuses the other user's
//! connection by its credentials and names the uid on stderr, while the
//! owner keeps working; `pmemvm ctl` refuses a socket, or a listening
//! process, that another user owns, without sending its request.
//!
//! Needs root (to create the user), and skips with the reason otherwise.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pmemvm_tests::gdb::{boot_tiny, gdb_available, gdb_batch, LISTENING};
use pmemvm_tests::pmemvm::{pmemvm_bin, run_cmd, Output, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tiny::{guest, kvm_available};

const LIMIT: Duration = Duration::from_secs(60);

/// A second local user, removed on drop.
#[derive(Debug)]
struct LocalUser {
    name: String,
    uid: u32,
    gid: u32,
}

/// Runs a user-database command (useradd, userdel), again while another
/// holds the database's lock (status 10: the tests run side by side).
fn user_db(program: &str, args: &[&str]) -> Result<(), String> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(program)
            .args(args)
            .output()
            .map_err(|e| format!("{program}: {e}"))?;
        match out.status.code() {
            Some(0) => return Ok(()),
            Some(10) if Instant::now() < end => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                return Err(format!(
                    "{program} {args:?}: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        }
    }
}

fn id(flag: &str, name: &str) -> u32 {
    let out = Command::new("id").args([flag, name]).output().expect("id");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("id {flag} {name}: {out:?}"))
}

impl LocalUser {
    /// A new user `pmemvm-TAG-PID` with its own group, no home, no login.
    fn create(tag: &str) -> Result<Self, Skip> {
        // SAFETY: geteuid has no arguments and cannot fail.
        let me = unsafe { libc::geteuid() };
        if me != 0 {
            return Err(Skip::new(format!(
                "creating a second local user needs root, and this test runs as uid {me}"
            )));
        }
        if Command::new("useradd").arg("--help").output().is_err() {
            return Err(Skip::new("useradd is not installed (package passwd)"));
        }
        let name = format!("pmemvm-{tag}-{}", std::process::id());
        user_db(
            "useradd",
            &[
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                &name,
            ],
        )
        .map_err(|e| Skip::new(format!("a second local user cannot be made here: {e}")))?;
        let (uid, gid) = (id("-u", &name), id("-g", &name));
        assert_ne!(uid, 0);
        Ok(Self { name, uid, gid })
    }

    /// `program` as this user (no supplementary groups: std drops them).
    fn command(&self, program: impl AsRef<std::ffi::OsStr>, home: &Path) -> Command {
        let mut c = Command::new(program);
        c.uid(self.uid).gid(self.gid).env("HOME", home);
        c
    }

    /// The warning pmemvm prints when it refuses this user.
    fn refusal(&self) -> String {
        format!("refused and closed a connection from uid {}", self.uid)
    }
}

impl Drop for LocalUser {
    fn drop(&mut self) {
        if let Err(e) = user_db("userdel", &[&self.name]) {
            eprintln!("local_users: removing the test's user: {e}");
        }
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .expect("the socket")
        .permissions()
        .mode()
        & 0o777
}

/// What someone with write access to the socket file (or a careless chmod)
/// can do behind pmemvm's back.
fn widen(p: &Path) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).expect("chmod");
}

fn ctl(cmd: &mut Command, sock: &Path, args: &[&str]) -> Output {
    cmd.arg("ctl").arg(sock).args(args);
    run_cmd(cmd, LIMIT)
}

#[test]
fn another_user_is_refused_by_the_gdb_socket() {
    require!(kvm_available());
    require!(gdb_available());
    let kernel = require!(guest("spin"));
    let user = require!(LocalUser::create("gdb"));
    let d = TempDir::new("users-gdb");
    let sock = d.join("gdb.sock");
    let s = sock.display().to_string();
    let mut vm = boot_tiny(&kernel, &["--gdb", &s]);
    assert!(vm.wait_for(LISTENING, LIMIT), "{}", vm.output());
    assert_eq!(mode(&sock), 0o600, "owner-only from its creation");
    let intrude = || {
        let mut gdb = user.command("gdb", &d.0);
        gdb.args(["-batch", "-nx", "-ex"])
            .arg(format!("target remote {s}"))
            .args(["-ex", "info registers rip"]);
        run_cmd(&mut gdb, LIMIT)
    };
    let denied = intrude();
    assert!(
        denied.stderr.contains("Permission denied") && !denied.stdout.contains("rip "),
        "the mode keeps the other user out:\n{}",
        denied.dump()
    );
    widen(&sock);
    let refused = intrude();
    refused_then_owner_attaches(&mut vm, &user, &refused, &kernel, &s);
}

/// `refused` (the other user's gdb) read no register and pmemvm named its uid;
/// the owner's gdb then attaches at `target`.
fn refused_then_owner_attaches(
    vm: &mut pmemvm_tests::gdb::Debugged,
    user: &LocalUser,
    refused: &Output,
    kernel: &Path,
    target: &str,
) {
    let end = Instant::now() + Duration::from_secs(10);
    while !vm.output().contains(&user.refusal()) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        vm.output().contains(&user.refusal()),
        "pmemvm names the uid it refused:\n{}\n--- gdb ---\n{}",
        vm.output(),
        refused.dump()
    );
    assert!(
        !refused.stdout.contains("rip "),
        "the other user read no register:\n{}",
        refused.dump()
    );
    let owner = gdb_batch(kernel, target, &["info registers rip"], LIMIT);
    assert!(
        owner.contains("rip "),
        "the owner still attaches:\n{owner}\n{}",
        vm.output()
    );
}

#[test]
fn another_user_is_refused_by_the_gdb_tcp_port_on_loopback() {
    require!(kvm_available());
    require!(gdb_available());
    let kernel = require!(guest("spin"));
    let user = require!(LocalUser::create("gdbtcp"));
    let d = TempDir::new("users-gdb-tcp");
    // Port 0: the kernel picks a free one, and pmemvm says which.
    let mut vm = boot_tiny(&kernel, &["--gdb", "127.0.0.1:0"]);
    assert!(vm.wait_for(LISTENING, LIMIT), "{}", vm.output());
    let port = listening_port(&vm.output());
    let target = format!("127.0.0.1:{port}");
    let mut gdb = user.command("gdb", &d.0);
    gdb.args(["-batch", "-nx", "-ex"])
        .arg(format!("target remote {target}"))
        .args(["-ex", "info registers rip"]);
    let refused = run_cmd(&mut gdb, LIMIT);
    refused_then_owner_attaches(&mut vm, &user, &refused, &kernel, &target);
}

/// The port in pmemvm's "listening" line for `--gdb 127.0.0.1:0`.
fn listening_port(output: &str) -> u16 {
    output
        .lines()
        .find(|l| l.contains(LISTENING))
        .and_then(|l| l.split("127.0.0.1:").nth(1))
        .and_then(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no port in the listening line:\n{output}"))
}

#[test]
fn another_user_is_refused_by_the_control_socket() {
    require!(kvm_available());
    let kernel = require!(guest("spin"));
    let user = require!(LocalUser::create("api"));
    let d = TempDir::new("users-api");
    let sock = d.join("api.sock");
    let s = sock.display().to_string();
    let mut vm = boot_tiny(&kernel, &["--api", &s]);
    assert!(
        vm.wait_for(&format!("control socket at {s}"), LIMIT),
        "{}",
        vm.output()
    );
    assert_eq!(mode(&sock), 0o600, "owner-only from its creation");
    let denied = ctl(&mut user.command(pmemvm_bin(), &d.0), &sock, &["stats"]);
    assert_eq!(denied.status, Some(1), "{}", denied.dump());
    assert!(
        denied.stderr.contains("Permission denied") && !denied.stdout.contains("exits"),
        "the mode keeps the other user out:\n{}",
        denied.dump()
    );
    widen(&sock);
    let refused = ctl(&mut user.command(pmemvm_bin(), &d.0), &sock, &["stats"]);
    assert_eq!(refused.status, Some(1), "{}", refused.dump());
    assert!(
        refused
            .stderr
            .contains("this control socket takes connections from its owner (and root) only")
            && !refused.stdout.contains("exits"),
        "{}",
        refused.dump()
    );
    assert!(
        vm.output().contains(&user.refusal()),
        "pmemvm names the uid it refused:\n{}",
        vm.output()
    );
    let owner = ctl(&mut Command::new(pmemvm_bin()), &sock, &["stats"]);
    assert_eq!(
        owner.status,
        Some(0),
        "the owner still gets in: {}",
        owner.dump()
    );
    assert!(owner.stdout.contains("\"exits\""), "{}", owner.dump());
}

/// A listener that another user runs: answers any request line with a
/// success `ctl version` would print, and says `got: LINE` for each.
struct Impostor {
    child: Child,
}

impl Impostor {
    fn start(user: &LocalUser, sock: &Path, home: &Path) -> Result<Self, Skip> {
        if Command::new("perl")
            .args(["-MIO::Socket::UNIX", "-e", "1"])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            return Err(Skip::new(
                "perl with IO::Socket::UNIX is not installed (package perl-base)",
            ));
        }
        let script = r#"
            use IO::Socket::UNIX; $| = 1;
            my $l = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Local => $ARGV[0], Listen => 1)
                or die "listen: $!";
            chmod 0666, $ARGV[0];
            print "listening\n";
            while (my $c = $l->accept) {
                my $line = <$c>;
                print "got: $line" if defined $line;
                print $c "{\"ok\":true,\"result\":{\"pmemvm\":\"impostor\",\"protocol\":1}}\n";
                close $c;
            }
        "#;
        let mut child = user
            .command("perl", home)
            .args(["-e", script])
            .arg(sock)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("perl");
        let mut first = [0u8; 10];
        let stdout = child.stdout.as_mut().expect("stdout");
        stdout.read_exact(&mut first).expect("the impostor listens");
        assert_eq!(&first, b"listening\n");
        Ok(Self { child })
    }

    /// What it said after `listening`, once it is ended.
    fn end(mut self) -> String {
        let _ = self.child.kill();
        let mut said = String::new();
        if let Some(out) = self.child.stdout.as_mut() {
            let _ = out.read_to_string(&mut said);
        }
        let _ = self.child.wait();
        said
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_client_refuses_a_socket_another_user_owns_or_listens_on() {
    let user = require!(LocalUser::create("ctl"));
    let d = TempDir::new("users-ctl");
    // A directory the other user may write, as /tmp is.
    let theirs = d.join("shared");
    std::fs::create_dir(&theirs).expect("dir");
    std::os::unix::fs::chown(&theirs, Some(user.uid), Some(user.gid)).expect("chown");
    let sock = theirs.join("vm.sock");
    let impostor = require!(Impostor::start(&user, &sock, &d.0));
    // This test runs as root: root's client takes no other user's socket.
    let planted = ctl(&mut Command::new(pmemvm_bin()), &sock, &["version"]);
    assert_eq!(planted.status, Some(2), "{}", planted.dump());
    assert!(
        planted.stderr.contains(&format!(
            "{} belongs to uid {}, not to you (uid 0) or root",
            sock.display(),
            user.uid
        )) && !planted.stdout.contains("impostor"),
        "{}",
        planted.dump()
    );
    // The file made to look like root's: the listening process still is not.
    std::os::unix::fs::chown(&sock, Some(0), Some(0)).expect("chown");
    let swapped = ctl(&mut Command::new(pmemvm_bin()), &sock, &["version"]);
    assert_eq!(swapped.status, Some(1), "{}", swapped.dump());
    assert!(
        swapped.stderr.contains(&format!(
            "the process listening at {} runs as uid {}",
            sock.display(),
            user.uid
        )) && !swapped.stdout.contains("impostor"),
        "{}",
        swapped.dump()
    );
    let said = impostor.end();
    assert!(
        !said.contains("got:"),
        "no request reached the other user's process: {said}"
    );
}
