//! The control socket's thread: accepts connections (at most
//! [`MAX_CLIENTS`] at once, each on its own thread, from this user or
//! root only: [`crate::owner_socket`]), reads request lines, and runs the
//! commands one at a time against the VM ([`Control`]). A connection that
//! sends nothing for [`IDLE_LIMIT`] is told so and closed, so clients that
//! connect and stay silent cannot keep `pmemvm ctl` out for long. Ends when
//! the VM does.

use crate::exit_status::Classified;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devices::exit::ExitNotifier;
use serde_json::{json, Value};

use super::protocol::{self, Command, Reply, MAX_LINE};
use super::{ApiListener, Endpoint};
use crate::debug::dump::Dumper;
use crate::debug::gdb::hub::Holder;
use crate::owner_socket::Gate;
use crate::stats::{DimmCounters, ExitStats, NvdimmCounts};

/// Connections served at once; more are told so and closed.
pub const MAX_CLIENTS: usize = 4;
/// How often the threads look at whether the VM ended.
const POLL: Duration = Duration::from_millis(100);
/// How long a connection may stay silent (between its requests, or before
/// its first) before it is closed. Long enough for a person typing into
/// `socat`; a command being run does not count.
pub const IDLE_LIMIT: Duration = Duration::from_secs(30);
/// How long `pause` waits for the vCPUs to stop.
const PAUSE_DEADLINE: Duration = Duration::from_secs(5);

/// Where pmemvm's counters are, read while the VM runs and at its end.
#[derive(Debug, Clone)]
pub struct Counters {
    /// VM exits.
    pub exits: Arc<ExitStats>,
    /// The DIMMs'.
    pub dimms: Vec<DimmCounters>,
    /// `_DSM` calls.
    pub dsm: Option<Arc<devices::nvdimm_dsm::DsmHandler>>,
    /// Hot-added DIMMs (theirs follow the boot DIMMs' counters).
    pub hotplug: Option<Arc<crate::nvdimm::hotplug::NvdimmHotplug>>,
}

impl Counters {
    /// Each DIMM's counters now.
    pub fn nvdimms(&self) -> Vec<NvdimmCounts> {
        let added = self
            .hotplug
            .as_ref()
            .map(|h| h.counters())
            .unwrap_or_default();
        self.dimms
            .iter()
            .chain(added.iter())
            .map(|d| NvdimmCounts {
                file: d.file.clone(),
                base: d.base,
                size: d.size,
                flushes: d.flush.flushes.load(Ordering::Relaxed),
                flush_failures: d.flush.failures.load(Ordering::Relaxed),
                label_calls: self.dsm.as_ref().map_or(0, |h| h.calls_for(d.handle)),
                machine_checks: d.poison.as_ref().map(|p| p.raised.load(Ordering::Relaxed)),
            })
            .collect()
    }
}

/// What the commands act on.
#[derive(Debug)]
pub struct Control {
    /// Dumps (and, through its hub, the vCPUs' pause).
    pub dumper: Arc<Dumper>,
    /// Counters.
    pub counters: Counters,
    /// The VM runs under `--gdb`, which owns pausing.
    pub under_gdb: bool,
    /// The pvpanic device (for `stats`).
    pub pvpanic: Arc<crate::pvpanic::PvPanic>,
    /// When the VM started.
    pub started: Instant,
    /// True while the vCPUs are paused by `pause`; also the lock that makes
    /// commands one at a time.
    pub paused: Mutex<bool>,
    /// The DIMMs' media errors (`media`).
    pub media: super::media::MediaControl,
    /// Room for hot-added DIMMs (`nvdimm add`), with `--nvdimm-slots`.
    pub hotplug: Option<Arc<crate::nvdimm::hotplug::NvdimmHotplug>>,
}

