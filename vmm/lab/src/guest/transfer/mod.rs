//! `pmemvm run -- CMD`: a command in the guest, with files and trees going in
//! (`--put HOST[:GUEST]`) and coming back (`--get GUEST` into `--out DIR`).
//!
//! Bulk data never crosses the serial port or the initramfs:
//!
//! * the `--put` trees are one read-only ext4 image ([`image`], made by `mke2fs -d`)
//!   on a **read-only virtio disk** (`/dev/vdX`), off the NVDIMM bus: the guest's
//!   NVDIMMs are exactly the user's `--nvdimm`s, so ndctl (and its own tests, which
//!   take over every DIMM of the bus) never see pmemvm's transfer devices. The guest
//!   mounts it read-only and bind-mounts each tree onto its guest path: the data
//!   stays on the disk, not in guest RAM;
//! * the `--get` paths come back as one tar archive that the guest writes onto a
//!   second, **writable** virtio disk of `--transfer-size` bytes (sparse on the host).
//!
//! The guest finds each disk by a tag at its start, not by its name.
//!
//! Both are checked with SHA-256 on both sides: the host sends the put
//! image's length and hash in `/job/transfer` and the guest refuses to run the
//! command on a mismatch; the guest sends the get archive's length and hash as the
//! `get.manifest` frame and the host refuses a mismatch. The command's stdout and
//! stderr come back as the frames `cmd.stdout` and `cmd.stderr`; stdout is also
//! copied to the console, so a run that times out keeps what it printed.
//!
//! The guest side is `run_command` in `guest-images/rootfs/init`.

pub mod archive;
pub mod image;
mod spec;

pub use spec::{GetSpec, PutSpec};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::guest::guest_job::GuestReport;
use vmm::config::DiskSpec;
use vmm::layout::NVDIMM_REGION_ALIGN;

/// Path of the command script inside the job archive.
pub const JOB_COMMAND_PATH: &str = "job/cmd.sh";
/// Path of the transfer description inside the job archive.
pub const JOB_TRANSFER_PATH: &str = "job/transfer";
/// Frame with the command's standard output.
pub const STDOUT_FRAME: &str = "cmd.stdout";
/// Frame with the command's standard error.
pub const STDERR_FRAME: &str = "cmd.stderr";
/// Frame with `<length> <sha256>` of the get archive.
pub const GET_MANIFEST_FRAME: &str = "get.manifest";
/// Frame with one `--get` path a line that the guest did not have.
pub const GET_MISSING_FRAME: &str = "get.missing";
/// Frame with `<length>` of a get archive that did not fit the transfer area.
pub const GET_OVERFLOW_FRAME: &str = "get.overflow";
/// Frame with why the guest refused the put image.
pub const PUT_ERROR_FRAME: &str = "put.error";
/// Console line after which the command's stdout follows.
pub const STDOUT_CONSOLE_MARK: &str = "pmemvm-init: command output follows";
/// Default size of the writable transfer area for `--get`.
pub const DEFAULT_TRANSFER_SIZE: u64 = 512 << 20;

