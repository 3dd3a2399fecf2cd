//! The `--put` image: the user's files and trees as a read-only ext4 file system
//! (no journal) made on the host by `mke2fs -d` (e2fsprogs runs it unprivileged).
//!
//! The image's root holds one entry a `--put`, named by its index (`0`, `1`, ...);
//! the guest mounts the image read-only and bind-mounts entry `i` onto the guest path
//! of `--put` number `i` (a symbolic link is recreated instead). So the data stays on
//! the put DIMM and is read from it on demand: a tree can be larger than guest RAM.
//! The image's first 1024 bytes, unused by ext4, start with the run's marker (the
//! guest finds the DIMM by it); its SHA-256 is taken after the marker is written.
//!
//! `mke2fs -d` takes one directory, so the trees are staged first below the
//! scratch directory: hard links where the file system allows, copies elsewhere.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest;

use super::archive::ArchiveSum;
use super::{PutSpec, TransferError};
use vmm::layout::NVDIMM_REGION_ALIGN;

/// ext4 block size of the image.
const BLOCK: u64 = 4096;
/// Bytes of an inode in the image (mke2fs's default for ext4).
const INODE: u64 = 256;
/// Fixed room for the superblock, group descriptors, bitmaps and the root.
const FIXED: u64 = 4 << 20;

/// What a `--put` becomes in the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutKind {
    /// A directory, bind-mounted.
    Dir,
    /// A regular file, bind-mounted.
    File,
    /// A symbolic link, recreated.
    Link,
}

impl PutKind {
    /// The word of the `putpath` line of `/job/transfer`.
    pub fn word(self) -> &'static str {
        match self {
            Self::Dir => "dir",
            Self::File => "file",
            Self::Link => "link",
        }
    }

    /// The kind of the host path `path` (not following a final link).
    pub fn of(path: &Path) -> Result<Self, std::io::Error> {
        let ty = std::fs::symlink_metadata(path)?.file_type();
        Ok(if ty.is_dir() {
            Self::Dir
        } else if ty.is_symlink() {
            Self::Link
        } else {
            Self::File
        })
    }
}

/// Blocks and inodes a host tree takes in the image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Data and directory bytes, in whole blocks.
    pub bytes: u64,
    /// Inodes.
    pub inodes: u64,
}

impl Footprint {
    /// Adds the footprint of `path` (a file, link or directory tree).
    pub fn add(&mut self, path: &Path) -> Result<(), std::io::Error> {
        let meta = std::fs::symlink_metadata(path)?;
        self.inodes += 1;
        if meta.is_dir() {
            let mut names = 0u64;
            for entry in std::fs::read_dir(path)? {
                let entry = entry?;
                names += entry.file_name().len() as u64 + 16;
                self.add(&entry.path())?;
            }
            self.bytes += names.div_ceil(BLOCK).max(1) * BLOCK;
        } else if meta.is_file() {
            // Data blocks, plus an extent-tree block a 128 MiB of data.
            let blocks = meta.len().div_ceil(BLOCK);
            self.bytes += (blocks + blocks.div_ceil(32_768)) * BLOCK;
        } else if meta.is_symlink() {
            self.bytes += BLOCK; // a target of 60 bytes or more takes a block
        }
        Ok(())
    }

    /// Image bytes for this footprint: data, inode tables and room for the
    /// metadata, a multiple of the NVDIMM region alignment (16 MiB).
    pub fn image_len(&self) -> u64 {
        let inodes = self.inode_count();
        let raw = self.bytes.saturating_add(inodes * INODE);
        let with_meta = raw.saturating_add(raw / 32).saturating_add(FIXED);
        with_meta.next_multiple_of(NVDIMM_REGION_ALIGN)
    }

    /// Inodes to ask mke2fs for (the root, lost+found, the reserved ones and the trees).
    pub fn inode_count(&self) -> u64 {
        (self.inodes + 64).next_multiple_of(64)
    }
}

/// The footprint of all the `--put`s.
pub fn footprint(puts: &[PutSpec]) -> Result<Footprint, TransferError> {
    let mut fp = Footprint::default();
    for put in puts {
        fp.add(&put.host)
            .map_err(|source| TransferError::PutSource {
                path: put.host.clone(),
                source,
            })?;
    }
    Ok(fp)
}

/// `mke2fs` on `PATH`, or in `/usr/sbin` or `/sbin` (a user's `PATH` often lacks them).
fn find_mke2fs() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("mke2fs"))
        .find(|p| p.is_file())
}

/// Copies `src` to `dst` (not following links): directories entry by entry, files
/// hard-linked where possible, links recreated; other kinds are left out.
fn stage(src: &Path, dst: &Path) -> Result<(), std::io::Error> {
    let meta = std::fs::symlink_metadata(src)?;
    let ty = meta.file_type();
    if ty.is_dir() {
        std::fs::create_dir(dst)?;
        for entry in std::fs::read_dir(src)? {
            let entry = entry?;
            stage(&entry.path(), &dst.join(entry.file_name()))?;
        }
        std::fs::set_permissions(dst, meta.permissions())?;
    } else if ty.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(src)?, dst)?;
    } else if ty.is_file() && std::fs::hard_link(src, dst).is_err() {
        std::fs::copy(src, dst)?;
    }
    Ok(())
}

