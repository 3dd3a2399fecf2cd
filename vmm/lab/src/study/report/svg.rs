//! The SVG chart (`chart.svg`), hand-written: a bar panel per metric, then the time-series
//! panels of [`super::svg_series`].

use std::fmt::Write as _;

use super::format::{p_text, ratio_text, xml_escape};
use super::{BenchReport, MetricAnalysis, FUNCTIONAL_ONLY};

/// Bar panels per row, and a panel's width and height.
const COLS: usize = 4;
const PW: f64 = 230.0;
const PH: f64 = 220.0;
/// Where the first row of panels starts.
const TOP: f64 = 70.0;
const COLOURS: [&str; 4] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759"];

/// One bar panel's place and vertical scale.
struct Panel {
    x0: f64,
    plot_bottom: f64,
    scale: f64,
    /// The horizontal room of each side's bar.
    slot: f64,
}

impl BenchReport {
    /// A bar chart: one panel per metric that has figures, a bar per side (mean) with a whisker
    /// over the min–max range, and under the panel our ratio with Welch's p (`n.s.`: not
    /// significant at p >= 0.05) and upstream's ratio per post; below them, where runs carry
    /// per-second series, a panel per metric (IOPS, bandwidth) and side with a line per run.
    pub fn render_svg(&self) -> String {
        let analysis = self.analyse();
        let panels: Vec<&MetricAnalysis> = analysis
            .metrics
            .iter()
            .filter(|a| a.sides.iter().any(Option::is_some))
            .collect();
        let rows = panels.len().div_ceil(COLS).max(1);
        #[allow(clippy::cast_precision_loss)]
        let (width, bars_end) = (PW * COLS as f64 + 20.0, TOP + PH * rows as f64);
        let series_rows = self.series_metrics().len();
        let series_height = if series_rows == 0 {
            0.0
        } else {
            #[allow(clippy::cast_precision_loss)]
            let rows = series_rows as f64;
            super::svg_series::HEADING + super::svg_series::ROW_HEIGHT * rows
        };
        let height = bars_end + series_height + 20.0;
        let mut s = String::new();
        self.svg_heading(&mut s, &analysis, width, height);
        for (i, a) in panels.iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let (x0, y0) = (10.0 + PW * (i % COLS) as f64, TOP + PH * (i / COLS) as f64);
            self.bar_panel(&mut s, a, x0, y0);
        }
        self.render_series(&mut s, bars_end, width);
        s.push_str("</svg>\n");
        s
    }

    /// The document's start: size, background, title, the engine line and,
    /// off hardware KVM, the functional-only warning.
    fn svg_heading(&self, s: &mut String, analysis: &super::Analysis, width: f64, height: f64) {
        let _ = writeln!(s, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(
            s,
            r#"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="20" font-size="15" font-weight="bold">{}</text>"#,
            xml_escape(&format!("{}: {}", self.experiment, self.description))
        );
        let _ = writeln!(
            s,
            r#"<text x="10" y="38">{}</text>"#,
            xml_escape(&format!(
                "{}; runs with figures: {} of {}; bars: mean, whiskers: min-max",
                self.engine_line(),
                analysis.good_runs,
                analysis.total_runs
            ))
        );
        if !self.accelerator.is_performance() {
            let _ = writeln!(
                s,
                r##"<text x="10" y="56" fill="#c00000" font-weight="bold">{}</text>"##,
                xml_escape(&format!(
                    "{}: {FUNCTIONAL_ONLY}",
                    self.accelerator.name().to_uppercase()
                ))
            );
        }
    }

    /// One metric's panel at (`x0`, `y0`): its bars and, under them, the notes.
    fn bar_panel(&self, s: &mut String, a: &MetricAnalysis, x0: f64, y0: f64) {
        let m = a.metric;
        let _ = writeln!(s, r#"<g class="panel" id="{}">"#, m.key());
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-weight="bold">{}</text>"#,
            x0 + 5.0,
            y0 + 14.0,
            xml_escape(m.label())
        );
        let (plot_top, plot_bottom) = (y0 + 24.0, y0 + PH - 50.0);
        let top_value = a
            .sides
            .iter()
            .flatten()
            .map(|st| st.max.max(st.mean))
            .fold(0.0, f64::max);
        let scale = if top_value > 0.0 {
            (plot_bottom - plot_top) / (top_value * 1.1)
        } else {
            0.0
        };
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" y1="{plot_bottom:.1}" x2="{x2:.1}" y2="{plot_bottom:.1}" stroke="black"/>"#,
            x = x0 + 5.0,
            x2 = x0 + PW - 15.0
        );
        #[allow(clippy::cast_precision_loss)]
        let slot = (PW - 30.0) / self.sides.len().max(1) as f64;
        let panel = Panel {
            x0,
            plot_bottom,
            scale,
            slot,
        };
        for (j, (side, st)) in self.sides.iter().zip(&a.sides).enumerate() {
            bar(s, &panel, a, j, side, st.as_ref());
        }
        for (k, note) in self.panel_notes(a).iter().enumerate() {
            #[allow(clippy::cast_precision_loss)]
            let y = plot_bottom + 30.0 + 14.0 * k as f64;
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{y:.1}">{}</text>"#,
                x0 + 5.0,
                xml_escape(note)
            );
        }
        s.push_str("</g>\n");
    }

    /// Under a panel: our ratio with its test, and upstream's per post.
    fn panel_notes(&self, a: &MetricAnalysis) -> Vec<String> {
        let m = a.metric;
        let mut notes = Vec::new();
        if let Some(r) = a.ratio {
            let test = match (&a.welch, a.significant) {
                (Some(w), Some(true)) => format!(", p={}", p_text(w.p)),
                (Some(w), _) => format!(", p={} n.s.", p_text(w.p)),
                (None, _) => ", not tested".to_owned(),
            };
            notes.push(format!(
                "{}/{} {}{test}",
                self.sides[self.sides.len() - 1],
                self.sides[0],
                ratio_text(r)
            ));
        }
        let upstream: Vec<String> = a
            .upstream
            .iter()
            .filter_map(|u| match (u.ratio, u.sides.as_slice()) {
                (Some(r), _) => Some(format!("{} {}", u.source, ratio_text(r))),
                // A single-sided experiment: upstream's mean beside ours.
                (None, [Some(only)]) => Some(format!("{} {}", u.source, m.format(only.mean))),
                _ => None,
            })
            .collect();
        if !upstream.is_empty() {
            notes.push(format!("upstream: {}", upstream.join(", ")));
        }
        notes
    }
}

