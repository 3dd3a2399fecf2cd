//! The nested engine: this same `pmemvm` binary, inside the L1 (see the
//! module docs of [`crate::nested`]), runs `pmemvm boot` of the machine the
//! caller prepared. The run's scratch directory is the share: the kernel, the
//! initrd with the job appended, the console and the result channel are
//! files there; each of the user's backing files is reached through a 9p
//! mount of its own directory, so pmemvm in L1 maps the user's file itself.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vmm::config::{DiskSpec, LegacyPmemSpec, NvdimmSpec};

use super::l1::{l1_command, run_l1, L1Options, Mount, INTERACTIVE_TTY};
use super::share::{install_binary, l1_dir, tail, write_command};
use super::{cache_dir, io_err, prepare_l1, L1Image, NestedError};
use crate::engine::{Ended, EngineError, GuestEngine, Machine};
use crate::preflight::Engine;

/// What the L1 needs beside the guest's RAM: its kernel and initramfs, pmemvm
/// and the page cache of the kernel, initrd and the mapped DIMM pages.
pub const L1_OVERHEAD_MIB: u64 = 1024;
/// Time the L1 takes to boot and to set up under TCG, on top of a run's
/// `--timeout`.
pub const L1_BOOT_ALLOWANCE: Duration = Duration::from_secs(240);
/// The accelerator the results name: the guest runs on the L1's KVM, which
/// runs under QEMU's TCG (functional only).
pub const ACCELERATOR: &str = "kvm-on-tcg";

/// L1 RAM for a guest of `guest_bytes`.
pub fn l1_memory_mib(guest_bytes: u64) -> u32 {
    u32::try_from((guest_bytes >> 20) + L1_OVERHEAD_MIB).unwrap_or(u32::MAX)
}

/// The `--nvdimm` option of `spec` with its backing file at `path` (as the
/// L1 sees it).
fn nvdimm_arg(spec: &NvdimmSpec, path: &str, record: Option<&str>) -> String {
    let mut s = format!("{},file={path}", spec.size);
    if spec.readonly {
        s.push_str(",readonly");
    }
    s.push_str(&format!(",label-size={}", spec.label_size));
    if spec.prealloc {
        s.push_str(",prealloc");
    }
    if let Some(n) = spec.node {
        s.push_str(&format!(",node={n}"));
    }
    if !spec.badblocks.is_empty() {
        let ranges: Vec<String> = spec
            .badblocks
            .iter()
            .map(|(off, len)| format!("{off}+{len}"))
            .collect();
        s.push_str(&format!(",badblocks={}", ranges.join(":")));
    }
    if let Some(dir) = record {
        s.push_str(&format!(",record={dir}"));
    }
    s
}

/// Where a `record=` directory is in L1: its parent (which must exist)
/// shared like a backing file's directory, the directory by its name there.
fn place_record_dir(dir: &Path, mounts: &mut Vec<Mount>) -> Result<String, NestedError> {
    let bad = |why: String| NestedError::BackingFile {
        file: dir.to_path_buf(),
        why,
    };
    vmm::record::check_dir(dir).map_err(|e| bad(e.to_string()))?;
    let name = dir
        .file_name()
        .ok_or_else(|| bad("it names no directory".into()))?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let host_dir = parent
        .canonicalize()
        .map_err(|e| bad(format!("its parent cannot be shared into the L1 VM ({e})")))?;
    Ok(format!("{}/{name}", mount_of(host_dir, mounts).l1_dir))
}

/// vCPUs of the L1 VM for a guest of `guest_cpus`: as many as the guest has
/// (a guest's vCPUs are threads of pmemvm in L1; on fewer L1 vCPUs, a guest
/// vCPU that spins waiting for another, e.g. for an IPI's answer, starves it
/// and Linux in L1 reports soft lockups), at most the host's CPUs (QEMU's TCG
/// runs one thread per L1 vCPU).
pub fn l1_cpus(guest_cpus: u8, host_cpus: usize) -> u32 {
    let host = u32::try_from(host_cpus.max(1)).unwrap_or(u32::MAX);
    u32::from(guest_cpus.max(1)).min(host)
}

fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The host-side locks of the user's backing files, held while the L1 runs.
#[derive(Debug)]
struct HostLocks(#[allow(dead_code)] Vec<fs::File>);

/// Takes pmemvm's lock (`flock`, exclusive; shared for `readonly`) on an
/// existing backing file on the host: pmemvm's own lock is taken in the L1,
/// where QEMU's 9p server does not pass it on, so this one keeps a pmemvm on
/// the host (or another nested one) off the file for the run. A file that
/// does not exist yet is created by pmemvm in the L1 and not locked here.
fn lock_on_host(file: &Path, readonly: bool) -> Result<Option<fs::File>, NestedError> {
    let Ok(f) = fs::File::open(file) else {
        return Ok(None);
    };
    if !vmm::backing::try_lock(&f, readonly).unwrap_or(false) {
        return Err(NestedError::BackingFile {
            file: file.to_path_buf(),
            why: "it is in use by another pmemvm (it holds the file's lock)".into(),
        });
    }
    Ok(Some(f))
}

/// Where one backing file is in L1: a file in the share by its relative
/// path, another file through a 9p mount of its directory at `/host/dimmN`
/// (one mount per directory, in `mounts`; locked on the host, see
/// [`lock_on_host`]), a temporary one (`None`) as `temp_name` in the share
/// (removed with it).
fn place_file(
    share: &Path,
    file: Option<&PathBuf>,
    temp_name: String,
    readonly: bool,
    mounts: &mut Vec<Mount>,
    locks: &mut Vec<fs::File>,
) -> Result<String, NestedError> {
    let Some(file) = file else {
        return Ok(temp_name);
    };
    if file.starts_with(share) {
        return Ok(file
            .strip_prefix(share)
            .map(|p| p.display().to_string())
            .unwrap_or_default());
    }
    let bad = |why: &str| NestedError::BackingFile {
        file: file.clone(),
        why: why.to_string(),
    };
    let name = file
        .file_name()
        .ok_or_else(|| bad("it names no file"))?
        .to_string_lossy()
        .into_owned();
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    locks.extend(lock_on_host(file, readonly)?);
    let dir = parent.canonicalize().map_err(|e| {
        bad(&format!(
            "its directory cannot be shared into the L1 VM ({e})"
        ))
    })?;
    Ok(format!("{}/{name}", mount_of(dir, mounts).l1_dir))
}

/// The 9p mount of host directory `host_dir` in L1 (`/host/dimmN`): the one
/// already in `mounts`, or a new one added there.
fn mount_of(host_dir: PathBuf, mounts: &mut Vec<Mount>) -> Mount {
    if let Some(m) = mounts.iter().find(|m| m.host_dir == host_dir) {
        return m.clone();
    }
    let n = mounts.len();
    let m = Mount {
        tag: format!("dimm{n}"),
        host_dir,
        l1_dir: format!("/host/dimm{n}"),
    };
    mounts.push(m.clone());
    m
}

/// The `--nvdimm`, `--pmem-legacy` and `--disk` options of `pmemvm boot` in
/// L1, with each backing file where L1 sees it ([`place_file`]: temporary
/// DIMMs are `pmemN.img`, temporary legacy ranges `legacyN.img` in the
/// share; disks are always files), and the mounts and host locks that takes.
fn place_dimms(
    share: &Path,
    nvdimms: &[NvdimmSpec],
    legacy: &[LegacyPmemSpec],
    disks: &[DiskSpec],
) -> Result<(Vec<String>, Vec<Mount>, HostLocks), NestedError> {
    let mut args = Vec::new();
    let mut mounts: Vec<Mount> = Vec::new();
    let mut locks = Vec::new();
    for (i, spec) in nvdimms.iter().enumerate() {
        if spec.hugepages {
            return Err(NestedError::Unsupported("--nvdimm SIZE,hugepages"));
        }
        let temp = format!("pmem{i}.img");
        let path = place_file(
            share,
            spec.file.as_ref(),
            temp,
            spec.readonly,
            &mut mounts,
            &mut locks,
        )?;
        let record = match &spec.record {
            Some(dir) => Some(place_record_dir(dir, &mut mounts)?),
            None => None,
        };
        args.push("--nvdimm".to_string());
        args.push(nvdimm_arg(spec, &path, record.as_deref()));
    }
    for (i, spec) in legacy.iter().enumerate() {
        let temp = format!("legacy{i}.img");
        let path = place_file(
            share,
            spec.file.as_ref(),
            temp,
            spec.readonly,
            &mut mounts,
            &mut locks,
        )?;
        args.push("--pmem-legacy".to_string());
        // The spec's own spelling (its Display parses back to it), with the L1 path.
        args.push(spec.with_file(path.into()).to_string());
    }
    for (i, disk) in disks.iter().enumerate() {
        let path = place_file(
            share,
            Some(&disk.path),
            format!("disk{i}.img"),
            disk.readonly,
            &mut mounts,
            &mut locks,
        )?;
        args.push("--disk".to_string());
        args.push(
            DiskSpec {
                path: PathBuf::from(path),
                readonly: disk.readonly,
            }
            .to_string(),
        );
    }
    Ok((args, mounts, HostLocks(locks)))
}

/// A file of the share by its path relative to the share.
fn in_share(share: &Path, path: &Path) -> Result<String, NestedError> {
    path.strip_prefix(share)
        .map(|p| p.display().to_string())
        .map_err(|_| NestedError::BackingFile {
            file: path.to_path_buf(),
            why: "it is not in the run's scratch directory (pmemvm bug)".into(),
        })
}

/// pmemvm's own lines on the stderr of pmemvm in L1 (errors and their
/// causes, abnormal ends), without log lines.
fn pmemvm_messages(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            (l.starts_with("pmemvm: ")
                && !l.starts_with("pmemvm: warning")
                && !l.starts_with("pmemvm: SIGQUIT:"))
                || l.trim_start()
                    .split_once(": ")
                    .is_some_and(|(n, _)| l.starts_with("  ") && n.trim().parse::<u32>().is_ok())
        })
        .map(str::trim)
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// Common argv of `pmemvm boot` in L1: the machine and its DIMMs.
fn boot_argv(
    kernel: &str,
    initrd: Option<&str>,
    cmdline: &str,
    cpus: u8,
    memory: u64,
    dimm_args: Vec<String>,
) -> Vec<String> {
    let mut argv: Vec<String> = ["pmemvm", "boot", "--kernel", kernel]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Some(i) = initrd {
        argv.extend(["--initrd".to_string(), i.to_string()]);
    }
    argv.extend([
        "--cmdline".to_string(),
        cmdline.to_string(),
        "--cpus".to_string(),
        cpus.to_string(),
        "--memory".to_string(),
        memory.to_string(),
    ]);
    argv.extend(dimm_args);
    argv
}

