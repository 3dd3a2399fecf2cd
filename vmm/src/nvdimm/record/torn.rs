//! Torn crash images: a power cut after flush N leaves the stores made after
//! it partly on the media. A torn variant holds a seeded random subset of the
//! pieces (`granule` bytes each, aligned) that the next epoch changed: whole
//! 64-byte cache lines by default, or the 8-byte stores the pmem driver makes
//! (`--torn SEED,granule=8`).

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::log::{EpochEntry, FlushLog, LogError, LINE, PAGE};

/// Why a torn variant could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TearError {
    /// The log's epoch could not be read.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The image could not be read or written.
    #[error("writing a torn crash image: {0}")]
    Io(#[source] std::io::Error),
}

/// Granules a variant may tear at: a divisor of a cache line, at least the
/// 8 bytes of one store.
pub const GRANULES: [usize; 4] = [8, 16, 32, 64];

/// The granule of a manifest written before granules could be chosen.
pub fn default_granule() -> u64 {
    LINE as u64
}

/// `--torn SEED[,granule=N]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornSpec {
    /// The seed of the subset (the same seed gives the same bytes).
    pub seed: u64,
    /// Bytes of each piece: one of [`GRANULES`].
    pub granule: usize,
}

/// A `--torn` value that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TornSpecError {
    /// The seed is not a number.
    #[error("--torn '{0}': the seed is a number from 0 to 18446744073709551615; give SEED or SEED,granule=8|16|32|64")]
    Seed(String),
    /// An option other than granule=.
    #[error("--torn '{0}': give SEED or SEED,granule=8|16|32|64")]
    Option(String),
    /// A granule that is not 8, 16, 32 or 64.
    #[error("--torn '{0}': a granule is 8, 16, 32 or 64 bytes (one store up to a cache line)")]
    Granule(String),
}

impl std::str::FromStr for TornSpec {
    type Err = TornSpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (seed, rest) = text.split_once(',').unwrap_or((text, ""));
        let seed = seed
            .parse()
            .map_err(|_| TornSpecError::Seed(text.to_string()))?;
        let granule = match rest {
            "" => LINE,
            r => {
                let v = r
                    .strip_prefix("granule=")
                    .ok_or_else(|| TornSpecError::Option(text.to_string()))?;
                v.parse()
                    .ok()
                    .filter(|g| GRANULES.contains(g))
                    .ok_or_else(|| TornSpecError::Granule(text.to_string()))?
            }
        };
        Ok(Self { seed, granule })
    }
}

impl std::fmt::Display for TornSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.granule {
            LINE => write!(f, "{}", self.seed),
            g => write!(f, "{},granule={g}", self.seed),
        }
    }
}

/// Writes into `torn` a seeded subset of the `granule`-byte pieces `next`
/// stores that differ from `work` (the state the image shows); returns how
/// many pieces differ and the offsets of those written.
pub(super) fn tear(
    log: &mut FlushLog,
    next: &EpochEntry,
    work: &File,
    torn: &File,
    seed: u64,
    granule: usize,
) -> Result<(u64, Vec<u64>), TearError> {
    let io = TearError::Io;
    let granule = if GRANULES.contains(&granule) {
        granule
    } else {
        LINE
    };
    let mut rng = SplitMix(seed);
    let indexes = log.indexes(next)?;
    let (mut now, mut later) = (vec![0u8; PAGE], vec![0u8; PAGE]);
    let mut after = 0u64;
    let mut applied = Vec::new();
    for (i, &idx) in indexes.iter().enumerate() {
        log.page(next, i, &mut later)?;
        work.read_exact_at(&mut now, idx * PAGE as u64)
            .map_err(io)?;
        for l in 0..PAGE / granule {
            let r = l * granule..(l + 1) * granule;
            if now[r.clone()] == later[r.clone()] {
                continue;
            }
            after += 1;
            if rng.next() & 1 == 1 {
                let at = idx * PAGE as u64 + r.start as u64;
                torn.write_all_at(&later[r], at).map_err(io)?;
                applied.push(at);
            }
        }
    }
    Ok((after, applied))
}

/// SplitMix64: small, fast, and the same everywhere for a seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_spec_is_a_seed_and_a_granule_of_one_store_up_to_a_line() {
        let t = |s: &str| s.parse::<TornSpec>();
        assert_eq!(
            t("42"),
            Ok(TornSpec {
                seed: 42,
                granule: 64
            })
        );
        assert_eq!(
            t("7,granule=8"),
            Ok(TornSpec {
                seed: 7,
                granule: 8
            })
        );
        assert_eq!(t("7,granule=8").unwrap().to_string(), "7,granule=8");
        assert_eq!(t("42").unwrap().to_string(), "42", "written as before");
        for bad in ["7,granule=3", "7,granule=128", "7,granule=", "7,granule=4"] {
            let e = t(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("'{bad}'")) && e.contains("8, 16, 32 or 64"),
                "{e}"
            );
        }
        assert!(matches!(t("x"), Err(TornSpecError::Seed(_))));
        assert!(matches!(t("1,size=8"), Err(TornSpecError::Option(_))));
    }
}
