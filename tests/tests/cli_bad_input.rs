//! Malformed command lines: every invocation in the table must end with exit
//! status 2, one clear error line naming the bad value, no panic or
//! backtrace, and nothing created or modified in a scratch directory (which
//! is also the working directory and `$TMPDIR` of the run).
//!
//! Cases that get past argument parsing need a usable /dev/kvm (pmemvm opens
//! it before it looks at kernels and files) and the tiny guests; without them
//! those cases are skipped with a reason and the rest still run. The test
//! prints a `CLI:` line with the number of invocations tried and panics seen
//! (docs/robustness.md quotes it; run with `--nocapture`).

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use pmemvm_tests::pmemvm::{pmemvm_bin, run_cmd, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

#[path = "support/cli_cases.rs"]
mod cli_cases;
use cli_cases::*;

/// Files the cases refer to, created before the first snapshot.
fn populate(d: &Path) {
    std::fs::create_dir(d.join("adir")).expect("adir");
    std::fs::create_dir(d.join("recfull")).expect("recfull");
    std::fs::write(d.join("recfull/mine"), b"keep").expect("recfull/mine");
    std::fs::create_dir(d.join("tmp")).expect("tmp");
    std::fs::write(d.join("notelf"), b"this is no kernel\n").expect("notelf");
    std::fs::write(d.join("empty"), b"").expect("empty");
    // An ELF header that linux-loader rejects (big-endian class byte missing).
    let mut bad = b"\x7fELF".to_vec();
    bad.resize(64, 0);
    std::fs::write(d.join("badelf"), bad).expect("badelf");
    std::fs::write(d.join("highelf"), elf_loaded_at(0x200_0000)).expect("highelf");
    // The same ELF cut inside its segment: the file is at fault, not --memory.
    let mut cut = elf_loaded_at(0x10_0000);
    cut.truncate(0x1008);
    std::fs::write(d.join("cutelf"), cut).expect("cutelf");
    // A bzImage header (boot protocol 2.15) without XLF_KERNEL_64.
    let mut bz = vec![0u8; 0x1000];
    bz[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
    bz[0x202..0x206].copy_from_slice(b"HdrS");
    bz[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    std::fs::write(d.join("bz32"), bz.clone()).expect("bz32");
    // A bzImage header whose kernel_version string names release 6.1.99-test, and module
    // trees for --modules: of that release, without modules.dep, of another release.
    bz[0x20e..0x210].copy_from_slice(&0x300u16.to_le_bytes());
    bz[0x500..0x512].copy_from_slice(b"6.1.99-test (t) #1");
    std::fs::write(d.join("bzmod"), bz).expect("bzmod");
    for (tree, dep) in [
        ("mods/lib/modules/6.1.99-test", true),
        ("nodep/lib/modules/6.1.99-test", false),
        ("othermods/lib/modules/6.1.0-other", true),
    ] {
        std::fs::create_dir_all(d.join(tree).join("kernel")).expect("module tree");
        if dep {
            std::fs::write(d.join(tree).join("modules.dep"), b"").expect("modules.dep");
        }
    }
    std::fs::write(d.join("small.img"), vec![0x5a; 4096]).expect("small.img");
    // A backing file of pmemvm 0.1's layout for --nvdimm 16M: exactly 16 MiB.
    std::fs::write(d.join("old.img"), vec![0x6b; 16 << 20]).expect("old.img");
    let sized = std::fs::File::create(d.join("sized.img")).expect("sized.img");
    sized.set_len(4 << 20).expect("sizing");
    std::fs::hard_link(d.join("sized.img"), d.join("link.img")).expect("hard link");
    let ro = std::fs::File::create(d.join("ro.img")).expect("ro.img");
    ro.set_len((16 << 20) + (128 << 10) + 4096).expect("sizing"); // --nvdimm 16M
                                                                  // Longer than --pmem-legacy 16M needs (pmemvm never truncates it).
    let e820 = std::fs::File::create(d.join("e820-32m.img")).expect("e820-32m.img");
    e820.set_len(32 << 20).expect("sizing");
    let big = std::fs::File::create(d.join("big.initrd")).expect("big.initrd");
    big.set_len(32 << 20).expect("sizing");
    std::fs::write(d.join("job.fio"), b"[job]\nrw=read\nsize=1M\n").expect("job.fio");
    std::fs::write(d.join("out.json"), b"{\"keep\": true}\n").expect("out.json");
}

/// A minimal x86-64 ELF executable with one 16-byte PT_LOAD at `paddr`.
fn elf_loaded_at(paddr: u64) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(b"\x7fELF\x02\x01\x01\x00");
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    v.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&paddr.to_le_bytes()); // entry
    v.extend_from_slice(&64u64.to_le_bytes()); // phoff
    v.extend_from_slice(&0u64.to_le_bytes()); // shoff
    v.extend_from_slice(&0u32.to_le_bytes());
    for h in [64u16, 56, 1, 0, 0, 0] {
        v.extend_from_slice(&h.to_le_bytes());
    }
    v.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    v.extend_from_slice(&5u32.to_le_bytes()); // R+X
    for q in [0x1000u64, paddr, paddr, 16, 16, 0x1000] {
        v.extend_from_slice(&q.to_le_bytes());
    }
    v.resize(0x1000, 0);
    v.extend_from_slice(&[0xf4; 16]); // hlt
    v
}

/// Listing, sizes, mtimes and content hashes (ctimes for files over 1 MiB)
/// of everything under `dir`.
/// A directory's own mtime is left out: `pmemvm run` makes and removes a
/// scratch directory in `$TMPDIR`, which touches only that; anything left
/// behind still shows as a new entry.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, Option<SystemTime>, u64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(md) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let mut h = DefaultHasher::new();
            if md.is_file() && md.len() <= 1 << 20 {
                std::fs::read(&p).unwrap_or_default().hash(&mut h);
            } else if md.is_file() {
                // Large (sparse) files: any write changes the ctime, which
                // nobody can set back.
                (md.ino(), md.ctime(), md.ctime_nsec()).hash(&mut h);
            } else if md.is_dir() {
                stack.push(p.clone());
            }
            let mtime = if md.is_dir() {
                None
            } else {
                md.modified().ok()
            };
            out.insert(p, (md.len(), mtime, h.finish()));
        }
    }
    out
}