/// Side `j`'s bar in `panel`: its label, the mean's bar with the figures in its
/// title, the min–max whisker and the mean above it; "no data" without figures.
fn bar(
    s: &mut String,
    panel: &Panel,
    a: &MetricAnalysis,
    j: usize,
    side: &str,
    st: Option<&super::SideStats>,
) {
    let m = a.metric;
    let Panel {
        x0,
        plot_bottom,
        scale,
        slot,
    } = *panel;
    #[allow(clippy::cast_precision_loss)]
    let bx = x0 + 10.0 + slot * j as f64 + slot * 0.15;
    let bw = slot * 0.7;
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        bx + bw / 2.0,
        plot_bottom + 14.0,
        xml_escape(side)
    );
    let Some(st) = st else {
        no_data(s, bx + bw / 2.0, plot_bottom - 4.0);
        return;
    };
    let bar_top = plot_bottom - st.mean * scale;
    let _ = writeln!(
        s,
        r#"<rect x="{bx:.1}" y="{bar_top:.1}" width="{bw:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
        plot_bottom - bar_top,
        COLOURS[j % COLOURS.len()],
        xml_escape(&format!(
            "{side}: mean {} ({} boot(s), {} run(s); sd of the boot means {}, 95% CI of their geometric mean {})",
            m.format(st.mean),
            st.boots,
            st.n,
            st.stddev.map_or_else(|| "n<2".to_owned(), |v| m.format(v)),
            st.ci95.map_or_else(
                || "n<2".to_owned(),
                |c| format!("{} to {}", m.format(c.low), m.format(c.high))
            )
        ))
    );
    let (wy1, wy2, cx) = (
        plot_bottom - st.max * scale,
        plot_bottom - st.min * scale,
        bx + bw / 2.0,
    );
    let _ = writeln!(
        s,
        r#"<line class="whisker" x1="{cx:.1}" y1="{wy1:.1}" x2="{cx:.1}" y2="{wy2:.1}" stroke="black"/>"#
    );
    for y in [wy1, wy2] {
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="black"/>"#,
            cx - 6.0,
            cx + 6.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        wy1 - 4.0,
        xml_escape(&m.format(st.mean))
    );
}

/// "no data" where a side's bar would be.
fn no_data(s: &mut String, x: f64, y: f64) {
    let _ = writeln!(
        s,
        r#"<text x="{x:.1}" y="{y:.1}" text-anchor="middle">no data</text>"#
    );
}
