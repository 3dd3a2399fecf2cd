//! The control socket's client, the other end of [`super::protocol`]: one request line, the
//! one reply, the answer in words. `pmemvm ctl SOCKET COMMAND` is this with a command line
//! around it; tests and programs that drive a running VM use it too.
//!
//! It speaks only to the caller's own VMs: the socket file must belong to the caller or root,
//! and so must the process listening on it (its peer credentials, checked after connecting, so
//! a socket swapped in after the first check is caught too; [`crate::owner_socket`]). It
//! reads at most [`MAX_REPLY`] bytes of a reply.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::protocol::Reply;

/// How long the client waits for an answer (a dump of a large guest takes a while).
const REPLY_LIMIT: Duration = Duration::from_secs(900);
/// The longest reply the client reads, newline included (`stats` of a machine with many
/// DIMMs is a few KiB).
pub const MAX_REPLY: u64 = 4 << 20;

/// What a client asks of the VM; with the `clap` feature, `pmemvm ctl SOCKET`'s
/// commands (their help is these comments).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::Subcommand))]
pub enum Request {
    /// pmemvm's and the protocol's versions.
    Version,
    /// pmemvm's counters (VM exits, NVDIMM flushes, `_DSM` calls), as JSON.
    Stats,
    /// Stop the vCPUs.
    Pause,
    /// Let the vCPUs run again.
    Resume,
    /// Write the guest's RAM and vCPU registers to FILE (a new file), an
    /// ELF core for `crash vmlinux FILE` and `drgn -c FILE -s vmlinux`.
    Dump {
        /// The new file (a relative path is taken from here; it is sent absolute).
        file: PathBuf,
        /// The NVDIMMs' ranges too (they are in their backing files anyway;
        /// with this the dump is one file, and as large as RAM and DIMMs).
        #[cfg_attr(feature = "clap", arg(long))]
        nvdimms: bool,
    },
    /// A DIMM's media errors while the guest runs: inject (the guest is
    /// notified and scrubs), clear, list.
    #[cfg_attr(feature = "clap", command(subcommand))]
    Media(MediaRequest),
    /// A DIMM's health while the guest runs: set (the DIMM's device is
    /// notified, so `ndctl monitor` sees it), get.
    #[cfg_attr(feature = "clap", command(subcommand))]
    Health(HealthRequest),
    /// Hot-add an NVDIMM into an empty slot (the VM was started with
    /// --nvdimm-slots N); removal is refused.
    #[cfg_attr(feature = "clap", command(subcommand))]
    Nvdimm(NvdimmRequest),
}

/// `nvdimm` requests (`pmemvm ctl SOCKET nvdimm ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::Subcommand))]
pub enum NvdimmRequest {
    /// A new DIMM as --nvdimm takes it: SIZE[,file=PATH][,label-size=SIZE][,prealloc]
    /// [,hugepages][,badblocks=...] (a relative file= path is the VM's, from where
    /// pmemvm started). It joins guest NUMA node 0; the guest is notified (0x80)
    /// and its nfit driver adds the region.
    Add {
        /// The DIMM.
        spec: String,
    },
    /// Refused: persistent memory is not taken from a running guest.
    Remove {
        /// The DIMM: its place among the machine's DIMMs, from 0.
        dimm: u32,
    },
}

/// `media` requests (`pmemvm ctl SOCKET media ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::Subcommand))]
pub enum MediaRequest {
    /// RANGE joins DIMM's error list (saved in its backing file) and the
    /// guest is notified (0x81 on the NVDIMM root device): Linux scrubs and
    /// adds it to the namespace's badblocks. With --cxl, RANGE's 64-byte
    /// units join CXL device DIMM's poison list and a General Media event
    /// record goes into its Failure log, with the device's event interrupt.
    Inject {
        /// The DIMM: its place among the --nvdimm options, from 0 (with
        /// --cxl, the device's among the --cxl-pmem options).
        dimm: u32,
        /// OFFSET+LEN[:OFFSET+LEN...] in bytes from the region's start (a
        /// CXL device's: its device physical address), multiples of 512 (K,
        /// M, G suffixes), e.g. 1M+4K.
        range: String,
        /// DIMM names a --cxl-pmem device.
        #[cfg_attr(feature = "clap", arg(long))]
        cxl: bool,
    },
    /// RANGE leaves DIMM's error list (the guest's badblocks stay until it
    /// rewrites the range, as on hardware); with --cxl, the CXL device's
    /// poison list.
    Clear {
        /// The DIMM: its place among the --nvdimm options, from 0 (with
        /// --cxl, the device's among the --cxl-pmem options).
        dimm: u32,
        /// OFFSET+LEN[:OFFSET+LEN...], as for inject.
        range: String,
        /// DIMM names a --cxl-pmem device.
        #[cfg_attr(feature = "clap", arg(long))]
        cxl: bool,
    },
    /// The error list of DIMM (of every DIMM and CXL device without one), as
    /// JSON.
    List {
        /// The DIMM: its place among the --nvdimm options, from 0 (with
        /// --cxl, the device's among the --cxl-pmem options).
        dimm: Option<u32>,
        /// DIMM names a --cxl-pmem device.
        #[cfg_attr(feature = "clap", arg(long, requires = "dimm"))]
        cxl: bool,
    },
}

