//! Tier 4: disk I/O off the vCPU thread, under pmemvm on this host's KVM.
//! The disk is a file on a FUSE file system served by this test, whose first
//! read waits until the test lets it go (at most [`HOLD`]). The tiny
//! `slowdisk` guest submits a read of sector 0 and then polls, reading the
//! disk's registers and printing "t" as it goes.
//!
//! Proved, with one vCPU on the host kind the run has: while the file read is
//! in the kernel, the guest's vCPU runs and its register accesses are
//! answered (before, the notifying vCPU did the read and the device's lock
//! was held across it: an MMIO read of the same disk, from any vCPU, waited);
//! `--timeout` ends the run on time while the read is still held (before, the
//! run loop's lost-interrupt check waited for the same lock).

use std::ffi::OsStr;
use std::process::Command;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, INodeNo, LockOwner, MountOption, OpenFlags,
    ReplyAttr, ReplyData, ReplyEntry, Request,
};
use pmemvm_tests::gdb::Debugged;
use pmemvm_tests::pmemvm::{pmemvm_bin, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::skip::Skip;
use pmemvm_tests::tiny::{guest, kvm_available};

/// The longest the held read waits for the test.
const HOLD: Duration = Duration::from_secs(30);
/// The disk's bytes.
const DISK_LEN: u64 = 64 * 1024;
const FILE_INO: INodeNo = INodeNo(2);

/// One file, `disk.img`, whose first read waits for `release` (or [`HOLD`])
/// after saying so on `started`.
struct SlowDisk {
    started: Sender<()>,
    release: Mutex<Receiver<()>>,
    held: Mutex<bool>,
}

fn attr(ino: INodeNo, kind: FileType, size: u64, perm: u16) -> FileAttr {
    FileAttr {
        ino,
        size,
        blocks: size / 512,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        flags: 0,
        blksize: 512,
    }
}

impl Filesystem for SlowDisk {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == INodeNo::ROOT && name == "disk.img" {
            let a = attr(FILE_INO, FileType::RegularFile, DISK_LEN, 0o600);
            reply.entry(&Duration::from_secs(60), &a, fuser::Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ttl = Duration::from_secs(60);
        match ino {
            INodeNo::ROOT => reply.attr(&ttl, &attr(ino, FileType::Directory, 0, 0o755)),
            FILE_INO => reply.attr(&ttl, &attr(ino, FileType::RegularFile, DISK_LEN, 0o600)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let first = !std::mem::replace(
            &mut *self.held.lock().unwrap_or_else(|e| e.into_inner()),
            true,
        );
        if first {
            let _ = self.started.send(());
            let release = self.release.lock().unwrap_or_else(|e| e.into_inner());
            let _ = release.recv_timeout(HOLD);
        }
        let len = u64::from(size).min(DISK_LEN.saturating_sub(offset));
        reply.data(&vec![0x5a; usize::try_from(len).unwrap_or(0)]);
    }
}

/// The mounted file system; unmounted when dropped.
struct Mounted {
    _session: fuser::BackgroundSession,
    started: Receiver<()>,
    release: Sender<()>,
}

fn mount_slow_disk(dir: &std::path::Path) -> Result<Mounted, Skip> {
    if !std::path::Path::new("/dev/fuse").exists() {
        return Err(Skip::new("/dev/fuse is missing: no FUSE on this host"));
    }
    let (started_tx, started) = channel();
    let (release, release_rx) = channel();
    let fs = SlowDisk {
        started: started_tx,
        release: Mutex::new(release_rx),
        held: Mutex::new(false),
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![MountOption::FSName("pmemvm-slow-disk".into())];
    let session = fuser::spawn_mount(fs, dir, &config).map_err(|e| {
        Skip::new(format!(
            "FUSE mount at {} failed (fusermount3 from fuse3?): {e}",
            dir.display()
        ))
    })?;
    Ok(Mounted {
        _session: session,
        started,
        release,
    })
}

/// `pmemvm boot` of the `slowdisk` guest with its disk on the slow file.
fn boot_slowdisk(dir: &TempDir, extra: &[&str]) -> Result<(Mounted, Debugged), Skip> {
    kvm_available()?;
    let kernel = guest("slowdisk")?;
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).expect("mount point");
    let m = mount_slow_disk(&mnt)?;
    let mut cmd = Command::new(pmemvm_bin());
    cmd.args(["boot", "--kernel"])
        .arg(kernel)
        .arg("--disk")
        .arg(format!("{},readonly", mnt.join("disk.img").display()))
        .args(extra);
    Ok((m, Debugged::start(cmd)))
}

fn ticks(output: &str) -> usize {
    output.matches('t').count()
}

#[test]
fn the_vcpu_runs_and_its_register_reads_are_answered_while_a_disk_read_waits() {
    let dir = TempDir::new("disk-io-thread");
    let (m, mut vm) = require!(boot_slowdisk(&dir, &["--timeout", "120"]));
    m.started
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("the disk read never reached the file\n{}", vm.output()));
    let at_start = ticks(&vm.output());
    let end = Instant::now() + Duration::from_secs(20);
    while ticks(&vm.output()) < at_start + 5 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let during = ticks(&vm.output()) - at_start;
    let _ = m.release.send(());
    assert!(
        during >= 5,
        "the guest printed {during} \"t\" in 20 s while its disk read was held: its vCPU \
         waited for the read\n{}",
        vm.output()
    );
    assert!(
        vm.wait_for("R\n", Duration::from_secs(20)),
        "{}",
        vm.output()
    );
    let (status, out) = vm.finish(Duration::from_secs(20));
    assert_eq!(status, Some(0), "the read's status byte\n{out}");
}

#[test]
fn the_timeout_ends_the_run_on_time_while_a_disk_read_is_held() {
    let dir = TempDir::new("disk-io-timeout");
    let started = Instant::now();
    let (m, mut vm) = require!(boot_slowdisk(&dir, &["--timeout", "4"]));
    m.started
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("the disk read never reached the file\n{}", vm.output()));
    // The read is held (up to 30 s): pmemvm must give up at its time-out,
    // give or take the 5 s it waits for the disk's thread, and say so.
    let said = vm.wait_for("did not finish within 4 s", Duration::from_secs(20));
    let took = started.elapsed();
    // A process cannot leave while one of its threads waits for a FUSE
    // answer (the kernel waits it out, as for any disk): let the read go.
    let _ = m.release.send(());
    let (status, out) = vm.finish(Duration::from_secs(40));
    drop(m);
    assert!(said, "no time-out sentence\n{out}");
    assert!(
        took < Duration::from_secs(15),
        "pmemvm gave up {took:?} after its start with --timeout 4 and a disk read held\n{out}"
    );
    assert_eq!(status, Some(124), "the time-out's status\n{out}");
    assert!(
        out.contains("I/O thread was still in a request"),
        "the run did not say that the disk's thread was still in the held read\n{out}"
    );
}
