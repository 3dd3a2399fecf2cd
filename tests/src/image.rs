//! The one lookup of the project's guest image for the tests.
//!
//! `$PMEMVM_IMAGE_DIR` when set, else `guest-images/out/` of this source tree.
//! An image that was never built is the one case that skips (tests/run.sh
//! builds it, so strict mode fails then too). A `$PMEMVM_IMAGE_DIR` that does
//! not hold a complete image, or a `guest-images/out/` with a manifest but a
//! file missing, is a misconfiguration or a broken build: the test fails, in
//! every mode.

use std::path::PathBuf;

use lab::guest::guest_job::ImageDir;

use crate::skip::Skip;

/// The environment variable naming the image directory.
pub const IMAGE_DIR_ENV: &str = "PMEMVM_IMAGE_DIR";

/// What looking for the image found, before it becomes a skip or a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// A complete image.
    Found(ImageDir),
    /// No image was built (and no `$PMEMVM_IMAGE_DIR` given): a skip.
    NotBuilt(String),
    /// A directory was named or half-built but is not a complete image: a failure.
    Broken(String),
}

/// Looks for the image without deciding what a miss means (see [`image_dir`]).
pub fn lookup() -> Lookup {
    if let Some(dir) = std::env::var_os(IMAGE_DIR_ENV).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return match ImageDir::in_dir(&dir) {
            Ok(image) => Lookup::Found(image),
            Err(missing) => Lookup::Broken(format!(
                "{IMAGE_DIR_ENV}={} is not a built guest image: {} is missing \
                 (unset it, or point it at the output of guest-images/build.sh)",
                dir.display(),
                missing.display()
            )),
        };
    }
    let dir = crate::pmemvm::workspace_root().join("guest-images/out");
    match ImageDir::in_dir(&dir) {
        Ok(image) => Lookup::Found(image),
        Err(missing) if missing.ends_with("manifest.json") => Lookup::NotBuilt(format!(
            "the guest image is not built in {} (run guest-images/build.sh; tests/run.sh does)",
            dir.display()
        )),
        Err(missing) => Lookup::Broken(format!(
            "the guest image in {} is incomplete: {} is missing (run guest-images/build.sh --force)",
            dir.display(),
            missing.display()
        )),
    }
}

/// The built guest image; a skip when none was built; a failure (panic) when
/// `$PMEMVM_IMAGE_DIR` or the build output is broken.
pub fn image_dir() -> Result<ImageDir, Skip> {
    match lookup() {
        Lookup::Found(image) => Ok(image),
        Lookup::NotBuilt(why) => Err(Skip::new(why)),
        Lookup::Broken(why) => panic!("{why}"),
    }
}

/// One file of the guest image (`vmlinux`, `bzImage`, `initramfs.cpio.gz`,
/// `manifest.json`, ...): as [`image_dir`], and a failure when a complete
/// image lacks that file.
pub fn guest_image(name: &str) -> Result<PathBuf, Skip> {
    let image = image_dir()?;
    let path = image.dir.join(name);
    assert!(
        path.is_file(),
        "the guest image in {} has no {name}",
        image.dir.display()
    );
    Ok(path)
}

/// A fio job that does no I/O: what a guest job runs when its work is its
/// setup script.
pub const NULL_FIO_JOB: &str = "[null]\nioengine=null\nsize=1M\nbs=4k\nrw=write\n";

/// The guest image's initramfs `base` with a job appended whose setup script
/// is `setup` and whose fio job does nothing ([`NULL_FIO_JOB`]).
pub fn setup_job_initrd(base: &[u8], setup: &str) -> Vec<u8> {
    let job = lab::guest::guest_job::GuestJob {
        fio_job: NULL_FIO_JOB.into(),
        setup: Some(setup.into()),
        args: None,
        ..lab::guest::guest_job::GuestJob::default()
    }
    .archive()
    .expect("job archive");
    lab::guest::guest_job::append_to_initrd(base, &job)
}