impl Control {
    fn gdb_refusal(&self, what: &str) -> Option<Reply> {
        self.under_gdb.then(|| {
            Reply::error(
                None,
                format!("'{what}' is refused: this VM runs under gdb (--gdb), which stops and resumes its vCPUs; use gdb's interrupt and continue, and its 'dump memory'"),
                true,
            )
        })
    }

    /// Runs one request.
    pub fn run(&self, request: protocol::Request) -> Reply {
        let id = request.id.clone();
        let mut paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        let mut reply = match request.command {
            Command::Version => Reply::ok(
                None,
                json!({"pmemvm": env!("CARGO_PKG_VERSION"), "protocol": protocol::PROTOCOL,
                       "vcpus": self.dumper.hub().vcpus()}),
            ),
            Command::Stats => Reply::ok(None, self.stats(*paused)),
            Command::Pause => self.gdb_refusal("pause").unwrap_or_else(|| {
                let hub = self.dumper.hub();
                match hub.hold_all(Holder::Pause, crate::signals::kick_signal(), PAUSE_DEADLINE) {
                    Ok(()) => {
                        hub.drain_stops();
                        *paused = true;
                        Reply::ok(None, json!({"paused": true}))
                    }
                    Err(running) => {
                        hub.release_all(Holder::Pause);
                        Reply::error(
                            None,
                            format!(
                                "vCPU(s) {running:?} did not stop within {} s; the guest runs on",
                                PAUSE_DEADLINE.as_secs()
                            ),
                            false,
                        )
                    }
                }
            }),
            Command::Resume => self.gdb_refusal("resume").unwrap_or_else(|| {
                // Only pause's hold: vCPUs a dump holds (--dump-on-panic)
                // run again when the dump is written.
                let hub = self.dumper.hub();
                hub.release_all(Holder::Pause);
                *paused = false;
                Reply::ok(None, json!({"paused": false}))
            }),
            Command::Dump { file, nvdimms } => {
                self.gdb_refusal("dump").unwrap_or_else(|| {
                    match self.dumper.dump(&file, None, nvdimms) {
                        Ok(info) => {
                            Reply::ok(None, serde_json::to_value(info).unwrap_or(Value::Null))
                        }
                        Err(e) => Reply::error(None, e.to_string(), e.is_usage()),
                    }
                })
            }
            Command::Media {
                action,
                target,
                range,
            } => match self.media.run(action, target, range.as_deref()) {
                Ok(v) => Reply::ok(None, v),
                Err((e, usage)) => Reply::error(None, e, usage),
            },
            Command::Health { dimm, action } => match self.media.health(dimm, action) {
                Ok(v) => Reply::ok(None, v),
                Err((e, usage)) => Reply::error(None, e, usage),
            },
            Command::Nvdimm(action) => self.nvdimm(action),
        };
        reply.id = id;
        reply
    }

    /// `nvdimm add|remove`.
    fn nvdimm(&self, action: protocol::NvdimmAction) -> Reply {
        match action {
            protocol::NvdimmAction::Remove(dimm) => Reply::error(
                None,
                format!(
                    "removing NVDIMM {dimm} is refused: persistent memory is not taken from a running guest (Linux has no path for a DIMM that leaves, and platforms offer no surprise removal); shut the guest down instead"
                ),
                true,
            ),
            protocol::NvdimmAction::Add(spec) => match &self.hotplug {
                None => Reply::error(
                    None,
                    "this VM has no empty NVDIMM slot to hot-add into: start it with --nvdimm-slots N (the --nvdimm DIMMs plus empty slots)"
                        .to_owned(),
                    true,
                ),
                Some(h) => match h.add(&spec) {
                    Ok(a) => Reply::ok(
                        None,
                        json!({"dimm": a.index, "handle": a.handle, "base": a.base,
                               "size": a.size, "file": a.file, "notified": a.notified,
                               "slots": h.slots(), "present": h.present()}),
                    ),
                    Err(e) => Reply::error(None, e.to_string(), e.is_usage()),
                },
            },
        }
    }

