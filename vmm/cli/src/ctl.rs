//! `pmemvm ctl SOCKET COMMAND`: the control socket's client. Sends one
//! request line, reads the one reply, prints the answer (JSON for
//! `stats` and `version`, a sentence otherwise), and exits 0 when done,
//! 2 when the request was wrong, 1 when pmemvm could not do it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};
use vmm::api::protocol::Reply;

use clap::{Args, Subcommand};

/// How long the client waits for an answer (a dump of a large guest takes a while).
const REPLY_LIMIT: Duration = Duration::from_secs(900);

/// `pmemvm ctl SOCKET COMMAND`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The VM's control socket (its `--api PATH`).
    pub socket: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// The control socket's commands.
#[derive(Debug, Clone, Subcommand)]
pub enum CtlCommand {
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
        /// The new file (a relative path is taken from here).
        file: PathBuf,
    },
    /// A DIMM's media errors while the guest runs: inject (the guest is
    /// notified and scrubs), clear, list.
    Media {
        /// What to do.
        #[command(subcommand)]
        action: MediaCommand,
    },
    /// A DIMM's health while the guest runs: set (the DIMM's device is
    /// notified, so `ndctl monitor` sees it), get.
    Health {
        /// What to do.
        #[command(subcommand)]
        action: HealthCommand,
    },
}

/// `pmemvm ctl SOCKET health ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum HealthCommand {
    /// Changes DIMM's SMART values (saved in its backing file) and notifies
    /// its ACPI device (0x81).
    Set {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
        /// health=ok|non-critical|critical|fatal, temperature=C, spares=%,
        /// alarm=none|spares+mtemp+ctemp (one or more).
        #[arg(required = true)]
        settings: Vec<String>,
    },
    /// DIMM's SMART values now, as JSON.
    Get {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
    },
}

/// `pmemvm ctl SOCKET media ...`.
#[derive(Debug, Clone, Subcommand)]
pub enum MediaCommand {
    /// RANGE joins DIMM's error list (saved in its backing file) and the
    /// guest is notified (0x81 on the NVDIMM root device): Linux scrubs and
    /// adds it to the namespace's badblocks.
    Inject {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
        /// OFFSET+LEN[:OFFSET+LEN...] in bytes from the region's start,
        /// multiples of 512 (K, M, G suffixes), e.g. 1M+4K.
        range: String,
    },
    /// RANGE leaves DIMM's error list (the guest's badblocks stay until it
    /// rewrites the range, as on hardware).
    Clear {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: u32,
        /// OFFSET+LEN[:OFFSET+LEN...], as for inject.
        range: String,
    },
    /// The error list of DIMM (of every DIMM without one), as JSON.
    List {
        /// The DIMM: its place among the --nvdimm options, from 0.
        dimm: Option<u32>,
    },
}

/// Errors of `pmemvm ctl`.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Nothing, or not a socket, at the path.
    #[error(
        "{0} is not a control socket (pmemvm boot/run --api PATH creates one while the guest runs)"
    )]
    NotASocket(PathBuf),
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
    /// The dump file's path cannot be made absolute.
    #[error("dump file {0}: cannot tell its absolute path ({1})")]
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

impl CtlError {
    /// True for the user's mistakes.
    pub fn is_usage(&self) -> bool {
        match self {
            Self::NotASocket(_) | Self::Path(..) => true,
            Self::Refused { usage, .. } => *usage,
            Self::Connect { .. } | Self::Io { .. } => false,
        }
    }
}

