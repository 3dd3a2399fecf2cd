//! `--engine qemu`: qemu-system-x86_64 with its own NVDIMM (the peer
//! engine), in a process group of its own that ends with pmemvm.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use vmm::config::NvdimmSpec;
use vmm::exit_status;

use super::{in_nested_l1, Ended, Engine, EngineError, GuestEngine, Machine};
use crate::guest::nested::wait::Waited;
use crate::guest::qemu::{QemuAccel, QemuMachine};

/// `qemu-system-x86_64` with QEMU's own NVDIMM, as a child process.
#[derive(Debug)]
pub struct Qemu {
    pub(super) qemu: PathBuf,
    pub(super) accel: QemuAccel,
}

impl GuestEngine for Qemu {
    fn engine(&self) -> Engine {
        Engine::Qemu
    }

    fn boot(&self, m: &Machine<'_>) -> Result<Ended, EngineError> {
        // QEMU listens at --gdb itself.
        drop(m.take_endpoints());
        if let Some(l) = m.config.machine.legacy_pmem.first() {
            return Err(super::Refusal::LegacyPmemOnQemu(l.to_string()).into());
        }
        let initrd_file = job_initrd(m)?;
        let machine = QemuMachine {
            qemu: &self.qemu,
            accel: self.accel,
            cpus: m.config.machine.cpus,
            memory: m.config.machine.memory,
            kernel: &m.config.kernel,
            initrd: Some(&initrd_file),
            cmdline: &m.config.cmdline,
            nvdimms: dimm_files(m)?,
            disks: &m.config.machine.disks,
            cxl: cxl_files(m)?,
            console: m.console,
            channel: m.channel,
        };
        let mut cmd = machine.command();
        if let Some((addr, wait)) = m.gdb {
            let dev = qemu_gdb_device(addr);
            eprintln!("pmemvm: --engine qemu: --gdb is QEMU's own gdbstub (-gdb {dev}{}): gdb attaches the same way; pmemvm's monitor commands are not there", if wait { " -S" } else { "" });
            cmd.args(["-gdb", &dev]);
            if wait {
                cmd.arg("-S");
            }
        }
        log::info!("running {cmd:?}");
        let end = run_with_deadline(
            &mut cmd,
            m.timeout,
            m.stream_console.then_some(m.console),
            &m.scratch.join("qemu.log"),
        )?;
        let (status, error) = end_status(end, m.timeout);
        Ok(Ended {
            status,
            error,
            accelerator: self.accel.name().into(),
            functional_only: self.accel == QemuAccel::Tcg || in_nested_l1(),
            ..Ended::default()
        })
    }
}

/// The initrd with the job archive appended, in the scratch directory.
fn job_initrd(m: &Machine<'_>) -> Result<PathBuf, EngineError> {
    let initrd_file = m.scratch.join("initrd");
    let data = match &m.config.initrd {
        Some(p) => std::fs::read(p).map_err(|source| EngineError::Input {
            what: "initrd",
            path: p.to_path_buf(),
            source,
        })?,
        None => Vec::new(),
    };
    let data = crate::guest::guest_job::append_to_initrd(&data, &m.config.initrd_append);
    std::fs::write(&initrd_file, &data).map_err(|source| EngineError::Io {
        what: "writing the job initrd".into(),
        source,
    })?;
    Ok(initrd_file)
}

/// Each DIMM's file (QEMU needs named backing files: temporary ones live in
/// the scratch dir), created when missing; a new DIMM's label area starts as
/// on pmemvm (and on a real platform): an empty, valid label index, no
/// namespace. QEMU alone would show a zeroed label area, which Linux reads
/// as label-less (a raw /dev/pmem0 of it all).
fn dimm_files<'m>(m: &Machine<'m>) -> Result<Vec<(&'m NvdimmSpec, PathBuf)>, EngineError> {
    let dimms: Vec<(&NvdimmSpec, PathBuf)> = m
        .config
        .machine
        .nvdimms
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let p = n
                .file
                .clone()
                .unwrap_or_else(|| m.scratch.join(format!("pmem{i}.img")));
            (n, p)
        })
        .collect();
    for (n, p) in &dimms {
        if !p.exists() {
            let f = std::fs::File::create(p).and_then(|f| f.set_len(n.file_len()).map(|_| f));
            f.map_err(|source| EngineError::Io {
                what: format!("creating {}", p.display()),
                source,
            })?;
        }
        if !n.readonly && n.label_size > 0 {
            let init = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .and_then(|f| vmm::memory::backing::init_empty_labels(&f, n));
            init.map_err(|source| EngineError::Io {
                what: format!("initialising the label area of {}", p.display()),
                source,
            })?;
        }
    }
    Ok(dimms)
}

/// Each CXL device's files for QEMU: its backing file (created in pmemvm's
/// layout when missing, in the scratch directory for a temporary device, so
/// pmemvm can boot the same file later) and a label storage area of its own
/// in the scratch directory (QEMU 7.2 maps no file offset: the labels QEMU's
/// guest writes last for that run). The serial is the file's identity page's
/// when pmemvm made it, else one from the device's place.
fn cxl_files<'m>(
    m: &Machine<'m>,
) -> Result<Vec<crate::guest::qemu::QemuCxlDevice<'m>>, EngineError> {
    let io = |what: String| move |source| EngineError::Io { what, source };
    let mut out = Vec::new();
    for (i, spec) in m.config.machine.cxl_pmem.iter().enumerate() {
        let layout = vmm::cxl::machine::backing_spec(spec);
        let memory = spec
            .file
            .clone()
            .unwrap_or_else(|| m.scratch.join(format!("cxl{i}.img")));
        if !memory.exists() {
            std::fs::File::create(&memory)
                .and_then(|f| f.set_len(layout.file_len()))
                .map_err(io(format!("creating {}", memory.display())))?;
        }
        let lsa = m.scratch.join(format!("cxl{i}.lsa"));
        std::fs::File::create(&lsa)
            .and_then(|f| f.set_len(spec.label_size))
            .map_err(io(format!("creating {}", lsa.display())))?;
        let serial = vmm::nvdimm::identity::peek_serial(&NvdimmSpec {
            file: Some(memory.clone()),
            ..layout
        })
        .map_or(0x00c0_0000 + i as u64, u64::from);
        out.push(crate::guest::qemu::QemuCxlDevice {
            spec,
            memory,
            lsa,
            serial,
        });
    }
    Ok(out)
}

