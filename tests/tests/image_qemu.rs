// test-queue: tcg
//! The guest image (`guest-images/build.sh`) under QEMU TCG with QEMU's own
//! NVDIMM: it boots, finds `/dev/pmem0`, runs fio jobs delivered as an
//! appended cpio archive, returns fio's JSON on COM2 and leaves through the
//! guest-exit port 0x501 with the job's status.
//!
//! QEMU's `isa-debug-exit` device sits on port 0x501 like pmemvm's exit port;
//! it ends QEMU with status `(byte << 1) | 1`, which the tests check too.
//!
//! Skips (with `SKIP:` on stderr) when QEMU or the built image is missing.

use pmemvm_tests::pmemvm::TempDir;
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use lab::guest::guest_job::{self, GuestJob, GuestReport, ImageDir};
use lab::guest::qemu::{opt_escape, QemuAccel, QemuCommand, QemuMachine};
use std::os::unix::process::CommandExt;
use vmm::config::NvdimmSpec;

/// Each boot must finish within this.
const BOOT_DEADLINE: Duration = Duration::from_secs(60);
/// Size of the NVDIMM backing file (mkfs.xfs needs more than 300 MB: see the XFS test).
const NVDIMM_SIZE_MIB: u64 = 128;

/// `guest-images/` of this source tree.
fn guest_images_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-images")
}

struct Boot {
    console: String,
    channel: Vec<u8>,
    /// QEMU's exit status (`None`: killed at the deadline).
    qemu_status: Option<i32>,
    elapsed: Duration,
    _dir: TempDir,
}

impl Boot {
    fn report(&self) -> GuestReport {
        match guest_job::parse_channel(&self.channel) {
            Ok(report) => report,
            Err(err) => panic!("bad COM2 stream: {err}\n{}", self.dump()),
        }
    }

    fn dump(&self) -> String {
        format!(
            "qemu status {:?} after {:.1} s\n----- console (COM1) -----\n{}\n----- COM2 ({} bytes) -----\n{}\n",
            self.qemu_status,
            self.elapsed.as_secs_f64(),
            self.console,
            self.channel.len(),
            String::from_utf8_lossy(&self.channel[..self.channel.len().min(4096)])
        )
    }

    fn file(&self, name: &str) -> String {
        match self.report().files.get(name) {
            Some(data) => String::from_utf8_lossy(data).into_owned(),
            None => panic!("the guest sent no {name}\n{}", self.dump()),
        }
    }
}

/// QEMU and the built image, or why the test is skipped.
fn requirements() -> Result<(PathBuf, ImageDir), Skip> {
    let qemu = pmemvm_tests::nested::find_qemu()?;
    let image = pmemvm_tests::image::image_dir()?;
    Ok((qemu, image))
}

fn wait_with_deadline(child: &mut Child, deadline: Duration) -> Option<i32> {
    pmemvm_tests::process::wait_with_deadline(child, deadline)
        .expect("wait for QEMU")
        .and_then(|s| s.code())
}

/// Boots the image under QEMU TCG with one NVDIMM and `job` appended to the initrd.
fn boot(name: &str, qemu: &Path, image: &ImageDir, cmdline_extra: &str, job: &GuestJob) -> Boot {
    boot_with_nvdimm(name, qemu, image, cmdline_extra, job, NVDIMM_SIZE_MIB)
}

/// [`boot`] with an NVDIMM of `nvdimm_mib` MiB.
fn boot_with_nvdimm(
    name: &str,
    qemu: &Path,
    image: &ImageDir,
    cmdline_extra: &str,
    job: &GuestJob,
    nvdimm_mib: u64,
) -> Boot {
    let dir = TempDir::new(name);
    let base = std::fs::read(&image.initramfs).expect("read initramfs");
    let archive = job.archive().expect("job archive");
    let initrd = dir.0.join("initrd");
    std::fs::write(&initrd, guest_job::append_to_initrd(&base, &archive)).expect("write initrd");
    let nvdimm = dir.0.join("nvdimm.img");
    let file = std::fs::File::create(&nvdimm).expect("create nvdimm file");
    file.set_len(nvdimm_mib << 20).expect("size nvdimm file");
    let console = dir.0.join("console.log");
    let com2 = dir.0.join("com2.log");
    let append = format!("console=ttyS0 panic=-1 {cmdline_extra}");

    // The product's own QEMU command (the peer engine), as `pmemvm run --engine qemu` builds it.
    let spec: NvdimmSpec = format!("{nvdimm_mib}M,label-size=0")
        .parse()
        .expect("NVDIMM spec");
    let machine = QemuMachine {
        qemu,
        accel: QemuAccel::Tcg,
        cpus: 1,
        memory: 512 << 20,
        kernel: &image.bz_image,
        initrd: Some(&initrd),
        cmdline: &append,
        nvdimms: vec![(&spec, nvdimm.clone())],
        disks: &[],
        console: &console,
        channel: &com2,
        cxl: Vec::new(),
    };
    let mut cmd = machine.command();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .process_group(0);
    let mut tcg = pmemvm_tests::tcg::lock().expect("take the TCG lock");
    tcg.note_console(&console);
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn qemu");
    let qemu_status = wait_with_deadline(&mut child, BOOT_DEADLINE);
    let elapsed = start.elapsed();
    drop(tcg);
    let console =
        String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned();
    let channel = std::fs::read(&com2).unwrap_or_default();
    let boot = Boot {
        console,
        channel,
        qemu_status,
        elapsed,
        _dir: dir,
    };
    eprintln!(
        "{name}: QEMU TCG boot + job took {:.1} s",
        boot.elapsed.as_secs_f64()
    );
    assert!(
        boot.qemu_status.is_some(),
        "QEMU did not finish within {BOOT_DEADLINE:?}\n{}",
        boot.dump()
    );
    boot
}

