//! The stub's thread: waits for a debugger on the `--gdb` endpoint, stops
//! the guest for it, runs the GDB remote protocol (`gdbstub`'s state
//! machine, polled so the thread also sees vCPU stops and the VM's end),
//! and when the debugger detaches takes its breakpoints out and lets the
//! guest run on — then waits for the next one. A guest that ends while
//! gdb is attached is reported to gdb as an exit with pmemvm's status.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use devices::exit::{ExitNotifier, ExitRequest};
use gdbstub::common::Signal;
use gdbstub::conn::Connection;
use gdbstub::stub::state_machine::GdbStubStateMachine;
use gdbstub::stub::{DisconnectReason, GdbStub, MultiThreadStopReason};
use vm_memory::GuestMemoryMmap;

use super::hub::{DebugHub, Holder, StopCause};
use super::target::{tid_of, BreakpointMode, GuestTarget};
use super::{GdbError, GdbListener};
use crate::owner_socket::Gate;

/// What the stub says when it listens (the nested engine watches for it).
pub const LISTENING: &str = "gdb: waiting for a debugger at";

/// How long stopping the guest for the debugger may take.
const HOLD_DEADLINE: Duration = Duration::from_secs(5);
/// How often a waiting stub looks at the VM.
const POLL: Duration = Duration::from_millis(20);

/// A bound endpoint; a Unix socket is removed with it.
#[derive(Debug)]
pub(crate) enum Endpoint {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
    Serial(File),
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Self::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Opens a serial device for the protocol, raw (no echo, no line editing,
/// Ctrl-C a byte like any other).
pub(crate) fn open_serial(path: &Path) -> Result<File, GdbError> {
    crate::tty::open_raw(path).map_err(|source| GdbError::Serial {
        path: path.to_path_buf(),
        source,
    })
}

/// One debugger's connection.
#[derive(Debug)]
pub struct Stream(Box<StreamKind>);

#[derive(Debug)]
enum StreamKind {
    Tcp(TcpStream),
    Unix(UnixStream),
    Serial(File),
}

impl Stream {
    fn fd(&self) -> RawFd {
        match &*self.0 {
            StreamKind::Tcp(s) => s.as_raw_fd(),
            StreamKind::Unix(s) => s.as_raw_fd(),
            StreamKind::Serial(f) => f.as_raw_fd(),
        }
    }

    fn io(&mut self) -> &mut dyn ReadWrite {
        match &mut *self.0 {
            StreamKind::Tcp(s) => s,
            StreamKind::Unix(s) => s,
            StreamKind::Serial(f) => f,
        }
    }

    /// Waits up to `timeout` for a byte; `Ok(None)` when none came.
    fn read_byte(&mut self, timeout: Duration) -> std::io::Result<Option<u8>> {
        let mut pfd = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            };
        }
        if n == 0 {
            return Ok(None);
        }
        let mut b = [0u8; 1];
        match self.io().read(&mut b)? {
            0 => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the debugger closed the connection",
            )),
            _ => Ok(Some(b[0])),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

impl Connection for Stream {
    type Error = std::io::Error;

    fn write(&mut self, byte: u8) -> Result<(), Self::Error> {
        self.io().write_all(&[byte])
    }

    fn write_all(&mut self, buf: &[u8]) -> Result<(), Self::Error> {
        self.io().write_all(buf)
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        self.io().flush()
    }

