//! `--put HOST[:GUEST]` and `--get GUEST`: what the user asked to move, with
//! the guest paths checked (absolute, or relative to `/job`; no `.`/`..`).

use std::path::{Component, PathBuf};

use serde::{Deserialize, Serialize};

use super::TransferError;

/// Checks a guest path: absolute, or relative to `/job` (the command's cwd).
fn guest_path(option: &'static str, text: &str) -> Result<String, TransferError> {
    let bad = || TransferError::BadGuestPath {
        option,
        text: text.to_string(),
    };
    let trimmed = text.trim_end_matches('/');
    if trimmed.is_empty() || text.contains('\0') || text.contains('\n') {
        return Err(bad());
    }
    let comps: Vec<&str> = trimmed.trim_start_matches('/').split('/').collect();
    if comps
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == "..")
    {
        return Err(bad());
    }
    Ok(if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/job/{trimmed}")
    })
}

/// Guest paths a `--put` bind mount would cover with the user's tree: the
/// guest's programs and configuration, `/job` itself (its command), and
/// whatever lies under the put image's mount point or a kernel file system.
const RESERVED: &[&str] = &[
    "/job",
    "/bin",
    "/sbin",
    "/usr",
    "/usr/bin",
    "/usr/sbin",
    "/lib",
    "/lib64",
    "/etc",
    "/init",
];
const RESERVED_TREES: &[&str] = &["/put", "/proc", "/sys", "/dev"];

fn reserved(guest: &str) -> bool {
    RESERVED.contains(&guest)
        || RESERVED_TREES
            .iter()
            .any(|t| guest == *t || guest.starts_with(&format!("{t}/")))
}

/// `--put HOST[:GUEST]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutSpec {
    /// The host file or directory.
    pub host: PathBuf,
    /// Its absolute guest path (default `/job/<last name of HOST>`).
    pub guest: String,
}

impl std::str::FromStr for PutSpec {
    type Err = TransferError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, guest) = match s.split_once(':') {
            Some((h, g)) => (h, Some(g)),
            None => (s, None),
        };
        let host = PathBuf::from(host);
        let guest = match guest {
            Some(g) => guest_path("--put", g)?,
            None => {
                let name = host
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => n.to_str(),
                        _ => None,
                    })
                    .next_back()
                    .ok_or_else(|| TransferError::BadGuestPath {
                        option: "--put",
                        text: s.to_string(),
                    })?;
                guest_path("--put", name)?
            }
        };
        if reserved(&guest) {
            return Err(TransferError::ReservedGuestPath {
                text: s.to_string(),
                guest,
            });
        }
        Ok(PutSpec { host, guest })
    }
}

/// `--get GUEST`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetSpec {
    /// As the user typed it.
    pub text: String,
    /// Absolute guest path.
    pub guest: String,
}

impl GetSpec {
    /// The name it gets in `--out`: the guest path's last component.
    pub fn out_name(&self) -> &str {
        self.guest.rsplit('/').next().unwrap_or(&self.guest)
    }
}

impl std::str::FromStr for GetSpec {
    type Err = TransferError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(GetSpec {
            text: s.to_string(),
            guest: guest_path("--get", s)?,
        })
    }
}
