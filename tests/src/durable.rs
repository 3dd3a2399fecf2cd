//! The durability harness: the tiny `durable` guest (tests/guests/durable.S)
//! on this host's KVM, its parameter block, running pmemvm on it (under strace
//! when installed) and checking every byte of the backing file afterwards.
//! Used by tests/tests/durability.rs.

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::pmemvm::pmemvm_bin;
use crate::skip::Skip;
use crate::tiny::{guest, kvm_available};

pub const DEADLINE: Duration = Duration::from_secs(25);
pub const MIB: u64 = 1 << 20;
/// First DIMM byte the guest writes (the parameter block is in page 0).
pub const DATA_OFFSET: u64 = 4096;

/// How the guest ends the VM (the `mode` field of the parameter block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    PowerOff = 0,
    ResetRegister = 1,
    TripleFault = 2,
    GuestExitPort = 3,
    HaltForever = 4,
    I8042Reset = 5,
}

/// The parameter block the host puts at offset 0 of the backing file.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub end: End,
    pub seed: u32,
    pub offset: u64,
    pub len: u64,
    pub stride: u64,
    pub flush_hint: bool,
    pub exit_byte: u8,
}

impl Params {
    pub fn new(end: End, seed: u32) -> Self {
        Self {
            end,
            seed,
            offset: DATA_OFFSET,
            len: MIB,
            stride: 4,
            flush_hint: false,
            exit_byte: 0x2a,
        }
    }

    pub fn block(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(0x30);
        b.extend_from_slice(b"DURABLE1");
        b.extend_from_slice(&(self.end as u32).to_le_bytes());
        b.extend_from_slice(&self.seed.to_le_bytes());
        b.extend_from_slice(&self.offset.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&self.stride.to_le_bytes());
        b.extend_from_slice(&u32::from(self.flush_hint).to_le_bytes());
        b.extend_from_slice(&u32::from(self.exit_byte).to_le_bytes());
        b
    }

    /// The u32 the guest writes at DIMM offset `o`.
    pub fn word(&self, o: u64) -> [u8; 4] {
        #[allow(clippy::cast_possible_truncation)] // the guest's arithmetic is 32-bit too
        let v = self.seed.wrapping_add((o / 4) as u32);
        v.to_le_bytes()
    }

    /// The identity block pmemvm finds at the end of the prepared file (a
    /// fixed serial: the file's bytes are all known in advance).
    pub fn identity(&self, region: u64, labels: u64) -> vmm::nvdimm::identity::Identity {
        vmm::nvdimm::identity::Identity {
            serial: 0x1000_0001,
            region_size: region,
            label_size: labels,
            id: [0x42; 16],
        }
    }

    /// The whole backing file (region of `region` bytes, `labels` bytes of
    /// labels, identity page) as it must be after the guest wrote every word
    /// below DIMM offset `upto`.
    pub fn expected(&self, region: u64, labels: u64, upto: u64) -> Vec<u8> {
        let file_size = region + labels + vmm::layout::NVDIMM_IDENTITY_SIZE;
        let mut v = vec![0u8; usize::try_from(file_size).expect("file size")];
        let id = self.identity(region, labels).encode();
        let at = usize::try_from(region + labels).expect("offset");
        v[at..].copy_from_slice(&id);
        let block = self.block();
        v[..block.len()].copy_from_slice(&block);
        let end = (self.offset + self.len).min(upto);
        let mut o = self.offset;
        while o < end {
            let i = usize::try_from(o).expect("offset");
            v[i..i + 4].copy_from_slice(&self.word(o));
            o += self.stride;
        }
        v
    }
}

/// Default label area of `--nvdimm SIZE,file=...`.
pub const LABELS: u64 = 128 << 10;

