//! The host side of the backing files: a full host file system stops the VM
//! and names the file, `prealloc` on a too-small file system refuses and
//! leaves nothing, and two pmemvm processes on one file are refused while a
//! stale lock does not block (see tests/src/durable.rs for the harness).

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::Stdio;

use pmemvm_tests::durable::*;
use pmemvm_tests::mounts::{Mounted, SetupError};
use pmemvm_tests::pmemvm::TempDir;
use pmemvm_tests::require;

// ---- A full host file system -----------------------------------------------

/// A size-limited tmpfs mounted for one test, unmounted on drop (before its
/// directory is removed: fields drop in order).
struct SmallTmpfs {
    _mount: Mounted,
    dir: TempDir,
}

impl SmallTmpfs {
    fn mount(name: &str, size: &str) -> Result<Self, SetupError> {
        let dir = TempDir::new(name);
        let mount = Mounted::new(&dir.0, "tmpfs", &format!("size={size}"))?;
        Ok(Self { _mount: mount, dir })
    }

    fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

#[test]
fn full_host_file_system_stops_the_vm_and_names_the_file() {
    let g = require!(durable_guest());
    let fs = require!(SmallTmpfs::mount("fullfs", "8m"));
    let file = fs.join("pm-full.img");
    // 64 MiB sparse file on 8 MiB: one word in every 4 KiB page of the DIMM.
    let mut p = Params::new(End::PowerOff, 0xf011);
    p.len = 64 * MIB - DATA_OFFSET;
    p.stride = 4096;
    prepare_file(&file, 64 * MIB, 0, &p);
    let args: Vec<String> = vec![
        "boot".into(),
        "--kernel".into(),
        g,
        "--nvdimm".into(),
        format!("64M,file={},label-size=0", file.display()),
    ];
    let out = Running::start(&args, &fs.dir.0, Stdio::null(), None).finish();
    assert_eq!(out.status, Some(6), "{}", out.dump());
    assert!(
        out.stderr.contains(&file.display().to_string()),
        "file not named:\n{}",
        out.dump()
    );
    assert!(
        out.stderr.contains("full"),
        "reason not given:\n{}",
        out.dump()
    );
    assert!(
        !out.stdout.contains("pattern written"),
        "the guest went on:\n{}",
        out.dump()
    );
    let got = std::fs::read(&file).expect("reading the backing file");
    let holds_word = |o: u64| {
        let i = usize::try_from(o).expect("offset");
        got[i..i + 4] == p.word(o)
    };
    // A host kernel with KVM_CAP_MEMORY_FAULT_INFO (Linux 6.8+, e.g. this
    // workplace's) says which guest address failed, and pmemvm names the
    // NVDIMM offset; an older one (Debian 12's 6.1, the nested L1's) returns a
    // plain EFAULT, and pmemvm names the file and its free space only.
    let fault_info = kvm_ioctls::Kvm::new().is_ok_and(|k| {
        k.check_extension_raw(libc::c_ulong::from(kvm_bindings::KVM_CAP_MEMORY_FAULT_INFO)) > 0
    });
    let failed_at = if fault_info {
        out.stderr
            .split("NVDIMM offset 0x")
            .nth(1)
            .and_then(|s| s.split(|c: char| !c.is_ascii_hexdigit()).next())
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .expect("the message gives the failing DIMM offset")
    } else {
        assert!(
            out.stderr.contains("could not access guest memory"),
            "{}",
            out.dump()
        );
        // The guest writes its pages in order: the first without its word is
        // where it stopped, and none after it may hold one.
        let first_missing = (0..)
            .map(|n| p.offset + n * p.stride)
            .take_while(|&o| o < 64 * MIB)
            .find(|&o| !holds_word(o))
            .expect("the guest cannot have written every page of a 64 MiB DIMM on 8 MiB");
        let mut o = first_missing;
        while o < 64 * MIB {
            assert!(
                !holds_word(o),
                "page at {o:#x} written after the guest stopped at {first_missing:#x}"
            );
            o += p.stride;
        }
        first_missing
    };
    assert!(
        failed_at > DATA_OFFSET && failed_at < 64 * MIB,
        "{failed_at:#x}"
    );
    // Every page the guest wrote before the failing one holds its word.
    let mut lost = 0u64;
    let mut o = p.offset;
    while o < failed_at {
        if !holds_word(o) {
            lost += 4;
        }
        o += p.stride;
    }
    eprintln!(
        "DURABILITY: full tmpfs: stopped at DIMM offset {failed_at:#x}, {} pages written before checked, bytes lost {lost}",
        (failed_at - p.offset) / p.stride
    );
    assert_eq!(lost, 0, "{}", out.dump());
}

#[test]
fn prealloc_on_a_small_file_system_refuses_and_leaves_nothing() {
    let g = require!(durable_guest());
    let fs = require!(SmallTmpfs::mount("prealloc", "8m"));
    let file = fs.join("pm-prealloc.img");
    let out = Running::start(
        &[
            "boot".into(),
            "--kernel".into(),
            g,
            "--nvdimm".into(),
            format!("64M,file={},prealloc", file.display()),
        ],
        &fs.dir.0,
        Stdio::null(),
        None,
    )
    .finish();
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr.contains(&file.display().to_string()),
        "{}",
        out.dump()
    );
    assert!(out.stderr.contains("preallocated"), "{}", out.dump());
    assert!(out.stderr.contains("No space left"), "{}", out.dump());
    assert!(
        listing(&fs.dir.0).is_empty(),
        "left behind: {:?}",
        listing(&fs.dir.0)
    );
}

