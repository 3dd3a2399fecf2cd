//! Upstream's figures as the report carries them: the posts they come from (subject, author,
//! date, Message-ID) and, per post and metric, every run upstream posted.
//!
//! The thread's runs are the thread's `off` and `on` (or its only side): they stand beside a
//! side of this report only when that side is the thread's — the experiment's own `off`/`on`
//! (and `default` of a single-sided experiment), or a `--side NAME:...,as=off|on` that says
//! which of the thread's sides it repeats ([`ThreadSide`]). A user's `good`/`broken` are not
//! the thread's off/on, so they get no upstream column and no upstream ratio.

use serde::{Deserialize, Serialize};

use super::Metric;
use crate::study::inference::{self, Described, RatioEstimate, Welch, CONFIDENCE};

/// One of the thread's sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadSide {
    /// The thread's runs with the feature off (or of its only side).
    Off,
    /// With the feature on.
    On,
}

impl ThreadSide {
    /// `off` or `on`, as `--side ...,as=` spells it.
    pub fn name(self) -> &'static str {
        match self {
            ThreadSide::Off => "off",
            ThreadSide::On => "on",
        }
    }

    /// Parses `off` or `on`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "off" => Some(ThreadSide::Off),
            "on" => Some(ThreadSide::On),
            _ => None,
        }
    }

    /// The thread's side a side of this name is without a declaration: the experiment's own
    /// `off`/`on`, and `default` when it is the only side.
    pub fn by_name(label: &str, sides: usize) -> Option<Self> {
        match label {
            "default" if sides == 1 => Some(ThreadSide::Off),
            _ => Self::parse(label),
        }
    }

    /// Index into [`UpstreamFigure::runs`].
    pub fn index(self) -> usize {
        match self {
            ThreadSide::Off => 0,
            ThreadSide::On => 1,
        }
    }
}

/// One upstream post.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamSource {
    /// Short label the report uses (`V1`, `V2`, `bcache`, `famfs`).
    pub label: String,
    /// The mail's Subject.
    pub subject: String,
    /// Who posted it.
    pub author: String,
    /// The Date header, where the archived copy has one.
    pub date: Option<String>,
    /// The Message-ID (without angle brackets), where the archived copy has one.
    pub message_id: Option<String>,
    /// The mailing list.
    pub list: String,
    /// Where in the post the figures are.
    pub note: String,
    /// How upstream ran the measurement.
    pub how: String,
}

impl UpstreamSource {
    /// `V1: "[PATCH 0/1] …", Author, Date, Message-ID <…>, list` on one line.
    pub fn citation(&self) -> String {
        let date = self
            .date
            .as_deref()
            .unwrap_or("date not in the archived copy");
        let id = self.message_id.as_ref().map_or_else(
            || "Message-ID not in the archived copy".to_owned(),
            |id| format!("Message-ID <{id}>"),
        );
        format!(
            "{}: \"{}\", {}, {date}, {id}, {}",
            self.label, self.subject, self.author, self.list
        )
    }
}

/// One metric as one post reported it: the value of every run, per side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamFigure {
    /// The metric.
    pub metric: Metric,
    /// Label of the [`UpstreamSource`].
    pub source: String,
    /// Runs with the feature off, or the runs of a single-sided experiment.
    pub off: Vec<f64>,
    /// Runs with the feature on (empty for single-sided experiments).
    pub on: Vec<f64>,
}

impl UpstreamFigure {
    /// The runs of side `i` (0 = off/only, 1 = on).
    pub fn runs(&self, i: usize) -> &[f64] {
        if i == 0 {
            &self.off
        } else {
            &self.on
        }
    }

    /// Ratio of the means, on/off.
    pub fn ratio(&self) -> Option<f64> {
        let mean = |v: &[f64]| {
            #[allow(clippy::cast_precision_loss)]
            let n = v.len() as f64;
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / n)
        };
        let (off, on) = (mean(&self.off)?, mean(&self.on)?);
        (off != 0.0).then(|| on / off)
    }
}

/// Everything the report knows about upstream's measurement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Upstream {
    /// The posts, in the order the report lists them.
    pub sources: Vec<UpstreamSource>,
    /// Per post and metric, the posted runs.
    pub figures: Vec<UpstreamFigure>,
}

impl Upstream {
    /// The figures of one metric, in source order.
    pub fn of(&self, metric: Metric) -> Vec<&UpstreamFigure> {
        self.sources
            .iter()
            .filter_map(|s| {
                self.figures
                    .iter()
                    .find(|f| f.metric == metric && f.source == s.label)
            })
            .collect()
    }
}

/// Upstream's own runs of one metric and post, analysed like ours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamAnalysis {
    /// Label of the post.
    pub source: String,
    /// Per side (off/only, on).
    pub sides: Vec<Option<Described>>,
    /// on/off of the means.
    pub ratio: Option<f64>,
    /// The ratio with its interval, where upstream posted at least two runs per side.
    pub ratio_ci95: Option<RatioEstimate>,
    /// Welch's test of upstream's runs.
    pub welch: Option<Welch>,
}