/// `isa-debug-exit` turns the byte written to port 0x501 into this exit status.
fn debug_exit_status(byte: u8) -> Option<i32> {
    Some((i32::from(byte) << 1) | 1)
}

fn fio_json(boot: &Boot) -> serde_json::Value {
    let text = boot.file("fio.json");
    match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(err) => panic!("fio.json is not JSON ({err})\n{}", boot.dump()),
    }
}

const VERIFY_JOB: &str = "\
[global]
filename=/dev/pmem0
direct=1
bs=4k
size=32m
verify=crc32c
do_verify=1
verify_fatal=1

[uring-randwrite-verify]
ioengine=io_uring
iodepth=8
rw=randwrite

[libaio-write-verify]
stonewall
ioengine=libaio
iodepth=4
rw=write
offset=64m

; preadv2(RWF_NOWAIT) with O_DIRECT only works when the pmem queue has
; QUEUE_FLAG_NOWAIT (patched nd_pmem, nowait=1); else the I/O fails with EOPNOTSUPP.
[pvsync2-rwf-nowait]
stonewall
ioengine=pvsync2
nowait=1
rw=read
size=1m
verify=0
do_verify=0
";

/// The pvsync2/RWF_NOWAIT probe alone (see [`VERIFY_JOB`]).
const RWF_NOWAIT_JOB: &str = "\
[pvsync2-rwf-nowait]
filename=/dev/pmem0
direct=1
ioengine=pvsync2
nowait=1
bs=4k
rw=read
size=1m
";

/// Linux's EOPNOTSUPP, as fio reports it in `jobs[].error`.
const EOPNOTSUPP: i64 = 95;

const NOWAIT_SETUP: &str = "\
cat /sys/module/nd_pmem/parameters/nowait > \"$PMEMVM_OUT/nd_pmem.nowait\"
cat /sys/module/bcache/parameters/bch_nowait > \"$PMEMVM_OUT/bcache.bch_nowait\"
ls /dev > \"$PMEMVM_OUT/dev.txt\"
";

#[test]
fn fio_verify_job_on_pmem_reports_json_over_com2() {
    let (qemu, image) = require!(requirements());
    let job = GuestJob {
        fio_job: VERIFY_JOB.into(),
        setup: Some(NOWAIT_SETUP.into()),
        args: None,
        ..GuestJob::default()
    };
    // nd_pmem.nowait=1 is V2's behaviour (flag always set); the parameters default to off (V1).
    let boot = boot(
        "verify",
        &qemu,
        &image,
        "nd_pmem.nowait=1 bcache.bch_nowait=1",
        &job,
    );
    let report = boot.report();
    assert_eq!(report.status, Some(0), "{}", boot.dump());
    assert_eq!(
        boot.qemu_status,
        debug_exit_status(0),
        "exit port not used\n{}",
        boot.dump()
    );
    assert!(boot.console.contains("found /dev/pmem0"), "{}", boot.dump());
    assert!(
        boot.file("dev.txt").lines().any(|l| l == "pmem0"),
        "{}",
        boot.dump()
    );
    assert_eq!(boot.file("nd_pmem.nowait").trim(), "Y", "{}", boot.dump());
    assert_eq!(
        boot.file("bcache.bch_nowait").trim(),
        "Y",
        "{}",
        boot.dump()
    );

    let json = fio_json(&boot);
    let jobs = json["jobs"].as_array().expect("fio jobs array");
    assert_eq!(jobs.len(), 3, "{json}");
    for (job, engine) in jobs
        .iter()
        .zip(["uring-randwrite-verify", "libaio-write-verify"])
    {
        assert_eq!(job["jobname"], engine);
        assert_eq!(job["error"], 0, "{engine}: {job}");
        // Everything written was read back and verified.
        assert_eq!(job["write"]["io_bytes"], 32 << 20, "{engine}: {job}");
        assert_eq!(job["read"]["io_bytes"], 32 << 20, "{engine}: {job}");
    }
    assert!(
        json["fio version"]
            .as_str()
            .unwrap_or_default()
            .starts_with("fio-3.33"),
        "{json}"
    );
}

