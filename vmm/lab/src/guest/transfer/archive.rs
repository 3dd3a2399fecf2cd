//! The tar archive of `--get` (the `--put` side is an ext4 image: [`super::image`]).
//!
//! * **Tar writer.** [`write_tar`] writes files and trees as one tar stream (names
//!   are guest paths without the leading `/`), hashing it as it goes: the shape of a
//!   get archive, for the tests and the fuzz target (the put side is an ext4 image,
//!   see [`super::image`]).
//! * **Get.** The guest writes one tar of the `--get` paths onto the writable
//!   transfer DIMM. That archive is hostile input: [`plan_get_archive`] decodes it
//!   into a list of host paths below `--out` (every entry under one of the asked
//!   paths, only plain components, only regular files and directories, data inside
//!   the archive) before [`extract_get_archive`] writes anything.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use sha2::Digest;

use super::{GetSpec, PutSpec, TransferError};

/// A writer that hashes and counts what passes through.
struct Hashing<W> {
    inner: W,
    hash: sha2::Sha256,
    len: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Length and hex SHA-256 of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSum {
    /// Bytes.
    pub len: u64,
    /// Hex SHA-256 of those bytes.
    pub sha256: String,
}

/// Writes `puts` as a tar archive to `out`; returns its length and SHA-256. Its
/// first entry is the empty file `marker`.
pub fn write_tar(puts: &[PutSpec], marker: &str, out: &Path) -> Result<ArchiveSum, TransferError> {
    let io = |what: String| move |source| TransferError::Io { what, source };
    let file = std::fs::File::create(out).map_err(io(format!("creating {}", out.display())))?;
    let hashing = Hashing {
        inner: std::io::BufWriter::new(file),
        hash: sha2::Sha256::new(),
        len: 0,
    };
    let mut builder = tar::Builder::new(hashing);
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Deterministic);
    let mut header = tar::Header::new_gnu();
    header.set_size(0);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    builder
        .append_data(&mut header, marker, std::io::empty())
        .map_err(io("starting the archive".into()))?;
    for put in puts {
        let name = put.guest.trim_start_matches('/');
        let meta =
            std::fs::symlink_metadata(&put.host).map_err(|source| TransferError::PutSource {
                path: put.host.clone(),
                source,
            })?;
        let added = if meta.is_dir() {
            builder.append_dir_all(name, &put.host)
        } else {
            builder.append_path_with_name(&put.host, name)
        };
        added.map_err(io(format!("packing {}", put.host.display())))?;
    }
    let mut hashing = builder
        .into_inner()
        .map_err(io("finishing the archive".into()))?;
    hashing
        .flush()
        .map_err(io(format!("writing {}", out.display())))?;
    Ok(ArchiveSum {
        len: hashing.len,
        sha256: format!("{:x}", hashing.hash.finalize()),
    })
}

/// What an entry of the get archive becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedKind {
    /// A directory.
    Dir,
    /// A regular file with its data at `offset..offset + len` of the archive.
    File {
        /// Offset of the data in the archive.
        offset: usize,
        /// Data bytes.
        len: usize,
        /// Executable bit.
        executable: bool,
    },
}

/// One entry of the get archive, mapped below `--out`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEntry {
    /// Path relative to `--out` (plain components only).
    pub rel: PathBuf,
    /// Directory or file.
    pub kind: PlannedKind,
}

/// The decoded get archive: what to write and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GetPlan {
    /// Entries to write, in archive order.
    pub entries: Vec<PlannedEntry>,
    /// Entries not written (symbolic links, devices...), with why.
    pub skipped: Vec<String>,
}

/// Decodes the guest's get archive (`bytes`, already cut to the length the
/// guest reported) into host paths below `--out`. Nothing is written.
pub fn plan_get_archive(bytes: &[u8], gets: &[GetSpec]) -> Result<GetPlan, TransferError> {
    let bad = |why: String| TransferError::BadGetArchive(why);
    let mut plan = GetPlan::default();
    let mut archive = tar::Archive::new(bytes);
    let entries = archive
        .entries()
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    for entry in entries {
        let entry = entry.map_err(|e| bad(format!("cannot read an entry: {e}")))?;
        let raw = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let rel = map_entry(&name, gets)
            .ok_or_else(|| bad(format!("entry {name:?} is not below any --get path")))?;
        let kind = match entry.header().entry_type() {
            tar::EntryType::Directory => PlannedKind::Dir,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let offset = usize::try_from(entry.raw_file_position())
                    .map_err(|_| bad(format!("entry {name:?} starts past the end")))?;
                let len = usize::try_from(entry.size())
                    .map_err(|_| bad(format!("entry {name:?} is too large")))?;
                let end = offset
                    .checked_add(len)
                    .filter(|&e| e <= bytes.len())
                    .ok_or_else(|| bad(format!("entry {name:?} runs past the archive's end")))?;
                let _ = end;
                let mode = entry.header().mode().unwrap_or(0o644);
                PlannedKind::File {
                    offset,
                    len,
                    executable: mode & 0o111 != 0,
                }
            }
            other => {
                plan.skipped.push(format!(
                    "{name} (a {other:?} entry, not a file or directory)"
                ));
                continue;
            }
        };
        plan.entries.push(PlannedEntry { rel, kind });
    }
    Ok(plan)
}

