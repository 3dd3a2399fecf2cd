//! The run directory of one harness run: the share and the harness's files
//! beside it (console log, QEMU log), removed on drop unless kept.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use super::{io_err, NestedError, L1_DIR};

/// A run directory under the system temp dir; removed on drop unless kept.
#[derive(Debug)]
pub(super) struct RunDir {
    pub(super) path: PathBuf,
    keep: bool,
}

impl RunDir {
    pub(super) fn create() -> Result<RunDir, NestedError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("pmemvm-e2e-{}-{n}-{nanos:09}", std::process::id()));
        fs::create_dir_all(path.join("share").join(L1_DIR))
            .map_err(io_err(format!("create {}", path.display())))?;
        let keep = std::env::var_os("PMEMVM_TEST_KEEP").is_some_and(|v| v != "0");
        Ok(RunDir { path, keep })
    }

    pub(super) fn share(&self) -> PathBuf {
        self.path.join("share")
    }

    pub(super) fn l1(&self) -> PathBuf {
        self.share().join(L1_DIR)
    }

    /// Keeps the directory (for errors) and returns its path.
    pub(super) fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.path.clone()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

#[derive(Debug)]
pub(super) enum FileSource {
    Copy(PathBuf),
    Bytes(Vec<u8>),
}