#[test]
fn nd_pmem_nowait_defaults_to_off_as_in_v1() {
    let (qemu, image) = require!(requirements());
    let job = GuestJob {
        fio_job: RWF_NOWAIT_JOB.into(),
        setup: Some(NOWAIT_SETUP.into()),
        args: None,
        ..GuestJob::default()
    };
    // No parameter on the command line: V1's default, QUEUE_FLAG_NOWAIT off.
    let boot = boot("nowait-off", &qemu, &image, "", &job);
    assert_eq!(boot.file("nd_pmem.nowait").trim(), "N", "{}", boot.dump());
    assert_eq!(
        boot.file("bcache.bch_nowait").trim(),
        "N",
        "{}",
        boot.dump()
    );
    assert!(boot.console.contains("nowait = N"), "{}", boot.dump());
    // Without QUEUE_FLAG_NOWAIT the stock behaviour is back: RWF_NOWAIT is refused.
    let json = fio_json(&boot);
    assert_eq!(json["jobs"][0]["error"], EOPNOTSUPP, "{json}");
    assert!(
        boot.file("fio.stderr").contains("Operation not supported"),
        "{}",
        boot.dump()
    );
    let status = boot.report().status.expect("a status line");
    assert_ne!(status, 0, "{}", boot.dump());
    assert_eq!(
        boot.qemu_status,
        debug_exit_status(status),
        "{}",
        boot.dump()
    );
}

#[test]
fn xfs_dax_and_bcache_tools_work_in_the_guest() {
    let (qemu, image) = require!(requirements());
    let setup = std::fs::read_to_string(guest_images_dir().join("jobs/xfs-dax.setup.sh"))
        .expect("read xfs-dax.setup.sh");
    let setup = format!(
        "{setup}
grep ' /mnt/pmem ' /proc/mounts > \"$PMEMVM_OUT/mounts\"
dd if=/dev/zero of=/tmp/backing.img bs=1M count=64 2>/dev/null
losetup /dev/loop0 /tmp/backing.img
make-bcache -B /dev/loop0
echo /dev/loop0 > /sys/fs/bcache/register
for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /sys/block/bcache0 ] && break; sleep 0.2; done
ls /sys/block > \"$PMEMVM_OUT/blocks\"
"
    );
    let job = GuestJob {
        fio_job: "[xfs-dax-write-verify]\ndirectory=/mnt/pmem\nioengine=psync\nbs=64k\nsize=16m\nrw=write\nverify=crc32c\n"
            .into(),
        setup: Some(setup),
        args: None,
        ..GuestJob::default()
    };
    let boot = boot_with_nvdimm("xfs-dax", &qemu, &image, "", &job, 512);
    assert_eq!(boot.report().status, Some(0), "{}", boot.dump());
    let mounts = boot.file("mounts");
    assert!(
        mounts.contains("xfs") && mounts.contains("dax=always"),
        "{mounts}"
    );
    assert!(
        boot.file("blocks").lines().any(|l| l == "bcache0"),
        "{}",
        boot.dump()
    );
    let json = fio_json(&boot);
    assert_eq!(json["jobs"][0]["error"], 0, "{json}");
    assert_eq!(json["jobs"][0]["write"]["io_bytes"], 16 << 20, "{json}");
}

#[test]
fn failing_fio_job_reports_non_zero_status() {
    let (qemu, image) = require!(requirements());
    // fio refuses an unknown I/O engine and exits with status 1.
    let job = GuestJob {
        fio_job: "[bad]\nfilename=/dev/pmem0\nioengine=no-such-engine\nrw=read\nsize=1m\n".into(),
        setup: None,
        args: None,
        ..GuestJob::default()
    };
    let boot = boot("fio-fails", &qemu, &image, "", &job);
    let report = boot.report();
    let status = report.status.expect("a status line");
    assert_ne!(status, 0, "{}", boot.dump());
    assert_eq!(
        boot.qemu_status,
        debug_exit_status(status),
        "{}",
        boot.dump()
    );
    assert!(report.files.contains_key("fio.stderr"), "{}", boot.dump());
}

