//! The chart's time-series panels: per metric (IOPS, bandwidth) and side, every run's
//! per-second values as a line (x: seconds since the phase started, y: the value summed over
//! the jobs, from fio's logs: [`crate::study::fio::log`]), with upstream's level beside the thread's
//! sides.
//!
//! Each panel is a `<g class="series-panel" data-metric=".." data-side="..">`; a run is a
//! `<path class="series-line" data-run="N">` over its complete seconds and a dashed
//! `<path class="series-tail">` over the seconds not every job logged in full (a fill's tail,
//! or a last window fio did not log). Upstream's level is the mean of the thread's posted runs
//! of that side, per post: a dashed `<line class="upstream-ref">` with its label, or, when it
//! lies far above this chart's values (an emulated run against the thread's hardware), a label
//! `<text class="upstream-ref-off-scale">` at the top instead of a line that would flatten
//! every run. Sides that are not the thread's get no level (see [`super::upstream`]).

use std::fmt::Write as _;

use super::format::xml_escape;
use super::{BenchReport, Metric, RunRecord};
use crate::study::fio::{PhaseSeries, Series};

/// Height of one row of time-series panels.
pub(super) const ROW_HEIGHT: f64 = 250.0;
/// Height of the section's heading.
pub(super) const HEADING: f64 = 36.0;
/// A level up to this many times the runs' largest value is drawn on the scale.
const LEVEL_ON_SCALE: f64 = 1.5;
/// Run colours, cycled.
const COLOURS: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

/// How to take one metric's series from a run's.
type SeriesOf = fn(&PhaseSeries) -> &Series;

/// The metrics with a time series, and how to take theirs from a run's.
const METRICS: [(Metric, SeriesOf); 2] = [
    (Metric::Iops, |s| &s.iops),
    (Metric::BwMibS, |s| &s.bw_mib_s),
];

/// One side's level from one post.
struct Level {
    source: String,
    value: f64,
    runs: usize,
}

impl BenchReport {
    /// The runs of side `side` that carry a series with points.
    fn series_runs(&self, side: &str) -> Vec<&RunRecord> {
        self.runs
            .iter()
            .filter(|r| r.side == side)
            .filter(|r| r.series.as_ref().is_some_and(|s| !s.iops.values.is_empty()))
            .collect()
    }

    /// The metrics that get time-series panels (some run has points of them).
    pub(super) fn series_metrics(&self) -> Vec<Metric> {
        METRICS
            .iter()
            .filter(|(_, of)| {
                self.runs
                    .iter()
                    .filter_map(|r| r.series.as_ref())
                    .any(|s| !of(s).values.is_empty())
            })
            .map(|(m, _)| *m)
            .collect()
    }

    /// Upstream's level of side `i` for `metric`: per post, the mean of the thread's runs of
    /// the side this one is (none for a side that is not the thread's).
    fn levels(&self, i: usize, metric: Metric) -> Vec<Level> {
        let Some(t) = self.thread_side(i) else {
            return Vec::new();
        };
        self.upstream
            .of(metric)
            .into_iter()
            .filter_map(|f| {
                let runs = f.runs(t.index());
                #[allow(clippy::cast_precision_loss)]
                let mean = runs.iter().sum::<f64>() / runs.len() as f64;
                (!runs.is_empty()).then(|| Level {
                    source: format!("{} {}", f.source, t.name()),
                    value: mean,
                    runs: runs.len(),
                })
            })
            .collect()
    }