/// Makes `path` unwritable even for root: `chattr +i`, else a read-only bind
/// mount. Undone on drop.
struct ReadOnlyFile {
    path: PathBuf,
    how: &'static str,
}

impl ReadOnlyFile {
    fn new(path: &Path) -> Result<Self, String> {
        let ok = |c: &mut Command| c.output().is_ok_and(|o| o.status.success());
        if ok(Command::new("chattr").arg("+i").arg(path)) {
            return Ok(Self {
                path: path.into(),
                how: "chattr",
            });
        }
        if ok(Command::new("mount").arg("--bind").arg(path).arg(path)) {
            if ok(Command::new("mount")
                .args(["-o", "remount,bind,ro"])
                .arg(path))
            {
                return Ok(Self {
                    path: path.into(),
                    how: "mount",
                });
            }
            let _ = Command::new("umount").arg(path).status();
        }
        Err(
            "neither chattr +i nor a read-only bind mount works here (root bypasses chmod 444)"
                .into(),
        )
    }
}

impl Drop for ReadOnlyFile {
    fn drop(&mut self) {
        let _ = match self.how {
            "chattr" => Command::new("chattr").arg("-i").arg(&self.path).status(),
            _ => Command::new("umount").arg(&self.path).status(),
        };
    }
}

#[test]
fn malformed_invocations_are_refused_cleanly() {
    let scratch = TempDir::new("cli-bad");
    let d = scratch.0.clone();
    populate(&d);
    let dstr = d.display().to_string();
    let kvm_skip = kvm_available().err().map(|s| s.to_string());
    let kernel = guest("hello").map(|p| p.display().to_string());
    let long = "a".repeat(5000);
    let _ro = match ReadOnlyFile::new(&d.join("ro.img")) {
        Ok(r) => Some(r),
        Err(why) => {
            pmemvm_tests::skip::skip(&format!("read-only backing file case: {why}"));
            None
        }
    };
    let mut before = snapshot(&d);
    let (mut tried, mut skipped, mut panics) = (0u32, 0u32, 0u32);
    let mut failures = Vec::new();
    for c in cases() {
        let needs_kernel = c.args.contains(&"{K}");
        let skip = match c.needs {
            Needs::Kvm => kvm_skip.clone(),
            Needs::ReadOnlyFile => kvm_skip.clone().or_else(|| {
                _ro.is_none()
                    .then(|| "no way to make a read-only file".into())
            }),
            Needs::Nothing => None,
        }
        .or_else(|| {
            (needs_kernel && c.needs != Needs::Nothing)
                .then(|| kernel.as_ref().err().map(ToString::to_string))
                .flatten()
        });
        if let Some(why) = skip {
            pmemvm_tests::skip::skip(&format!("{:?}: {why}", c.args));
            skipped += 1;
            continue;
        }
        let k = kernel
            .clone()
            .unwrap_or_else(|_| "/nonexistent-kernel".into());
        let subst = |s: &str| {
            s.replace("{D}", &dstr)
                .replace("{K}", &k)
                .replace("{LONG}", &long)
        };
        let mut args: Vec<String> = c.args.iter().map(|a| subst(a)).collect();
        // "--nvdimm=16M*300": 300 temporary DIMMs.
        if let Some(i) = args.iter().position(|a| a == "--nvdimm=16M*300") {
            args.splice(
                i..=i,
                (0..300).flat_map(|_| ["--nvdimm".to_string(), "16M".to_string()]),
            );
        }
        let names = subst(c.names);
        tried += 1;
        let out = run_cmd(
            Command::new(pmemvm_bin())
                .args(&args)
                .current_dir(&d)
                .env("TMPDIR", d.join("tmp"))
                .env_remove("RUST_BACKTRACE"),
            DEADLINE,
        );
        let err = &out.stderr;
        if err.contains("panicked")
            || err.contains("RUST_BACKTRACE")
            || err.contains("stack backtrace")
        {
            panics += 1;
        }
        let error_lines = err
            .lines()
            .filter(|l| l.starts_with("error:") || l.starts_with("pmemvm: error:"))
            .count();
        let cause_lines = err
            .lines()
            .filter(|l| l.trim_start().starts_with("1:"))
            .count();
        let mut problems = Vec::new();
        if out.status != Some(2) {
            problems.push(format!("status {:?}, not 2", out.status));
        }
        if !err.contains(&names) {
            problems.push(format!("stderr does not name {names:?}"));
        }
        if error_lines != 1
            || cause_lines > 1
            || err.lines().filter(|l| !l.trim().is_empty()).count() > 4
        {
            problems.push(format!(
                "not a single clear error line ({error_lines} error lines)"
            ));
        }
        let after = snapshot(&d);
        if after != before {
            let changed: Vec<_> = after
                .iter()
                .filter(|(p, v)| before.get(*p) != Some(v))
                .map(|(p, _)| p.display().to_string())
                .chain(
                    before
                        .keys()
                        .filter(|p| !after.contains_key(*p))
                        .map(|p| p.display().to_string()),
                )
                .collect();
            problems.push(format!("files created or changed: {changed:?}"));
        }
        if !problems.is_empty() {
            failures.push(format!("{args:?}: {}\n{}", problems.join("; "), out.dump()));
            // Later cases compare against a clean directory again.
            for p in snapshot(&d).keys().filter(|p| !before.contains_key(*p)) {
                let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
            }
            before = snapshot(&d);
        }
    }
    eprintln!(
        "CLI: {tried} malformed invocations tried, {skipped} skipped, {panics} panics, {} failed",
        failures.len()
    );
    assert!(
        tried + skipped >= 40,
        "the table must hold at least 40 invocations"
    );
    assert!(
        failures.is_empty(),
        "{} invocations misbehaved:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// `run --kernel LINUX` without `--initrd` takes the guest image's initramfs
/// (its /init runs the job); with no image it is refused up front, naming the
/// kernel and the way out, instead of booting a kernel that cannot run the job.
#[test]
fn run_with_a_linux_kernel_and_no_initrd_needs_the_image() {
    let dir = TempDir::new("no-initrd");
    populate(&dir.0);
    let before = snapshot(&dir.0);
    let out = run_cmd(
        Command::new(pmemvm_bin())
            .current_dir(&dir.0)
            .env("PMEMVM_IMAGE_DIR", dir.0.join("no-image"))
            .args([
                "run", "--kernel", "bz32", "--fio", "job.fio", "--engine", "qemu",
            ]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr.contains("--kernel bz32 without --initrd")
            && out.stderr.contains("guest-images/build.sh"),
        "{}",
        out.dump()
    );
    assert_eq!(snapshot(&dir.0), before, "files changed:\n{}", out.dump());
}

/// Every command that falls back on the guest image says, when it is not there, what it was
/// needed for and how to get it: one sentence, status 2, nothing changed (one resolver,
/// `lab::guest::guest_job::image_for`).
#[test]
fn a_missing_guest_image_is_one_sentence_naming_what_it_was_for() {
    let dir = TempDir::new("no-image");
    populate(&dir.0);
    let before = snapshot(&dir.0);
    for (args, says) in [
        (
            &["boot"][..],
            "no --kernel given and the default guest image is not available",
        ),
        (
            &["run", "--fio", "job.fio", "--engine", "qemu"][..],
            "no --kernel given and the default guest image is not available",
        ),
    ] {
        let out = run_cmd(
            Command::new(pmemvm_bin())
                .current_dir(&dir.0)
                .env("PMEMVM_IMAGE_DIR", dir.0.join("no-image"))
                .args(args),
            Duration::from_secs(30),
        );
        assert_eq!(out.status, Some(2), "{args:?}\n{}", out.dump());
        let errors: Vec<&str> = out.stderr.lines().filter(|l| l.contains("error")).collect();
        assert_eq!(errors.len(), 1, "{args:?}\n{}", out.dump());
        assert!(
            errors[0].contains(says)
                && errors[0].contains("build the image with guest-images/build.sh"),
            "{args:?}\n{}",
            out.dump()
        );
        assert_eq!(snapshot(&dir.0), before, "files changed:\n{}", out.dump());
    }
}

/// The `./pmemvm` wrapper checks the Rust toolchain before it builds anything: no cargo or
/// rustc on PATH, or a rustc older than Cargo.toml's `rust-version` (Debian 12's is 1.63), is
/// one sentence saying how to get one, and status 2.
#[test]
fn the_wrapper_wants_rust_at_the_manifests_rust_version() {
    let root = pmemvm_tests::pmemvm::workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let min = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("rust-version in Cargo.toml");
    let wrapper = |path: &Path| {
        let mut cmd = Command::new(root.join("pmemvm"));
        cmd.args(["bench", "pmem-nowait"])
            .current_dir(&root)
            .env("PATH", path);
        run_cmd(&mut cmd, Duration::from_secs(30))
    };
    let dir = TempDir::new("wrapper-rust");
    let no_rust = pmemvm_tests::pmemvm::path_without(&dir.0, &["cargo", "rustc"]);
    let out = wrapper(&no_rust);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr
            .contains(&format!("building pmemvm needs Rust {min} or newer")),
        "{}",
        out.dump()
    );
    assert!(out.stderr.contains("rustup"), "{}", out.dump());
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.dump());
    // A rustc that says it is Debian 12's.
    for (name, text) in [
        (
            "rustc",
            "#!/bin/sh\necho 'rustc 1.63.0 (4b91a6ea7 2022-08-08)'\n",
        ),
        ("cargo", "#!/bin/sh\necho cargo must not run >&2\nexit 1\n"),
    ] {
        let p = no_rust.join(name);
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, text).expect("fake tool");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let out = wrapper(&no_rust);
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(
        out.stderr
            .contains(&format!("rustc 1.63.0 is older than {min}")),
        "{}",
        out.dump()
    );
    assert!(!out.stderr.contains("cargo must not run"), "{}", out.dump());
}

/// `pmemvm preflight run` (what `./pmemvm` asks before it installs QEMU or builds the image)
/// refuses an option the engine the run resolves to cannot honour, as `run` would after the
/// install and build: one sentence, status 2, no needs printed. `--engine qemu` resolves to
/// QEMU on every host kind; on a host whose KVM cannot run Linux (PVM here, or none),
/// `--engine auto` does too.
/// Preflight creates nothing: `--rootfs debian` with a package list no run has built
/// yet is checked (the list's spelling, the build script) but not built — no
/// mmdebstrap, no image in `guest-images/out/rootfs` — and a misspelt list is one
/// sentence, status 2.
#[test]
fn preflight_run_with_rootfs_debian_builds_nothing() {
    let rootfs_dir = pmemvm_tests::pmemvm::workspace_root().join("guest-images/out/rootfs");
    let listing = || -> Vec<String> {
        std::fs::read_dir(&rootfs_dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let before = listing();
    let packages = format!(
        "hostname,sed,pmemvm-never-built-{}",
        std::process::id() % 1000
    );
    let mut cmd = Command::new(pmemvm_bin());
    cmd.args([
        "preflight",
        "run",
        "--engine",
        "qemu",
        "--rootfs",
        "debian",
        "--packages",
        &packages,
        "--",
        "true",
    ]);
    let started = std::time::Instant::now();
    let out = run_cmd(&mut cmd, Duration::from_secs(30));
    assert_eq!(out.status, Some(0), "{}", out.dump());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "preflight took {:?}: did it build?",
        started.elapsed()
    );
    assert_eq!(listing(), before, "preflight created a root file system");
    let mut cmd = Command::new(pmemvm_bin());
    cmd.args([
        "preflight",
        "run",
        "--engine",
        "qemu",
        "--rootfs",
        "debian",
        "--packages",
        "py thon",
        "--",
        "true",
    ]);
    let out = run_cmd(&mut cmd, Duration::from_secs(30));
    assert_eq!(out.status, Some(2), "{}", out.dump());
    assert!(out.stderr.contains("'py thon'"), "{}", out.dump());
    assert_eq!(listing(), before);
}

#[test]
fn preflight_run_refuses_what_the_resolved_engine_cannot_honour() {
    let dir = TempDir::new("preflight-run-qemu");
    let job = dir.join("job.fio");
    std::fs::write(&job, "[x]\nioengine=null\nsize=1M\n").unwrap();
    let job = job.to_str().unwrap();
    let auto_is_qemu = !matches!(
        pmemvm_tests::host_kind::HostKind::detect(),
        Ok(pmemvm_tests::host_kind::HostKind::Hardware)
    );
    let cases: [(&[&str], &str); 3] = [
        (&["--pin", "0"], "--pin"),
        (&["--host-node", "0"], "--host-node"),
        (&["--memory", "64M,thp"], "--memory SIZE,hugepages/thp"),
    ];
    for (extra, option) in cases {
        let mut engines = vec!["qemu"];
        if auto_is_qemu {
            engines.push("auto");
        }
        for engine in engines {
            let mut args = vec!["preflight", "run", "--engine", engine, "--fio", job];
            args.extend_from_slice(extra);
            let mut cmd = Command::new(pmemvm_bin());
            cmd.args(&args);
            let out = run_cmd(&mut cmd, Duration::from_secs(30));
            assert_eq!(out.status, Some(2), "{args:?}\n{}", out.dump());
            assert!(
                out.stderr.contains(&format!(
                    "{option} applies to --engine pmemvm only (QEMU places its guest itself)"
                )),
                "{args:?}\n{}",
                out.dump()
            );
            assert_eq!(out.stderr.lines().count(), 1, "{}", out.dump());
            assert!(
                out.stdout.trim().is_empty(),
                "needs printed: {}",
                out.dump()
            );
        }
    }
}

/// `guest-images/build.sh --check-space` (what `./pmemvm` runs before it installs anything
/// when the command needs the image): on a cold machine (no image in `--out`, no stage in
/// the cache) whose build directory's file system is too small, one sentence and status 2,
/// nothing created; with a stage cached it passes.
#[test]
fn a_cold_image_build_without_space_is_refused_before_any_install() {
    let dir = TempDir::new("image-space");
    let small = require!(pmemvm_tests::mounts::Mounted::new(
        &dir.join("small"),
        "tmpfs",
        "size=16M"
    ));
    let cache = dir.join("cache");
    let out = dir.join("out");
    let work = small.0.join("work");
    let check = || {
        let mut cmd =
            Command::new(pmemvm_tests::pmemvm::workspace_root().join("guest-images/build.sh"));
        cmd.args(["--check-space", "--out", out.to_str().unwrap()])
            .env("PMEMVM_IMAGE_WORK", &work)
            .env("PMEMVM_IMAGE_CACHE", &cache);
        run_cmd(&mut cmd, Duration::from_secs(30))
    };
    let r = check();
    assert_eq!(r.status, Some(2), "{}", r.dump());
    assert!(
        r.stderr
            .contains("building the guest image needs about 3072 MiB free in")
            && r.stderr.contains("which has 16 MiB"),
        "{}",
        r.dump()
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.dump());
    for p in [&cache, &out, &work] {
        assert!(!p.exists(), "--check-space created {}", p.display());
    }
    std::fs::create_dir_all(cache.join("kernel-0123456789abcdef")).unwrap();
    let r = check();
    assert_eq!(r.status, Some(0), "{}", r.dump());
}

#[test]
fn a_busy_gdb_port_is_refused_before_the_guest_starts_on_every_engine() {
    let kernel = require!(guest("hello"));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let port = taken.local_addr().expect("its address").port();
    let addr = format!("127.0.0.1:{port}");
    for (command, engine) in [
        ("boot", "pmemvm"),
        ("boot", "nested"),
        ("run", "pmemvm"),
        ("run", "qemu"),
        ("run", "nested"),
    ] {
        let mut cmd = Command::new(pmemvm_bin());
        cmd.args([command, "--engine", engine, "--kernel"])
            .arg(&kernel)
            .args(["--gdb", &addr]);
        if command == "run" {
            cmd.args(["--", "true"]);
        }
        let out = run_cmd(&mut cmd, DEADLINE);
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert_eq!(out.status, Some(2), "{engine}: {}", out.stderr);
        assert_eq!(lines.len(), 1, "{engine}: one sentence: {}", out.stderr);
        assert!(
            lines[0].contains(&format!("--gdb {addr}: cannot listen there")),
            "{engine}: {}",
            out.stderr
        );
        assert!(
            !out.stdout.contains("hello"),
            "{engine}: the guest did not start"
        );
    }
}
