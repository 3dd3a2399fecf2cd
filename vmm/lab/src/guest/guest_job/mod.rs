//! Guest jobs: how the host hands a fio job to the pmemvm guest image and reads
//! the results back.
//!
//! * **Delivery.** The host appends a second, uncompressed newc cpio archive to
//!   the image's `initramfs.cpio.gz`; Linux unpacks it over the first one. The
//!   archive holds `/job/job.fio`, optionally `/job/setup.sh` (run with `sh -e`
//!   before fio, cwd `/job`) and `/job/args` (one line of extra fio arguments).
//!   [`job_archive`] writes such an archive, [`append_to_initrd`] concatenates it
//!   to the image's initramfs with the alignment the kernel needs.
//! * **Results.** The guest's `/init` sends files on COM2 as frames
//!   `PMEMVM-BEGIN <name> <size>\n<size bytes>\nPMEMVM-END <name>\n` and ends
//!   with `PMEMVM-STATUS <n>\n`; [`parse_channel`] decodes that stream. Then it
//!   writes the status byte to the guest-exit port (0x501).
//! * **Image.** [`find_image_dir`] locates the files `guest-images/build.sh`
//!   writes (`vmlinux`, `bzImage`, `initramfs.cpio.gz`, `manifest.json`).
//!
//! The guest side of this protocol is `guest-images/rootfs/init`; the format is
//! described in `docs/guest-image.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Path of the fio job file inside the job archive.
pub const JOB_FIO_PATH: &str = "job/job.fio";
/// Path of the optional setup script inside the job archive.
pub const JOB_SETUP_PATH: &str = "job/setup.sh";
/// Path of the optional extra fio arguments (one line) inside the job archive.
pub const JOB_ARGS_PATH: &str = "job/args";
/// Path of the phase list (one phase name a line) inside the job archive.
pub const JOB_PHASES_PATH: &str = "job/phases";
/// `/job/job.fio` of a job with phases, for an init that does not know `/job/phases`: fio
/// refuses it (unknown engine), so that init reports a failure the host can explain.
pub const PHASES_FALLBACK_JOB: &str = "; pmemvm: this job has phases (/job/phases); an init that \
runs only /job/job.fio gets this job, which fails on purpose: rebuild the guest image.\n\
[pmemvm-image-without-phases]\nioengine=pmemvm-image-without-phases\nsize=4k\n";
/// `/job/job.fio` of a command run (`/job/cmd.sh`), for an init that does not know
/// commands: it fails at once, as [`PHASES_FALLBACK_JOB`] does.
pub const COMMAND_FALLBACK_JOB: &str = "; pmemvm: this job is a command (/job/cmd.sh); an init \
that runs only /job/job.fio gets this job, which fails on purpose: rebuild the guest image.\n\
[pmemvm-image-without-phases]\nioengine=pmemvm-image-without-phases\nsize=4k\n";
/// Name of the frame with one `<phase> <status>` line per phase (`setup` first, if any).
pub const PHASES_STATUS_FRAME: &str = "phases.status";
/// Name of the frame with one `<phase> <fio command line>` line per phase run.
pub const PHASES_COMMANDS_FRAME: &str = "phases.commands";
/// Name of the frame with the guest's kernel release, fio version and command line.
pub const GUEST_INFO_FRAME: &str = "guest-info";
/// Name of the frame that carries fio's JSON output.
pub const FIO_JSON_FRAME: &str = "fio.json";
/// Name of the frame that carries fio's stderr.
pub const FIO_STDERR_FRAME: &str = "fio.stderr";
/// Frame of the `/dev` paths a `run --fio` job names that the guest does not have (the
/// guest's /init then does not run fio).
pub const MISSING_DEVICES_FRAME: &str = "missing-devices";
/// Name of the frame that carries the output (stdout + stderr) of `setup.sh`.
pub const SETUP_LOG_FRAME: &str = "setup.log";
/// Environment variable that points at a directory holding a built image.
pub const IMAGE_DIR_ENV: &str = "PMEMVM_IMAGE_DIR";
/// Where `guest-images/build.sh` writes the image, relative to the source tree.
pub const IMAGE_OUT_SUBDIR: &str = "guest-images/out";

const BEGIN_MARK: &[u8] = b"PMEMVM-BEGIN ";
const END_MARK: &str = "PMEMVM-END ";
const STATUS_MARK: &[u8] = b"PMEMVM-STATUS ";
const CPIO_MAGIC: &str = "070701";
const CPIO_TRAILER: &str = "TRAILER!!!";
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;