    /// Appends the time-series section at `top` (width `width`) and returns its height; 0
    /// when no run has a series.
    pub(super) fn render_series(&self, s: &mut String, top: f64, width: f64) -> f64 {
        let metrics = self.series_metrics();
        if metrics.is_empty() {
            return 0.0;
        }
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}" font-size="13" font-weight="bold">Per second: fio's logs, summed over the jobs, a line per run</text>"#,
            top + 14.0,
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="{:.1}">{}</text>"#,
            top + 28.0,
            xml_escape(
                "dashed: seconds not every job logged in full (a job ended, or fio did not log \
                 its last second); grey dashes: upstream's level, the mean of the thread's runs \
                 of that side"
            )
        );
        #[allow(clippy::cast_precision_loss)]
        let pw = (width - 20.0) / self.sides.len().max(1) as f64;
        for (row, metric) in metrics.iter().enumerate() {
            let of = METRICS
                .iter()
                .find(|(m, _)| m == metric)
                .map_or(METRICS[0].1, |(_, f)| *f);
            // One scale per metric for all sides, so their panels compare at a glance.
            let data_max = self
                .runs
                .iter()
                .filter_map(|r| r.series.as_ref())
                .flat_map(|s| of(s).values.iter().copied())
                .fold(0.0, f64::max);
            let seconds = self
                .runs
                .iter()
                .filter_map(|r| r.series.as_ref())
                .map(|s| {
                    let x = of(s);
                    #[allow(clippy::cast_precision_loss)]
                    let n = x.values.len() as f64;
                    n * f64::from(x.period_ms) / 1000.0
                })
                .fold(1.0, f64::max);
            let levels: Vec<Vec<Level>> = (0..self.sides.len())
                .map(|i| self.levels(i, *metric))
                .collect();
            let y_max = levels
                .iter()
                .flatten()
                .map(|l| l.value)
                .filter(|&v| v <= data_max * LEVEL_ON_SCALE)
                .fold(data_max, f64::max)
                * 1.1;
            for (i, side) in self.sides.iter().enumerate() {
                #[allow(clippy::cast_precision_loss)]
                let (x0, y0) = (
                    10.0 + pw * i as f64,
                    top + HEADING + ROW_HEIGHT * row as f64,
                );
                let panel = Panel {
                    x0,
                    y0,
                    w: pw - 10.0,
                    seconds,
                    y_max,
                    metric: *metric,
                };
                self.series_panel(s, &panel, side, of, &levels[i]);
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let rows = metrics.len() as f64;
        HEADING + ROW_HEIGHT * rows
    }

    fn series_panel(&self, s: &mut String, p: &Panel, side: &str, of: SeriesOf, levels: &[Level]) {
        let m = p.metric;
        let _ = writeln!(
            s,
            r#"<g class="series-panel" id="series-{}-{}" data-metric="{}" data-side="{}">"#,
            m.key(),
            xml_escape(side),
            m.key(),
            xml_escape(side)
        );
        let _ = writeln!(
            s,
            r#"<text class="series-title" x="{:.1}" y="{:.1}" font-weight="bold">{}</text>"#,
            p.x0 + 5.0,
            p.y0 + 14.0,
            xml_escape(&format!("{} per second, side {side}", m.label()))
        );
        // Title, then the run legend and upstream's labels (one row each), then the plot.
        #[allow(clippy::cast_precision_loss)]
        let label_rows = levels.len().max(1) as f64;
        let plot = Plot {
            panel: p,
            left: p.x0 + 55.0,
            right: p.x0 + p.w - 25.0,
            top: p.y0 + 36.0 + 13.0 * label_rows,
            bottom: p.y0 + ROW_HEIGHT - 30.0,
        };
        plot.axes(s);
        let runs = self.series_runs(side);
        if runs.is_empty() {
            let _ = writeln!(
                s,
                r#"<text class="no-series" x="{:.1}" y="{:.1}" text-anchor="middle">no per-second logs from this side</text>"#,
                (plot.left + plot.right) / 2.0,
                (plot.top + plot.bottom) / 2.0
            );
        }
        // The run legend under the time axis, between its two ticks.
        let mut legend_x = plot.left + 40.0;
        for (k, r) in runs.iter().enumerate() {
            let Some(series) = r.series.as_ref().map(of) else {
                continue;
            };
            let colour = COLOURS[k % COLOURS.len()];
            plot.run_lines(s, r, series, colour);
            let name = format!("run {}", r.run);
            if legend_x > plot.right - 90.0 {
                continue;
            }
            let _ = writeln!(
                s,
                r#"<text class="legend" data-run="{}" x="{legend_x:.1}" y="{:.1}" fill="{colour}">{}</text>"#,
                r.run,
                plot.bottom + 14.0,
                xml_escape(&name)
            );
            #[allow(clippy::cast_precision_loss)]
            let advance = 7.0 * name.len() as f64 + 10.0;
            legend_x += advance;
        }
        plot.levels(s, levels);
        s.push_str("</g>\n");
    }
}

/// A panel's plot area and its scales.
struct Plot<'a> {
    panel: &'a Panel,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
}