/// `health` requests (`pmemvm ctl SOCKET health ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::Subcommand))]
pub enum HealthRequest {
    /// Changes DIMM's SMART values (saved in its backing file) and notifies
    /// its ACPI device (0x81).
    Set {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
        /// health=ok|non-critical|critical|fatal, temperature=C, spares=%,
        /// alarm=none|spares+mtemp+ctemp (one or more).
        #[cfg_attr(feature = "clap", arg(required = true))]
        settings: Vec<String>,
    },
    /// DIMM's SMART values now, as JSON.
    Get {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
    },
}

/// Errors of a client's request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing, or not a socket, at the path.
    #[error(
        "{0} is not a control socket (pmemvm boot/run --api PATH creates one while the guest runs)"
    )]
    NotASocket(PathBuf),
    /// The socket file is another user's.
    #[error("{path} belongs to uid {uid}, not to you (uid {me}) or root: pmemvm ctl speaks only to control sockets of your own VMs", path = .path.display(), me = crate::owner_socket::own_uid())]
    NotOwner {
        /// The socket.
        path: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// The process listening on the socket is another user's.
    #[error("the process listening at {path} runs as uid {uid}, not as you (uid {me}) or root; the request was not sent", path = .path.display(), me = crate::owner_socket::own_uid())]
    ForeignListener {
        /// The socket.
        path: PathBuf,
        /// The listener's uid.
        uid: u32,
    },
    /// Nobody listens (the VM ended).
    #[error("no VM answers at {path} ({source}); it may have ended")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The conversation broke off.
    #[error("talking to the VM at {path}: {reason}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// What happened.
        reason: String,
    },
    /// A file's path (dump, new DIMM) cannot be made absolute.
    #[error("{path}: cannot tell its absolute path ({source})", path = .0.display(), source = .1)]
    Path(PathBuf, std::io::Error),
    /// pmemvm refused or failed the request.
    #[error("{message}")]
    Refused {
        /// pmemvm's sentence.
        message: String,
        /// The request was wrong (status 2).
        usage: bool,
    },
}

impl crate::exit_status::Classified for ClientError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::NotASocket(_) | Self::Path(..) | Self::NotOwner { .. } => Usage,
            Self::Refused { usage: true, .. } => Usage,
            Self::Refused { usage: false, .. } => Environment,
            Self::Connect { .. } | Self::Io { .. } | Self::ForeignListener { .. } => Environment,
        }
    }
}

/// The request line for `command`.
fn request_line(command: &Request) -> Result<Value, ClientError> {
    Ok(match command {
        Request::Version => json!({"command": "version"}),
        Request::Stats => json!({"command": "stats"}),
        Request::Pause => json!({"command": "pause"}),
        Request::Resume => json!({"command": "resume"}),
        Request::Dump { file, nvdimms } => {
            let abs = std::path::absolute(file).map_err(|e| ClientError::Path(file.clone(), e))?;
            match nvdimms {
                true => json!({"command": "dump", "file": abs, "nvdimms": true}),
                false => json!({"command": "dump", "file": abs}),
            }
        }
        Request::Media(action) => media_line(action),
        Request::Health(action) => match action {
            HealthRequest::Set { dimm, settings } => {
                json!({"command": "health", "action": "set", "dimm": dimm, "set": settings.join(",")})
            }
            HealthRequest::Get { dimm } => {
                json!({"command": "health", "action": "get", "dimm": dimm})
            }
        },
        Request::Nvdimm(NvdimmRequest::Add { spec }) => {
            // Checked here, and a relative file= made absolute as for `dump`:
            // the VM may run elsewhere than this client.
            let mut parsed: crate::config::NvdimmSpec =
                spec.parse().map_err(|e| ClientError::Refused {
                    message: format!("{e}"),
                    usage: true,
                })?;
            if let Some(file) = parsed.file.take() {
                parsed.file =
                    Some(std::path::absolute(&file).map_err(|e| ClientError::Path(file, e))?);
            }
            json!({"command": "nvdimm", "action": "add", "spec": parsed.to_string()})
        }
        Request::Nvdimm(NvdimmRequest::Remove { dimm }) => {
            json!({"command": "nvdimm", "action": "remove", "dimm": dimm})
        }
    })
}