/// The request line for `command`.
fn request(command: &CtlCommand) -> Result<Value, CtlError> {
    Ok(match command {
        CtlCommand::Version => json!({"command": "version"}),
        CtlCommand::Stats => json!({"command": "stats"}),
        CtlCommand::Pause => json!({"command": "pause"}),
        CtlCommand::Resume => json!({"command": "resume"}),
        CtlCommand::Dump { file } => {
            let abs = std::path::absolute(file).map_err(|e| CtlError::Path(file.clone(), e))?;
            json!({"command": "dump", "file": abs})
        }
        CtlCommand::Media { action } => match action {
            MediaCommand::Inject { dimm, range } => {
                json!({"command": "media", "action": "inject", "dimm": dimm, "range": range})
            }
            MediaCommand::Clear { dimm, range } => {
                json!({"command": "media", "action": "clear", "dimm": dimm, "range": range})
            }
            MediaCommand::List { dimm: Some(d) } => {
                json!({"command": "media", "action": "list", "dimm": d})
            }
            MediaCommand::List { dimm: None } => json!({"command": "media", "action": "list"}),
        },
        CtlCommand::Health { action } => match action {
            HealthCommand::Set { dimm, settings } => {
                json!({"command": "health", "action": "set", "dimm": dimm, "set": settings.join(",")})
            }
            HealthCommand::Get { dimm } => {
                json!({"command": "health", "action": "get", "dimm": dimm})
            }
        },
    })
}

/// What to print for a done command.
fn answer(command: &CtlCommand, result: &Value) -> String {
    let n = |k: &str| result.get(k).and_then(Value::as_u64).unwrap_or(0);
    match command {
        CtlCommand::Media { action } => media_answer(action, result),
        CtlCommand::Health {
            action: HealthCommand::Set { .. },
        } => format!(
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
        CtlCommand::Health { .. } => {
            serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string())
        }
        CtlCommand::Version | CtlCommand::Stats => {
            serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string())
        }
        CtlCommand::Pause => "paused: the vCPUs are stopped (pmemvm ctl SOCKET resume lets them run)".into(),
        CtlCommand::Resume => "running".into(),
        CtlCommand::Dump { .. } => format!(
            "{}: {} MiB of guest RAM ({} MiB not zero), {} vCPU(s), {}",
            result.get("file").and_then(Value::as_str).unwrap_or("?"),
            n("ram_bytes") >> 20,
            n("data_bytes") >> 20,
            n("vcpus"),
            match result.get("kernel_release").and_then(Value::as_str) {
                Some(r) => format!("kernel {r}: crash vmlinux FILE, or drgn -c FILE -s vmlinux"),
                None => "no VMCOREINFO in guest memory: the guest kernel lacks CONFIG_CRASH_CORE, which crash and drgn need".into(),
            }
        ),
    }
}

/// What to print for a done `media` command.
fn media_answer(action: &MediaCommand, result: &Value) -> String {
    let ranges = || {
        let list: Vec<String> = result["bad_ranges"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| format!("{}+{}", r["offset"], r["length"]))
                    .collect()
            })
            .unwrap_or_default();
        match list.is_empty() {
            true => "none".to_owned(),
            false => list.join(":"),
        }
    };
    let dimm = &result["dimm"];
    match action {
        MediaCommand::Inject { .. } => format!(
            "DIMM {dimm}: bad ranges now {}; {}",
            ranges(),
            match result["notified"].as_bool() {
                Some(true) => "the guest was notified (0x81 on the NVDIMM root device: it scrubs and adds them to badblocks)",
                _ => "the guest was NOT notified (see pmemvm's log); it sees them at its next scrub",
            }
        ),
        MediaCommand::Clear { .. } => format!(
            "DIMM {dimm}: {} bytes cleared; bad ranges now {}",
            result["cleared_bytes"],
            ranges()
        ),
        MediaCommand::List { .. } => {
            serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string())
        }
    }
}

