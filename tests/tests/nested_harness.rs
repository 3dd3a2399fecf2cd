//! Tests of the end-to-end harness itself (tier 5 infrastructure): a command
//! runs on a machine with a real KVM — an L1 VM under QEMU TCG with emulated
//! SVM here, the host itself on hardware-virtualization hosts — and its exit
//! status, output and files come back. Each test skips with `SKIP: <reason>`
//! when QEMU, the Debian kernel package or KVM is unavailable.

use std::fs;
use std::time::Duration;

use pmemvm_tests::nested::{Mode, NestedError, NestedVm, RUN_MARKER};
use pmemvm_tests::require;

/// The test helper binary that drives /dev/kvm (tests/l1/kvm_probe.rs).
const KVM_PROBE: &str = env!("CARGO_BIN_EXE_pmemvm-kvm-probe");

#[test]
fn exit_status_and_output_reach_the_host() {
    let vm = require!(NestedVm::new()).deadline(Duration::from_secs(120));
    let out = vm
        .run(&["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7"])
        .expect("run a command");
    assert_eq!(out.status, 7, "{}", out.dump());
    assert_eq!(out.stdout, "to-stdout\n", "{}", out.dump());
    assert_eq!(out.stderr, "to-stderr\n", "{}", out.dump());
    if out.mode == Mode::Nested {
        assert!(
            out.l1_console.contains("PMEMVM-L1-STATUS 7"),
            "{}",
            out.dump()
        );
        eprintln!(
            "nested/TCG: L1 {} ran the command {:.2} s after its kernel started; round trip {:.1?}",
            out.l1_kernel.as_deref().unwrap_or("?"),
            out.l1_uptime_at_run.unwrap_or(f64::NAN),
            out.elapsed
        );
    }

    let out = vm.run(&["true"]).expect("run true");
    assert_eq!(out.status, 0, "{}", out.dump());
}

#[test]
fn kvm_runs_guest_code() {
    let vm = require!(NestedVm::new())
        .deadline(Duration::from_secs(120))
        .binary("pmemvm-kvm-probe", KVM_PROBE);
    let script = if vm.mode() == Mode::Nested {
        // kvm-amd on QEMU's emulated SVM, with nested paging.
        "test -c /dev/kvm && test -d /sys/module/kvm_amd && \
         echo nested=$(cat /sys/module/kvm_amd/parameters/nested) && \
         echo npt=$(cat /sys/module/kvm_amd/parameters/npt) && pmemvm-kvm-probe"
    } else {
        "test -c /dev/kvm && pmemvm-kvm-probe"
    };
    let out = vm.run(&["sh", "-c", script]).expect("run the KVM probe");
    assert_eq!(out.status, 0, "{}", out.dump());
    assert!(
        out.stdout.contains("kvm-probe: api=12 out=0x42 hlt=ok"),
        "{}",
        out.dump()
    );
    if out.mode == Mode::Nested {
        assert!(out.stdout.contains("npt=Y"), "{}", out.dump());
    }
}

#[test]
fn files_travel_both_ways_through_the_share() {
    let vm = require!(NestedVm::new())
        .deadline(Duration::from_secs(120))
        .bytes("in/greeting.txt", "hello from the host\n");
    let out = vm
        .run(&[
            "sh",
            "-c",
            "set -e; tr a-z A-Z < in/greeting.txt > shout.txt; \
             head -c 1048576 /dev/zero | tr '\\000' 'Z' > big.bin; mkdir -p out; \
             echo \"$(pwd)\" > out/cwd.txt",
        ])
        .expect("run a command writing files");
    assert_eq!(out.status, 0, "{}", out.dump());
    let shout = fs::read_to_string(out.path("shout.txt")).expect("shout.txt on the host");
    assert_eq!(shout, "HELLO FROM THE HOST\n");
    let big = fs::read(out.path("big.bin")).expect("big.bin on the host");
    assert_eq!(big.len(), 1 << 20);
    assert!(big.iter().all(|&b| b == b'Z'));
    let cwd = fs::read_to_string(out.path("out/cwd.txt")).expect("cwd.txt on the host");
    if out.mode == Mode::Nested {
        assert_eq!(cwd, "/share\n");
    }
}