/// The path below `--out` of archive entry `name`: entries are the guest's
/// paths without the leading `/`; one of `gets` must be it or hold it.
fn map_entry(name: &str, gets: &[GetSpec]) -> Option<PathBuf> {
    let name = name.trim_start_matches("./").trim_end_matches('/');
    let comps: Vec<&str> = name.split('/').collect();
    if comps
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == ".." || c.contains('\0'))
    {
        return None;
    }
    for get in gets {
        let want: Vec<&str> = get.guest.trim_start_matches('/').split('/').collect();
        if comps.len() >= want.len() && comps[..want.len()] == want[..] {
            let mut rel = PathBuf::from(get.out_name());
            for c in &comps[want.len()..] {
                rel.push(c);
            }
            // Belt and braces: only normal components reach the file system.
            if rel.components().all(|c| matches!(c, Component::Normal(_))) {
                return Some(rel);
            }
            return None;
        }
    }
    None
}

/// Writes a planned get archive below `out` (created if missing). Paths
/// that would pass through a symbolic link are refused.
pub fn extract_get_archive(bytes: &[u8], plan: &GetPlan, out: &Path) -> Result<(), TransferError> {
    let io = |what: String| move |source| TransferError::Io { what, source };
    std::fs::create_dir_all(out).map_err(io(format!("creating {}", out.display())))?;
    for entry in &plan.entries {
        let dst = out.join(&entry.rel);
        // Each parent below `out` must be a real directory we made or found.
        let mut cur = out.to_path_buf();
        let parents: Vec<_> = entry
            .rel
            .parent()
            .map(|p| p.components().collect())
            .unwrap_or_default();
        for c in parents {
            cur.push(c);
            match std::fs::symlink_metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(TransferError::BadGetArchive(format!(
                        "{} is not a directory",
                        cur.display()
                    )))
                }
                Err(_) => {
                    std::fs::create_dir(&cur).map_err(io(format!("creating {}", cur.display())))?;
                }
            }
        }
        match &entry.kind {
            PlannedKind::Dir => match std::fs::symlink_metadata(&dst) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(TransferError::BadGetArchive(format!(
                        "{} is both a file and a directory",
                        entry.rel.display()
                    )))
                }
                Err(_) => {
                    std::fs::create_dir(&dst).map_err(io(format!("creating {}", dst.display())))?;
                }
            },
            PlannedKind::File {
                offset,
                len,
                executable,
            } => {
                let data = bytes
                    .get(*offset..offset.saturating_add(*len))
                    .ok_or_else(|| {
                        TransferError::BadGetArchive(format!(
                            "{} runs past the archive",
                            entry.rel.display()
                        ))
                    })?;
                if std::fs::symlink_metadata(&dst).is_ok_and(|m| !m.is_file()) {
                    return Err(TransferError::BadGetArchive(format!(
                        "{} is both a file and something else",
                        entry.rel.display()
                    )));
                }
                let mut f = std::fs::File::create(&dst)
                    .map_err(io(format!("creating {}", dst.display())))?;
                f.write_all(data)
                    .map_err(io(format!("writing {}", dst.display())))?;
                if *executable {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = f.set_permissions(std::fs::Permissions::from_mode(0o755));
                }
            }
        }
    }
    Ok(())
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", sha2::Sha256::digest(bytes))
}

/// Reads the first `len` bytes of `path` (the get DIMM's backing file).
pub fn read_prefix(path: &Path, len: u64) -> Result<Vec<u8>, TransferError> {
    let io = |source| TransferError::Io {
        what: format!("reading {}", path.display()),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let mut out = Vec::new();
    f.take(len).read_to_end(&mut out).map_err(io)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(p: &str) -> GetSpec {
        p.parse().expect("get spec")
    }

    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            // set_path refuses "..": write the raw name like a hostile guest would.
            let raw = &mut h.as_old_mut().name;
            raw[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, *data).expect("append");
        }
        b.into_inner().expect("tar")
    }

    #[test]
    fn entries_map_below_out_by_the_get_paths_last_name() {
        let gets = [get("/results"), get("out.txt")];
        let bytes = tar_of(&[("results/a/b.txt", b"hi"), ("job/out.txt", b"x")]);
        let plan = plan_get_archive(&bytes, &gets).expect("plan");
        let rels: Vec<_> = plan.entries.iter().map(|e| e.rel.clone()).collect();
        assert_eq!(
            rels,
            [PathBuf::from("results/a/b.txt"), PathBuf::from("out.txt")]
        );
        let d = std::env::temp_dir().join(format!("pmemvm-get-test-{}", std::process::id()));
        extract_get_archive(&bytes, &plan, &d).expect("extract");
        assert_eq!(
            std::fs::read(d.join("results/a/b.txt")).expect("read"),
            b"hi"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn hostile_names_are_refused() {
        let gets = [get("/results")];
        for name in [
            "results/../../etc/passwd",
            "etc/passwd",
            "results//x",
            "resultsX/y",
        ] {
            let bytes = tar_of(&[(name, b"x")]);
            let e = plan_get_archive(&bytes, &gets).expect_err(name);
            assert!(e.to_string().contains("not below"), "{name}: {e}");
        }
    }

    #[test]
    fn truncated_archives_are_errors_not_panics() {
        let bytes = tar_of(&[("results/a", &[7u8; 4000])]);
        for cut in [10, 600, 1500, 3000] {
            let _ = plan_get_archive(&bytes[..cut], &[get("/results")]);
        }
        let short = &bytes[..1500];
        assert!(plan_get_archive(short, &[get("/results")]).is_err());
    }
}
