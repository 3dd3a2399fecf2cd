//! `pmemvm ctl SOCKET nvdimm add SPEC` against a running guest on this host's
//! KVM (a tiny two-vCPU guest, one file-backed NVDIMM, `--nvdimm-slots 3`),
//! as a user types it: the new DIMM's file is made as `--nvdimm` makes one,
//! the platform raises its event line (0x80 on the NVDIMM root device), the
//! new DIMM is in `stats` and `media list` and takes `media inject`, the
//! slots run out with one sentence, removal is refused, a bad spec changes
//! nothing, and the DIMM's file holds its media state after the VM ends. The
//! guest kernel's side (Linux reads `_FIT`, adds the region, `ndctl
//! create-namespace` on it, bytes in the file) is proven in the nested tier
//! (`nested_hotplug`).

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

fn json(out: &pmemvm_tests::pmemvm::Output) -> serde_json::Value {
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.dump()))
}

#[test]
fn nvdimm_add_fills_the_empty_slots_and_the_new_dimm_is_one_like_the_others() {
    require!(kvm_available());
    let kernel = require!(guest("counting"));
    let d = TempDir::new("api-hotplug");
    let sock = d.join("api.sock");
    let (first, added) = (d.join("first.img"), d.join("added dimm.img"));
    let s = sock.display().to_string();
    let mut vm = boot(
        &kernel,
        &[
            "--cpus",
            "2",
            "--api",
            &s,
            "--nvdimm",
            &format!("64M,file={}", first.display()),
            "--nvdimm-slots",
            "3",
        ],
    );
    assert!(
        vm.wait_for(&format!("control socket at {s}"), LIMIT),
        "{}",
        vm.output()
    );

    // A relative file= is the client's: made absolute before it is sent.
    let rel = pmemvm_tests::pmemvm::run_cmd(
        std::process::Command::new(pmemvm_tests::pmemvm::pmemvm_bin())
            .current_dir(d.join("."))
            .args([
                "ctl",
                &s,
                "nvdimm",
                "add",
                "32M,file=added dimm.img,label-size=256K",
            ]),
        LIMIT,
    );
    assert_eq!(rel.status, Some(0), "{}", rel.dump());
    assert!(
        rel.stdout
            .starts_with("DIMM 1 hot-added: 33554432 bytes at 0x")
            && rel
                .stdout
                .contains("2 of 3 slots used; the guest was notified (0x80"),
        "{}",
        rel.dump()
    );
    // The file as --nvdimm makes it: region, label area, identity page.
    let len = std::fs::metadata(&added)
        .expect("the new DIMM's file")
        .len();
    assert_eq!(len, (32 << 20) + (256 << 10) + 4096);

    let st = json(&ctl(&sock, &["stats"]));
    let dimms = st["nvdimms"].as_array().expect("nvdimms");
    assert_eq!(dimms.len(), 2, "{st:#}");
    assert!(
        dimms[1]["file"]
            .as_str()
            .unwrap_or("")
            .ends_with("added dimm.img"),
        "{st:#}"
    );
    assert_eq!(dimms[1]["size"], 32 << 20);
    let (b0, b1) = (
        dimms[0]["base"].as_u64().unwrap_or(0),
        dimms[1]["base"].as_u64().unwrap_or(0),
    );
    assert!(
        b1 >= b0 + (64 << 20) && b1 % (1 << 30) == 0,
        "above the first DIMM, on a 1 GiB boundary: {st:#}"
    );
    assert_eq!(st["platform_events"]["raised"], 1, "{st:#}");

    // The new DIMM is DIMM 1 for the other commands.
    let inj = ctl(&sock, &["media", "inject", "1", "1M+4K"]);
    assert_eq!(inj.status, Some(0), "{}", inj.dump());
    let list = json(&ctl(&sock, &["media", "list"]));
    assert_eq!(list["dimms"].as_array().map(Vec::len), Some(2), "{list:#}");
    let h = ctl(&sock, &["health", "get", "1"]);
    assert_eq!(h.status, Some(0), "{}", h.dump());

    // Refusals: one sentence, status 2, nothing added.
    for (args, says) in [
        (&["nvdimm", "add", "3M"][..], "is not a multiple of 16 MiB"),
        (
            &["nvdimm", "add", "16M,record=/tmp/rec"],
            "a hot-added NVDIMM cannot have record=",
        ),
        (
            &["nvdimm", "add", "16M,mce=on"],
            "a hot-added NVDIMM cannot have mce=on",
        ),
        (&["nvdimm", "remove", "0"], "removing NVDIMM 0 is refused"),
    ] {
        let o = ctl(&sock, args);
        assert_eq!(o.status, Some(2), "{args:?}: {}", o.dump());
        assert!(o.stderr.contains(says), "{args:?}: {}", o.dump());
        assert_eq!(o.stderr.lines().count(), 1, "one sentence: {}", o.dump());
    }
    let third = ctl(&sock, &["nvdimm", "add", "16M"]);
    assert_eq!(third.status, Some(0), "{}", third.dump());
    assert!(
        third.stdout.contains("3 of 3 slots used"),
        "{}",
        third.dump()
    );
    let full = ctl(&sock, &["nvdimm", "add", "16M"]);
    assert_eq!(full.status, Some(2), "{}", full.dump());
    assert!(
        full.stderr
            .contains("this VM has no free NVDIMM slot (3 in all, each holding a DIMM)"),
        "{}",
        full.dump()
    );
    let st = json(&ctl(&sock, &["stats"]));
    assert_eq!(st["nvdimms"].as_array().map(Vec::len), Some(3), "{st:#}");
    assert_eq!(
        st["platform_events"]["raised"], 3,
        "two adds, one injection: {st:#}"
    );

    let pid = libc::pid_t::try_from(vm.pid()).expect("pid");
    // SAFETY: kill sends a signal to the pmemvm child this test started.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let (status, out) = vm.finish(LIMIT);
    assert_eq!(status, Some(143), "{out}");
    // The hot-added DIMM ended as the boot DIMMs do: its media state is in its file.
    let kept = run(
        &["nvdimm", "badblocks", added.to_str().expect("path")],
        LIMIT,
    );
    assert_eq!(kept.status, Some(0), "{}", kept.dump());
    assert!(
        kept.stdout.contains("\n1048576+4096\n"),
        "the injected range is in the file: {}",
        kept.dump()
    );
}

#[test]
fn without_empty_slots_nvdimm_add_says_how_to_get_them() {
    require!(kvm_available());
    let kernel = require!(guest("counting"));
    let d = TempDir::new("api-hotplug-none");
    let sock = d.join("api.sock");
    let s = sock.display().to_string();
    let mut vm = boot(&kernel, &["--api", &s, "--nvdimm", "64M"]);
    assert!(
        vm.wait_for(&format!("control socket at {s}"), LIMIT),
        "{}",
        vm.output()
    );
    let o = ctl(&sock, &["nvdimm", "add", "16M"]);
    assert_eq!(o.status, Some(2), "{}", o.dump());
    assert!(
        o.stderr.contains("start it with --nvdimm-slots N"),
        "{}",
        o.dump()
    );
    let pid = libc::pid_t::try_from(vm.pid()).expect("pid");
    // SAFETY: kill sends a signal to the pmemvm child this test started.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let (status, out) = vm.finish(LIMIT);
    assert_eq!(status, Some(143), "{out}");
}