/// Errors building a job archive or locating the guest image.
#[derive(Debug, thiserror::Error)]
pub enum GuestJobError {
    /// A path in the archive is empty, absolute or contains `.`/`..` components.
    #[error("invalid path {path:?} for the job archive: use a relative path like \"job/job.fio\"")]
    InvalidArchivePath {
        /// The rejected path.
        path: String,
    },
    /// The same path was given twice.
    #[error("the job archive lists {path:?} twice")]
    DuplicateArchivePath {
        /// The duplicated path.
        path: String,
    },
    /// A file does not fit the 32-bit size field of a newc header.
    #[error("{path:?} is too large for a cpio newc archive ({size} bytes, at most 4 GiB - 1)")]
    ArchiveFileTooLarge {
        /// Path of the file.
        path: String,
        /// Its size in bytes.
        size: usize,
    },
    /// `$PMEMVM_IMAGE_DIR` is set but does not hold a complete image.
    #[error(
        "{IMAGE_DIR_ENV}={dir} does not hold a built guest image ({missing} is missing); \
         build one with `guest-images/build.sh --out {dir}`"
    )]
    ImageDirIncomplete {
        /// The directory named by the environment variable.
        dir: PathBuf,
        /// The first missing file.
        missing: PathBuf,
    },
    /// No image was found next to the executable or above it.
    #[error(
        "no built guest image found (looked for {IMAGE_OUT_SUBDIR}/manifest.json above {start}); \
         build it with `guest-images/build.sh` or set {IMAGE_DIR_ENV}"
    )]
    ImageNotFound {
        /// Directory where the search started.
        start: PathBuf,
    },
    /// The image directory has a manifest but not all the files it lists.
    #[error("the guest image in {dir} is incomplete ({missing} is missing); rerun `guest-images/build.sh`")]
    ImageIncomplete {
        /// The image directory.
        dir: PathBuf,
        /// The first missing file.
        missing: PathBuf,
    },
    /// The path of the running executable could not be determined.
    #[error("cannot determine the path of the running executable")]
    CurrentExe(#[source] std::io::Error),
}

/// Errors decoding the COM2 result stream of a guest job.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuestChannelError {
    /// A `PMEMVM-BEGIN` line is cut off or malformed.
    #[error("malformed frame header {line:?} on the guest channel (expected `PMEMVM-BEGIN <name> <size>`)")]
    BadFrameHeader {
        /// The offending header line (lossily decoded).
        line: String,
    },
    /// The stream ended inside a frame's data.
    #[error("guest channel ended inside file {name:?}: got {got} of {expected} bytes")]
    TruncatedFrame {
        /// File name of the frame.
        name: String,
        /// Size announced by the header.
        expected: usize,
        /// Bytes actually present.
        got: usize,
    },
    /// A frame's data is not followed by its `PMEMVM-END <name>` line.
    #[error("file {name:?} on the guest channel is not followed by `PMEMVM-END {name}`")]
    MissingFrameEnd {
        /// File name of the frame.
        name: String,
    },
    /// Two frames carry the same file name.
    #[error("the guest sent file {name:?} twice")]
    DuplicateFrame {
        /// File name of the frame.
        name: String,
    },
    /// A `PMEMVM-STATUS` line is cut off, malformed or out of range.
    #[error(
        "malformed status line {line:?} on the guest channel (expected `PMEMVM-STATUS <0-255>`)"
    )]
    BadStatus {
        /// The offending line (lossily decoded).
        line: String,
    },
    /// More than one status line.
    #[error("the guest sent more than one PMEMVM-STATUS line")]
    DuplicateStatus,
}

/// What a guest job sent back on COM2.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuestReport {
    /// Files by frame name (e.g. [`FIO_JSON_FRAME`]), with their raw contents.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The job's exit status (fio's, or setup's if setup failed), if it got that far.
    pub status: Option<u8>,
}

/// One fio invocation of a job with phases: `/job/<name>.fio`, optional `/job/<name>.args`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GuestPhase {
    /// File and frame name (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// The job file.
    pub fio_job: String,
    /// Extra fio command-line options (one line).
    pub args: Option<String>,
}