/// Creates a sparse backing file for `--nvdimm REGION` with `labels` bytes
/// of labels: the parameter block at offset 0, the identity page at the end.
pub fn prepare_file(path: &Path, region: u64, labels: u64, p: &Params) {
    let f = std::fs::File::create(path).expect("creating the backing file");
    f.set_len(region + labels + vmm::layout::NVDIMM_IDENTITY_SIZE)
        .expect("sizing the backing file");
    f.write_all_at(&p.block(), 0)
        .expect("writing the parameter block");
    f.write_all_at(&p.identity(region, labels).encode(), region + labels)
        .expect("writing the identity page");
}

/// Compares the file with `want`; returns the number of differing bytes and
/// a description of the first difference.
pub fn bytes_lost(path: &Path, want: &[u8]) -> (u64, String) {
    let got = std::fs::read(path).expect("reading the backing file");
    if got.len() != want.len() {
        return (
            want.len() as u64,
            format!("file is {} bytes, expected {}", got.len(), want.len()),
        );
    }
    // The second half of the identity page is pmemvm's media state (bad
    // ranges, unsafe shutdown count, a dirty flag that differs between
    // orderly and killed exits): it must be a valid block, and is otherwise
    // checked by vmm's media tests and nested_media_errors, not here.
    let media_at = got.len().saturating_sub(vmm::nvdimm::media::BLOCK_SIZE);
    if vmm::nvdimm::media::State::decode(&got[media_at..]).is_err() {
        return (
            vmm::nvdimm::media::BLOCK_SIZE as u64,
            format!("the media-state block at {media_at:#x} is damaged"),
        );
    }
    let mut lost = 0u64;
    let mut first = String::new();
    for (i, (g, w)) in got[..media_at].iter().zip(want).enumerate() {
        if g != w {
            if lost == 0 {
                first = format!("first difference at byte {i:#x}: {g:#04x} instead of {w:#04x}");
            }
            lost += 1;
        }
    }
    (lost, first)
}

/// Checks every byte of `path` and reports the figure.
pub fn check_file(what: &str, path: &Path, want: &[u8], dump: &str) {
    let (lost, first) = bytes_lost(path, want);
    eprintln!(
        "DURABILITY: {what}: bytes checked {}, bytes lost {lost}",
        want.len()
    );
    assert_eq!(lost, 0, "{what}: {lost} bytes differ ({first})\n{dump}");
}

/// Tiny guest `durable`, or a skip reason.
pub fn durable_guest() -> Result<String, Skip> {
    kvm_available()?;
    Ok(guest("durable")?.to_string_lossy().into_owned())
}

/// What a finished run produced.
#[derive(Debug)]
pub struct Finished {
    pub status: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub strace: Option<String>,
}

impl Finished {
    pub fn dump(&self) -> String {
        format!(
            "status={:?} signal={:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- strace ---\n{}",
            self.status,
            self.signal,
            self.stdout,
            self.stderr,
            self.strace.as_deref().unwrap_or("(not traced)")
        )
    }

    /// The fdatasync/fsync calls strace saw on `path` (None when not traced).
    pub fn syncs_of(&self, path: &Path) -> Option<usize> {
        let log = self.strace.as_ref()?;
        let needle = format!("<{}>", path.display());
        Some(
            log.lines()
                .filter(|l| {
                    (l.contains("fdatasync(") || l.contains("fsync(")) && l.contains(&needle)
                })
                .filter(|l| l.trim_end().ends_with("= 0"))
                .count(),
        )
    }
}

/// A pmemvm process with its output collected in the background.
#[allow(missing_debug_implementations)]
pub struct Running {
    pub child: Child,
    /// The pmemvm process (the child itself, or strace's child).
    pub pid: i32,
    pub stdout: Arc<Mutex<String>>,
    pub readers: Vec<JoinHandle<()>>,
    pub stderr: Arc<Mutex<String>>,
    pub strace_log: Option<PathBuf>,
    /// Reaped (or given up on): nothing left to clean up.
    pub done: bool,
}

impl Running {
    /// SIGKILLs pmemvm (and strace, if it runs under it) and reaps them.
    pub fn kill(&mut self) {
        // Only while our child lives: then pmemvm (it, or strace's tracee)
        // has not been reaped and its pid cannot have been reused.
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on the pid of a live process this test started.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    /// A failed assertion must not leave a VM running.
    fn drop(&mut self) {
        if !self.done {
            self.kill();
        }
    }
}

pub fn collect(mut r: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => into
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    })
}

