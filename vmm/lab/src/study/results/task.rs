//! `--only SIDE:BOOT`: one boot of one side of a bench — what one Slurm array task runs, and
//! what a user reruns by hand when that task failed.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

/// A bad `--only`.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// Not `SIDE:BOOT`.
    #[error("--only '{value}' is not SIDE:BOOT (e.g. on:2): {why}")]
    Syntax {
        /// The value.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A side or boot the bench does not have.
    #[error("--only {task} is not a task of this bench: its sides are {sides} and its boots 1 to {runs} (--runs {runs})")]
    NotInBench {
        /// The task.
        task: Task,
        /// The bench's sides, comma-separated.
        sides: String,
        /// `--runs`.
        runs: u32,
    },
}

/// One boot of one side.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Task {
    /// Side label.
    pub side: String,
    /// The side's boot, from 1 (`--runs` counts them).
    pub boot: u32,
}

impl Task {
    /// `side`'s boot `boot`.
    pub fn new(side: &str, boot: u32) -> Self {
        Self {
            side: side.to_owned(),
            boot,
        }
    }

    /// Parses `SIDE:BOOT` (the side may itself contain `:`; the boot is after the last one).
    pub fn parse(value: &str) -> Result<Self, TaskError> {
        let err = |why| TaskError::Syntax {
            value: value.to_owned(),
            why,
        };
        let (side, boot) = value.rsplit_once(':').ok_or(err("there is no ':'"))?;
        if side.is_empty() {
            return Err(err("the side is empty"));
        }
        match boot.parse::<u32>() {
            Ok(0) => Err(err("boots count from 1")),
            Ok(n) => Ok(Self::new(side, n)),
            Err(_) => Err(err("the boot is not a whole number")),
        }
    }

    /// Checks the task against a bench's sides and `--runs`.
    pub fn check(&self, sides: &[String], runs: u32) -> Result<(), TaskError> {
        if sides.contains(&self.side) && self.boot <= runs {
            Ok(())
        } else {
            Err(TaskError::NotInBench {
                task: self.clone(),
                sides: sides.join(", "),
                runs,
            })
        }
    }

    /// Every task of a bench in the order `bench` boots them: sides alternate per boot (off 1,
    /// on 1, off 2, on 2, ...). Slurm array task `i` is element `i`.
    pub fn all(sides: &[String], runs: u32) -> Vec<Self> {
        (1..=runs)
            .flat_map(|boot| sides.iter().map(move |s| Self::new(s, boot)))
            .collect()
    }

    /// The directory name of the task's result, different for every (side, boot) — on a
    /// case-insensitive file system too: `SIDE-BOOT` when the side is lower-case letters,
    /// digits, `-` and `_` only; otherwise the side with upper case lowered and anything else
    /// replaced by `_`, then `.` and the first 12 hex digits of the side's SHA-256
    /// (`a.b` → `a_b.<hash>-1`, while `a_b` stays `a_b-1`). Plain names never contain `.`
    /// and the boot follows the last `-`, so two tasks share a name only when two side names
    /// that sanitize alike share 48 bits of SHA-256 (the Slurm job checks that too).
    pub fn dir_name(&self) -> String {
        let plain = !self.side.is_empty()
            && self
                .side
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        if plain {
            return format!("{}-{}", self.side, self.boot);
        }
        let sanitized: String = self
            .side
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-') {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let digest = sha2::Sha256::digest(self.side.as_bytes());
        let hash: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("{sanitized}.{hash}-{}", self.boot)
    }
}

/// `--only` for clap: the parsed task or the one-sentence error.
pub fn parse_arg(value: &str) -> Result<Task, String> {
    Task::parse(value).map_err(|e| e.to_string())
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.side, self.boot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sides() -> Vec<String> {
        vec!["off".into(), "on".into()]
    }

    #[test]
    fn parses_side_and_boot() {
        assert_eq!(Task::parse("on:2").unwrap(), Task::new("on", 2));
        assert_eq!(Task::parse("a:b:3").unwrap(), Task::new("a:b", 3));
        for (bad, why) in [
            ("on", "there is no ':'"),
            (":1", "the side is empty"),
            ("on:0", "boots count from 1"),
            ("on:x", "the boot is not a whole number"),
        ] {
            let e = Task::parse(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("--only '{bad}' is not SIDE:BOOT (e.g. on:2): {why}")
            );
        }
    }

    #[test]
    fn checks_against_the_bench() {
        assert!(Task::new("on", 2).check(&sides(), 2).is_ok());
        let e = Task::new("on", 3).check(&sides(), 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--only on:3 is not a task of this bench: its sides are off, on and its boots 1 to 2 (--runs 2)"
        );
        assert!(Task::new("of", 1).check(&sides(), 2).is_err());
    }

    #[test]
    fn all_tasks_alternate_sides_like_bench() {
        let all: Vec<String> = Task::all(&sides(), 2).iter().map(Task::to_string).collect();
        assert_eq!(all, ["off:1", "on:1", "off:2", "on:2"]);
        assert_eq!(Task::new("on", 2).dir_name(), "on-2");
    }

    #[test]
    fn directory_names_differ_for_every_side_and_boot() {
        // Sides that sanitize alike (punctuation, case) get the sanitized name and a hash.
        let sides = [
            "a.b", "a_b", "a-b", "A_b", "a b/c", "a_b_c", "on", "on-1", "x.1",
        ];
        let mut names = std::collections::BTreeSet::new();
        for side in sides {
            for boot in 1..=12 {
                let name = Task::new(side, boot).dir_name();
                assert!(
                    name.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b"-_.".contains(&b)),
                    "{name}"
                );
                assert!(
                    names.insert(name.to_ascii_lowercase()),
                    "{side}:{boot} collides: {name}"
                );
            }
        }
        assert_eq!(Task::new("a_b", 1).dir_name(), "a_b-1");
        let dotted = Task::new("a.b", 1).dir_name();
        assert!(
            dotted.starts_with("a_b.") && dotted.ends_with("-1"),
            "{dotted}"
        );
        assert_eq!(dotted.len(), "a_b.".len() + 12 + "-1".len());
    }
}