/// A fio job for the guest image, turned into an archive by [`GuestJob::archive`].
///
/// Either one job file (`fio_job`, run as `/job/job.fio`), or `phases`: then `/job/phases`
/// lists them and the guest's init runs each in order, sending `<name>.json`,
/// `<name>.stderr` and `phases.status` (see `guest-images/rootfs/init`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GuestJob {
    /// Contents of `/job/job.fio` (unused when there are phases).
    pub fio_job: String,
    /// Contents of `/job/setup.sh`, run with `sh -e` in `/job` before fio.
    pub setup: Option<String>,
    /// Extra fio arguments (one line, split on whitespace by the guest shell).
    pub args: Option<String>,
    /// The phases, in order.
    pub phases: Vec<GuestPhase>,
    /// More files for the archive (path, contents, mode), e.g. `job/cmd.sh`
    /// of `pmemvm run -- CMD` (see [`crate::guest::transfer`]).
    pub extra_files: Vec<(String, Vec<u8>, u32)>,
}

impl GuestJob {
    /// The newc cpio archive holding this job, ready for [`append_to_initrd`].
    pub fn archive(&self) -> Result<Vec<u8>, GuestJobError> {
        let mut owned: Vec<(String, &[u8], u32)> = Vec::new();
        if self.phases.is_empty() {
            owned.push((JOB_FIO_PATH.into(), self.fio_job.as_bytes(), 0o644));
        }
        if let Some(setup) = &self.setup {
            owned.push((JOB_SETUP_PATH.into(), setup.as_bytes(), 0o755));
        }
        if let Some(args) = &self.args {
            owned.push((JOB_ARGS_PATH.into(), args.as_bytes(), 0o644));
        }
        let list: String = self
            .phases
            .iter()
            .map(|p| format!("{}\n", p.name))
            .collect();
        for p in &self.phases {
            let ok = !p.name.is_empty()
                && !p.name.starts_with('.')
                && p.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !ok {
                return Err(GuestJobError::InvalidArchivePath {
                    path: format!("job/{}.fio", p.name),
                });
            }
            owned.push((format!("job/{}.fio", p.name), p.fio_job.as_bytes(), 0o644));
            if let Some(args) = &p.args {
                owned.push((format!("job/{}.args", p.name), args.as_bytes(), 0o644));
            }
        }
        if !self.phases.is_empty() {
            owned.push((JOB_PHASES_PATH.into(), list.as_bytes(), 0o644));
            // An older image's init knows only /job/job.fio: it runs this one, which fails at
            // once, instead of starting a shell that waits for the time-out.
            owned.push((JOB_FIO_PATH.into(), PHASES_FALLBACK_JOB.as_bytes(), 0o644));
        }
        for (path, data, mode) in &self.extra_files {
            owned.push((path.clone(), data.as_slice(), *mode));
        }
        let files: Vec<(&str, &[u8], u32)> =
            owned.iter().map(|(p, d, m)| (p.as_str(), *d, *m)).collect();
        job_archive(&files)
    }
}

/// Writes a newc ("070701") cpio archive holding `files` (path inside the
/// archive, contents, permission bits), preceded by entries for their parent
/// directories and followed by the `TRAILER!!!` entry.
///
/// Paths are relative (`job/job.fio`); the file type bits of `mode` default to
/// a regular file. All entries are owned by root with mtime 0.
pub fn job_archive(files: &[(&str, &[u8], u32)]) -> Result<Vec<u8>, GuestJobError> {
    let mut out = Vec::new();
    let mut dirs = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut ino: u32 = 1;
    for &(path, data, mode) in files {
        let comps = archive_components(path)?;
        if !seen.insert(comps.join("/")) {
            return Err(GuestJobError::DuplicateArchivePath {
                path: path.to_string(),
            });
        }
        let size = u32::try_from(data.len()).map_err(|_| GuestJobError::ArchiveFileTooLarge {
            path: path.to_string(),
            size: data.len(),
        })?;
        for depth in 1..comps.len() {
            let dir = comps[..depth].join("/");
            if dirs.insert(dir.clone()) {
                write_cpio_entry(&mut out, ino, &dir, S_IFDIR | 0o755, 2, &[], 0);
                ino += 1;
            }
        }
        let mode = if mode & S_IFMT == 0 {
            S_IFREG | mode
        } else {
            mode
        };
        write_cpio_entry(&mut out, ino, &comps.join("/"), mode, 1, data, size);
        ino += 1;
    }
    write_cpio_entry(&mut out, 0, CPIO_TRAILER, 0, 1, &[], 0);
    Ok(out)
}