#[test]
fn hung_command_is_killed_at_the_deadline() {
    let deadline = Duration::from_secs(30);
    let vm = require!(NestedVm::new()).deadline(deadline);
    let mode = vm.mode();
    let err = vm
        .run(&["sh", "-c", "echo going to hang >&2; sleep 100000"])
        .expect_err("a hung command must not return a status");
    let NestedError::Deadline {
        console,
        run_dir,
        killed_after,
        ..
    } = &err
    else {
        panic!("expected a deadline error, got: {err}");
    };
    assert!(
        *killed_after >= deadline && *killed_after < deadline + Duration::from_secs(5),
        "killed after {killed_after:?}"
    );
    let message = err.to_string();
    assert!(message.contains("did not finish within 30s"), "{message}");
    if mode == Mode::Nested {
        // The console shows how far L1 got: it was running the command.
        assert!(console.contains(RUN_MARKER), "{message}");
        assert!(message.contains(RUN_MARKER), "{message}");
        // And QEMU's monitor said where the L1's vCPU was before the kill.
        assert!(
            message
                .contains("where the L1's vCPUs were before the kill (QEMU's monitor): CPU#0 RIP="),
            "{message}"
        );
    } else {
        assert!(console.contains("going to hang"), "{message}");
    }
    let _ = fs::remove_dir_all(run_dir);
}

// ---- pmemvm boots the project's guest image (tier 5 proper) -------------
//
// These need the pmemvm binary (target/{release,debug}/pmemvm or
// PMEMVM_BIN) and the guest image (guest-images/out or PMEMVM_IMAGE_DIR);
// they skip with a reason until both exist.

use lab::guest::guest_job::{append_to_initrd, parse_channel, GuestJob};

/// A fio job that touches no device: the tests below are about boot, exit
/// status and the NVDIMM, which `setup.sh` exercises before fio runs.
const NULL_FIO_JOB: &str = "[null]\nioengine=null\nsize=1M\nbs=4k\nrw=write\n";

/// Everything a `pmemvm boot` of the guest image needs, in the share.
struct GuestRun {
    vm: NestedVm,
    kernel_name: &'static str,
}

/// Prepares a run of the guest image with `setup` as the job's setup.sh.
fn guest_run(setup: &str) -> Result<GuestRun, NestedError> {
    let vm = NestedVm::new()?.with_pmemvm()?;
    let (kernel_name, kernel) = match pmemvm_tests::nested::guest_image("bzImage") {
        Ok(k) => ("bzImage", k),
        Err(skip) => (
            "vmlinux",
            pmemvm_tests::nested::guest_image("vmlinux")
                .map_err(|_| NestedError::Unavailable(skip))?,
        ),
    };
    let initrd =
        pmemvm_tests::nested::guest_image("initramfs.cpio.gz").map_err(NestedError::Unavailable)?;
    let base = fs::read(&initrd).expect("read the guest initramfs");
    let job = GuestJob {
        fio_job: NULL_FIO_JOB.to_string(),
        setup: Some(setup.to_string()),
        args: None,
        ..GuestJob::default()
    }
    .archive()
    .expect("build the job archive");
    let vm = vm
        .deadline(Duration::from_secs(400))
        .file(kernel_name, kernel)
        .bytes("initrd.img", append_to_initrd(&base, &job));
    Ok(GuestRun { vm, kernel_name })
}