    fn on_session_start(&mut self) -> Result<(), Self::Error> {
        if let StreamKind::Tcp(s) = &*self.0 {
            s.set_nodelay(true)?;
        }
        Ok(())
    }
}

/// Waits for a debugger; `None` when the VM ended first. On a Unix socket or
/// from a loopback address, another user's connection is refused at `gate`
/// and closed.
fn accept(endpoint: &Endpoint, exit: &ExitNotifier, gate: &mut Gate) -> Option<Stream> {
    let kind = loop {
        if exit.get().is_some() {
            return None;
        }
        let got = match endpoint {
            Endpoint::Tcp(l) => l.accept().map(|(s, _)| StreamKind::Tcp(s)),
            Endpoint::Unix(l, _) => l.accept().map(|(s, _)| StreamKind::Unix(s)),
            Endpoint::Serial(f) => f.try_clone().map(StreamKind::Serial),
        };
        match got {
            Ok(StreamKind::Unix(s)) if !gate.admit(&s) => {}
            Ok(StreamKind::Tcp(s)) if !gate.admit_tcp(&s) => {}
            Ok(k) => break k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                log::warn!("gdb: accepting a debugger failed: {e}");
                std::thread::sleep(POLL);
            }
        }
    };
    let ok = match &kind {
        StreamKind::Tcp(s) => s.set_nonblocking(false),
        StreamKind::Unix(s) => s.set_nonblocking(false),
        StreamKind::Serial(_) => Ok(()),
    };
    if let Err(e) = ok {
        log::warn!("gdb: the debugger's connection: {e}");
    }
    Some(Stream(Box::new(kind)))
}

/// Waits up to `limit` for the stub's thread, which tells an attached gdb
/// how the guest ended and returns; left running (detached) after that.
pub fn join_within(thread: std::thread::JoinHandle<()>, limit: Duration) {
    let end = std::time::Instant::now() + limit;
    while !thread.is_finished() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    if thread.is_finished() {
        let _ = thread.join();
    }
}

/// How a debugging session ended.
#[derive(Debug)]
enum End {
    /// gdb detached or went away: the guest runs on.
    Detached,
    /// gdb's `kill`: the VM ends.
    Killed,
    /// The VM ended.
    VmEnded,
}

/// The stub's thread.
#[derive(Debug)]
pub struct Server {
    listener: GdbListener,
    hub: Arc<DebugHub>,
    mem: GuestMemoryMmap,
    exit: Arc<ExitNotifier>,
    kick: libc::c_int,
    breakpoints: BreakpointMode,
}

impl Server {
    /// A server for `listener` over `hub`'s vCPUs, making breakpoints as
    /// `breakpoints` says.
    pub fn new(
        listener: GdbListener,
        hub: Arc<DebugHub>,
        mem: GuestMemoryMmap,
        exit: Arc<ExitNotifier>,
        breakpoints: BreakpointMode,
    ) -> Self {
        Self {
            listener,
            hub,
            mem,
            exit,
            kick: crate::signals::kick_signal(),
            breakpoints,
        }
    }