/// Runs mke2fs on `staged` into `out` of `len` bytes; `Err` holds its stderr.
fn mke2fs(tool: &Path, staged: &Path, out: &Path, len: u64, inodes: u64) -> Result<(), String> {
    let _ = std::fs::remove_file(out);
    let res = Command::new(tool)
        .args(["-q", "-F", "-t", "ext4", "-O", "^has_journal,^resize_inode"])
        .args(["-b", "4096", "-I", "256", "-m", "0", "-L", "pmemvm-put"])
        .args(["-E", "root_owner=0:0,nodiscard", "-N", &inodes.to_string()])
        .arg("-d")
        .arg(staged)
        .arg(out)
        .arg(format!("{}k", len / 1024))
        // No /etc/mke2fs.conf (e.g. a minimal host): its built-in defaults.
        .env("MKE2FS_CONFIG", "/dev/null")
        .output()
        .map_err(|e| e.to_string())?;
    if res.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&res.stderr);
    Err(err.lines().last().unwrap_or("failed").trim().to_string())
}

/// Writes the `--put` image to `out` (staging below `scratch`); returns its length
/// and SHA-256 (marker included).
pub fn write_put_image(
    puts: &[PutSpec],
    marker: &str,
    scratch: &Path,
    out: &Path,
) -> Result<ArchiveSum, TransferError> {
    let io = |what: String| move |source| TransferError::Io { what, source };
    let tool = find_mke2fs().ok_or(TransferError::NoMke2fs)?;
    let fp = footprint(puts)?;
    let staged = scratch.join("put-tree");
    let _ = std::fs::remove_dir_all(&staged);
    std::fs::create_dir_all(&staged).map_err(io(format!("creating {}", staged.display())))?;
    for (i, put) in puts.iter().enumerate() {
        stage(&put.host, &staged.join(i.to_string()))
            .map_err(io(format!("staging {}", put.host.display())))?;
    }
    let mut len = fp.image_len();
    let mut made = mke2fs(&tool, &staged, out, len, fp.inode_count());
    if made.is_err() {
        // The estimate was short (many small files, long names): once more with room.
        len = (len + len / 2).next_multiple_of(NVDIMM_REGION_ALIGN);
        made = mke2fs(&tool, &staged, out, len, fp.inode_count() * 2);
    }
    let _ = std::fs::remove_dir_all(&staged);
    made.map_err(|why| TransferError::PutImage {
        len,
        tool: tool.clone(),
        why,
    })?;
    let mut head = marker.as_bytes().to_vec();
    head.push(b'\n');
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(out)
        .map_err(io(format!("opening {}", out.display())))?;
    std::io::Write::write_all(&mut file, &head)
        .map_err(io(format!("writing {}", out.display())))?;
    std::io::Seek::rewind(&mut file).map_err(io(format!("reading {}", out.display())))?;
    let mut hash = sha2::Sha256::new();
    let copied = std::io::copy(&mut std::io::Read::take(&mut file, len), &mut hash)
        .map_err(io(format!("reading {}", out.display())))?;
    if copied != len {
        return Err(TransferError::PutImage {
            len,
            tool,
            why: format!("the image has {copied} bytes"),
        });
    }
    Ok(ArchiveSum {
        len,
        sha256: format!("{:x}", hash.finalize()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_footprint_counts_blocks_and_inodes() {
        let d = std::env::temp_dir().join(format!("pmemvm-image-fp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("t/sub")).expect("mkdir");
        std::fs::write(d.join("t/sub/a"), vec![1u8; 5000]).expect("write");
        std::fs::write(d.join("t/empty"), b"").expect("write");
        let mut fp = Footprint::default();
        fp.add(&d.join("t")).expect("footprint");
        // t, sub, a, empty; a: 2 blocks + 1 extent block; two directory blocks.
        assert_eq!(fp.inodes, 4);
        assert_eq!(fp.bytes, 5 * BLOCK);
        assert_eq!(fp.image_len(), NVDIMM_REGION_ALIGN);
        let big = Footprint {
            bytes: 200 << 20,
            inodes: 40,
        };
        assert_eq!(big.image_len() % NVDIMM_REGION_ALIGN, 0);
        assert!(big.image_len() > 200 << 20 && big.image_len() <= 224 << 20);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_image_holds_the_trees_by_index_and_starts_with_the_marker() {
        if find_mke2fs().is_none() {
            pmemvm_skip::skip!("no mke2fs (e2fsprogs) on this host");
        }
        let d = std::env::temp_dir().join(format!("pmemvm-image-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("t/sub")).expect("mkdir");
        std::fs::write(d.join("t/sub/f"), b"data").expect("write");
        std::fs::write(d.join("one"), b"file").expect("write");
        let puts: Vec<PutSpec> = vec![
            format!("{}:/x", d.join("t").display())
                .parse()
                .expect("put"),
            format!("{}:/y", d.join("one").display())
                .parse()
                .expect("put"),
        ];
        let img = d.join("put.img");
        let sum = write_put_image(&puts, ".pmemvm-put-abc", &d, &img).expect("image");
        let bytes = std::fs::read(&img).expect("read");
        assert_eq!(bytes.len() as u64, sum.len);
        assert_eq!(sum.len % NVDIMM_REGION_ALIGN, 0);
        assert!(bytes.starts_with(b".pmemvm-put-abc\n"));
        assert_eq!(&bytes[1080..1082], &[0x53, 0xef], "ext4 superblock magic");
        assert_eq!(sum.sha256, format!("{:x}", sha2::Sha256::digest(&bytes)));
        assert!(!d.join("put-tree").exists(), "the staging tree is removed");
        // e2fsprogs' own reader sees the trees under their indexes.
        for (path, want) in [("/0/sub/f", "data"), ("/1", "file")] {
            let out = Command::new("debugfs")
                .args(["-R", &format!("cat {path}")])
                .arg(&img)
                .output();
            let Ok(out) = out else {
                eprintln!("debugfs missing: content not checked");
                break;
            };
            assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{path}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
