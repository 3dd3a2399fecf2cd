//! What a failed verify observed, in fio's terms: which block (file, offset, length), and for
//! a "bad header numberio" error which write the block held and which one fio expected —
//! per side and boot. The report states these; it claims a cause only where pmemvm measured
//! one ([`STALE_HEADER_NOTE`]).

use serde::Serialize;

use super::BenchReport;

/// One verify error as fio reported it, read back into its parts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyObservation {
    /// Side label.
    pub side: String,
    /// Boot of the side, from 1.
    pub boot: u32,
    /// The device or file fio read back.
    pub file: Option<String>,
    /// Byte offset of the block in `file`.
    pub offset: Option<u64>,
    /// Length of the block in bytes.
    pub length: Option<u64>,
    /// "bad header numberio A, wanted B": A, the number of the write whose header the block
    /// held (fio numbers its writes in issue order).
    pub found: Option<u64>,
    /// B, the number of the last write fio issued to that block.
    pub wanted: Option<u64>,
    /// fio's own words.
    pub error: String,
}

impl VerifyObservation {
    /// Reads a failed run's reason (`fio error 84 in job J (<fio's verify line>)`, anywhere in
    /// the text); `None` when it is not fio's verify error.
    pub fn parse(side: &str, boot: u32, reason: &str) -> Option<VerifyObservation> {
        let at = reason.find(super::failures::VERIFY_ERROR)?;
        let detail = reason[at..]
            .split_once(" (")
            .map_or("", |(_, d)| d.strip_suffix(')').unwrap_or(d));
        let first = detail.split(" | ").next().unwrap_or_default();
        let after = |key: &str| first.split_once(key).map(|(_, rest)| rest);
        let (found, wanted) = match after("bad header numberio ") {
            Some(rest) => (
                number(rest),
                rest.split_once("wanted ").and_then(|(_, w)| number(w)),
            ),
            None => (None, None),
        };
        Some(VerifyObservation {
            side: side.to_owned(),
            boot,
            file: after(" at file ")
                .and_then(|r| r.split(' ').next())
                .map(str::to_owned),
            offset: after(" offset ").and_then(number),
            length: after(", length ").and_then(number),
            found,
            wanted,
            error: first.to_owned(),
        })
    }

    /// True when the block held the header of a write fio issued before the one it expects:
    /// an earlier write reached the block after a later one.
    pub fn stale_header(&self) -> bool {
        matches!((self.found, self.wanted), (Some(a), Some(b)) if a < b)
    }

    /// True when the block's data did not match its own checksum (fio's "crc32c: verify
    /// failed at file …", no header numbers): parts of two writes in one block, as when two
    /// writes to it are copied at the same time.
    pub fn torn_block(&self) -> bool {
        self.found.is_none() && self.error.contains(": verify failed at file ")
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let block = match (&self.file, self.offset, self.length) {
            (Some(f), Some(o), Some(l)) => format!("{f} offset {o} ({l} bytes)"),
            (Some(f), Some(o), None) => format!("{f} offset {o}"),
            _ => "a block".to_owned(),
        };
        let what = match (self.found, self.wanted) {
            (Some(a), Some(b)) if a < b => format!(
                "held the header of write {a}, fio expected write {b} ({} writes later)",
                b - a
            ),
            (Some(a), Some(b)) => format!("held the header of write {a}, fio expected write {b}"),
            _ if self.error.is_empty() => "failed to verify (fio gave no detail)".to_owned(),
            _ => format!("failed to verify: {}", self.error),
        };
        format!("{} boot {}: {block} {what}", self.side, self.boot)
    }
}