/// The exit status and error text of QEMU's end.
fn end_status(end: QemuEnd, timeout: std::time::Duration) -> (Option<u8>, Option<String>) {
    match end {
        // isa-debug-exit: QEMU exits with (byte << 1) | 1.
        QemuEnd::Exited(Some(s)) if s & 1 == 1 => (u8::try_from(s >> 1).ok(), None),
        QemuEnd::Exited(Some(0)) => (Some(0), None),
        QemuEnd::Exited(Some(s)) => (None, Some(format!("qemu-system-x86_64 failed with status {s}"))),
        QemuEnd::Exited(None) => (None, Some("qemu-system-x86_64 was killed by a signal".into())),
        QemuEnd::Deadline => (
            Some(exit_status::TIMED_OUT),
            Some(format!(
                "the guest did not finish within {} s (use --timeout to allow more); QEMU was killed",
                timeout.as_secs()
            )),
        ),
        QemuEnd::Signal(signal) => (
            u8::try_from(128 + signal).ok(),
            Some(format!("stopped by signal {signal}; QEMU was ended")),
        ),
    }
}

/// QEMU's `-gdb` device for the user's `--gdb` address.
fn qemu_gdb_device(addr: &vmm::debug::gdb::GdbAddr) -> String {
    match addr {
        vmm::debug::gdb::GdbAddr::Tcp(a) => format!("tcp:{}:{}", a.ip(), a.port()),
        vmm::debug::gdb::GdbAddr::Unix(p) => format!("unix:{},server=on,wait=off", p.display()),
        vmm::debug::gdb::GdbAddr::Serial(p) => p.display().to_string(),
    }
}

/// How QEMU's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QemuEnd {
    /// QEMU exited with this status (None: killed by a signal).
    Exited(Option<i32>),
    /// The deadline passed; QEMU was killed.
    Deadline,
    /// A stop signal reached pmemvm; QEMU was ended (SIGTERM, then SIGKILL).
    Signal(i32),
}

/// Time QEMU gets to end in order after SIGTERM before SIGKILL.
const QEMU_STOP_GRACE: Duration = Duration::from_secs(5);

/// Runs QEMU until it exits, the deadline passes (it is killed) or a stop
/// signal (SIGINT, SIGTERM, SIGHUP) reaches pmemvm (QEMU gets SIGTERM, then
/// SIGKILL after [`QEMU_STOP_GRACE`]). QEMU runs in a process group of its own
/// and dies with this thread (`PR_SET_PDEATHSIG`), so it never outlives pmemvm;
/// its stderr goes to `log` (warnings are logged at the end).
fn run_with_deadline(
    cmd: &mut std::process::Command,
    deadline: Duration,
    stream: Option<&Path>,
    log: &Path,
) -> Result<QemuEnd, EngineError> {
    let log_file = std::fs::File::create(log).map_err(|source| EngineError::Io {
        what: format!("creating {}", log.display()),
        source,
    })?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .process_group(0);
    crate::guest::nested::wait::dies_with_this_process(cmd);
    crate::guest::nested::wait::with_empty_signal_mask(cmd);
    // Blocked before the spawn, so none is missed; QEMU starts with an empty
    // mask (with_empty_signal_mask), so it ends on the SIGTERM below.
    let signals = vmm::signals::StopSignals::block();
    let mut child = cmd.spawn().map_err(|source| EngineError::Io {
        what: "starting qemu-system-x86_64".into(),
        source,
    })?;
    let mut shown = 0usize;
    let mut stopped_by = None;
    let waited = crate::guest::nested::wait::wait_watched_with_grace(
        &mut child,
        Some(deadline),
        QEMU_STOP_GRACE,
        || {
            if let Some(sig) = signals.as_ref().ok().and_then(|s| s.read()) {
                stopped_by = Some(sig);
                return Some(format!("signal {sig}"));
            }
            if let Some(path) = stream {
                if let Ok(b) = std::fs::read(path) {
                    if b.len() > shown {
                        use std::io::Write;
                        let _ = std::io::stdout().write_all(&b[shown..]);
                        let _ = std::io::stdout().flush();
                        shown = b.len();
                    }
                }
            }
            None
        },
    )
    .map_err(|source| EngineError::Io {
        what: "waiting for qemu-system-x86_64".into(),
        source,
    })?;
    let err = std::fs::read_to_string(log).unwrap_or_default();
    if !err.trim().is_empty() {
        log::warn!("qemu: {}", err.trim());
    }
    Ok(match waited {
        Waited::Exited(s) => QemuEnd::Exited(s.code()),
        Waited::Deadline => QemuEnd::Deadline,
        Waited::Stopped(_) => QemuEnd::Signal(stopped_by.unwrap_or(libc::SIGTERM)),
    })
}