/// `--engine nested`: pmemvm in a QEMU TCG L1 with emulated SVM.
#[derive(Debug)]
pub struct NestedEngine {
    qemu: PathBuf,
    l1: L1Image,
    pmemvm: PathBuf,
}

impl NestedEngine {
    /// Prepares (or finds cached) the L1 and finds this pmemvm binary.
    pub fn new(qemu: PathBuf) -> Result<Self, NestedError> {
        let l1 = prepare_l1(&cache_dir())?;
        let pmemvm = std::env::current_exe().map_err(io_err("find the pmemvm binary"))?;
        Ok(Self { qemu, l1, pmemvm })
    }

    fn boot_nested(&self, m: &Machine<'_>) -> Result<Ended, NestedError> {
        if !m.placement.pin.is_empty() {
            return Err(NestedError::Unsupported("--pin"));
        }
        if m.placement.host_node.is_some() {
            return Err(NestedError::Unsupported("--host-node"));
        }
        if m.ram_pages != vmm::hugepages::RamPages::Default {
            return Err(NestedError::Unsupported("--memory SIZE,hugepages/thp"));
        }
        if let Some(w) = crate::qemu::nested_qemu_warning(&self.qemu) {
            eprintln!("pmemvm: warning: --engine nested: {w}");
        }
        let share = m.scratch;
        let (dimm_args, mounts, _locks) = place_dimms(share, m.nvdimms, m.legacy_pmem, m.disks)?;
        fs::copy(m.kernel, share.join("kernel")).map_err(io_err(format!(
            "copy {} into the share",
            m.kernel.display()
        )))?;
        let initrd = match m.initrd {
            Some(p) => fs::read(p).map_err(io_err(format!("read {}", p.display())))?,
            None => Vec::new(),
        };
        let initrd = crate::guest_job::append_to_initrd(&initrd, m.job_archive);
        fs::write(share.join("initrd"), initrd).map_err(io_err("write the job initrd"))?;
        let mut argv = boot_argv(
            "kernel",
            Some("initrd"),
            m.cmdline,
            m.cpus,
            m.memory,
            dimm_args,
        );
        if let Some((addr, wait)) = m.gdb {
            argv.extend(super::gdb::l1_args(&self.qemu, addr, wait));
        }
        argv.extend([
            "--console-log".to_string(),
            in_share(share, m.console)?,
            "--channel".to_string(),
            in_share(share, m.channel)?,
            // The guest's own time limit, kept by pmemvm in L1: at it, pmemvm says where
            // each vCPU was (the L1's deadline adds the boot allowance on top).
            "--timeout".to_string(),
            m.timeout.as_secs().max(1).to_string(),
        ]);
        install_binary(share, "pmemvm", &self.pmemvm, true)?;
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        write_command(share, &[], &words, &mounts, None)?;
        let opts = L1Options {
            memory_mib: l1_memory_mib(m.memory),
            cpus: l1_cpus(m.cpus, host_cpus()),
            mounts,
            interactive: false,
            gdb: m.gdb.map(|(addr, _)| super::l1::gdb_chardev(addr)),
        };
        let l1 = l1_dir(share);
        let console = l1.join("l1-console.log");
        let cmd = l1_command(&self.qemu, &self.l1, &opts, &console, share);
        log::info!("running the L1: {cmd:?}");
        let announcer = m
            .gdb
            .map(|(addr, _)| super::gdb::GdbAnnouncer::start(l1.join("stderr"), addr.to_string()));
        let run = run_l1(
            cmd,
            false,
            &console,
            &l1.join("qemu.log"),
            share,
            Some(m.timeout + L1_BOOT_ALLOWANCE),
            m.stream_console.then_some(m.console),
        );
        drop(announcer);
        let mut ended = Ended {
            accelerator: ACCELERATOR.into(),
            functional_only: true,
            ..Ended::default()
        };
        match run {
            Ok(run) => {
                for w in &run.wakeups {
                    eprintln!("pmemvm: --engine nested: the L1 VM fell silent ({w})");
                }
                let stderr = fs::read_to_string(l1.join("stderr")).unwrap_or_default();
                ended.status = u8::try_from(run.status).ok();
                ended.error = pmemvm_messages(&stderr).map(|m| format!("pmemvm in the L1 VM: {m}"));
                log::info!(
                    "L1 ran pmemvm for {:.1} s (command started at L1 uptime {:?} s); its stderr, last lines:\n{}",
                    run.elapsed.as_secs_f64(),
                    run.uptime_at_run,
                    tail(&stderr, 20)
                );
            }
            Err(e @ super::L1Failure::Deadline { .. }) => {
                ended.status = Some(vmm::exit_status::TIMED_OUT);
                ended.error = Some(format!(
                    "the guest did not finish within {} s (use --timeout to allow more; the L1 VM gets {} s more to boot): {e}",
                    m.timeout.as_secs(),
                    L1_BOOT_ALLOWANCE.as_secs()
                ));
            }
            Err(super::L1Failure::Signal { signal }) => {
                ended.status = u8::try_from(128 + signal).ok();
                ended.error = Some(format!("stopped by signal {signal}; the L1 VM was killed"));
            }
            Err(e) => ended.error = Some(format!("--engine nested: {e}")),
        }
        Ok(ended)
    }
}