// ---- Two processes, one file -------------------------------------------------

#[test]
fn second_pmemvm_on_the_same_file_is_refused_and_stale_locks_do_not_block() {
    let g = require!(durable_guest());
    let dir = TempDir::new("lock");
    let file = dir.join("shared.img");
    let p = Params {
        len: 64 << 10,
        ..Params::new(End::HaltForever, 0x1111)
    };
    prepare_file(&file, 16 * MIB, LABELS, &p);
    let spec = format!("16M,file={}", file.display());
    let args = |end: &str| -> Vec<String> {
        vec![
            "boot".into(),
            "--kernel".into(),
            g.clone(),
            "--nvdimm".into(),
            end.into(),
        ]
    };
    let mut first = Running::start(&args(&spec), &dir.0, Stdio::null(), None);
    assert!(first.wait_for("pattern written"), "first VM did not start");
    let snapshot = std::fs::read(&file).expect("read");
    for variant in [spec.clone(), format!("{spec},readonly")] {
        let second = Running::start(&args(&variant), &dir.0, Stdio::null(), None).finish();
        assert_eq!(second.status, Some(2), "{variant}: {}", second.dump());
        assert!(
            second.stderr.contains(&file.display().to_string()),
            "{}",
            second.dump()
        );
        assert!(second.stderr.contains("in use"), "{}", second.dump());
        assert_eq!(
            std::fs::read(&file).expect("read"),
            snapshot,
            "the refused run changed the file"
        );
    }
    first.signal(libc::SIGTERM);
    assert_eq!(first.finish().status, Some(143));

    // A SIGKILLed holder: its lock goes with it.
    let mut killed = Running::start(&args(&spec), &dir.0, Stdio::null(), None);
    assert!(killed.wait_for("pattern written"), "VM did not start");
    killed.signal(libc::SIGKILL);
    assert_eq!(killed.finish().signal, Some(libc::SIGKILL));
    let p2 = Params {
        len: 64 << 10,
        ..Params::new(End::PowerOff, 0x2222)
    };
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .and_then(|f| f.write_all_at(&p2.block(), 0))
        .expect("new parameter block");
    let next = Running::start(&args(&spec), &dir.0, Stdio::null(), None).finish();
    assert_eq!(
        next.status,
        Some(0),
        "a stale lock blocked the next run: {}",
        next.dump()
    );
    check_file(
        "after-stale-lock",
        &file,
        &p2.expected(16 * MIB, LABELS, u64::MAX),
        &next.dump(),
    );
}
