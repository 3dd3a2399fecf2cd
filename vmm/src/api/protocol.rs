//! The control socket's protocol, version 1 (docs/api.md): JSON lines. A
//! client writes one request, a JSON object on one line of at most
//! [`MAX_LINE`] bytes; pmemvm answers each with one line, in order:
//!
//! ```text
//! → {"command": "dump", "file": "/tmp/guest.core", "id": 7}
//! ← {"ok": true, "id": 7, "result": {"file": "/tmp/guest.core", ...}}
//! → {"command": "pasue"}
//! ← {"ok": false, "error": "unknown command 'pasue': use version, stats, pause, resume or dump"}
//! ```
//!
//! Lines, not HTTP: the client (`pmemvm ctl`) and a shell (`socat -
//! UNIX-CONNECT:PATH`) need no HTTP stack, requests are naturally
//! serialized per connection, and the same stream can later carry events.
//! Unknown keys are refused, so a misspelt argument is an error, not a
//! default.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol's version (in `version`'s answer; a client checks it).
pub const PROTOCOL: u32 = 1;
/// The longest request line, newline included.
pub const MAX_LINE: usize = 64 << 10;
/// The commands, for messages.
pub const COMMANDS: &str = "version, stats, pause, resume, dump, media, health or nvdimm";

/// One request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// pmemvm's and the protocol's versions.
    Version,
    /// pmemvm's counters, as JSON.
    Stats,
    /// Stop the vCPUs (the guest's clocks run on).
    Pause,
    /// Let them run again.
    Resume,
    /// Write an ELF core of guest RAM and vCPU registers to `file` (an
    /// absolute path that does not exist).
    Dump {
        /// Where.
        file: std::path::PathBuf,
        /// The NVDIMMs' ranges too (`"nvdimms": true`).
        nvdimms: bool,
    },
    /// A DIMM's or a CXL device's media errors, changed or listed while the
    /// guest runs.
    Media {
        /// What to do.
        action: MediaAction,
        /// The device; `None` for `list` means every DIMM.
        target: Option<MediaTarget>,
        /// `OFFSET+LEN[:OFFSET+LEN...]` in bytes from the region's (a CXL
        /// device's: its capacity's) start (inject and clear).
        range: Option<String>,
    },
    /// A DIMM's health, changed or read while the guest runs.
    Health {
        /// The DIMM, by its place among the `--nvdimm` options (from 0).
        dimm: u32,
        /// What to do.
        action: HealthAction,
    },
    /// A DIMM hot-added into an empty slot (or a removal, which is refused).
    Nvdimm(NvdimmAction),
}

/// A refused or failed `media` request: the reply's sentence, and whether
/// the request was wrong (true) or pmemvm failed (false).
pub type MediaRefusal = (String, bool);

/// Whose media `media` acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaTarget {
    /// An NVDIMM, by its place among the `--nvdimm` options, from 0
    /// (`"dimm": N`).
    Dimm(u32),
    /// A CXL memory device, by its place among the `--cxl-pmem` options,
    /// from 0 (`"cxl": N`).
    Cxl(u32),
}

/// `nvdimm`'s request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvdimmAction {
    /// Hot-add a DIMM of this spec (the `--nvdimm` syntax).
    Add(Box<crate::config::NvdimmSpec>),
    /// Remove DIMM `n` (refused: see docs/api.md).
    Remove(u32),
}

/// `health`'s request: set (with the change) or get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthAction {
    /// Change the DIMM's SMART values and notify its device (0x81).
    Set(devices::nvdimm_health_set::HealthChange),
    /// The DIMM's SMART values now.
    Get,
}

/// What `media` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaAction {
    /// The range joins the DIMM's error list, and the guest is notified
    /// (0x81 on the NVDIMM root device: Linux scrubs and adds it to badblocks).
    Inject,
    /// The range leaves the list (as the guest's clear-error call does).
    Clear,
    /// The list.
    List,
}

/// A request and the client's `id` to echo.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// What to do.
    pub command: Command,
    /// Echoed in the reply (any JSON number or string).
    pub id: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    command: String,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    dimm: Option<u32>,
    #[serde(default)]
    cxl: Option<u32>,
    #[serde(default)]
    range: Option<String>,
    #[serde(default)]
    set: Option<String>,
    #[serde(default)]
    spec: Option<String>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    nvdimms: Option<bool>,
}

