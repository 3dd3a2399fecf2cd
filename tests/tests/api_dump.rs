//! The control socket (`--api`), memory dumps and the pvpanic device on
//! this host's KVM, with tiny guests, as a user types them: `pmemvm ctl
//! SOCKET version|stats|pause|resume|dump FILE` against a running
//! two-vCPU guest (a paused guest's memory stands still between two
//! dumps, a resumed one moves on; the dump is an ELF core that binutils'
//! `readelf` reads, with a register note per vCPU), bad requests on the
//! socket (one sentence each, status 2, nothing of the user's touched),
//! and a guest that reports a panic through pvpanic: `--dump-on-panic`
//! writes its memory with the VMCOREINFO note found in it, and pmemvm
//! ends with status 7. The guest kernel's own dumps, read by crash and
//! drgn, are proven in the nested tier (`nested_dump`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use pmemvm_tests::core_file::read_u64 as find_phys;
use pmemvm_tests::pmemvm::{pmemvm_bin, run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const LIMIT: Duration = Duration::from_secs(60);

use pmemvm_tests::gdb::boot_tiny as boot;

fn ctl(sock: &Path, args: &[&str]) -> pmemvm_tests::pmemvm::Output {
    let mut all = vec!["ctl", sock.to_str().expect("path")];
    all.extend_from_slice(args);
    run(&all, LIMIT)
}

/// The address of `symbol` in the tiny guest (identity-mapped: physical too).
fn symbol(kernel: &Path, symbol: &str) -> u64 {
    let out = Command::new("nm")
        .arg(kernel)
        .output()
        .expect("nm (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let addr = f.next()?;
            let name = f.nth(1)?;
            (name == symbol).then(|| u64::from_str_radix(addr, 16).ok())?
        })
        .unwrap_or_else(|| panic!("no {symbol} in {}", kernel.display()))
}

/// The 8 bytes at guest-physical `gpa` in an ELF core, by its PT_LOADs.
fn read_phys(core: &[u8], gpa: u64) -> u64 {
    find_phys(core, gpa).unwrap_or_else(|| panic!("no PT_LOAD holds {gpa:#x}"))
}

