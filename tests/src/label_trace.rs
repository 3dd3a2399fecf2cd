//! Reading an strace log of pmemvm for the order of label writes and
//! syncs (`tests/tests/nested_nvdimm_defaults.rs`, and the fixture test on a
//! real log).

use std::collections::BTreeMap;
use std::ops::Range;

/// Counts the label writes (pwrite64 at a file offset in `label_area`) in
/// an `strace -f -e trace=pwrite64,fdatasync` log and returns them with the
/// lines of those its thread did not follow with a successful fdatasync
/// before any other traced call (or before the log ends).
pub fn label_writes_synced(strace: &str, label_area: Range<u64>) -> (usize, Vec<String>) {
    let mut pending: BTreeMap<String, String> = BTreeMap::new();
    let mut unsynced = Vec::new();
    let mut writes = 0;
    for l in strace.lines() {
        let Some((tid, call)) = l.trim().split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        if call.starts_with("pwrite64(") {
            let args = call
                .rsplit_once(" <unfinished")
                .or_else(|| call.rsplit_once(") = "))
                .map_or("", |(head, _)| head);
            let off = args.rsplit(", ").next().and_then(|o| o.trim().parse().ok());
            if let Some(prev) = pending.remove(tid) {
                unsynced.push(prev);
            }
            if off.is_some_and(|o: u64| label_area.contains(&o)) {
                writes += 1;
                pending.insert(tid.to_string(), l.to_string());
            }
        } else if call.contains("pwrite64 resumed") {
            // the rest of a write already counted
        } else if call.contains("fdatasync") {
            if call.trim_end().ends_with("= 0") {
                pending.remove(tid);
            }
        } else if let Some(prev) = pending.remove(tid) {
            unsynced.push(prev);
        }
    }
    unsynced.extend(pending.into_values());
    (writes, unsynced)
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: Range<u64> = 64 << 20..(64 << 20) + (128 << 10);

    #[test]
    fn strace_check_can_fail() {
        let good = "7   pwrite64(9, \"x\"..., 4072, 67108864) = 4072\n7   fdatasync(9)    = 0\n";
        assert_eq!(label_writes_synced(good, AREA), (1, vec![]));
        let split = "7 pwrite64(9, \"x\"..., 8, 67112960 <unfinished ...>\n8 fdatasync(9) = 0\n\
                     7 <... pwrite64 resumed>) = 8\n7 fdatasync(9 <unfinished ...>\n\
                     7 <... fdatasync resumed>) = 0\n";
        assert_eq!(label_writes_synced(split, AREA), (1, vec![]));
        let never = "7 pwrite64(9, \"x\"..., 4072, 67108864) = 4072\n";
        assert_eq!(label_writes_synced(never, AREA).1.len(), 1);
        let failed = "7 pwrite64(9, \"x\", 1, 67108864) = 1\n7 fdatasync(9) = -1 EIO (I/O error)\n";
        assert_eq!(label_writes_synced(failed, AREA).1.len(), 1);
        let other = "7 pwrite64(9, \"x\", 1, 4096) = 1\n";
        assert_eq!(label_writes_synced(other, AREA), (0, vec![]));
    }
}