    fn stats(&self, paused: bool) -> Value {
        json!({
            "uptime_ms": u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "paused": paused,
            "guest_panicked": self.pvpanic.panicked(),
            "exits": self.counters.exits.snapshot(),
            "platform_events": self.media.events.as_ref().map(|e| {
                let (raised, read) = e.counts();
                json!({"raised": raised, "read_by_guest": read})
            }),
            "nvdimms": self.counters.nvdimms(),
            "dsm": self.counters.dsm.as_ref().map(|d| {
                let s = d.stats();
                let g = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
                json!({
                    "calls": g(&s.calls),
                    "errors": g(&s.errors),
                    "label_bytes_read": g(&s.label_bytes_read),
                    "label_bytes_written": g(&s.label_bytes_written),
                    "label_syncs": g(&s.label_syncs),
                })
            }),
        })
    }
}

/// Serves `listener` with `control` until `exit` has a request.
pub fn spawn(
    listener: ApiListener,
    control: Arc<Control>,
    exit: Arc<ExitNotifier>,
) -> std::io::Result<JoinHandle<()>> {
    spawn_with(listener, control, exit, IDLE_LIMIT)
}

/// [`spawn`] with a connection's silence limit `idle`.
fn spawn_with(
    listener: ApiListener,
    control: Arc<Control>,
    exit: Arc<ExitNotifier>,
    idle: Duration,
) -> std::io::Result<JoinHandle<()>> {
    let builder = std::thread::Builder::new().name("api".into());
    match &listener.endpoint {
        Endpoint::Unix(l) => {
            l.set_nonblocking(true)?;
            builder.spawn(move || {
                if let Endpoint::Unix(l) = &listener.endpoint {
                    accept_loop(l, listener.path(), &control, &exit, idle);
                }
            })
        }
        Endpoint::Serial(f) => {
            // One stream for the VM's life (the nested engine's): no limit.
            let reader = BufReader::with_capacity(8192, PolledTty(f.try_clone()?));
            let writer = f.try_clone()?;
            builder.spawn(move || {
                serve(reader, writer, &control, &exit, None);
                drop(listener);
            })
        }
    }
}

/// A tty read with the same time-out as a socket's: a read that finds no
/// byte within [`POLL`] is `TimedOut`, so the reader sees the VM's end.
struct PolledTty(std::fs::File);

impl Read for PolledTty {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let poll_ms = i32::try_from(POLL.as_millis()).unwrap_or(100);
        match crate::tty::readable(&self.0, poll_ms)? {
            true => self.0.read(buf),
            false => Err(ErrorKind::TimedOut.into()),
        }
    }
}