/// What to print for a done command.
fn answer(command: &Request, result: &Value) -> String {
    let n = |k: &str| result.get(k).and_then(Value::as_u64).unwrap_or(0);
    match command {
        Request::Media(action) => media_answer(action, result),
        Request::Health(HealthRequest::Set { .. }) => format!(
            "DIMM {}: health {}, media temperature {} °C, spares {} %{}; {}",
            result["dimm"],
            result["health"].as_str().unwrap_or("?"),
            result["media_temperature"],
            result["spares"],
            match result["alarms_tripped"].as_array() {
                Some(a) if !a.is_empty() => format!(
                    ", alarms tripped: {}",
                    a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
                ),
                _ => String::new(),
            },
            match result["notified"].as_bool() {
                Some(true) => "its device was notified (0x81: ndctl monitor in the guest reports it)",
                _ => "its device was NOT notified (see pmemvm's log)",
            }
        ),
        Request::Health(_) => {
            serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string())
        }
        Request::Version | Request::Stats => {
            serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string())
        }
        Request::Nvdimm(_) => format!(
            "DIMM {} hot-added: {} bytes at {:#x} (NFIT handle {:#x}), file {}; {} of {} slots used; {}",
            result["dimm"],
            n("size"),
            n("base"),
            n("handle"),
            result["file"].as_str().unwrap_or("?"),
            n("present"),
            n("slots"),
            match result["notified"].as_bool() {
                Some(true) => "the guest was notified (0x80 on the NVDIMM root device: it reads _FIT and adds the region)",
                _ => "the guest was NOT notified (see pmemvm's log)",
            }
        ),
        Request::Pause => "paused: the vCPUs are stopped (pmemvm ctl SOCKET resume lets them run)".into(),
        Request::Resume => "running".into(),
        Request::Dump { .. } => format!(
            "{}: {} MiB of guest RAM{} ({} MiB not zero), {} vCPU(s), {}",
            result.get("file").and_then(Value::as_str).unwrap_or("?"),
            n("ram_bytes") >> 20,
            match n("nvdimm_bytes") >> 20 {
                0 => String::new(),
                mib => format!(" and {mib} MiB of NVDIMMs"),
            },
            n("data_bytes") >> 20,
            n("vcpus"),
            match (
                result.get("kernel_release").and_then(Value::as_str),
                result.get("vmcoreinfo_from").and_then(Value::as_str).unwrap_or("")
            ) {
                (Some(r), from) => format!("kernel {r}: crash vmlinux FILE, or drgn -c FILE -s vmlinux (VMCOREINFO {from})"),
                (None, why) => why.to_string(),
            }
        ),
    }
}

/// A `media` request's line: the device under `"dimm"` or, with `--cxl`,
/// under `"cxl"`.
fn media_line(action: &MediaRequest) -> Value {
    let key = |cxl: bool| if cxl { "cxl" } else { "dimm" };
    let (verb, device, range) = match action {
        MediaRequest::Inject { dimm, range, cxl } => ("inject", Some((*dimm, *cxl)), Some(range)),
        MediaRequest::Clear { dimm, range, cxl } => ("clear", Some((*dimm, *cxl)), Some(range)),
        MediaRequest::List { dimm, cxl } => ("list", dimm.map(|d| (d, *cxl)), None),
    };
    let mut line = json!({"command": "media", "action": verb});
    if let Some((index, cxl)) = device {
        line[key(cxl)] = json!(index);
    }
    if let Some(range) = range {
        line["range"] = json!(range);
    }
    line
}