fn readelf_notes(core: &Path) -> String {
    let out = Command::new("readelf")
        .args(["-n", "-W"])
        .arg(core)
        .output()
        .expect("readelf (binutils)");
    assert!(
        out.status.success(),
        "readelf -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One raw request line on the socket, and the reply line.
fn raw(sock: &Path, line: &[u8]) -> String {
    let mut s = UnixStream::connect(sock).expect("connect");
    s.set_read_timeout(Some(LIMIT)).expect("timeout");
    s.write_all(line).expect("send");
    let mut reply = String::new();
    BufReader::new(&s).read_line(&mut reply).expect("reply");
    reply
}

#[test]
fn ctl_pauses_dumps_and_resumes_a_running_guest_and_refuses_bad_requests() {
    require!(kvm_available());
    let kernel = require!(guest("counting"));
    let counter = symbol(&kernel, "counter");
    let d = TempDir::new("api-dump");
    let sock = d.join("api.sock");
    let s = sock.display().to_string();
    let mut vm = boot(&kernel, &["--cpus", "2", "--api", &s]);
    assert!(
        vm.wait_for(&format!("control socket at {s}"), LIMIT),
        "{}",
        vm.output()
    );
    let mode = std::fs::metadata(&sock).expect("socket").permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600,
        "owner-only"
    );

    let v = ctl(&sock, &["version"]);
    assert_eq!(v.status, Some(0), "{}", v.dump());
    let version: serde_json::Value = serde_json::from_str(&v.stdout).expect("version is JSON");
    assert_eq!(version["protocol"], 1, "{}", v.stdout);
    assert_eq!(version["vcpus"], 2, "{}", v.stdout);

    let p = ctl(&sock, &["pause"]);
    assert_eq!(p.status, Some(0), "{}", p.dump());
    let (a, b, c) = (d.join("a.core"), d.join("b.core"), d.join("c.core"));
    for f in [&a, &b] {
        let o = ctl(&sock, &["dump", f.to_str().expect("path")]);
        assert_eq!(o.status, Some(0), "{}", o.dump());
        assert!(o.stdout.contains("2 vCPU(s)"), "{}", o.dump());
        assert!(
            o.stdout.contains("no VMCOREINFO"),
            "the tiny guest has none: {}",
            o.dump()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let (ca, cb) = (
        read_phys(&std::fs::read(&a).expect("a.core"), counter),
        read_phys(&std::fs::read(&b).expect("b.core"), counter),
    );
    assert!(ca > 0, "the guest counted before the pause");
    assert_eq!(ca, cb, "a paused guest's memory stands still");
    let st = ctl(&sock, &["stats"]);
    assert_eq!(st.status, Some(0), "{}", st.dump());
    let stats: serde_json::Value = serde_json::from_str(&st.stdout).expect("stats is JSON");
    assert_eq!(stats["paused"], true, "{}", st.stdout);
    assert!(
        stats["exits"]["interrupted"].as_u64().is_some(),
        "{}",
        st.stdout
    );

    assert_eq!(ctl(&sock, &["resume"]).status, Some(0));
    std::thread::sleep(Duration::from_millis(500));
    // A relative path is the caller's, made absolute by ctl.
    let rel = Command::new(pmemvm_bin())
        .current_dir(&d.0)
        .args(["ctl", &s, "dump", "c.core"])
        .output()
        .expect("ctl");
    assert!(
        rel.status.success(),
        "{}",
        String::from_utf8_lossy(&rel.stderr)
    );
    let cc = read_phys(&std::fs::read(&c).expect("c.core"), counter);
    assert!(cc > cb, "a resumed guest moves on: {cb} then {cc}");
    let notes = readelf_notes(&c);
    assert_eq!(
        notes.matches("NT_PRSTATUS").count(),
        2,
        "a register note per vCPU:\n{notes}"
    );

    // Bad requests: one sentence, status 2, the user's file untouched.
    let again = ctl(&sock, &["dump", a.to_str().expect("path")]);
    assert_eq!(again.status, Some(2), "{}", again.dump());
    assert!(
        again.stderr.contains("exists; pmemvm does not overwrite"),
        "{}",
        again.dump()
    );
    assert_eq!(read_phys(&std::fs::read(&a).expect("a.core"), counter), ca);
    let nodir = ctl(&sock, &["dump", "/nonexistent/dir/x.core"]);
    assert_eq!(nodir.status, Some(2), "{}", nodir.dump());
    assert!(
        nodir.stderr.contains("its directory does not exist"),
        "{}",
        nodir.dump()
    );
    let not_sock = ctl(&a, &["stats"]);
    assert_eq!(not_sock.status, Some(2), "{}", not_sock.dump());
    assert!(
        not_sock.stderr.contains("is not a control socket"),
        "{}",
        not_sock.dump()
    );
    for (line, says) in [
        (
            &b"{\"command\": \"pasue\"}\n"[..],
            "unknown command 'pasue'",
        ),
        (b"stats\n", "is not a JSON object"),
        (
            b"{\"command\":\"dump\",\"file\":\"x.core\"}\n",
            "not an absolute path",
        ),
        (
            b"{\"command\":\"stats\",\"verbose\":true}\n",
            "unknown field",
        ),
    ] {
        let r = raw(&sock, line);
        assert!(
            r.contains("\"ok\":false") && r.contains(says) && r.contains("\"usage\":true"),
            "{r}"
        );
    }
    let mut long = vec![b'x'; 100 << 10];
    long.push(b'\n');
    assert!(raw(&sock, &long).contains("longer than 65536 bytes"));
    // The guest ran on through all of it.
    let st = ctl(&sock, &["stats"]);
    assert_eq!(st.status, Some(0), "the VM still answers: {}", st.dump());

    let pid = libc::pid_t::try_from(vm.pid()).expect("pid");
    // SAFETY: kill sends a signal to the pmemvm child this test started.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let (status, out) = vm.finish(LIMIT);
    assert_eq!(status, Some(143), "{out}");
    assert!(!sock.exists(), "the socket goes with the VM");
    let gone = ctl(&sock, &["stats"]);
    assert_eq!(gone.status, Some(2), "{}", gone.dump());
}

#[test]
fn a_guest_panic_reported_through_pvpanic_is_dumped_and_ends_with_status_7() {
    require!(kvm_available());
    let kernel = require!(guest("panicker"));
    let d = TempDir::new("api-panic");
    let core = d.join("panic.core");
    let k = kernel.display().to_string();
    let c = core.display().to_string();
    let out = run(
        &[
            "boot",
            "--kernel",
            &k,
            "--cpus",
            "2",
            "--timeout",
            "60",
            "--dump-on-panic",
            &c,
        ],
        LIMIT,
    );
    assert_eq!(out.status, Some(7), "{}", out.dump());
    assert!(
        out.stderr.contains("the guest kernel panicked (vCPU"),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr.contains(&format!("are in {c}")),
        "{}",
        out.dump()
    );
    assert!(
        out.stderr.contains("kernel pmemvm-tiny-panicker"),
        "{}",
        out.dump()
    );
    let notes = readelf_notes(&core);
    assert!(notes.contains("VMCOREINFO"), "{notes}");
    assert_eq!(notes.matches("NT_PRSTATUS").count(), 2, "{notes}");
    let bytes = std::fs::read(&core).expect("core");
    let started = read_phys(&bytes, symbol(&kernel, "started"));
    assert!(
        (1..=2).contains(&started),
        "the guest's memory is in the dump: started={started}"
    );
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("OSRELEASE=pmemvm-tiny-panicker\nPAGESIZE=4096\n"));

    // Without --dump-on-panic the panic still ends the VM with status 7.
    let plain = run(&["boot", "--kernel", &k, "--timeout", "60"], LIMIT);
    assert_eq!(plain.status, Some(7), "{}", plain.dump());
    assert!(
        plain
            .stderr
            .contains("the guest kernel panicked (its pvpanic device said so"),
        "{}",
        plain.dump()
    );

    // An existing file is refused before the guest starts, and left as it was.
    let before = std::fs::read(&core).expect("core");
    let again = run(
        &[
            "boot",
            "--kernel",
            &k,
            "--timeout",
            "60",
            "--dump-on-panic",
            &c,
        ],
        LIMIT,
    );
    assert_eq!(again.status, Some(2), "{}", again.dump());
    assert!(
        again
            .stderr
            .contains("exists; pmemvm does not overwrite files"),
        "{}",
        again.dump()
    );
    assert_eq!(std::fs::read(&core).expect("core"), before);
    let taken = d.join("taken.sock");
    std::fs::write(&taken, b"mine").expect("write");
    let t = taken.display().to_string();
    let busy = run(
        &["boot", "--kernel", &k, "--timeout", "60", "--api", &t],
        LIMIT,
    );
    assert_eq!(busy.status, Some(2), "{}", busy.dump());
    assert!(busy.stderr.contains("the path exists"), "{}", busy.dump());
    assert_eq!(std::fs::read(&taken).expect("taken"), b"mine");
}

/// `dump FILE --nvdimms`: the DIMM's range is in the dump with the file's
/// bytes (a mark the host wrote at offset 4 KiB, at guest-physical 4 GiB +
/// 4 KiB); a plain dump has RAM only. One vCPU is enough here.
#[test]
fn a_dump_with_nvdimms_holds_the_dimms_range() {
    require!(kvm_available());
    let kernel = require!(guest("counting"));
    let d = TempDir::new("api-dump-nvdimms");
    let dimm = d.join("pm0.img");
    let mut data = vec![0u8; (16 << 20) + 4096];
    data[4096..4104].copy_from_slice(&0x5d1f_a11e_d00d_f00d_u64.to_le_bytes());
    std::fs::write(&dimm, &data).expect("DIMM file");
    let sock = d.join("api.sock");
    let s = sock.display().to_string();
    let spec = format!("16M,file={},label-size=0", dimm.display());
    let mut vm = boot(&kernel, &["--api", &s, "--nvdimm", &spec]);
    assert!(
        vm.wait_for(&format!("control socket at {s}"), LIMIT),
        "{}",
        vm.output()
    );
    let (plain, with) = (d.join("plain.core"), d.join("with.core"));
    let o = ctl(&sock, &["dump", plain.to_str().expect("path")]);
    assert_eq!(o.status, Some(0), "{}", o.dump());
    let o = ctl(&sock, &["dump", with.to_str().expect("path"), "--nvdimms"]);
    assert_eq!(o.status, Some(0), "{}", o.dump());
    assert!(o.stdout.contains("16 MiB of NVDIMMs"), "{}", o.dump());
    let at = (1u64 << 32) + 4096;
    assert_eq!(
        find_phys(&std::fs::read(&with).expect("with.core"), at),
        Some(0x5d1f_a11e_d00d_f00d)
    );
    assert_eq!(
        find_phys(&std::fs::read(&plain).expect("plain.core"), at),
        None
    );
}