    /// Starts the thread `gdb`.
    pub fn spawn(self) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("gdb".into())
            .spawn(move || self.serve())
    }

    fn serve(self) {
        let nonblocking = match &self.listener.endpoint {
            Endpoint::Tcp(l) => l.set_nonblocking(true),
            Endpoint::Unix(l, _) => l.set_nonblocking(true),
            Endpoint::Serial(_) => Ok(()),
        };
        if let Err(e) = nonblocking {
            self.exit.request(ExitRequest::Fatal(format!("gdb: {e}")));
            return;
        }
        // A TCP port 0 is shown as the port the kernel gave.
        let shown = match &self.listener.endpoint {
            Endpoint::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| self.listener.addr.to_string(), |a| a.to_string()),
            _ => self.listener.addr.to_string(),
        };
        eprintln!(
            "pmemvm: {LISTENING} {shown}{}",
            if self.listener.wait {
                " (the guest starts when it attaches)"
            } else {
                ""
            }
        );
        let mut target = GuestTarget::new(self.hub.clone(), self.mem.clone(), self.breakpoints);
        let mut gate = Gate::new(format!("--gdb {shown}"));
        loop {
            let Some(mut stream) = accept(&self.listener.endpoint, &self.exit, &mut gate) else {
                return;
            };
            // gdb speaks first; a serial line is "connected" at once, so
            // the guest is stopped only when a debugger says something.
            let first = loop {
                if self.exit.get().is_some() {
                    return;
                }
                match stream.read_byte(POLL) {
                    Ok(Some(b)) => break Some(b),
                    Ok(None) => {}
                    Err(_) => break None,
                }
            };
            let Some(first) = first else { continue };
            log::info!("gdb: a debugger attached");
            self.hold();
            let end = self.session(stream, first, &mut target);
            log::info!("gdb: session ended: {end:?}");
            match end {
                End::Detached => target.release_all(),
                End::Killed => {
                    target.release_all();
                    self.exit.request(ExitRequest::Signal(libc::SIGKILL));
                    return;
                }
                End::VmEnded => return,
            }
        }
    }

    fn hold(&self) {
        if let Err(running) = self
            .hub
            .hold_all(Holder::Debugger, self.kick, HOLD_DEADLINE)
        {
            log::warn!(
                "gdb: vCPU {running:?} did not stop within {} s (busy in pmemvm's device code?)",
                HOLD_DEADLINE.as_secs()
            );
        }
    }

    /// The stop to report after `first`: every vCPU held, and a
    /// breakpoint or step preferred to a plain hold.
    fn gather(&self, first: super::hub::Stop) -> super::hub::Stop {
        self.hold();
        let mut best = first;
        while let Some(s) = self.hub.next_stop(Duration::ZERO) {
            if best.cause == StopCause::Held && s.cause != StopCause::Held {
                best = s;
            }
        }
        best
    }

    fn session(&self, stream: Stream, first: u8, target: &mut GuestTarget) -> End {
        match self.protocol(stream, first, target) {
            Ok(end) => end,
            Err(e) => {
                log::warn!("gdb: {e}");
                if self.exit.get().is_some() {
                    End::VmEnded
                } else {
                    End::Detached
                }
            }
        }
    }

    fn protocol(&self, stream: Stream, first: u8, target: &mut GuestTarget) -> Result<End, String> {
        let err = |e: gdbstub::stub::GdbStubError<GdbError, std::io::Error>| e.to_string();
        let mut sm = GdbStub::new(stream)
            .run_state_machine(target)
            .map_err(err)?;
        let mut pending = Some(first);
        loop {
            sm = match sm {
                GdbStubStateMachine::Idle(mut g) => {
                    let byte = match pending.take() {
                        Some(b) => b,
                        None => loop {
                            if let Some(b) =
                                g.borrow_conn().read_byte(POLL).map_err(|e| e.to_string())?
                            {
                                break b;
                            }
                            if self.exit.get().is_some() {
                                return Ok(End::VmEnded);
                            }
                        },
                    };
                    g.incoming_data(target, byte).map_err(err)?
                }
                GdbStubStateMachine::Running(mut g) => {
                    if let Some(b) = g.borrow_conn().read_byte(POLL).map_err(|e| e.to_string())? {
                        g.incoming_data(target, b).map_err(err)?
                    } else if let Some(stop) = self.hub.next_stop(Duration::ZERO) {
                        let stop = self.gather(stop);
                        match target.stop_reason(stop) {
                            Some(reason) => g.report_stop(target, reason).map_err(err)?,
                            None => GdbStubStateMachine::Running(g),
                        }
                    } else if let Some(request) = self.exit.get() {
                        let code = crate::exit_status::for_request(&request);
                        let _ = g.report_stop(target, MultiThreadStopReason::Exited(code));
                        return Ok(End::VmEnded);
                    } else {
                        GdbStubStateMachine::Running(g)
                    }
                }
                GdbStubStateMachine::CtrlCInterrupt(g) => {
                    self.hold();
                    self.hub.drain_stops();
                    let reason = tid_of(0).map(|tid| MultiThreadStopReason::SignalWithThread {
                        tid,
                        signal: Signal::SIGINT,
                    });
                    g.interrupt_handled(target, reason).map_err(err)?
                }
                GdbStubStateMachine::Disconnected(g) => {
                    return Ok(match g.get_reason() {
                        DisconnectReason::Kill => End::Killed,
                        _ => End::Detached,
                    });
                }
            };
        }
    }
}