/// Errors of `--put`, `--get` and the command.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// `--` without a command.
    #[error("`--` must be followed by the command to run in the guest (e.g. `pmemvm run -- uname -a`), or give --fio JOBFILE")]
    NoCommand,
    /// Both `--fio` and a command.
    #[error("give either --fio JOBFILE or `-- COMMAND`, not both")]
    FioAndCommand,
    /// `--put`/`--get` without a command.
    #[error("--put and --get work with a command (`-- COMMAND`), not with --fio")]
    TransferWithFio,
    /// A `--put` source cannot be read.
    #[error("--put {path}: cannot read it: {source}")]
    PutSource {
        /// Host path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A guest path is not usable.
    #[error("{option} {text:?}: the guest path must be a file or directory name like \"t\" or \"/data/t\", without \"..\" and not \"/\"")]
    BadGuestPath {
        /// `--put` or `--get`.
        option: &'static str,
        /// What was given.
        text: String,
    },
    /// A `--put` onto a guest path that the guest itself needs.
    #[error("--put {text:?}: its guest path {guest} would cover what the guest needs there (its programs, /job and its command, the put image at /put, or a kernel file system); put it elsewhere, e.g. /data/NAME or NAME (under /job)")]
    ReservedGuestPath {
        /// What was given.
        text: String,
        /// The guest path it named.
        guest: String,
    },
    /// Two `--get`s come back under one name.
    #[error("--get {a} and --get {b} would both be written to {name} in --out; get their common parent instead")]
    GetNameClash {
        /// First path.
        a: String,
        /// Second path.
        b: String,
        /// The shared last name.
        name: String,
    },
    /// `--get` without `--out`.
    #[error("--get needs --out DIR: the directory the files come back into")]
    GetWithoutOut,
    /// `--out` is unusable.
    #[error("--out {path}: {why}")]
    BadOut {
        /// The directory.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// No mke2fs on the host.
    #[error("--put needs mke2fs (Debian package e2fsprogs) on the host to make the read-only image of the files; it is not on PATH, in /usr/sbin or in /sbin")]
    NoMke2fs,
    /// mke2fs failed.
    #[error("{tool} could not make the {len}-byte --put image: {why}")]
    PutImage {
        /// Image bytes.
        len: u64,
        /// The mke2fs used.
        tool: PathBuf,
        /// Its last line of stderr.
        why: String,
    },
    /// The put trees do not fit the transfer area.
    #[error("the --put files take about {need} bytes, more than the transfer area of {area} bytes; raise --transfer-size (e.g. --transfer-size {suggest}M)")]
    PutTooLarge {
        /// Bytes needed (with tar overhead).
        need: u64,
        /// Area.
        area: u64,
        /// A size that fits, in MiB.
        suggest: u64,
    },
    /// The guest lacked a `--get` path.
    #[error("--get {0}: the guest has no such file or directory after the command")]
    GetMissing(String),
    /// The get archive did not fit.
    #[error("the --get files took {need} bytes in the guest, more than the transfer area of {area} bytes; raise --transfer-size")]
    GetTooLarge {
        /// Bytes the guest's archive had.
        need: u64,
        /// Area.
        area: u64,
    },
    /// The guest refused the put image.
    #[error("the guest could not use the --put files: {0}")]
    PutRefused(String),
    /// The get archive's checksum differs.
    #[error("the --get archive is damaged: the guest wrote {len} bytes with SHA-256 {guest}, the host read {host}")]
    GetChecksum {
        /// Length.
        len: u64,
        /// Guest's hash.
        guest: String,
        /// Host's hash.
        host: String,
    },
    /// The get archive or its manifest is malformed (hostile or broken guest).
    #[error("the guest's --get archive is not acceptable: {0}")]
    BadGetArchive(String),
    /// `--rootfs` or `--packages`.
    #[error(transparent)]
    Rootfs(#[from] crate::guest::rootfs::RootfsError),
    /// Host I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl vmm::exit_status::Classified for TransferError {
    fn kind(&self) -> vmm::exit_status::ErrorKind {
        use vmm::exit_status::ErrorKind::*;
        match self {
            Self::GetChecksum { .. } | Self::BadGetArchive(_) => Guest,
            Self::NoMke2fs
            | Self::PutImage { .. }
            | Self::Io { .. }
            | Self::Rootfs(crate::guest::rootfs::RootfsError::BuildFailed { .. }) => Environment,
            _ => Usage,
        }
    }
}

/// A command run with its transfers, validated on the host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommandJob {
    /// argv.
    pub argv: Vec<String>,
    /// `--put`s.
    pub puts: Vec<PutSpec>,
    /// `--get`s.
    pub gets: Vec<GetSpec>,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// Size of the writable transfer area (a multiple of 16 MiB).
    pub area: u64,
    /// An ext4 root file system to run the command in (see [`crate::guest::rootfs`]).
    pub rootfs: Option<PathBuf>,
}

impl CommandJob {
    /// Checks everything that can be checked before the boot; changes nothing.
    pub fn validate(&self) -> Result<(), TransferError> {
        if self.argv.is_empty() {
            return Err(TransferError::NoCommand);
        }
        let need = image::footprint(&self.puts)?.image_len();
        if !self.puts.is_empty() && need > self.area {
            return Err(TransferError::PutTooLarge {
                need,
                area: self.area,
                suggest: need.div_ceil(NVDIMM_REGION_ALIGN) * (NVDIMM_REGION_ALIGN >> 20),
            });
        }
        if self.gets.is_empty() {
            return Ok(());
        }
        let out = self.out.as_ref().ok_or(TransferError::GetWithoutOut)?;
        for (i, a) in self.gets.iter().enumerate() {
            for b in &self.gets[i + 1..] {
                if a.out_name() == b.out_name() {
                    return Err(TransferError::GetNameClash {
                        a: a.text.clone(),
                        b: b.text.clone(),
                        name: a.out_name().to_string(),
                    });
                }
            }
        }
        let bad = |why: &str| TransferError::BadOut {
            path: out.clone(),
            why: why.to_string(),
        };
        if out.exists() && !out.is_dir() {
            return Err(bad("it exists and is not a directory"));
        }
        if !out.exists()
            && out
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .is_some_and(|p| !p.is_dir())
        {
            return Err(bad("its parent directory does not exist"));
        }
        for get in &self.gets {
            let dst = out.join(get.out_name());
            if std::fs::symlink_metadata(&dst).is_ok() {
                return Err(TransferError::BadOut {
                    path: out.clone(),
                    why: format!(
                        "{} already exists; pmemvm does not overwrite it (remove it or choose another --out)",
                        dst.display()
                    ),
                });
            }
        }
        Ok(())
    }

    /// `/job/cmd.sh`: the argv, each word single-quoted for `sh`.
    pub fn script(&self) -> String {
        let words: Vec<String> = self
            .argv
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
            .collect();
        format!("exec {}\n", words.join(" "))
    }
}

/// The disks and files a command run adds, laid out in the run's scratch directory.
#[derive(Debug, Clone)]
pub struct PreparedTransfer {
    /// virtio disks to add after the user's.
    pub disks: Vec<DiskSpec>,
    /// Job archive files (path, contents, mode).
    pub files: Vec<(String, Vec<u8>, u32)>,
    /// The get DIMM's backing file, if any.
    pub get_file: Option<PathBuf>,
    /// The put image, if any.
    pub put_sum: Option<archive::ArchiveSum>,
}

/// Writes the put image and names the transfer disks; `first_index` is the
/// number of user disks (the guest's `vdX` of the first transfer disk is the
/// letter after theirs).
pub fn prepare(
    job: &CommandJob,
    scratch: &Path,
    first_index: usize,
) -> Result<PreparedTransfer, TransferError> {
    let mut disks = Vec::new();
    let mut desc = String::new();
    let mut put_sum = None;
    let tag = nonce();
    if !job.puts.is_empty() {
        let img = scratch.join("put.img");
        let sum = image::write_put_image(&job.puts, &put_marker(&tag), scratch, &img)?;
        desc.push_str(&format!(
            "put {} {} {} {}\n",
            first_index + disks.len(),
            put_marker(&tag),
            sum.len,
            sum.sha256
        ));
        for (i, put) in job.puts.iter().enumerate() {
            let kind =
                image::PutKind::of(&put.host).map_err(|source| TransferError::PutSource {
                    path: put.host.clone(),
                    source,
                })?;
            desc.push_str(&format!("putpath {i} {} {}\n", kind.word(), put.guest));
        }
        disks.push(DiskSpec {
            path: img,
            readonly: true,
        });
        put_sum = Some(sum);
    }
    let mut get_file = None;
    if !job.gets.is_empty() {
        let img = scratch.join("get.img");
        // Sparse but for the marker the guest finds the area by.
        let marker = get_marker(&tag);
        let f = std::fs::File::create(&img)
            .and_then(|f| f.set_len(job.area).map(|()| f))
            .and_then(|mut f| std::io::Write::write_all(&mut f, marker.as_bytes()));
        f.map_err(|source| TransferError::Io {
            what: format!("creating {}", img.display()),
            source,
        })?;
        desc.push_str(&format!(
            "get {} {} {}\n",
            first_index + disks.len(),
            marker.trim_end(),
            job.area
        ));
        for g in &job.gets {
            desc.push_str(&format!("getpath {}\n", g.guest));
        }
        disks.push(DiskSpec {
            path: img.clone(),
            readonly: false,
        });
        get_file = Some(img);
    }
    if let Some(image) = &job.rootfs {
        crate::guest::rootfs::check_image(image)?;
        let img = scratch.join("rootfs.img");
        // A private copy: the command may write (the guest kernel has no overlayfs). Its
        // first 1024 bytes (unused by ext4) carry the tag.
        let marker = format!("pmemvm-rootfs-{tag}\n");
        let copied = std::fs::copy(image, &img)
            .and_then(|_| std::fs::OpenOptions::new().write(true).open(&img))
            .and_then(|mut f| std::io::Write::write_all(&mut f, marker.as_bytes()));
        copied.map_err(|source| TransferError::Io {
            what: format!("copying {} to {}", image.display(), img.display()),
            source,
        })?;
        desc.push_str(&format!(
            "rootfs {} {}\n",
            first_index + disks.len(),
            marker.trim_end()
        ));
        disks.push(DiskSpec {
            path: img,
            readonly: false,
        });
    }
    let mut files = vec![(
        JOB_COMMAND_PATH.to_string(),
        job.script().into_bytes(),
        0o755,
    )];
    if !desc.is_empty() {
        files.push((JOB_TRANSFER_PATH.to_string(), desc.into_bytes(), 0o644));
    }
    Ok(PreparedTransfer {
        disks,
        files,
        get_file,
        put_sum,
    })
}

/// A tag unique to this run: the transfer DIMMs are found by it, not by their
/// `pmemN` number (QEMU's NFIT lists DIMMs in an order of its own).
fn nonce() -> String {
    use sha2::Digest;
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seed = format!(
        "{} {} {}",
        std::process::id(),
        now.as_nanos(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    format!("{:x}", sha2::Sha256::digest(seed.as_bytes()))[..24].to_string()
}

/// Marker at the start of the put image.
fn put_marker(tag: &str) -> String {
    format!(".pmemvm-put-{tag}")
}

/// First line of the get area before the guest writes it.
fn get_marker(tag: &str) -> String {
    format!("pmemvm-get-{tag}\n")
}

/// What the command did, for the JSON record.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CommandOutcome {
    /// argv.
    pub argv: Vec<String>,
    /// Its stdout (from the console, and `partial`, when the guest did not finish).
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
    /// True when stdout is what the console showed before the run ended early.
    pub partial: bool,
    /// Bytes and SHA-256 of the put image.
    pub put: Option<ArchiveRecord>,
    /// Bytes and SHA-256 of the get archive (verified on the host).
    pub get: Option<ArchiveRecord>,
    /// Files written below --out (relative paths).
    pub got_files: Vec<String>,
    /// Get entries not written (links, devices).
    pub skipped: Vec<String>,
}

/// Length and SHA-256 of an archive, for the record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArchiveRecord {
    /// Bytes.
    pub bytes: u64,
    /// Hex SHA-256.
    pub sha256: String,
}

/// Reads the command's output and the get archive from the guest's report.
/// The outcome is filled as far as it goes; the error says what failed.
pub fn collect(
    job: &CommandJob,
    prepared: &PreparedTransfer,
    report: &GuestReport,
    console: &str,
    outcome: &mut CommandOutcome,
) -> Result<(), TransferError> {
    let text = |name: &str| {
        report
            .files
            .get(name)
            .map(|b| String::from_utf8_lossy(b).into_owned())
    };
    outcome.argv = job.argv.clone();
    outcome.put = prepared.put_sum.as_ref().map(|s| ArchiveRecord {
        bytes: s.len,
        sha256: s.sha256.clone(),
    });
    match text(STDOUT_FRAME) {
        Some(s) => outcome.stdout = s,
        None => {
            outcome.partial = true;
            outcome.stdout = console
                .split_once(STDOUT_CONSOLE_MARK)
                .map(|(_, rest)| rest.trim_start_matches(['\r', '\n']).replace("\r\n", "\n"))
                .unwrap_or_default();
        }
    }
    outcome.stderr = text(STDERR_FRAME).unwrap_or_default();
    if let Some(why) = text(PUT_ERROR_FRAME) {
        return Err(TransferError::PutRefused(why.trim().to_string()));
    }
    if let Some(missing) = text(GET_MISSING_FRAME) {
        let first = missing.lines().next().unwrap_or_default().to_string();
        let shown = job
            .gets
            .iter()
            .find(|g| g.guest == first)
            .map(|g| g.text.clone())
            .unwrap_or(first);
        return Err(TransferError::GetMissing(shown));
    }
    if let Some(need) = text(GET_OVERFLOW_FRAME) {
        return Err(TransferError::GetTooLarge {
            need: need.trim().parse().unwrap_or(0),
            area: job.area,
        });
    }
    let (Some(get_file), Some(out)) = (&prepared.get_file, &job.out) else {
        return Ok(());
    };
    let Some(manifest) = text(GET_MANIFEST_FRAME) else {
        // The guest never got to the get step (it failed or timed out earlier).
        return Ok(());
    };
    let mut fields = manifest.split_whitespace();
    let (Some(len), Some(sha), None) = (fields.next(), fields.next(), fields.next()) else {
        return Err(TransferError::BadGetArchive(format!(
            "malformed manifest {manifest:?}"
        )));
    };
    let len: u64 = len.parse().ok().filter(|&l| l <= job.area).ok_or_else(|| {
        TransferError::BadGetArchive(format!("length {len:?} is not within the transfer area"))
    })?;
    let bytes = archive::read_prefix(get_file, len)?;
    let host_sha = archive::sha256_hex(&bytes);
    if bytes.len() as u64 != len || host_sha != sha.to_ascii_lowercase() {
        return Err(TransferError::GetChecksum {
            len,
            guest: sha.to_string(),
            host: host_sha,
        });
    }
    outcome.get = Some(ArchiveRecord {
        bytes: len,
        sha256: host_sha,
    });
    let plan = archive::plan_get_archive(&bytes, &job.gets)?;
    archive::extract_get_archive(&bytes, &plan, out)?;
    outcome.got_files = plan
        .entries
        .iter()
        .filter(|e| matches!(e.kind, archive::PlannedKind::File { .. }))
        .map(|e| e.rel.display().to_string())
        .collect();
    outcome.skipped = plan.skipped;
    Ok(())
}

#[cfg(test)]
mod tests;
