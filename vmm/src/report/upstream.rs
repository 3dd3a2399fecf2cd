//! Upstream's figures as the report carries them.

use serde::{Deserialize, Serialize};

use super::Metric;

/// Upstream's figure for one metric: the range over its runs, per side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamFigure {
    /// The metric.
    pub metric: Metric,
    /// Range (low, high) upstream measured with the feature off, or for single-sided experiments
    /// the only value.
    pub off: Option<(f64, f64)>,
    /// Range upstream measured with the feature on.
    pub on: Option<(f64, f64)>,
}

impl UpstreamFigure {
    /// Ratio of the midpoints, on/off.
    pub fn ratio(&self) -> Option<f64> {
        let (off, on) = (self.off?, self.on?);
        let (m_off, m_on) = ((off.0 + off.1) / 2.0, (on.0 + on.1) / 2.0);
        (m_off != 0.0).then(|| m_on / m_off)
    }
}

pub(super) fn upstream_text(m: Metric, u: &UpstreamFigure, sides: &[String]) -> String {
    let range = |r: (f64, f64)| {
        if r.0 == r.1 {
            m.format(r.0)
        } else {
            format!("{}-{}", m.format(r.0), m.format(r.1))
        }
    };
    match (u.off, u.on) {
        (Some(off), Some(on)) => format!("{} -> {}", range(off), range(on)),
        (Some(only), None) => range(only),
        (None, Some(on)) => format!(
            "{}: {}",
            sides.last().map_or("on", String::as_str),
            range(on)
        ),
        (None, None) => "-".to_owned(),
    }
}