impl UpstreamAnalysis {
    /// The figure's runs beside this report's sides: `thread[i]` says which of the thread's
    /// sides report side `i` repeats. A side that is none of the thread's gets `None`; the
    /// ratio, its interval and the test (last side over first, as ours) need every side to be
    /// the thread's. `None` when no side is.
    pub fn beside(f: &UpstreamFigure, thread: &[Option<ThreadSide>]) -> Option<Self> {
        let sides: Vec<Option<Described>> = thread
            .iter()
            .map(|t| t.and_then(|t| Described::of(f.runs(t.index()), CONFIDENCE).ok()))
            .collect();
        if sides.iter().all(Option::is_none) {
            return None;
        }
        let (ratio, ratio_ci95, welch) = match sides.as_slice() {
            [Some(first), Some(last)] => (
                (first.mean != 0.0).then(|| last.mean / first.mean),
                inference::ratio_ci(last, first, CONFIDENCE).ok(),
                inference::welch(first, last).ok(),
            ),
            _ => (None, None, None),
        };
        Some(Self {
            source: f.source.clone(),
            sides,
            ratio,
            ratio_ci95,
            welch,
        })
    }

    /// Analyses one figure.
    pub fn of(f: &UpstreamFigure) -> Self {
        let describe = |v: &[f64]| Described::of(v, CONFIDENCE).ok();
        let sides: Vec<Option<Described>> = if f.on.is_empty() {
            vec![describe(&f.off)]
        } else {
            vec![describe(&f.off), describe(&f.on)]
        };
        let (ratio_ci95, welch) = match sides.as_slice() {
            [Some(off), Some(on)] => (
                inference::ratio_ci(on, off, CONFIDENCE).ok(),
                inference::welch(off, on).ok(),
            ),
            _ => (None, None),
        };
        Self {
            source: f.source.clone(),
            sides,
            ratio: f.ratio(),
            ratio_ci95,
            welch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(label: &str, id: Option<&str>) -> UpstreamSource {
        UpstreamSource {
            label: label.into(),
            subject: "[PATCH] x: y".into(),
            author: "A. Author".into(),
            date: id.map(|_| "Fri, 12 May 2023 03:43:01 -0700".into()),
            message_id: id.map(str::to_owned),
            list: "list@example.org".into(),
            note: String::new(),
            how: String::new(),
        }
    }

    #[test]
    fn citation_names_subject_date_and_message_id_or_says_they_are_missing() {
        assert_eq!(
            source("V1", Some("1@x")).citation(),
            "V1: \"[PATCH] x: y\", A. Author, Fri, 12 May 2023 03:43:01 -0700, Message-ID <1@x>, list@example.org"
        );
        let c = source("V2", None).citation();
        assert!(c.contains("date not in the archived copy"), "{c}");
        assert!(c.contains("Message-ID not in the archived copy"), "{c}");
    }

    #[test]
    fn ratio_of_means_and_upstream_analysis() {
        let f = UpstreamFigure {
            metric: Metric::Iops,
            source: "V1".into(),
            off: vec![3968e3, 4084e3, 3995e3],
            on: vec![5909e3, 5997e3, 6006e3],
        };
        assert!((f.ratio().unwrap() - 17912.0 / 12047.0).abs() < 1e-12);
        let a = UpstreamAnalysis::of(&f);
        assert!(a.welch.unwrap().significant());
        let r = a.ratio_ci95.unwrap();
        assert!(r.ci.low < r.ratio && r.ratio < r.ci.high);
        // One run per side: a ratio, but no interval and no test.
        let single = UpstreamFigure {
            off: vec![2.4e6],
            on: vec![10.6e6],
            ..f
        };
        let a = UpstreamAnalysis::of(&single);
        assert!(a.ratio.is_some() && a.ratio_ci95.is_none() && a.welch.is_none());
        assert_eq!(a.sides[0].as_ref().unwrap().sd, None);
    }

    #[test]
    fn upstream_stands_beside_the_threads_sides_only() {
        let f = UpstreamFigure {
            metric: Metric::Iops,
            source: "V1".into(),
            off: vec![3968e3, 4084e3, 3995e3],
            on: vec![5909e3, 5997e3, 6006e3],
        };
        let (off, on) = (Some(ThreadSide::Off), Some(ThreadSide::On));
        // The experiment's own sides: the thread's analysis, unchanged.
        assert_eq!(
            UpstreamAnalysis::beside(&f, &[off, on]),
            Some(UpstreamAnalysis::of(&f))
        );
        // Sides that are not the thread's: nothing.
        assert_eq!(UpstreamAnalysis::beside(&f, &[None, None]), None);
        // One side declared: its runs, no ratio.
        let one = UpstreamAnalysis::beside(&f, &[off, None]).unwrap();
        assert!(one.sides[0].is_some() && one.sides[1].is_none());
        assert_eq!((one.ratio, one.ratio_ci95, one.welch), (None, None, None));
        // Declared the other way round: the ratio is still last side over first.
        let swapped = UpstreamAnalysis::beside(&f, &[on, off]).unwrap();
        assert!((swapped.ratio.unwrap() - 12047.0 / 17912.0).abs() < 1e-12);
        assert_eq!(ThreadSide::by_name("default", 1), off);
        assert_eq!(ThreadSide::by_name("default", 2), None);
        assert_eq!(ThreadSide::by_name("good", 2), None);
    }
}