/// Appends a job archive to the image's initramfs. The kernel only looks for
/// a cpio header at 4-byte-aligned offsets, so `base` is padded with zeros.
pub fn append_to_initrd(base: &[u8], job: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(base.len() + 4 + job.len());
    out.extend_from_slice(base);
    pad4(&mut out);
    out.extend_from_slice(job);
    out
}

fn archive_components(path: &str) -> Result<Vec<&str>, GuestJobError> {
    let comps: Vec<&str> = path.split('/').collect();
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\0')
        || comps
            .iter()
            .any(|c| c.is_empty() || *c == "." || *c == "..");
    if bad {
        return Err(GuestJobError::InvalidArchivePath {
            path: path.to_string(),
        });
    }
    Ok(comps)
}

fn pad4(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(4), 0);
}

fn write_cpio_entry(
    out: &mut Vec<u8>,
    ino: u32,
    name: &str,
    mode: u32,
    nlink: u32,
    data: &[u8],
    size: u32,
) {
    // The name length includes the terminating NUL; it always fits in u32 here
    // because names come from short in-program paths, but saturate to be safe.
    let namesize = u32::try_from(name.len() + 1).unwrap_or(u32::MAX);
    // magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor,
    // rdevmajor, rdevminor, namesize, check
    let fields = [ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, namesize, 0];
    out.extend_from_slice(CPIO_MAGIC.as_bytes());
    for field in fields {
        out.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

/// Decodes the COM2 stream of a guest job.
///
/// Bytes outside frames (boot noise, partial lines) are ignored. A frame whose
/// data or end line is cut off is an error that names the file, so a guest that
/// died mid-transfer is never mistaken for a short result.
pub fn parse_channel(bytes: &[u8]) -> Result<GuestReport, GuestChannelError> {
    let mut report = GuestReport::default();
    let mut pos = 0;
    loop {
        let begin = find(bytes, BEGIN_MARK, pos);
        let status = find(bytes, STATUS_MARK, pos);
        let (at, is_frame) = match (begin, status) {
            (None, None) => return Ok(report),
            (Some(b), Some(s)) if b < s => (b, true),
            (Some(b), None) => (b, true),
            (_, Some(s)) => (s, false),
        };
        if is_frame {
            let (name, data, next) = parse_frame(bytes, at)?;
            if report.files.contains_key(&name) {
                return Err(GuestChannelError::DuplicateFrame { name });
            }
            report.files.insert(name, data);
            pos = next;
        } else {
            let (value, next) = parse_status(bytes, at)?;
            if report.status.replace(value).is_some() {
                return Err(GuestChannelError::DuplicateStatus);
            }
            pos = next;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// The line starting at `start` without its terminator, and the offset after the `\n`.
fn line_at(bytes: &[u8], start: usize) -> Option<(&[u8], usize)> {
    let rest = bytes.get(start..)?;
    let nl = rest.iter().position(|&c| c == b'\n')?;
    let line = &rest[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Some((line, start + nl + 1))
}

fn parse_frame(bytes: &[u8], start: usize) -> Result<(String, Vec<u8>, usize), GuestChannelError> {
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let Some((line, data_start)) = line_at(bytes, start) else {
        return Err(GuestChannelError::BadFrameHeader {
            line: lossy(&bytes[start..]),
        });
    };
    let bad_header = || GuestChannelError::BadFrameHeader { line: lossy(line) };
    let header = std::str::from_utf8(&line[BEGIN_MARK.len()..]).map_err(|_| bad_header())?;
    let mut fields = header.split(' ');
    let (Some(name), Some(size), None) = (fields.next(), fields.next(), fields.next()) else {
        return Err(bad_header());
    };
    let size: usize = size.parse().map_err(|_| bad_header())?;
    if name.is_empty() {
        return Err(bad_header());
    }
    let available = bytes.len() - data_start;
    if available < size {
        return Err(GuestChannelError::TruncatedFrame {
            name: name.to_string(),
            expected: size,
            got: available,
        });
    }
    let data_end = data_start + size;
    let missing_end = || GuestChannelError::MissingFrameEnd {
        name: name.to_string(),
    };
    // The data is followed by "\n" (possibly "\r\n") and the end line.
    let mut end_line_start = data_end;
    if bytes.get(end_line_start) == Some(&b'\r') {
        end_line_start += 1;
    }
    if bytes.get(end_line_start) != Some(&b'\n') {
        return Err(missing_end());
    }
    let (end_line, next) = line_at(bytes, end_line_start + 1).ok_or_else(missing_end)?;
    if end_line != format!("{END_MARK}{name}").as_bytes() {
        return Err(missing_end());
    }
    Ok((name.to_string(), bytes[data_start..data_end].to_vec(), next))
}

fn parse_status(bytes: &[u8], start: usize) -> Result<(u8, usize), GuestChannelError> {
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let Some((line, next)) = line_at(bytes, start) else {
        return Err(GuestChannelError::BadStatus {
            line: lossy(&bytes[start..]),
        });
    };
    let value = std::str::from_utf8(&line[STATUS_MARK.len()..])
        .ok()
        .and_then(|v| v.trim().parse::<u8>().ok())
        .ok_or_else(|| GuestChannelError::BadStatus { line: lossy(line) })?;
    Ok((value, next))
}

/// Paths of a built guest image (the output of `guest-images/build.sh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageDir {
    /// The directory holding the image.
    pub dir: PathBuf,
    /// Uncompressed ELF kernel with a PVH note.
    pub vmlinux: PathBuf,
    /// Compressed kernel for the Linux boot protocol (and QEMU `-kernel`).
    pub bz_image: PathBuf,
    /// The initramfs (gzip-compressed newc cpio).
    pub initramfs: PathBuf,
    /// `manifest.json`: versions, hashes and build times.
    pub manifest: PathBuf,
}

impl ImageDir {
    /// The image in `dir`, if all of its files are there (else the first missing one).
    pub fn in_dir(dir: &Path) -> Result<Self, PathBuf> {
        let image = ImageDir {
            dir: dir.to_path_buf(),
            vmlinux: dir.join("vmlinux"),
            bz_image: dir.join("bzImage"),
            initramfs: dir.join("initramfs.cpio.gz"),
            manifest: dir.join("manifest.json"),
        };
        for path in [
            &image.manifest,
            &image.vmlinux,
            &image.bz_image,
            &image.initramfs,
        ] {
            if !path.is_file() {
                return Err(path.clone());
            }
        }
        Ok(image)
    }
}

/// Finds the built guest image: `$PMEMVM_IMAGE_DIR` if set, else the first
/// `guest-images/out/` with a `manifest.json` in the directory of the running
/// executable or one of its ancestors (so `target/debug/pmemvm` and test
/// binaries find the image of their source tree).
pub fn find_image_dir() -> Result<ImageDir, GuestJobError> {
    if let Some(dir) = std::env::var_os(IMAGE_DIR_ENV).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return ImageDir::in_dir(&dir)
            .map_err(|missing| GuestJobError::ImageDirIncomplete { dir, missing });
    }
    let exe = std::env::current_exe().map_err(GuestJobError::CurrentExe)?;
    let start = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    find_image_above(&start)
}

/// Looks for `guest-images/out/manifest.json` in `start` and its ancestors.
pub fn find_image_above(start: &Path) -> Result<ImageDir, GuestJobError> {
    for dir in start.ancestors() {
        let out = dir.join(IMAGE_OUT_SUBDIR);
        if out.join("manifest.json").is_file() {
            return ImageDir::in_dir(&out)
                .map_err(|missing| GuestJobError::ImageIncomplete { dir: out, missing });
        }
    }
    Err(GuestJobError::ImageNotFound {
        start: start.to_path_buf(),
    })
}

mod image;
pub use image::{image_for, ImageNeed, ImageUnavailable};

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_init;

/// What the user is told when the fio job names `/dev` paths the guest does not have
/// (`missing`: the guest's space-separated list).
pub fn missing_devices_message(missing: &str) -> String {
    let list: Vec<&str> = missing.split_whitespace().collect();
    let names = list.join(", ");
    let pmem = list
        .iter()
        .any(|d| d.starts_with("/dev/pmem") || d.starts_with("/dev/dax"));
    let why = if pmem {
        "an NVDIMM with a label area (the default, label-size=128K) starts with no namespace, \
         as on real hardware, so there is no /dev/pmem* or /dev/dax* until one is created: \
         add --setup 'ndctl create-namespace' (fsdax, /dev/pmem0; -m devdax for /dev/dax0.0), \
         or give the DIMM label-size=0 for a raw /dev/pmem0 of the whole DIMM"
    } else {
        "check the job's filename= lines against the devices the guest has"
    };
    format!("the fio job names {names}, which the guest does not have; fio was not run: {why}")
}