pub fn strace_available() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Running {
    /// Starts `pmemvm ARGS` with `TMPDIR=tmpdir` and `stdin`; under strace
    /// (fdatasync/fsync, paths shown) when `trace_to` is given.
    pub fn start(args: &[String], tmpdir: &Path, stdin: Stdio, trace_to: Option<&Path>) -> Self {
        Self::start_with_env(args, tmpdir, stdin, trace_to, &[])
    }

    /// [`Running::start`] with extra environment variables.
    pub fn start_with_env(
        args: &[String],
        tmpdir: &Path,
        stdin: Stdio,
        trace_to: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = match trace_to {
            Some(log) => {
                let mut c = Command::new("strace");
                c.args([
                    "-f",
                    "-qq",
                    "--seccomp-bpf",
                    "-y",
                    "-e",
                    "trace=fdatasync,fsync",
                    "-o",
                ])
                .arg(log)
                .arg(pmemvm_bin());
                c
            }
            None => Command::new(pmemvm_bin()),
        };
        cmd.args(args)
            .envs(env.iter().copied())
            .env("TMPDIR", tmpdir)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning pmemvm");
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().expect("stdout"), stdout.clone()),
            collect(child.stderr.take().expect("stderr"), stderr.clone()),
        ];
        let mut pid = i32::try_from(child.id()).expect("pid");
        if trace_to.is_some() {
            // pmemvm is the child of strace whose executable is pmemvm
            // (strace also forks short-lived probe children first).
            let bin = std::fs::canonicalize(pmemvm_bin()).unwrap_or_else(|_| pmemvm_bin());
            let start = Instant::now();
            let traced = loop {
                let children = std::fs::read_dir(format!("/proc/{pid}/task"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
                    .collect::<String>();
                let found = children
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .find(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == bin));
                if let Some(p) = found {
                    break p;
                }
                // A pmemvm that ends at once (a vCPU fault at its first
                // exit) can come and go between two looks: strace has
                // then ended too, with pmemvm's status, which `finish`
                // reads and the test judges. Nothing is left to signal.
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break pid;
                }
                if start.elapsed() > DEADLINE {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("strace did not start pmemvm");
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            pid = traced;
        }
        Self {
            child,
            pid,
            stdout,
            readers,
            stderr,
            strace_log: trace_to.map(Path::to_path_buf),
            done: false,
        }
    }

    /// Waits until stdout contains `needle`; false at the deadline or exit.
    pub fn wait_for(&mut self, needle: &str) -> bool {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            if self
                .stdout
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(needle)
            {
                return true;
            }
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) with a pid of a process this test started and has not reaped.
        let rc = unsafe { libc::kill(self.pid, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", self.pid);
    }

    /// Waits for the end (kills at the deadline) and collects everything.
    pub fn finish(mut self) -> Finished {
        let f = self.wait_and_collect();
        self.done = true;
        f
    }

    pub fn wait_and_collect(&mut self) -> Finished {
        use std::os::unix::process::ExitStatusExt;
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for pmemvm") {
                break s;
            }
            if start.elapsed() > DEADLINE {
                self.kill();
                self.done = true;
                let out = self
                    .stdout
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                panic!("pmemvm did not end within {DEADLINE:?}; stdout:\n{out}");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let take = |m: &Arc<Mutex<String>>| m.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Finished {
            status: status.code(),
            signal: status.signal(),
            stdout: take(&self.stdout),
            stderr: take(&self.stderr),
            strace: self
                .strace_log
                .as_ref()
                .map(|p| std::fs::read_to_string(p).unwrap_or_default()),
        }
    }
}

/// Everything in `dir`, recursively, for "nothing left behind" checks.
pub fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.clone());
            if p.is_dir() {
                out.extend(listing(&p));
            }
        }
    }
    out.sort();
    out
}
