//! Is the L1 still running? Its init prints [`ALIVE_MARKER`] every
//! [`HEARTBEAT_EVERY`] seconds of L1 time from its start; under TCG, L1 time
//! follows host time, so a console without a new heartbeat for
//! [`STALL_AFTER`] means the L1 kernel has stopped (an emulation failure seen
//! in CI: a silent L1 until the deadline). A command that is merely slow
//! keeps the heartbeat going and is not affected.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::ALIVE_MARKER;

/// How often the L1 init prints its heartbeat (guest-images/l1/init).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);
/// No heartbeat for this long: the L1 has stopped.
pub const STALL_AFTER: Duration = Duration::from_secs(150);
/// No heartbeat for this long: the L1 gets a key event (see
/// [`super::stall::kick`]), again after each further such stretch.
pub const KICK_AFTER: Duration = Duration::from_secs(20);
/// Time allowed from QEMU's start to the first heartbeat (firmware, kernel
/// boot and the init's first mounts under TCG).
pub const FIRST_HEARTBEAT_WITHIN: Duration = Duration::from_secs(240);

/// Watches the L1 console file for heartbeats.
#[derive(Debug)]
pub struct Heartbeat {
    console: PathBuf,
    offset: u64,
    carry: Vec<u8>,
    beats: u64,
    started: Instant,
    last_beat: Option<Instant>,
}

impl Heartbeat {
    /// Watches `console` (written by QEMU from now on).
    pub fn new(console: &Path) -> Self {
        Self {
            console: console.to_path_buf(),
            offset: 0,
            carry: Vec::new(),
            beats: 0,
            started: Instant::now(),
            last_beat: None,
        }
    }

    /// Reads what the console gained since the last call; `Some(reason)` when
    /// the L1 has stopped.
    pub fn check(&mut self) -> Option<String> {
        let new = self.read_new();
        let n = count_beats(&mut self.carry, &new);
        if n > 0 {
            self.beats += n;
            self.last_beat = Some(Instant::now());
        }
        self.verdict(Instant::now())
    }

    /// How long the L1 has been silent since its last heartbeat (`None`
    /// before the first one: it is still booting).
    pub fn silence(&self) -> Option<Duration> {
        self.last_beat.map(|t| t.elapsed())
    }

    /// Heartbeats seen so far.
    pub fn beats(&self) -> u64 {
        self.beats
    }

    fn verdict(&self, now: Instant) -> Option<String> {
        match self.last_beat {
            None if now.duration_since(self.started) > FIRST_HEARTBEAT_WITHIN => Some(format!(
                "no heartbeat from the L1 init within {} s of starting QEMU",
                FIRST_HEARTBEAT_WITHIN.as_secs()
            )),
            Some(t) if now.duration_since(t) > STALL_AFTER => Some(format!(
                "no heartbeat from the L1 init for {} s after {} heartbeats; it prints one every {} s",
                now.duration_since(t).as_secs(),
                self.beats,
                HEARTBEAT_EVERY.as_secs()
            )),
            _ => None,
        }
    }

    fn read_new(&mut self) -> Vec<u8> {
        let mut buf = Vec::new();
        let Ok(mut f) = File::open(&self.console) else {
            return buf;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_ok() && f.read_to_end(&mut buf).is_ok() {
            self.offset += buf.len() as u64;
        }
        buf
    }
}

/// Counts complete heartbeat lines in `carry` + `new`, keeping an incomplete
/// last line in `carry`.
fn count_beats(carry: &mut Vec<u8>, new: &[u8]) -> u64 {
    carry.extend_from_slice(new);
    let Some(last_nl) = carry.iter().rposition(|&b| b == b'\n') else {
        return 0;
    };
    let complete: Vec<u8> = carry.drain(..=last_nl).collect();
    String::from_utf8_lossy(&complete)
        .lines()
        .filter(|l| l.contains(ALIVE_MARKER))
        .count() as u64
}

/// The console text without heartbeat lines and carriage returns.
pub fn without_heartbeats(console: &str) -> String {
    console
        .replace('\r', "")
        .lines()
        .filter(|l| !l.contains(ALIVE_MARKER))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_heartbeats_across_partial_reads() {
        let mut carry = Vec::new();
        assert_eq!(count_beats(&mut carry, b"boot\nPMEMVM-L1-ALIVE upt"), 0);
        assert_eq!(
            count_beats(&mut carry, b"ime=3\nPMEMVM-L1-ALIVE uptime=13\n"),
            2
        );
        assert!(carry.is_empty());
    }

    #[test]
    fn a_silent_l1_is_a_stall_and_a_beating_one_is_not() {
        let dir = std::env::temp_dir().join(format!("hb-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let console = dir.join("console");
        std::fs::write(&console, "x\nPMEMVM-L1-ALIVE uptime=1\n").expect("write");
        let mut hb = Heartbeat::new(&console);
        assert_eq!(hb.check(), None);
        assert_eq!(hb.beats(), 1);
        assert!(hb.silence().is_some_and(|d| d < KICK_AFTER));
        assert!(Heartbeat::new(&console).silence().is_none());
        let now = Instant::now();
        assert_eq!(hb.verdict(now + STALL_AFTER / 2), None);
        let stalled = hb
            .verdict(now + STALL_AFTER + Duration::from_secs(5))
            .expect("stall");
        assert!(stalled.contains("after 1 heartbeats"), "{stalled}");
        let fresh = Heartbeat::new(&dir.join("missing"));
        assert!(fresh
            .verdict(Instant::now() + FIRST_HEARTBEAT_WITHIN + Duration::from_secs(1))
            .is_some());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn heartbeat_lines_are_left_out_of_the_console() {
        assert_eq!(
            without_heartbeats("a\r\nPMEMVM-L1-ALIVE uptime=1\r\nb\n"),
            "a\nb"
        );
    }
}