impl Wire {
    /// Refuses the arguments `command` does not take (`takes` lists those it does).
    fn only(&self, command: &str, takes: &[&str]) -> Result<(), ProtocolError> {
        let given = [
            ("file", self.file.is_some()),
            ("action", self.action.is_some()),
            ("dimm", self.dimm.is_some()),
            ("cxl", self.cxl.is_some()),
            ("range", self.range.is_some()),
            ("set", self.set.is_some()),
            ("spec", self.spec.is_some()),
            ("nvdimms", self.nvdimms.is_some()),
        ];
        match given.iter().find(|(k, set)| *set && !takes.contains(k)) {
            Some((k, _)) => Err(ProtocolError::Argument(format!(
                "'{command}' takes no '{k}'"
            ))),
            None => Ok(()),
        }
    }
}

/// Why a request line is refused; the text is the reply's `error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Longer than [`MAX_LINE`].
    #[error("request longer than {MAX_LINE} bytes; one request is one line of JSON")]
    TooLong,
    /// Not UTF-8 or not JSON, or not an object of known keys.
    #[error("request is not a JSON object of the protocol ({0}); e.g. {{\"command\": \"stats\"}}")]
    Malformed(String),
    /// A command pmemvm does not have.
    #[error("unknown command '{0}': use {COMMANDS}")]
    Unknown(String),
    /// A command's argument is missing or wrong.
    #[error("{0}")]
    Argument(String),
}

fn id_ok(id: &Option<Value>) -> bool {
    matches!(id, None | Some(Value::Number(_) | Value::String(_)))
}

/// Parses one request line (without its newline).
pub fn parse(line: &[u8]) -> Result<Request, ProtocolError> {
    if line.len() >= MAX_LINE {
        return Err(ProtocolError::TooLong);
    }
    let text =
        std::str::from_utf8(line).map_err(|_| ProtocolError::Malformed("not UTF-8".into()))?;
    let wire: Wire = serde_json::from_str(text).map_err(|e| {
        // serde's message names the key or the column; keep it short.
        let m = e.to_string();
        ProtocolError::Malformed(m.chars().take(160).collect())
    })?;
    if !id_ok(&wire.id) {
        return Err(ProtocolError::Argument(
            "'id' must be a number or a string".into(),
        ));
    }
    let command = match wire.command.as_str() {
        "version" => wire.only("version", &[]).map(|()| Command::Version)?,
        "stats" => wire.only("stats", &[]).map(|()| Command::Stats)?,
        "pause" => wire.only("pause", &[]).map(|()| Command::Pause)?,
        "resume" => wire.only("resume", &[]).map(|()| Command::Resume)?,
        "dump" => {
            wire.only("dump", &["file", "nvdimms"])?;
            let file = wire.file.as_deref().ok_or_else(|| {
                ProtocolError::Argument(
                    "'dump' needs 'file': the absolute path of a new file".into(),
                )
            })?;
            let path = std::path::PathBuf::from(file);
            if !path.is_absolute() || file.contains('\0') {
                return Err(ProtocolError::Argument(format!(
                    "dump file '{file}' is not an absolute path (pmemvm ctl makes relative paths absolute)"
                )));
            }
            Command::Dump {
                file: path,
                nvdimms: wire.nvdimms.unwrap_or(false),
            }
        }
        "media" => media(&wire)?,
        "health" => health(&wire)?,
        "nvdimm" => nvdimm(&wire)?,
        other => return Err(ProtocolError::Unknown(other.chars().take(64).collect())),
    };
    Ok(Request {
        command,
        id: wire.id,
    })
}

/// `media`'s arguments.
fn media(wire: &Wire) -> Result<Command, ProtocolError> {
    wire.only("media", &["action", "dimm", "cxl", "range"])?;
    let target = match (wire.dimm, wire.cxl) {
        (Some(_), Some(_)) => {
            return Err(ProtocolError::Argument(
                "'media' takes 'dimm' or 'cxl', not both".into(),
            ))
        }
        (Some(d), None) => Some(MediaTarget::Dimm(d)),
        (None, Some(c)) => Some(MediaTarget::Cxl(c)),
        (None, None) => None,
    };
    let action = match wire.action.as_deref() {
        Some("inject") => MediaAction::Inject,
        Some("clear") => MediaAction::Clear,
        Some("list") => MediaAction::List,
        Some(other) => {
            return Err(ProtocolError::Argument(format!(
                "media action '{}' is not known; use inject, clear or list",
                other.chars().take(32).collect::<String>()
            )))
        }
        None => {
            return Err(ProtocolError::Argument(
                "'media' needs 'action': inject, clear or list".into(),
            ))
        }
    };
    if action == MediaAction::List {
        if wire.range.is_some() {
            return Err(ProtocolError::Argument(
                "'media list' takes no 'range'".into(),
            ));
        }
    } else {
        if target.is_none() {
            return Err(ProtocolError::Argument(
                "'media' inject and clear need 'dimm' (the DIMM's place among the --nvdimm options, from 0) or 'cxl' (the device's place among the --cxl-pmem options)".into(),
            ));
        }
        match wire.range.as_deref() {
            None => {
                return Err(ProtocolError::Argument(
                    "'media' inject and clear need 'range': OFFSET+LEN in bytes from the region's start (e.g. 1M+4K)".into(),
                ))
            }
            Some(r) if r.len() > 4096 => {
                return Err(ProtocolError::Argument(
                    "media range is longer than 4096 characters".into(),
                ))
            }
            Some(_) => {}
        }
    }
    Ok(Command::Media {
        action,
        target,
        range: wire.range.clone(),
    })
}

