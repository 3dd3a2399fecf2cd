//! What the benches that drive the `pmemvm` binary share (included by
//! `#[path]`: each bench is its own crate).

use std::path::PathBuf;

/// The pmemvm binary: `$PMEMVM_BIN`, else `target/release/pmemvm` or
/// `target/debug/pmemvm` beside the bench (build it first).
pub fn pmemvm_bin() -> Result<PathBuf, String> {
    if let Some(b) = std::env::var_os("PMEMVM_BIN").filter(|b| !b.is_empty()) {
        return Ok(PathBuf::from(b));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // target/<profile>/deps/BENCH-HASH
    let target = exe
        .ancestors()
        .nth(3)
        .ok_or("no target directory above the bench")?;
    ["release", "debug"]
        .iter()
        .map(|p| target.join(p).join("pmemvm"))
        .find(|p| p.exists())
        .ok_or_else(|| "no pmemvm binary: run `cargo build` first or set PMEMVM_BIN".to_string())
}

/// The median of `v` (not empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