impl GuestEngine for NestedEngine {
    fn engine(&self) -> Engine {
        Engine::Nested
    }

    fn boot(&self, m: &Machine<'_>) -> Result<Ended, EngineError> {
        Ok(self.boot_nested(m)?)
    }
}

/// `pmemvm boot --engine nested`: the machine to boot in the L1.
#[derive(Debug)]
pub struct InteractiveBoot<'a> {
    /// Kernel.
    pub kernel: &'a Path,
    /// Initrd.
    pub initrd: Option<&'a Path>,
    /// Kernel command line.
    pub cmdline: &'a str,
    /// vCPUs.
    pub cpus: u8,
    /// RAM bytes.
    pub memory: u64,
    /// The user's DIMMs.
    pub nvdimms: &'a [NvdimmSpec],
    /// The virtio disks.
    pub disks: &'a [DiskSpec],
    /// The user's legacy persistent-memory ranges.
    pub legacy_pmem: &'a [LegacyPmemSpec],
    /// `--gdb ADDR` and `--gdb-wait`: QEMU listens at ADDR on this host and
    /// pmemvm in the L1 serves gdb through the L1's third serial port.
    pub gdb: Option<(&'a vmm::gdb::GdbAddr, bool)>,
}

/// A temporary share, removed on drop.
struct TempShare(PathBuf);