fn number(s: &str) -> Option<u64> {
    s.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

/// What a stale header means and what pmemvm measured about it (docs/bench.md, "The verify
/// failure with NOWAIT off"); printed when a report has one.
pub const STALE_HEADER_NOTE: &str = "\"bad header numberio A, wanted B\" with A < B: the block \
     read back held the header of write A where fio expected write B, the last it issued to \
     that block, so the earlier write reached the block after the later one. The job writes 4k \
     blocks at random with norandommap at iodepth 16: two writes to one block can be in flight \
     together, and one held back (without QUEUE_FLAG_NOWAIT io_uring hands every write to an \
     io-wq worker) can stay in flight while many later ones complete, so B - A is not bounded \
     by the iodepth. pmemvm's A/B of this job under pmemvm (tests/tests/nested_verify_overlap.rs, \
     docs/bench.md) measured it failing only without NOWAIT and never with fio's \
     serialize_overlap=1, which keeps overlapping writes from being in flight together; that \
     is the evidence for this reading, not this run";

impl BenchReport {
    /// Every verify error of the experiment's verify job, in run order (runs, then the checks
    /// before the measurement).
    pub fn verify_observations(&self) -> Vec<VerifyObservation> {
        let job = self.verify_job();
        let runs = self
            .runs
            .iter()
            .filter(|r| r.phase == job)
            .filter_map(|r| VerifyObservation::parse(&r.side, r.boot, &r.outcome.failure()?));
        let checks = self
            .checks
            .iter()
            .filter(|c| c.phase == job)
            .filter_map(|c| VerifyObservation::parse(&c.side, c.boot, c.error.as_deref()?));
        runs.chain(checks).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fios_verify_lines_are_read_into_block_and_writes() {
        // fio 3.33's words (fio_detail keeps its first verify line).
        let o = VerifyObservation::parse(
            "off",
            2,
            "fio error 84 in job write-and-verify (verify: bad header numberio 63917, wanted \
             64003 at file /dev/bcache0 offset 701530112, length 4096 (requested block: \
             offset=701530112, length=4096))",
        )
        .expect("a verify error");
        assert_eq!(o.file.as_deref(), Some("/dev/bcache0"));
        assert_eq!(
            (o.offset, o.length, o.found, o.wanted),
            (Some(701_530_112), Some(4096), Some(63917), Some(64003))
        );
        assert!(o.stale_header());
        assert_eq!(
            o.describe(),
            "off boot 2: /dev/bcache0 offset 701530112 (4096 bytes) held the header of write \
             63917, fio expected write 64003 (86 writes later)"
        );
        let crc = VerifyObservation::parse(
            "on",
            1,
            "fio error 84 in job write-and-verify (crc32c: verify failed at file /dev/pmem0 \
             offset 180224, length 4096 (requested block: offset=180224, length=4096))",
        )
        .expect("a verify error");
        assert_eq!(
            (crc.offset, crc.found, crc.wanted),
            (Some(180_224), None, None)
        );
        assert!(!crc.stale_header());
        assert!(crc.torn_block());
        assert!(
            crc.describe()
                .contains("(4096 bytes) failed to verify: crc32c: verify failed"),
            "{}",
            crc.describe()
        );
        // As stderr names a failed run: the phase in parentheses before fio's words.
        let line = VerifyObservation::parse(
            "off",
            1,
            "off run 1 (write-and-verify): fio error 84 in job write-and-verify (verify: bad \
             header numberio 5, wanted 40 at file /dev/pmem0 offset 8192, length 4096)",
        )
        .expect("a verify error");
        assert_eq!(
            (line.offset, line.found, line.wanted),
            (Some(8192), Some(5), Some(40))
        );
        // Not fio's verify error, or numbers that are not a stale header.
        assert!(VerifyObservation::parse("off", 1, "guest did not reach init").is_none());
        let same = VerifyObservation::parse(
            "off",
            1,
            "fio error 84 in job j (verify: bad header numberio 9, wanted 9 at file f offset 0, length 4096)",
        )
        .expect("a verify error");
        assert!(!same.stale_header());
        assert!(
            !same.torn_block(),
            "a header with numbers is not a torn block"
        );
        let bare = VerifyObservation::parse("off", 1, "fio error 84 in job j").expect("84");
        assert_eq!(
            bare.describe(),
            "off boot 1: a block failed to verify (fio gave no detail)"
        );
    }
}