/// Runs `pmemvm ctl`; the printed answer on success.
pub fn ctl(args: &CtlArgs) -> Result<String, CtlError> {
    let is_socket = std::fs::metadata(&args.socket).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        return Err(CtlError::NotASocket(args.socket.clone()));
    }
    let line = request(&args.command)?;
    let path = args.socket.clone();
    let io = |reason: String| CtlError::Io {
        path: path.clone(),
        reason,
    };
    let mut stream = UnixStream::connect(&args.socket).map_err(|source| CtlError::Connect {
        path: args.socket.clone(),
        source,
    })?;
    stream
        .set_read_timeout(Some(REPLY_LIMIT))
        .map_err(|e| io(e.to_string()))?;
    let mut text = line.to_string();
    text.push('\n');
    stream
        .write_all(text.as_bytes())
        .map_err(|e| io(format!("sending the request: {e}")))?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .map_err(|e| io(format!("reading the reply: {e}")))?;
    if reply.is_empty() {
        return Err(io(
            "the VM closed the socket without a reply (it may have ended)".into(),
        ));
    }
    let reply: Reply = serde_json::from_str(&reply)
        .map_err(|e| io(format!("the reply is not the protocol's ({e})")))?;
    match (reply.ok, reply.result) {
        (true, Some(result)) => Ok(answer(&args.command, &result)),
        _ => Err(CtlError::Refused {
            message: reply
                .error
                .unwrap_or_else(|| "the VM refused the request".into()),
            usage: reply.usage,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_dump_path_is_sent_absolute_and_requests_parse_on_the_other_side() {
        let r = request(&CtlCommand::Dump {
            file: "guest.core".into(),
        })
        .unwrap();
        let file = r["file"].as_str().unwrap();
        assert!(
            file.starts_with('/') && file.ends_with("/guest.core"),
            "{file}"
        );
        for c in [
            CtlCommand::Version,
            CtlCommand::Stats,
            CtlCommand::Pause,
            CtlCommand::Resume,
            CtlCommand::Dump { file: "/x".into() },
            CtlCommand::Media {
                action: MediaCommand::Inject {
                    dimm: 1,
                    range: "1M+4K".into(),
                },
            },
            CtlCommand::Media {
                action: MediaCommand::Clear {
                    dimm: 0,
                    range: "0+512".into(),
                },
            },
            CtlCommand::Media {
                action: MediaCommand::List { dimm: None },
            },
            CtlCommand::Media {
                action: MediaCommand::List { dimm: Some(2) },
            },
            CtlCommand::Health {
                action: HealthCommand::Set {
                    dimm: 0,
                    settings: vec!["health=fatal".into(), "temperature=90".into()],
                },
            },
            CtlCommand::Health {
                action: HealthCommand::Get { dimm: 0 },
            },
        ] {
            let line = request(&c).unwrap().to_string();
            vmm::api::protocol::parse(line.as_bytes()).unwrap();
        }
    }

    #[test]
    fn media_answers_say_the_list_and_the_notification() {
        let inject = MediaCommand::Inject {
            dimm: 0,
            range: "1M+4K".into(),
        };
        let r = json!({"dimm": 0, "bad_ranges": [{"offset": 1048576, "length": 4096}], "notified": true});
        let a = media_answer(&inject, &r);
        assert!(
            a.starts_with("DIMM 0: bad ranges now 1048576+4096; the guest was notified"),
            "{a}"
        );
        let r = json!({"dimm": 1, "bad_ranges": [], "cleared_bytes": 4096});
        let clear = MediaCommand::Clear {
            dimm: 1,
            range: "1M+4K".into(),
        };
        assert_eq!(
            media_answer(&clear, &r),
            "DIMM 1: 4096 bytes cleared; bad ranges now none"
        );
    }

    #[test]
    fn a_path_that_is_no_socket_is_the_users_mistake() {
        let args = CtlArgs {
            socket: "/nonexistent/api.sock".into(),
            command: CtlCommand::Stats,
        };
        let e = ctl(&args).unwrap_err();
        assert!(e.is_usage(), "{e}");
        assert!(
            e.to_string()
                .starts_with("/nonexistent/api.sock is not a control socket"),
            "{e}"
        );
    }
}