impl GuestRun {
    /// `pmemvm boot` with one 64 MiB NVDIMM backed by `pm0.img` in the share.
    fn boot(&self) -> pmemvm_tests::nested::RunOutput {
        let out = self
            .vm
            .run(&[
                "pmemvm",
                "boot",
                "--kernel",
                self.kernel_name,
                "--initrd",
                "initrd.img",
                "--memory",
                "512M",
                "--nvdimm",
                "64M,file=pm0.img,label-size=0",
                "--console-log",
                "console.txt",
                "--channel",
                "channel.bin",
            ])
            .expect("run pmemvm in the harness");
        let console = fs::read_to_string(out.path("console.txt")).unwrap_or_default();
        eprintln!(
            "{}: pmemvm exited {} after {:.1?} (L1 ran it {:.2} s after boot); guest console:\n{}",
            out.mode,
            out.status,
            out.elapsed,
            out.l1_uptime_at_run.unwrap_or(f64::NAN),
            pmemvm_tests::nested::tail(&console, 25)
        );
        out
    }
}

#[test]
fn guest_boots_and_its_pmem_writes_reach_the_backing_file() {
    // A marker that cannot be in the file by accident (time-dependent).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let pattern = format!("PMEMVM-E2E-PATTERN-{nanos:x}-");
    let pattern = pattern.repeat(4096 / pattern.len() + 1)[..4096].to_string();
    let setup = format!(
        "test -b /dev/pmem0\n\
         echo \"guest user space: $(uname -r)\"\n\
         printf '%s' '{pattern}' > /tmp/pattern\n\
         dd if=/tmp/pattern of=/dev/pmem0 bs=4096 seek=3 count=1 conv=fsync\n\
         sync\n"
    );
    let run = require!(guest_run(&setup));
    let out = run.boot();
    let console = fs::read_to_string(out.path("console.txt")).unwrap_or_default();
    assert!(
        console.contains("pmemvm-init: up after"),
        "the guest did not reach user space\n{}\nguest console:\n{}",
        out.dump(),
        pmemvm_tests::nested::tail(&console, 60)
    );
    assert_eq!(
        out.status,
        0,
        "{}\nguest console:\n{}",
        out.dump(),
        pmemvm_tests::nested::tail(&console, 60)
    );
    let channel = fs::read(out.path("channel.bin")).expect("channel file on the host");
    let report = parse_channel(&channel).expect("parse the guest channel");
    assert_eq!(report.status, Some(0), "{}", out.dump());

    let backing = fs::read(out.path("pm0.img")).expect("backing file on the host");
    // The 64 MiB region, the 128 KiB label area and pmemvm's identity page.
    assert_eq!(
        backing.len(),
        (64 << 20) + 4096,
        "label-less: the region, then the identity page"
    );
    let found = backing
        .windows(pattern.len())
        .step_by(512)
        .position(|w| w == pattern.as_bytes());
    assert!(
        found.is_some(),
        "the pattern the guest wrote to /dev/pmem0 is not in the host backing file\n{}",
        out.dump()
    );
}

#[test]
fn guest_exit_status_reaches_the_host() {
    let run = require!(guest_run("echo failing on purpose\nexit 42\n"));
    let out = run.boot();
    assert_eq!(out.status, 42, "{}", out.dump());
    let channel = fs::read(out.path("channel.bin")).expect("channel file on the host");
    let report = parse_channel(&channel).expect("parse the guest channel");
    assert_eq!(report.status, Some(42), "{}", out.dump());
}

// ---- pmemvm boots Debian's stock kernel (independent of guest-images/) ---