impl Drop for TempShare {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The terminal settings of stdin, put back on drop (QEMU restores them
/// itself when it exits in order; this covers a killed QEMU).
struct SavedTerminal(Option<libc::termios>);

impl SavedTerminal {
    fn save() -> Self {
        let mut t = std::mem::MaybeUninit::<libc::termios>::uninit();
        // SAFETY: isatty and tcgetattr only read fd 0 and write the termios
        // struct `t` points to; `t` is read only after tcgetattr succeeded.
        let saved = unsafe {
            (libc::isatty(0) == 1 && libc::tcgetattr(0, t.as_mut_ptr()) == 0)
                .then(|| t.assume_init())
        };
        Self(saved)
    }
}

impl Drop for SavedTerminal {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            // SAFETY: tcsetattr reads the termios struct saved from this same fd.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, t);
            }
        }
    }
}

/// Boots `b` under pmemvm inside the L1 with the guest's console on this
/// terminal (L1's second serial port, relayed by QEMU; the L1's own console
/// goes to a file). Returns pmemvm's exit status in L1; the guest powering
/// off (or `Ctrl-A x`) ends both levels.
pub fn boot_interactive(b: &InteractiveBoot<'_>, qemu: &Path) -> Result<u8, NestedError> {
    let l1_image = prepare_l1(&cache_dir())?;
    if let Some(w) = crate::qemu::nested_qemu_warning(qemu) {
        eprintln!("pmemvm: warning: --engine nested: {w}");
    }
    let pmemvm = std::env::current_exe().map_err(io_err("find the pmemvm binary"))?;
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let share = TempShare(std::env::temp_dir().join(format!(
        "pmemvm-nested-boot-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )));
    fs::create_dir_all(&share.0).map_err(io_err(format!("create {}", share.0.display())))?;
    let (dimm_args, mounts, _locks) = place_dimms(&share.0, b.nvdimms, b.legacy_pmem, b.disks)?;
    fs::copy(b.kernel, share.0.join("kernel")).map_err(io_err(format!(
        "copy {} into the share",
        b.kernel.display()
    )))?;
    if let Some(i) = b.initrd {
        fs::copy(i, share.0.join("initrd"))
            .map_err(io_err(format!("copy {} into the share", i.display())))?;
    }
    let mut argv = boot_argv(
        "kernel",
        b.initrd.map(|_| "initrd"),
        b.cmdline,
        b.cpus,
        b.memory,
        dimm_args,
    );
    if let Some((addr, wait)) = b.gdb {
        argv.extend(super::gdb::l1_args(qemu, addr, wait));
    }
    install_binary(&share.0, "pmemvm", &pmemvm, true)?;
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    write_command(&share.0, &[], &words, &mounts, Some(INTERACTIVE_TTY))?;
    let opts = L1Options {
        memory_mib: l1_memory_mib(b.memory),
        cpus: l1_cpus(b.cpus, host_cpus()),
        mounts,
        interactive: true,
        gdb: b.gdb.map(|(addr, _)| super::l1::gdb_chardev(addr)),
    };
    let l1 = l1_dir(&share.0);
    let console = l1.join("l1-console.log");
    let cmd = l1_command(qemu, &l1_image, &opts, &console, &share.0);
    log::info!("running the L1: {cmd:?}");
    eprintln!("pmemvm: --engine nested: booting the L1 VM (QEMU TCG with emulated SVM; the guest's console follows here, functional only)");
    let saved = SavedTerminal::save();
    let run = run_l1(
        cmd,
        true,
        &console,
        &l1.join("qemu.log"),
        &share.0,
        None,
        None,
    );
    drop(saved);
    match run {
        Ok(run) => {
            for w in &run.wakeups {
                eprintln!("pmemvm: --engine nested: the L1 VM fell silent ({w})");
            }
            Ok(u8::try_from(run.status).unwrap_or(vmm::exit_status::RUNTIME_ERROR))
        }
        // As `boot` on the other engines: 128 + N, the terminal given back.
        Err(super::L1Failure::Signal { signal }) => {
            eprintln!("pmemvm: stopped by signal {signal}; the L1 VM was killed");
            Ok(u8::try_from(128 + signal).unwrap_or(vmm::exit_status::RUNTIME_ERROR))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_l1_has_as_many_vcpus_as_the_guest_up_to_the_hosts() {
        assert_eq!(l1_cpus(1, 2), 1);
        assert_eq!(l1_cpus(2, 2), 2);
        assert_eq!(l1_cpus(4, 2), 2);
        assert_eq!(l1_cpus(48, 64), 48);
        assert_eq!(l1_cpus(0, 0), 1);
    }

    #[test]
    fn dimms_are_placed_in_the_share_or_through_their_directory() {
        let share = std::env::temp_dir().join(format!("pmemvm-place-{}", std::process::id()));
        fs::create_dir_all(&share).expect("share");
        let user: NvdimmSpec = format!(
            "64M,label-size=0,file={}/sub-user.img",
            std::env::temp_dir().display()
        )
        .parse()
        .expect("spec");
        let in_share: NvdimmSpec = format!("16M,readonly,file={}/t.img", share.display())
            .parse()
            .expect("spec");
        let temp: NvdimmSpec = "32M,node=1".parse().expect("spec");
        let disk: DiskSpec = format!("{}/root.ext4,readonly", share.display())
            .parse()
            .expect("disk");
        let outside: DiskSpec = format!("{}/sub-disk.img", std::env::temp_dir().display())
            .parse()
            .expect("disk");
        let (args, mounts, _) =
            place_dimms(&share, &[user, in_share, temp], &[], &[disk, outside]).expect("placed");
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].tag, "dimm0");
        assert_eq!(
            args[1],
            format!("{},file=/host/dimm0/sub-user.img,label-size=0", 64u64 << 20)
        );
        assert_eq!(
            args[3],
            format!("{},file=t.img,readonly,label-size=131072", 16u64 << 20)
        );
        assert_eq!(
            args[5],
            format!("{},file=pmem2.img,label-size=131072,node=1", 32u64 << 20)
        );
        assert_eq!(
            args[6..],
            [
                "--disk",
                "root.ext4,readonly",
                "--disk",
                "/host/dimm0/sub-disk.img"
            ]
        );
        // An existing file another pmemvm holds is refused before the L1 boots.
        let held = share.join("held.img");
        fs::write(&held, b"x").expect("file");
        let holder = lock_on_host(&held, false).expect("lock").expect("exists");
        let spec: NvdimmSpec = format!("16M,file={}", held.display())
            .parse()
            .expect("spec");
        let err = place_dimms(Path::new("/no-share"), &[spec], &[], &[]).expect_err("locked");
        assert!(
            err.to_string().contains("in use by another pmemvm"),
            "{err}"
        );
        drop(holder);
        let missing: NvdimmSpec = "16M,file=/no/such/dir/x.img".parse().expect("spec");
        let err = place_dimms(&share, &[missing], &[], &[]).expect_err("no directory");
        assert!(err.is_usage());
        assert!(err.to_string().contains("/no/such/dir/x.img"), "{err}");
        fs::remove_dir_all(&share).expect("cleanup");
    }

    #[test]
    fn legacy_ranges_follow_the_dimms_and_share_their_mounts() {
        let share =
            std::env::temp_dir().join(format!("pmemvm-place-legacy-{}", std::process::id()));
        fs::create_dir_all(&share).expect("share");
        let tmp = std::env::temp_dir();
        let dimm: NvdimmSpec = format!("64M,label-size=0,file={}/d.img", tmp.display())
            .parse()
            .expect("spec");
        let user: LegacyPmemSpec = format!("256M,file={}/e820.img", tmp.display())
            .parse()
            .expect("spec");
        let ro: LegacyPmemSpec = format!("16M,file={}/r.img,readonly", share.display())
            .parse()
            .expect("spec");
        let temp: LegacyPmemSpec = "1G".parse().expect("spec");
        let (args, mounts, _) =
            place_dimms(&share, &[dimm], &[user, ro, temp], &[]).expect("placed");
        assert_eq!(mounts.len(), 1, "the DIMM's directory is mounted once");
        assert_eq!(
            args[2..],
            [
                "--pmem-legacy",
                "256M,file=/host/dimm0/e820.img",
                "--pmem-legacy",
                "16M,file=r.img,readonly",
                "--pmem-legacy",
                "1G,file=legacy2.img",
            ]
        );
        // Each spelling is what `pmemvm boot` in L1 parses back.
        for a in args[2..].iter().skip(1).step_by(2) {
            assert_eq!(a.parse::<LegacyPmemSpec>().expect("parses").to_string(), *a);
        }
        fs::remove_dir_all(&share).expect("cleanup");
    }

    #[test]
    fn only_pmemvm_lines_are_messages() {
        let stderr = "[2026 WARN vmm] x\npmemvm: error: --nvdimm 16M: wrong size\n  1: cause\npmemvm: warning: y\npmemvm: SIGQUIT: vCPU 0: in the guest\n";
        assert_eq!(
            pmemvm_messages(stderr).as_deref(),
            Some("pmemvm: error: --nvdimm 16M: wrong size; 1: cause")
        );
        assert_eq!(pmemvm_messages("[log] ok\n"), None);
        assert_eq!(l1_memory_mib(512 << 20), 1536);
    }
}