/// What to print for a done `media` command.
fn media_answer(action: &MediaRequest, result: &Value) -> String {
    if matches!(action, MediaRequest::List { .. }) {
        return serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string());
    }
    let cxl = result.get("cxl").is_some();
    let (device, list_key, start, what) = match cxl {
        true => (
            format!("CXL device {}", result["cxl"]),
            "poison",
            "dpa",
            "poison",
        ),
        false => (
            format!("DIMM {}", result["dimm"]),
            "bad_ranges",
            "offset",
            "bad ranges",
        ),
    };
    let list: Vec<String> = result[list_key]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| format!("{}+{}", r[start], r["length"]))
                .collect()
        })
        .unwrap_or_default();
    let ranges = match list.is_empty() {
        true => "none".to_owned(),
        false => list.join(":"),
    };
    let notified = result["notified"].as_bool() == Some(true);
    match action {
        MediaRequest::Inject { .. } => format!(
            "{device}: {what} now {ranges}; {}",
            match (cxl, notified) {
                (false, true) => "the guest was notified (0x81 on the NVDIMM root device: it scrubs and adds them to badblocks)",
                (false, false) => "the guest was NOT notified (see pmemvm's log); it sees them at its next scrub",
                (true, true) => "the guest was interrupted (a General Media event in the device's Failure log)",
                (true, false) => "the event record waits in the device's Failure log (the guest has not enabled its event interrupt)",
            }
        ),
        _ => format!(
            "{device}: {} bytes cleared; {what} now {ranges}",
            result["cleared_bytes"]
        ),
    }
}

/// Connects to `socket` when it, and the process listening there, are the caller's or root's.
fn connect(socket: &Path) -> Result<UnixStream, ClientError> {
    let is_socket = std::fs::metadata(socket).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        return Err(ClientError::NotASocket(socket.to_owned()));
    }
    let connect_error = |source| ClientError::Connect {
        path: socket.to_owned(),
        source,
    };
    if let Some(uid) = crate::owner_socket::check_owner(socket).map_err(connect_error)? {
        return Err(ClientError::NotOwner {
            path: socket.to_owned(),
            uid,
        });
    }
    let stream = UnixStream::connect(socket).map_err(connect_error)?;
    let listener = crate::owner_socket::peer_uid(&stream).map_err(connect_error)?;
    if !crate::owner_socket::may_connect(listener) {
        return Err(ClientError::ForeignListener {
            path: socket.to_owned(),
            uid: listener,
        });
    }
    stream
        .set_read_timeout(Some(REPLY_LIMIT))
        .map_err(connect_error)?;
    Ok(stream)
}

/// One reply line of at most [`MAX_REPLY`] bytes; why not, in words.
fn read_reply(stream: &UnixStream) -> Result<String, String> {
    let mut reply = String::new();
    BufReader::new(stream.take(MAX_REPLY))
        .read_line(&mut reply)
        .map_err(|e| format!("reading the reply: {e}"))?;
    if reply.is_empty() {
        return Err("the VM closed the socket without a reply (it may have ended)".into());
    }
    if !reply.ends_with('\n') && reply.len() as u64 >= MAX_REPLY {
        return Err(format!(
            "the reply is longer than {} MiB, which no pmemvm sends; it was not read further",
            MAX_REPLY >> 20
        ));
    }
    Ok(reply)
}

/// Sends `command` to the VM at `socket` and waits for its reply; on success, the answer in
/// words (JSON for `stats`, `version`, `media list`, `health get`).
pub fn call(socket: &Path, command: &Request) -> Result<String, ClientError> {
    let line = request_line(command)?;
    let stream = connect(socket)?;
    let io = |reason: String| ClientError::Io {
        path: socket.to_owned(),
        reason,
    };
    let mut text = line.to_string();
    text.push('\n');
    (&stream)
        .write_all(text.as_bytes())
        .map_err(|e| io(format!("sending the request: {e}")))?;
    let reply = read_reply(&stream).map_err(io)?;
    let reply: Reply = serde_json::from_str(&reply)
        .map_err(|e| io(format!("the reply is not the protocol's ({e})")))?;
    match (reply.ok, reply.result) {
        (true, Some(result)) => Ok(answer(command, &result)),
        _ => Err(ClientError::Refused {
            message: reply
                .error
                .unwrap_or_else(|| "the VM refused the request".into()),
            usage: reply.usage,
        }),
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
