//! `pmemvm ctl SOCKET media inject|clear|list` and `health set|get` against a running guest on
//! this host's KVM (a tiny two-vCPU guest with a file-backed NVDIMM), as a
//! user types them: an injected range is in the DIMM's list at once, the
//! platform raised its event line (the control socket's `stats` counts it),
//! a clear takes it off, bad requests get one sentence and status 2 and
//! change nothing, and what the list held when the VM ended is in the
//! backing file (`pmemvm nvdimm badblocks FILE`, as `badblocks=` is). The
//! guest kernel's side (the GED's `_EVT`, Linux's scrub and badblocks, fio's
//! EIO) is proven in the nested tier (`nested_media_live`).

use std::path::Path;
use std::time::Duration;

use pmemvm_tests::gdb::boot_tiny as boot;
use pmemvm_tests::pmemvm::{run, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const LIMIT: Duration = Duration::from_secs(60);

fn ctl(sock: &Path, args: &[&str]) -> pmemvm_tests::pmemvm::Output {
    let mut all = vec!["ctl", sock.to_str().expect("path")];
    all.extend_from_slice(args);
    run(&all, LIMIT)
}

#[test]
fn media_inject_clear_and_list_while_the_guest_runs_and_the_list_outlives_the_vm() {
    require!(kvm_available());
    let kernel = require!(guest("counting"));
    let d = TempDir::new("api-media");
    let sock = d.join("api.sock");
    let dimm = d.join("dimm.img");
    let (s, f) = (sock.display().to_string(), dimm.display().to_string());
    let mut vm = boot(
        &kernel,
        &[
            "--cpus",
            "2",
            "--api",
            &s,
            "--nvdimm",
            &format!("64M,file={f}"),
        ],
    );
    assert!(
        vm.wait_for(&format!("control socket at {s}"), LIMIT),
        "{}",
        vm.output()
    );

    let inj = ctl(&sock, &["media", "inject", "0", "1M+4K"]);
    assert_eq!(inj.status, Some(0), "{}", inj.dump());
    assert!(
        inj.stdout
            .contains("DIMM 0: bad ranges now 1048576+4096; the guest was notified"),
        "{}",
        inj.dump()
    );
    let list = ctl(&sock, &["media", "list", "0"]);
    assert_eq!(list.status, Some(0), "{}", list.dump());
    let l: serde_json::Value = serde_json::from_str(&list.stdout).expect("list is JSON");
    assert_eq!(
        l["dimms"][0]["bad_ranges"],
        serde_json::json!([{"offset": 1_048_576, "length": 4096}]),
        "{}",
        list.stdout
    );
    let st = ctl(&sock, &["stats"]);
    let stats: serde_json::Value = serde_json::from_str(&st.stdout).expect("stats is JSON");
    assert_eq!(
        stats["platform_events"]["raised"], 1,
        "one interrupt on the GED's line: {}",
        st.stdout
    );

    // Bad requests: one sentence, status 2, the list unchanged.
    for (args, says) in [
        (
            &["media", "inject", "1", "0+512"][..],
            "DIMM 1 does not exist: this VM has one NVDIMM, DIMM 0",
        ),
        (
            &["media", "inject", "0", "63M+2M"],
            "ends beyond the 64M-byte region",
        ),
        (
            &["media", "clear", "0", "100+512"],
            "is not a multiple of 512",
        ),
        (
            &["media", "inject", "0", "lots"],
            "'lots' is not OFFSET+LEN",
        ),
    ] {
        let o = ctl(&sock, args);
        assert_eq!(o.status, Some(2), "{args:?}: {}", o.dump());
        assert!(o.stderr.contains(says), "{args:?}: {}", o.dump());
        assert_eq!(o.stderr.lines().count(), 1, "one sentence: {}", o.dump());
    }
    let again = ctl(&sock, &["media", "list"]);
    assert!(again.stdout.contains("1048576"), "{}", again.dump());

    let clr = ctl(&sock, &["media", "clear", "0", "1M+4K"]);
    assert_eq!(clr.status, Some(0), "{}", clr.dump());
    assert!(
        clr.stdout
            .contains("DIMM 0: 4096 bytes cleared; bad ranges now none"),
        "{}",
        clr.dump()
    );
    let last = ctl(&sock, &["media", "inject", "0", "2M+512"]);
    assert_eq!(last.status, Some(0), "{}", last.dump());

    // Health: set as an operator would, read back, refused when wrong.
    let h = ctl(
        &sock,
        &["health", "set", "0", "health=fatal", "temperature=90"],
    );
    assert_eq!(h.status, Some(0), "{}", h.dump());
    assert!(
        h.stdout
            .starts_with("DIMM 0: health fatal, media temperature 90.0 °C, spares 100 %; its device was notified"),
        "{}",
        h.dump()
    );
    let g = ctl(&sock, &["health", "get", "0"]);
    let now: serde_json::Value = serde_json::from_str(&g.stdout).expect("health get is JSON");
    assert_eq!(now["health"], "fatal", "{}", g.stdout);
    for (args, says) in [
        (
            &["health", "set", "0", "health=dead"][..],
            "health setting 'health=dead' is not valid; use health=ok|",
        ),
        (&["health", "get", "3"], "DIMM 3 does not exist"),
    ] {
        let o = ctl(&sock, args);
        assert_eq!(o.status, Some(2), "{args:?}: {}", o.dump());
        assert!(o.stderr.contains(says), "{args:?}: {}", o.dump());
    }
    let st = ctl(&sock, &["stats"]);
    let stats: serde_json::Value = serde_json::from_str(&st.stdout).expect("stats is JSON");
    assert_eq!(
        stats["platform_events"]["raised"], 3,
        "two injections and a health change: {}",
        st.stdout
    );

    let pid = libc::pid_t::try_from(vm.pid()).expect("pid");
    // SAFETY: kill sends a signal to the pmemvm child this test started.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let (status, out) = vm.finish(LIMIT);
    assert_eq!(status, Some(143), "{out}");
    let kept = run(&["nvdimm", "badblocks", &f], LIMIT);
    assert_eq!(kept.status, Some(0), "{}", kept.dump());
    assert!(
        kept.stdout.contains(", 1 bad range,") && kept.stdout.contains("\n2097152+512\n"),
        "the injected range is in the file: {}",
        kept.dump()
    );
    assert!(
        !kept.stdout.contains("1048576+"),
        "the cleared one is not: {}",
        kept.dump()
    );
}

/// A pseudo-terminal pair: the controller, and the device's path (open
/// while the returned device fd is).
fn pty(
) -> Result<(std::fs::File, std::path::PathBuf, std::os::fd::OwnedFd), pmemvm_tests::skip::Skip> {
    use std::os::fd::AsRawFd;
    let (main, sub) = pmemvm_tests::terminal::openpty()?;
    let path =
        std::fs::read_link(format!("/proc/self/fd/{}", sub.as_raw_fd())).expect("the pty's path");
    Ok((std::fs::File::from(main), path, sub))
}

/// `--api` naming a serial device (here a pty; under `--engine nested` the L1's
/// serial port that QEMU connects to the user's socket): the protocol is spoken
/// on it directly, raw, request line by reply line, and the device is left in
/// place at the end.
#[test]
fn the_control_protocol_is_spoken_on_a_serial_device_named_by_api() {
    use std::io::{BufRead, Write};
    require!(kvm_available());
    let kernel = require!(guest("counting"));
    let d = TempDir::new("api-serial");
    let dimm = d.join("dimm.img");
    let (mut main, tty, _sub) = require!(pty());
    let t = tty.display().to_string();
    let mut vm = boot(
        &kernel,
        &[
            "--api",
            &t,
            "--nvdimm",
            &format!("64M,file={}", dimm.display()),
        ],
    );
    assert!(
        vm.wait_for(&format!("control socket at {t}"), LIMIT),
        "{}",
        vm.output()
    );
    let mut reader = std::io::BufReader::new(main.try_clone().expect("clone"));
    let mut ask = |line: &str| {
        main.write_all(line.as_bytes()).expect("write a request");
        let mut reply = String::new();
        reader.read_line(&mut reply).expect("read a reply");
        serde_json::from_str::<serde_json::Value>(&reply)
            .unwrap_or_else(|e| panic!("{e}: {reply:?}"))
    };
    let v = ask("{\"command\":\"version\",\"id\":1}\n");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["id"], 1, "{v}");
    assert_eq!(v["result"]["protocol"], 1, "{v}");
    let m = ask("{\"command\":\"media\",\"action\":\"inject\",\"dimm\":0,\"range\":\"1M+4K\"}\n");
    assert_eq!(m["ok"], true, "{m}");
    let bad = ask("{\"command\":\"pasue\"}\n");
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(
        bad["error"]
            .as_str()
            .unwrap_or("")
            .contains("unknown command 'pasue'"),
        "{bad}"
    );
    let pid = libc::pid_t::try_from(vm.pid()).expect("pid");
    // SAFETY: kill sends a signal to the pmemvm child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let (status, out) = vm.finish(LIMIT);
    assert_eq!(status, Some(143), "{out}");
    assert!(tty.exists(), "the serial device is not removed");
    let kept = run(&["nvdimm", "badblocks", &dimm.display().to_string()], LIMIT);
    assert!(kept.stdout.contains("\n1048576+4096\n"), "{}", kept.dump());
}