fn accept_loop(
    listener: &std::os::unix::net::UnixListener,
    path: &std::path::Path,
    control: &Arc<Control>,
    exit: &Arc<ExitNotifier>,
    idle: Duration,
) {
    let clients = Arc::new(AtomicUsize::new(0));
    let mut gate = Gate::new(format!("--api {}", path.display()));
    while exit.get().is_none() {
        let mut stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => {
                log::warn!("--api {}: accept failed: {e}", path.display());
                std::thread::sleep(POLL);
                continue;
            }
        };
        if !gate.admit(&stream) {
            let e = Reply::error(
                None,
                "this control socket takes connections from its owner (and root) only".into(),
                false,
            );
            let _ = stream.write_all(&e.line());
            continue;
        }
        let _ = stream.set_nonblocking(false);
        if clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            clients.fetch_sub(1, Ordering::SeqCst);
            let e = Reply::error(
                None,
                format!("{MAX_CLIENTS} clients are connected already; try again"),
                false,
            );
            let _ = stream.write_all(&e.line());
            continue;
        }
        let (control, exit, count) = (control.clone(), exit.clone(), clients.clone());
        let spawned = std::thread::Builder::new()
            .name("api-client".into())
            .spawn(move || {
                if let Ok(writer) = stream.try_clone() {
                    let _ = stream.set_read_timeout(Some(POLL));
                    serve(
                        BufReader::with_capacity(8192, stream),
                        writer,
                        &control,
                        &exit,
                        Some(idle),
                    );
                }
                count.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            clients.fetch_sub(1, Ordering::SeqCst);
            log::warn!("--api: cannot start a client thread: {e}");
        }
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes into `line`: `Some(too_long)`,
/// `None` at the end of the stream or the VM's. A longer line is consumed up
/// to its newline and reported as too long. With `idle`, a stream that sends
/// nothing for that long is a `TimedOut` error.
fn read_line<R: Read>(
    reader: &mut BufReader<R>,
    line: &mut Vec<u8>,
    exit: &ExitNotifier,
    idle: Option<Duration>,
) -> std::io::Result<Option<bool>> {
    line.clear();
    let mut too_long = false;
    let mut heard = Instant::now();
    loop {
        if exit.get().is_some() {
            return Ok(None);
        }
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if idle.is_some_and(|limit| heard.elapsed() >= limit) {
                    return Err(ErrorKind::TimedOut.into());
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        heard = Instant::now();
        if buf.is_empty() {
            return Ok(if line.is_empty() && !too_long {
                None
            } else {
                Some(too_long)
            });
        }
        let (chunk, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        if !too_long {
            if line.len() + chunk.len() >= MAX_LINE {
                too_long = true;
                line.clear();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let ended = done > chunk.len();
        reader.consume(done);
        if ended {
            return Ok(Some(too_long));
        }
    }
}

/// Answers the request lines of one connection (or serial device) until
/// it ends, stays silent for `idle`, or the VM ends.
fn serve<R: Read>(
    mut reader: BufReader<R>,
    mut writer: impl Write,
    control: &Control,
    exit: &ExitNotifier,
    idle: Option<Duration>,
) {
    let mut line = Vec::new();
    loop {
        let reply = match read_line(&mut reader, &mut line, exit, idle) {
            Err(e) if e.kind() == ErrorKind::TimedOut => {
                let secs = idle.map_or(0.0, |d| d.as_secs_f64());
                let bye = Reply::error(
                    None,
                    format!("closing this connection: no request for {secs} s"),
                    false,
                );
                let _ = writer.write_all(&bye.line());
                return;
            }
            Ok(None) | Err(_) => return,
            Ok(Some(true)) => {
                Reply::error(None, protocol::ProtocolError::TooLong.to_string(), true)
            }
            Ok(Some(false)) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(Some(false)) => match protocol::parse(&line) {
                Ok(request) => control.run(request),
                Err(e) => Reply::error(None, e.to_string(), true),
            },
        };
        if writer.write_all(&reply.line()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair() -> (BufReader<UnixStream>, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_read_timeout(Some(POLL)).unwrap();
        (BufReader::with_capacity(16, a), b)
    }

    #[test]
    fn lines_are_read_whole_and_an_overlong_one_is_refused_and_skipped() {
        let exit = ExitNotifier::new().unwrap();
        let (mut r, mut w) = pair();
        let mut long = vec![b'x'; MAX_LINE + 10];
        long.push(b'\n');
        w.write_all(b"{\"command\":\"stats\"}\n").unwrap();
        w.write_all(&long).unwrap();
        w.write_all(b"tail").unwrap();
        drop(w);
        let mut line = Vec::new();
        assert_eq!(
            read_line(&mut r, &mut line, &exit, None).unwrap(),
            Some(false)
        );
        assert_eq!(line, b"{\"command\":\"stats\"}");
        assert_eq!(
            read_line(&mut r, &mut line, &exit, None).unwrap(),
            Some(true)
        );
        assert!(line.is_empty(), "an overlong line is not kept");
        assert_eq!(
            read_line(&mut r, &mut line, &exit, None).unwrap(),
            Some(false)
        );
        assert_eq!(line, b"tail", "a last line without newline counts");
        assert_eq!(read_line(&mut r, &mut line, &exit, None).unwrap(), None);
    }

    #[test]
    fn a_reader_leaves_when_the_vm_ends() {
        let exit = ExitNotifier::new().unwrap();
        let (mut r, _w) = pair();
        exit.request(devices::exit::ExitRequest::PowerOff);
        let mut line = Vec::new();
        assert_eq!(read_line(&mut r, &mut line, &exit, None).unwrap(), None);
    }

    /// The control of a one-vCPU VM without devices: enough for `version`.
    fn control(exit: &Arc<ExitNotifier>) -> Arc<Control> {
        use vm_memory::{GuestAddress, GuestMemoryMmap};
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
        let hub = Arc::new(crate::debug::gdb::hub::DebugHub::new(1, false));
        Arc::new(Control {
            dumper: Arc::new(Dumper::new(mem, hub, std::path::Path::new("/nonexistent"))),
            counters: Counters {
                exits: Arc::new(ExitStats::default()),
                dimms: Vec::new(),
                dsm: None,
                hotplug: None,
            },
            under_gdb: false,
            pvpanic: Arc::new(crate::pvpanic::PvPanic::new(exit.clone())),
            started: Instant::now(),
            paused: Mutex::new(false),
            media: super::super::media::MediaControl::default(),
            hotplug: None,
        })
    }

    #[test]
    fn silent_connections_are_closed_and_do_not_keep_ctl_out() {
        use super::super::client::{call, Request};
        let exit = Arc::new(ExitNotifier::new().unwrap());
        let dir = std::env::temp_dir().join(format!("pmemvm-api-idle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("api.sock");
        let idle = Duration::from_secs(1);
        let listener = ApiListener::bind(&sock).unwrap();
        let thread = spawn_with(listener, control(&exit), exit.clone(), idle).unwrap();
        let silent: Vec<UnixStream> = (0..MAX_CLIENTS)
            .map(|_| UnixStream::connect(&sock).unwrap())
            .collect();
        // Accepted in order: the four are counted before the fifth.
        let e = call(&sock, &Request::Version).unwrap_err();
        assert!(
            e.to_string().contains("clients are connected already"),
            "the fifth is kept out while they stay: {e}"
        );
        for s in &silent {
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut bye = String::new();
            BufReader::new(s).read_to_string(&mut bye).unwrap();
            assert!(
                bye.contains("closing this connection: no request for 1 s"),
                "{bye:?}"
            );
        }
        // Each one's thread counts itself out just after closing it.
        let end = Instant::now() + Duration::from_secs(5);
        let answer = loop {
            match call(&sock, &Request::Version) {
                Ok(a) => break a,
                Err(e) if Instant::now() >= end => panic!("ctl still kept out: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        assert!(answer.contains("\"protocol\": 1"), "{answer}");
        exit.request(devices::exit::ExitRequest::PowerOff);
        thread.join().unwrap();
        assert!(!sock.exists(), "the socket goes with the VM");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_silent_reader_times_out_and_a_talking_one_does_not() {
        let exit = ExitNotifier::new().unwrap();
        let (mut r, mut w) = pair();
        let idle = Some(Duration::from_millis(300));
        let mut line = Vec::new();
        let e = read_line(&mut r, &mut line, &exit, idle).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        // Bytes a little at a time, each within the limit: no time-out.
        let writer = std::thread::spawn(move || {
            for b in b"{\"command\":\"stats\"}\n" {
                std::thread::sleep(Duration::from_millis(30));
                w.write_all(&[*b]).unwrap();
            }
        });
        assert_eq!(
            read_line(&mut r, &mut line, &exit, idle).unwrap(),
            Some(false)
        );
        assert_eq!(line, b"{\"command\":\"stats\"}");
        writer.join().unwrap();
    }
}