#[test]
fn failing_setup_skips_fio_and_reports_its_status_and_log() {
    let (qemu, image) = require!(requirements());
    let job = GuestJob {
        fio_job: "[never]\nfilename=/dev/pmem0\nrw=read\nsize=1m\n".into(),
        setup: Some("echo preparing the disk\necho this went wrong >&2\nexit 7\n".into()),
        args: None,
        ..GuestJob::default()
    };
    let boot = boot("setup-fails", &qemu, &image, "", &job);
    let report = boot.report();
    assert_eq!(report.status, Some(7), "{}", boot.dump());
    assert_eq!(boot.qemu_status, debug_exit_status(7), "{}", boot.dump());
    let log = boot.file("setup.log");
    assert!(
        log.contains("preparing the disk") && log.contains("this went wrong"),
        "{log}"
    );
    assert!(
        !report.files.contains_key("fio.json"),
        "fio ran after a failed setup\n{}",
        boot.dump()
    );
    assert!(
        boot.console.contains("this went wrong"),
        "setup stderr not on the console\n{}",
        boot.dump()
    );
}

/// Makes /dev/bcache0: a backing-only bcache device on a loop device in tmpfs.
const BCACHE_SETUP: &str = "\
dd if=/dev/zero of=/tmp/backing.img bs=1M count=64 2>/dev/null
losetup /dev/loop0 /tmp/backing.img
make-bcache -B /dev/loop0
echo /dev/loop0 > /sys/fs/bcache/register
for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /sys/block/bcache0 ] && break; sleep 0.2; done
cat /sys/module/bcache/parameters/bch_nowait > \"$PMEMVM_OUT/bcache.bch_nowait\"
";

#[test]
fn bcache_bch_nowait_switches_rwf_nowait_on_bcache_devices() {
    let (qemu, image) = require!(requirements());
    let job = GuestJob {
        fio_job: RWF_NOWAIT_JOB.replace("/dev/pmem0", "/dev/bcache0"),
        setup: Some(BCACHE_SETUP.into()),
        args: None,
        ..GuestJob::default()
    };
    for (param, flag, error) in [("1", "Y", 0), ("0", "N", EOPNOTSUPP)] {
        let boot = boot(
            &format!("bcache-nowait-{param}"),
            &qemu,
            &image,
            &format!("bcache.bch_nowait={param}"),
            &job,
        );
        assert_eq!(
            boot.file("bcache.bch_nowait").trim(),
            flag,
            "{}",
            boot.dump()
        );
        let json = fio_json(&boot);
        assert_eq!(
            json["jobs"][0]["error"], error,
            "bcache.bch_nowait={param}: {json}"
        );
        assert_eq!(
            boot.report().status == Some(0),
            error == 0,
            "{}",
            boot.dump()
        );
    }
}

#[test]
fn interactive_shell_on_the_console_without_a_job() {
    use std::io::{Read, Write};
    use std::sync::mpsc;

    let (qemu, image) = require!(requirements());
    let dir = TempDir::new("shell");
    let nvdimm = dir.0.join("nvdimm.img");
    std::fs::File::create(&nvdimm)
        .and_then(|f| f.set_len(NVDIMM_SIZE_MIB << 20))
        .expect("create nvdimm file");
    let mut q = QemuCommand::new(&qemu, QemuAccel::Tcg, "max");
    q.machine("pc,nvdimm=on")
        .smp(1)
        .memory("512M,slots=2,maxmem=2G")
        .object(&format!(
            "memory-backend-file,id=mem1,share=on,mem-path={},size={NVDIMM_SIZE_MIB}M",
            opt_escape(&nvdimm.to_string_lossy())
        ))
        .device("nvdimm,memdev=mem1,id=nv1")
        .serial("stdio")
        .serial("null")
        .kernel(
            &image.bz_image,
            Some(&image.initramfs),
            "console=ttyS0 panic=-1 quiet",
        );
    let mut child = q
        .into_command()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn qemu");
    let mut stdout = child.stdout.take().expect("qemu stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut console = Vec::new();
    let wait_for = |needle: &str, console: &mut Vec<u8>| -> bool {
        while start.elapsed() < BOOT_DEADLINE {
            if String::from_utf8_lossy(console).contains(needle) {
                return true;
            }
            if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
                console.extend_from_slice(&chunk);
            }
        }
        false
    };
    let mut stdin = child.stdin.take().expect("qemu stdin");
    let ok = wait_for("interactive shell on the console", &mut console)
        && wait_for("/ # ", &mut console)
        && stdin.write_all(b"echo shell-says-$((6*7)); tty\n").is_ok()
        && wait_for("shell-says-42", &mut console)
        && wait_for("/dev/ttyS0", &mut console)
        && stdin.write_all(b"exit\n").is_ok();
    let status = wait_with_deadline(&mut child, BOOT_DEADLINE.saturating_sub(start.elapsed()));
    let console = String::from_utf8_lossy(&console);
    assert!(ok, "the shell did not answer\n{console}");
    // `exit` leaves the shell and /init powers the machine off (ACPI S5).
    assert_eq!(
        status,
        Some(0),
        "QEMU did not power off after `exit`\n{console}"
    );
    assert!(!console.contains("job control turned off"), "{console}");
}