/// `nvdimm`'s arguments.
fn nvdimm(wire: &Wire) -> Result<Command, ProtocolError> {
    wire.only("nvdimm", &["action", "spec", "dimm"])?;
    match (wire.action.as_deref(), &wire.spec, wire.dimm) {
        (Some("add"), Some(spec), None) => {
            if spec.len() > 4096 {
                return Err(ProtocolError::Argument(
                    "nvdimm spec is longer than 4096 characters".into(),
                ));
            }
            let spec = spec
                .parse::<crate::config::NvdimmSpec>()
                .map_err(|e| ProtocolError::Argument(e.to_string()))?;
            Ok(Command::Nvdimm(NvdimmAction::Add(Box::new(spec))))
        }
        (Some("add"), None, _) => Err(ProtocolError::Argument(
            "'nvdimm add' needs 'spec': the new DIMM as --nvdimm takes it (e.g. 1G or 1G,file=/path)"
                .into(),
        )),
        (Some("add"), Some(_), Some(_)) => Err(ProtocolError::Argument(
            "'nvdimm add' takes no 'dimm': the DIMM goes into the next empty slot".into(),
        )),
        (Some("remove"), None, Some(dimm)) => Ok(Command::Nvdimm(NvdimmAction::Remove(dimm))),
        (Some("remove"), _, _) => Err(ProtocolError::Argument(
            "'nvdimm remove' takes 'dimm' alone".into(),
        )),
        (Some(other), _, _) => Err(ProtocolError::Argument(format!(
            "nvdimm action '{}' is not known; use add",
            other.chars().take(32).collect::<String>()
        ))),
        (None, _, _) => Err(ProtocolError::Argument(
            "'nvdimm' needs 'action': add".into(),
        )),
    }
}

/// `health`'s arguments.
fn health(wire: &Wire) -> Result<Command, ProtocolError> {
    wire.only("health", &["action", "dimm", "set"])?;
    let dimm = wire.dimm.ok_or_else(|| {
        ProtocolError::Argument(
            "'health' needs 'dimm': the DIMM's place among the --nvdimm options, from 0".into(),
        )
    })?;
    let action = match (wire.action.as_deref(), wire.set.as_deref()) {
        (Some("set"), Some(text)) if text.len() <= 4096 => HealthAction::Set(
            devices::nvdimm_health_set::HealthChange::parse(text)
                .map_err(ProtocolError::Argument)?,
        ),
        (Some("set"), Some(_)) => {
            return Err(ProtocolError::Argument(
                "'set' is longer than 4096 characters".into(),
            ))
        }
        (Some("set"), None) => {
            return Err(ProtocolError::Argument(format!(
                "'health' set needs 'set': {}",
                devices::nvdimm_health_set::ACCEPTED
            )))
        }
        (Some("get"), None) => HealthAction::Get,
        (Some("get"), Some(_)) => {
            return Err(ProtocolError::Argument(
                "'health get' takes no 'set'".into(),
            ))
        }
        (Some(other), _) => {
            return Err(ProtocolError::Argument(format!(
                "health action '{}' is not known; use set or get",
                other.chars().take(32).collect::<String>()
            )))
        }
        (None, _) => {
            return Err(ProtocolError::Argument(
                "'health' needs 'action': set or get".into(),
            ))
        }
    };
    Ok(Command::Health { dimm, action })
}

/// One reply line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// True when the command was done.
    pub ok: bool,
    /// The request's `id`, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    /// The command's answer (`ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// One sentence: what was wrong (not `ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// True when the request was wrong (the client exits 2), false when
    /// pmemvm could not do a correct one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage: bool,
}

impl Reply {
    /// A done command's reply.
    pub fn ok(id: Option<Value>, result: Value) -> Self {
        Self {
            ok: true,
            id,
            result: Some(result),
            error: None,
            usage: false,
        }
    }

    /// A refusal.
    pub fn error(id: Option<Value>, error: String, usage: bool) -> Self {
        Self {
            ok: false,
            id,
            result: None,
            error: Some(error),
            usage,
        }
    }

    /// The reply as one line, newline included.
    pub fn line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_else(|_| {
            br#"{"ok":false,"error":"pmemvm could not encode its reply"}"#.to_vec()
        });
        v.push(b'\n');
        v
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