impl Plot<'_> {
    /// The x of `t` seconds.
    fn x(&self, t: f64) -> f64 {
        self.left + (self.right - self.left) * t / self.panel.seconds
    }

    /// The y of value `v`.
    fn y(&self, v: f64) -> f64 {
        if self.panel.y_max > 0.0 {
            self.bottom - (self.bottom - self.top) * v / self.panel.y_max
        } else {
            self.bottom
        }
    }

    /// The axes and their end ticks.
    fn axes(&self, s: &mut String) {
        let (left, right, top, bottom) = (self.left, self.right, self.top, self.bottom);
        let _ = writeln!(
            s,
            r#"<path class="axes" d="M{left:.1},{top:.1} L{left:.1},{bottom:.1} L{right:.1},{bottom:.1}" stroke="black" fill="none"/>"#
        );
        for (v, anchor) in [(0.0, bottom), (self.panel.y_max, top)] {
            let _ = writeln!(
                s,
                r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                left - 4.0,
                anchor + 4.0,
                xml_escape(&self.panel.metric.format(v))
            );
        }
        for (t, anchor) in [(0.0, "start"), (self.panel.seconds, "end")] {
            let _ = writeln!(
                s,
                r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="{anchor}">{t:.0} s</text>"#,
                self.x(t),
                bottom + 14.0
            );
        }
    }

    /// One run's line: the complete seconds from the origin, then the partial
    /// tail (dashed) from the last one.
    fn run_lines(&self, s: &mut String, r: &RunRecord, series: &Series, colour: &str) {
        let period = f64::from(series.period_ms) / 1000.0;
        let point = |i: usize, v: f64| {
            #[allow(clippy::cast_precision_loss)]
            let t = (i + 1) as f64 * period;
            format!("{:.1},{:.1}", self.x(t), self.y(v))
        };
        let origin = format!("{:.1},{:.1}", self.x(0.0), self.y(0.0));
        let label = format!(
            "run {} (boot {}, {}): {} points, {} complete",
            r.run,
            r.boot,
            if r.phase.is_empty() { "?" } else { &r.phase },
            series.values.len(),
            series.complete
        );
        let complete = series.complete.min(series.values.len());
        if complete > 0 {
            let d: Vec<String> = std::iter::once(origin.clone())
                .chain(
                    series.values[..complete]
                        .iter()
                        .enumerate()
                        .map(|(i, v)| point(i, *v)),
                )
                .collect();
            let _ = writeln!(
                s,
                r#"<path class="series-line" data-run="{}" d="M{}" stroke="{colour}" stroke-width="1.5" fill="none"><title>{}</title></path>"#,
                r.run,
                d.join(" L"),
                xml_escape(&label)
            );
        }
        if complete < series.values.len() {
            let start = complete.saturating_sub(1);
            let mut d: Vec<String> = series.values[start..]
                .iter()
                .enumerate()
                .map(|(i, v)| point(start + i, *v))
                .collect();
            if complete == 0 {
                d.insert(0, origin);
            }
            let _ = writeln!(
                s,
                r#"<path class="series-tail" data-run="{}" d="M{}" stroke="{colour}" stroke-width="1.5" stroke-dasharray="4,3" fill="none"><title>{}</title></path>"#,
                r.run,
                d.join(" L"),
                xml_escape(&format!("{label}: partial seconds"))
            );
        }
    }

    /// Each level's label on a row of its own above the plot; a level on the
    /// scale also gets its line, tagged with the post at its right end (a tag
    /// close to the previous one moves down a line).
    fn levels(&self, s: &mut String, levels: &[Level]) {
        let (left, right, m) = (self.left, self.right, self.panel.metric);
        let mut last_tag = f64::NEG_INFINITY;
        for (k, l) in levels.iter().enumerate() {
            let on_scale = l.value <= self.panel.y_max;
            let text = format!(
                "{}: {} (mean of {} posted run(s)){}",
                l.source,
                m.format(l.value),
                l.runs,
                if on_scale { "" } else { ": above this scale" }
            );
            #[allow(clippy::cast_precision_loss)]
            let row = self.panel.y0 + 30.0 + 13.0 * k as f64;
            let class = if on_scale {
                "upstream-ref-label"
            } else {
                "upstream-ref-off-scale"
            };
            let _ = writeln!(
                s,
                r##"<text class="{class}" x="{right:.1}" y="{row:.1}" text-anchor="end" fill="#555555">{}</text>"##,
                xml_escape(&text)
            );
            if !on_scale {
                continue;
            }
            let ly = self.y(l.value);
            let _ = writeln!(
                s,
                r##"<line class="upstream-ref" x1="{left:.1}" y1="{ly:.1}" x2="{right:.1}" y2="{ly:.1}" stroke="#777777" stroke-dasharray="6,4"><title>{}</title></line>"##,
                xml_escape(&text)
            );
            let tag_y = (ly + 4.0).max(last_tag + 11.0);
            last_tag = tag_y;
            let _ = writeln!(
                s,
                r##"<text class="upstream-ref-tag" x="{:.1}" y="{tag_y:.1}" fill="#555555">{}</text>"##,
                right + 3.0,
                xml_escape(l.source.split(' ').next().unwrap_or_default())
            );
        }
    }
}

/// Where a panel goes and its scales.
struct Panel {
    x0: f64,
    y0: f64,
    w: f64,
    seconds: f64,
    y_max: f64,
    metric: Metric,
}