#[test]
fn stock_kernel_boots_under_pmemvm_and_writes_pmem() {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let l1 = require!(vm.stock_kernel());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let token = format!("PMEMVM-STOCK-{nanos:x}");
    let cmdline = format!(
        "console=ttyS0 reboot=acpi panic=-1 quiet pmemvm_l2_exit=42 pmemvm_l2_pattern={token}"
    );
    let out = vm
        .deadline(Duration::from_secs(400))
        .file("vmlinuz", &l1.vmlinuz)
        .file("initrd.gz", &l1.l2_initramfs)
        .run(&[
            "pmemvm",
            "boot",
            "--kernel",
            "vmlinuz",
            "--initrd",
            "initrd.gz",
            "--memory",
            "512M",
            "--nvdimm",
            "64M,file=pm0.img,label-size=0",
            "--cmdline",
            &cmdline,
            "--console-log",
            "console.txt",
        ])
        .expect("run pmemvm in the harness");
    let console = fs::read_to_string(out.path("console.txt")).unwrap_or_default();
    let context = format!(
        "{}\nguest console (last lines):\n{}",
        out.dump(),
        pmemvm_tests::nested::tail(&console, 40)
    );
    assert!(
        console.contains("PMEMVM-L2-USERSPACE"),
        "no user space\n{context}"
    );
    assert!(console.contains("PMEMVM-L2-PATTERN written"), "{context}");
    // The guest chose 42; pmemvm passes the guest-exit byte through.
    assert_eq!(out.status, 42, "{context}");
    let expected: Vec<u8> = token.bytes().cycle().take(4096).collect();
    let backing = fs::read(out.path("pm0.img")).expect("backing file on the host");
    assert_eq!(backing.len(), (64 << 20) + 4096, "{context}");
    let at = backing
        .windows(expected.len())
        .step_by(512)
        .position(|w| w == expected.as_slice())
        .map(|i| i * 512);
    assert!(at.is_some(), "pattern not in the backing file\n{context}");
    let l2_uptime = console
        .lines()
        .find(|l| l.contains("PMEMVM-L2-USERSPACE"))
        .and_then(|l| l.split("uptime=").nth(1))
        .unwrap_or("?");
    eprintln!(
        "{}: stock kernel guest reached user space {l2_uptime} s after its start, exited 42; \
         {:.1?} total (L1 ran pmemvm {:.2} s after boot); pattern at backing offset {:#x}",
        out.mode,
        out.elapsed,
        out.l1_uptime_at_run.unwrap_or(f64::NAN),
        at.unwrap_or(0)
    );
}

#[test]
fn fio_verify_runs_in_the_guest_image_under_pmemvm_run() {
    let vm = require!(NestedVm::new().and_then(NestedVm::with_pmemvm));
    let (kernel_name, kernel) = match pmemvm_tests::nested::guest_image("bzImage") {
        Ok(k) => ("bzImage", k),
        Err(skip) => (
            "vmlinux",
            require!(pmemvm_tests::nested::guest_image("vmlinux").map_err(|_| skip)),
        ),
    };
    let initrd = require!(pmemvm_tests::nested::guest_image("initramfs.cpio.gz"));
    let job = pmemvm_tests::nested::workspace_root().join("guest-images/jobs/verify.fio");
    let out = vm
        .deadline(Duration::from_secs(500))
        .file(kernel_name, kernel)
        .file("initramfs.cpio.gz", initrd)
        .file("verify.fio", job)
        .run(&[
            "pmemvm",
            "run",
            "--kernel",
            kernel_name,
            "--initrd",
            "initramfs.cpio.gz",
            "--nvdimm",
            "128M,file=pm0.img,label-size=0",
            "--fio",
            "verify.fio",
            "--json",
            "result.json",
        ])
        .expect("run pmemvm in the harness");
    eprintln!(
        "{}: pmemvm run (64 MiB io_uring write+verify) exited {} after {:.1?}",
        out.mode, out.status, out.elapsed
    );
    assert_eq!(out.status, 0, "{}", out.dump());
    let text = fs::read_to_string(out.path("result.json")).expect("result.json on the host");
    let result: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(result["status"], 0, "{text}");
    let job = &result["fio"]["jobs"][0];
    assert_eq!(job["error"], 0, "{text}");
    assert_eq!(job["write"]["io_bytes"], 64 << 20, "{text}");
    assert!(
        job["read"]["io_bytes"].as_u64().unwrap_or(0) > 0,
        "no verify reads: {text}"
    );
    if out.mode == Mode::Nested {
        assert_eq!(result["functional_only"], true, "{text}");
    }
    let backing = fs::read(out.path("pm0.img")).expect("backing file on the host");
    assert!(
        backing[..64 << 20].iter().any(|&b| b != 0),
        "fio's blocks are not in the backing file"
    );
}
