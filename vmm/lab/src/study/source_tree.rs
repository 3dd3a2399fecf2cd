//! Files of pmemvm's source tree that the binary runs (the guest-image and suite
//! scripts): found above the running executable, so `target/debug/pmemvm` and the test
//! binaries use the scripts of their own checkout.

use std::path::{Path, PathBuf};

/// `rel` (e.g. `guest-images/rootfs-debian.sh`) in the nearest directory above this
/// executable that has it; else the directory the search started from.
pub fn find(rel: &str) -> Result<PathBuf, PathBuf> {
    let start = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    find_above(&start, rel).ok_or(start)
}

/// `rel` in `start` or the nearest of its ancestors that has it.
pub fn find_above(start: &Path, rel: &str) -> Option<PathBuf> {
    start.ancestors().map(|d| d.join(rel)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_ancestor_holding_the_file_wins() {
        let base = std::env::temp_dir().join(format!("pmemvm-source-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let deep = base.join("a/target/debug");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(base.join("a/guest-images")).unwrap();
        std::fs::write(base.join("a/guest-images/x.sh"), "").unwrap();
        assert_eq!(
            find_above(&deep, "guest-images/x.sh"),
            Some(base.join("a/guest-images/x.sh"))
        );
        assert_eq!(find_above(&deep, "guest-images/none.sh"), None);
        let _ = std::fs::remove_dir_all(&base);
    }
}
