//! `pmemvm run --rootfs debian|IMAGE [--packages LIST] -- CMD`: the command runs
//! in a Debian root file system instead of the guest image's busybox.
//!
//! `debian` is built on the host (no guest) by `guest-images/rootfs-debian.sh`:
//! mmdebstrap of bookworm with the listed packages, packed into an ext4 image with
//! `mke2fs -d`, cached by the package list's hash. The run gets a private copy of the
//! image on a writable virtio disk, off the NVDIMM bus (the guest kernel has no
//! overlayfs, so a copy rather than a read-only lower layer); the guest's init
//! mounts it, binds `/proc`, `/sys`, `/dev` and `/job` into it and runs the command
//! there with `chroot` (see `run_command` in `guest-images/rootfs/init`). The
//! kernel is the image's, its drivers built in.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The script that builds the Debian root file system, relative to the source tree.
pub const BUILD_SCRIPT: &str = "guest-images/rootfs-debian.sh";
/// Packages of `--rootfs debian` without `--packages`.
pub const DEFAULT_PACKAGES: &str = "python3,stress-ng,fio,xfsprogs,ndctl";
/// Offset of the ext4 magic 0xEF53 (superblock at 1024, `s_magic` at 56).
const EXT4_MAGIC_OFFSET: u64 = 1080;

/// Errors finding or building a root file system.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    /// `--packages` without `--rootfs debian`.
    #[error("--packages needs --rootfs debian (it names what the Debian root file system holds)")]
    PackagesWithoutDebian,
    /// A package list with characters no Debian package name has.
    #[error("--packages '{0}' is not valid: give Debian package names separated by commas, e.g. python3,stress-ng")]
    BadPackages(String),
    /// The image is not usable.
    #[error("--rootfs {path}: {why}")]
    BadImage {
        /// The image.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The build script is not found.
    #[error("--rootfs debian needs {BUILD_SCRIPT} of pmemvm's source tree, which was not found above {start}; build the image there and pass --rootfs IMAGE.ext4")]
    NoScript {
        /// Where the search started.
        start: PathBuf,
    },
    /// The build failed.
    #[error(
        "building the Debian root file system failed ({script} --packages {packages}): {detail}"
    )]
    BuildFailed {
        /// The script.
        script: PathBuf,
        /// The packages.
        packages: String,
        /// Its last output lines.
        detail: String,
    },
}

/// The package list of `--packages`, checked (letters, digits, `.+-`, commas).
pub fn check_packages(list: &str) -> Result<String, RootfsError> {
    let ok = !list.trim().is_empty()
        && list.split(',').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
        });
    if ok {
        Ok(list.to_string())
    } else {
        Err(RootfsError::BadPackages(list.to_string()))
    }
}

/// Checks an ext4 image for a disk: whole 512-byte sectors with the ext4 magic.
pub fn check_image(path: &Path) -> Result<u64, RootfsError> {
    use std::io::{Read, Seek, SeekFrom};
    let bad = |why: String| RootfsError::BadImage {
        path: path.to_path_buf(),
        why,
    };
    let mut f = std::fs::File::open(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let len = f
        .metadata()
        .map_err(|e| bad(format!("cannot read it: {e}")))?
        .len();
    if len == 0 || len % 512 != 0 {
        return Err(bad(format!(
            "it is {len} bytes; an image served as a virtio disk must be a whole number of 512-byte sectors (`truncate -s` it up, then `resize2fs`)"
        )));
    }
    let mut magic = [0u8; 2];
    f.seek(SeekFrom::Start(EXT4_MAGIC_OFFSET))
        .and_then(|_| f.read_exact(&mut magic))
        .map_err(|e| bad(format!("cannot read its superblock: {e}")))?;
    if magic != [0x53, 0xef] {
        return Err(bad(
            "it is not an ext2/3/4 image (no superblock magic at byte 1080); give `debian` or an image made with mke2fs".into(),
        ));
    }
    Ok(len)
}

/// What [`resolve`] checks before anything is built: the package list and the
/// build script of `debian`, or the image at a path. Creates nothing.
pub fn check_choice(choice: &str, packages: Option<&str>) -> Result<(), RootfsError> {
    if choice != "debian" {
        if packages.is_some() {
            return Err(RootfsError::PackagesWithoutDebian);
        }
        check_image(Path::new(choice))?;
        return Ok(());
    }
    check_packages(packages.unwrap_or(DEFAULT_PACKAGES))?;
    build_script().map(|_| ())
}

/// `guest-images/rootfs-debian.sh` of the source tree above this binary.
fn build_script() -> Result<PathBuf, RootfsError> {
    crate::study::source_tree::find(BUILD_SCRIPT).map_err(|start| RootfsError::NoScript { start })
}

/// The image of `--rootfs CHOICE`: `debian` is built (or found in its cache),
/// anything else is a path to an ext4 image.
pub fn resolve(choice: &str, packages: Option<&str>) -> Result<PathBuf, RootfsError> {
    if choice != "debian" {
        if packages.is_some() {
            return Err(RootfsError::PackagesWithoutDebian);
        }
        let path = PathBuf::from(choice);
        check_image(&path)?;
        return Ok(path);
    }
    let packages = check_packages(packages.unwrap_or(DEFAULT_PACKAGES))?;
    let script = build_script()?;
    log::info!("building or finding the Debian root file system ({packages})");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--packages")
        .arg(&packages)
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| RootfsError::BuildFailed {
            script: script.clone(),
            packages: packages.clone(),
            detail: e.to_string(),
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let image = stdout.lines().last().map(PathBuf::from);
    match image {
        Some(p) if out.status.success() && p.is_file() => {
            check_image(&p)?;
            Ok(p)
        }
        _ => {
            let err = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = err.lines().collect();
            Err(RootfsError::BuildFailed {
                script,
                packages,
                detail: lines[lines.len().saturating_sub(3)..].join(" / "),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_lists_and_images_are_checked() {
        assert!(check_packages("python3,stress-ng,pmdk-tools").is_ok());
        for bad in ["", "python3,", "a b", "x;rm", "Python3"] {
            let e = check_packages(bad).expect_err(bad);
            assert!(e.to_string().contains(&format!("'{bad}'")), "{e}");
        }
        let d = std::env::temp_dir().join(format!("pmemvm-rootfs-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("mkdir");
        let odd = d.join("odd.img");
        std::fs::write(&odd, vec![0u8; 4000]).expect("write");
        assert!(check_image(&odd)
            .expect_err("odd")
            .to_string()
            .contains("whole number of 512-byte sectors"));
        let plain = d.join("plain.img");
        std::fs::File::create(&plain)
            .and_then(|f| f.set_len(16 << 20))
            .expect("plain");
        assert!(check_image(&plain)
            .expect_err("plain")
            .to_string()
            .contains("not an ext2/3/4"));
        let e = resolve(plain.to_str().expect("utf8"), Some("python3")).expect_err("packages");
        assert!(matches!(e, RootfsError::PackagesWithoutDebian));
        let _ = std::fs::remove_dir_all(&d);
    }
}
