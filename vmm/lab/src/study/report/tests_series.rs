//! The chart's time-series panels (parsed back from the SVG, and rendered to PNG by
//! `rsvg-convert`), and slat percentiles in the runs of jobs that ask fio for them.

use std::collections::BTreeMap;

use super::tests::{ok, sample, summary};
use super::*;
use crate::study::fio::log::{parse_log, LOG_PERIOD_MS};
use crate::study::fio::{PhaseSeries, Series};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

/// 60 s of IOPS around `level`: a warm-up second, a stall at 30 s, a partial last second.
fn series_near(level: f64, wobble: f64) -> PhaseSeries {
    let values: Vec<f64> = (0..60)
        .map(|i| match i {
            0 => level * 0.6,
            30 => level * 0.3,
            59 => level * 0.4,
            _ => level * (1.0 + wobble * ((f64::from(i) * 0.7).sin())),
        })
        .collect();
    let bw: Vec<f64> = values.iter().map(|v| v / 256.0).collect();
    let series = |values: Vec<f64>| Series {
        period_ms: LOG_PERIOD_MS,
        values,
        streams: 48,
        complete: 59,
    };
    PhaseSeries {
        iops: series(values),
        bw_mib_s: series(bw),
    }
}

/// The sample report with a series on each good run: off near the thread's V1 off level
/// (about 4.0M IOPS), on near its on level (about 5.9M).
fn series_report() -> BenchReport {
    let mut r = sample(Accelerator::Kvm);
    for run in &mut r.runs {
        run.phase = format!("randread-{}", run.run);
        run.series = match (run.side.as_str(), run.run) {
            ("off", 1) => Some(series_near(4.0e6, 0.02)),
            ("off", 2) => Some(series_near(3.9e6, 0.03)),
            ("on", 1) => Some(series_near(5.95e6, 0.01)),
            ("on", 2) => Some(series_near(5.9e6, 0.02)),
            _ => None,
        };
    }
    r
}

/// An element of the SVG: name, attributes, text, children.
#[derive(Debug, Default)]
struct Node {
    name: String,
    attrs: BTreeMap<String, String>,
    text: String,
    children: Vec<Node>,
}

impl Node {
    fn attr(&self, k: &str) -> Option<&str> {
        self.attrs.get(k).map(String::as_str)
    }

    /// Every descendant (and self) that matches.
    fn find<'a>(&'a self, pred: &dyn Fn(&Node) -> bool, out: &mut Vec<&'a Node>) {
        if pred(self) {
            out.push(self);
        }
        for c in &self.children {
            c.find(pred, out);
        }
    }

    fn all(&self, name: &str, class: &str) -> Vec<&Node> {
        let mut v = Vec::new();
        self.find(
            &|n| n.name == name && n.attr("class") == Some(class),
            &mut v,
        );
        v
    }

    /// The text of the node and its descendants.
    fn deep_text(&self) -> String {
        let mut t = self.text.clone();
        for c in &self.children {
            t.push_str(&c.deep_text());
        }
        t
    }
}

/// Parses the chart (the subset of XML it is written in) into a tree.
fn parse_svg(svg: &str) -> Node {
    let body = svg.split_once("?>").map_or(svg, |(_, b)| b);
    let mut stack = vec![Node::default()];
    let mut rest = body;
    while let Some(lt) = rest.find('<') {
        if let Some(top) = stack.last_mut() {
            top.text.push_str(&rest[..lt]);
        }
        let gt = lt + rest[lt..].find('>').unwrap();
        let tag = &rest[lt + 1..gt];
        rest = &rest[gt + 1..];
        if tag.starts_with('/') {
            let done = stack.pop().unwrap();
            stack.last_mut().unwrap().children.push(done);
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let (name, mut attrs_text) = tag.split_once(' ').unwrap_or((tag, ""));
        let mut node = Node {
            name: name.to_owned(),
            ..Node::default()
        };
        while let Some((k, v)) = attrs_text.split_once("=\"") {
            let (value, after) = v.split_once('"').unwrap();
            node.attrs.insert(k.trim().to_owned(), value.to_owned());
            attrs_text = after;
        }
        if self_closing {
            stack.last_mut().unwrap().children.push(node);
        } else {
            stack.push(node);
        }
    }
    assert_eq!(stack.len(), 1, "unclosed elements");
    stack.pop().unwrap()
}

fn panel<'a>(root: &'a Node, metric: &str, side: &str) -> &'a Node {
    let panels = root.all("g", "series-panel");
    panels
        .into_iter()
        .find(|g| g.attr("data-metric") == Some(metric) && g.attr("data-side") == Some(side))
        .unwrap_or_else(|| panic!("no {metric} panel of side {side}"))
}

#[test]
fn the_chart_has_a_time_series_panel_per_metric_and_side_with_a_line_per_run() {
    let r = series_report();
    let svg = r.render_svg();
    super::tests::check_xml(&svg);
    let root = parse_svg(&svg);
    // The bar panels stay; below them IOPS and bandwidth, per side.
    assert!(!root.all("g", "panel").is_empty());
    assert_eq!(root.all("g", "series-panel").len(), 4);
    for (metric, label) in [("iops", "IOPS"), ("bw_mib_s", "BW MiB/s")] {
        for side in ["off", "on"] {
            let g = panel(&root, metric, side);
            let title = g.all("text", "series-title");
            assert_eq!(
                title[0].deep_text(),
                format!("{label} per second, side {side}")
            );
            // A line per run with a series (runs 1 and 2), each with its dashed partial tail,
            // labelled with the run, its boot and phase.
            let lines = g.all("path", "series-line");
            let runs: Vec<&str> = lines.iter().filter_map(|p| p.attr("data-run")).collect();
            assert_eq!(runs, ["1", "2"], "{metric} {side}");
            for (p, run) in lines.iter().zip(1..) {
                let label = p.deep_text();
                assert_eq!(
                    label,
                    format!("run {run} (boot {run}, randread-{run}): 60 points, 59 complete")
                );
                // The origin and 59 complete seconds.
                let d = p.attr("d").unwrap();
                assert_eq!(d.matches(" L").count(), 59, "{d}");
            }
            assert_eq!(g.all("path", "series-tail").len(), 2);
            assert_eq!(g.all("text", "legend").len(), 2);
            // The thread's level of this side, per post, as a line with its label.
            let refs = g.all("line", "upstream-ref");
            let labels: Vec<String> = g
                .all("text", "upstream-ref-label")
                .iter()
                .map(|t| t.deep_text())
                .collect();
            assert_eq!(refs.len(), 2, "{metric} {side}: {labels:?}");
            assert!(labels[0].starts_with(&format!("V1 {side}: ")), "{labels:?}");
            assert!(labels[1].starts_with(&format!("V2 {side}: ")), "{labels:?}");
            assert!(
                labels[0].ends_with("(mean of 3 posted run(s))"),
                "{labels:?}"
            );
        }
    }
    // V1's off level is the mean of its three posted runs.
    let iops_off = panel(&root, "iops", "off");
    let v1 = iops_off.all("text", "upstream-ref-label")[0].deep_text();
    assert_eq!(v1, "V1 off: 4.016M (mean of 3 posted run(s))");
    // Same scale on both sides: the on level sits higher (smaller y) than the off level.
    let y = |g: &Node| {
        g.all("line", "upstream-ref")[0]
            .attr("y1")
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    assert!(y(panel(&root, "iops", "on")) < y(iops_off));
    // A report without series has no such panels (the golden chart is unchanged).
    let plain = parse_svg(&sample(Accelerator::Kvm).render_svg());
    assert!(plain.all("g", "series-panel").is_empty());
}

#[test]
fn only_the_threads_sides_get_upstreams_level() {
    let mut r = series_report();
    r.sides = vec!["base".into(), "patched".into()];
    for run in &mut r.runs {
        run.side = if run.side == "off" { "base" } else { "patched" }.into();
    }
    let root = parse_svg(&r.render_svg());
    assert_eq!(root.all("g", "series-panel").len(), 4);
    assert!(root.all("line", "upstream-ref").is_empty());
    assert!(root.all("text", "upstream-ref-off-scale").is_empty());
    // base declared as the thread's off: its panels only.
    r.thread_sides = vec![Some(ThreadSide::Off), None];
    let root = parse_svg(&r.render_svg());
    assert_eq!(
        panel(&root, "iops", "base")
            .all("line", "upstream-ref")
            .len(),
        2
    );
    assert!(panel(&root, "iops", "patched")
        .all("line", "upstream-ref")
        .is_empty());
    let label = panel(&root, "iops", "base").all("text", "upstream-ref-label")[0].deep_text();
    assert!(label.starts_with("V1 off: "), "{label}");
}

#[test]
fn real_logs_far_below_the_threads_level_get_a_label_not_a_line() {
    // The real fio logs of 4 jobs on a host file: about 40k IOPS against the thread's 4M.
    let read = |f: &str| std::fs::read(format!("{FIXTURES}/{f}")).unwrap();
    let real = PhaseSeries {
        iops: parse_log(&read("logs_iops.log"), LOG_PERIOD_MS, 1.0).unwrap(),
        bw_mib_s: parse_log(&read("logs_bw.log"), LOG_PERIOD_MS, 1.0 / 1024.0).unwrap(),
    };
    let mut r = sample(Accelerator::Tcg);
    r.runs = vec![
        ok("off", 1, summary("logs.json", 0)),
        ok("on", 1, summary("logs.json", 0)),
    ];
    for run in &mut r.runs {
        run.series = Some(real.clone());
    }
    let svg = r.render_svg();
    super::tests::check_xml(&svg);
    let root = parse_svg(&svg);
    let g = panel(&root, "iops", "off");
    assert!(g.all("line", "upstream-ref").is_empty());
    let off_scale: Vec<String> = g
        .all("text", "upstream-ref-off-scale")
        .iter()
        .map(|t| t.deep_text())
        .collect();
    assert_eq!(off_scale.len(), 2, "{off_scale:?}");
    assert!(
        off_scale[0].starts_with("V1 off: 4.016M") && off_scale[0].ends_with("above this scale"),
        "{off_scale:?}"
    );
    // Five seconds, four complete: a line and its dashed last second.
    let line = &g.all("path", "series-line")[0];
    assert_eq!(line.attr("d").unwrap().matches(" L").count(), 4);
    assert_eq!(g.all("path", "series-tail").len(), 1);
}

/// PNG width and height from the IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

#[test]
fn the_chart_with_time_series_renders_to_png() {
    let svg = series_report().render_svg();
    // The same place every run, left for a look (`rsvg-convert` output next to its SVG).
    let dir = std::env::temp_dir().join("pmemvm-report-series-chart");
    std::fs::create_dir_all(&dir).unwrap();
    let (svg_path, png_path) = (dir.join("chart.svg"), dir.join("chart.png"));
    std::fs::write(&svg_path, &svg).unwrap();
    let _ = std::fs::remove_file(&png_path);
    let status = match std::process::Command::new("rsvg-convert")
        .arg("--output")
        .arg(&png_path)
        .arg(&svg_path)
        .status()
    {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            pmemvm_skip::skip!("rsvg-convert not installed (apt-get install librsvg2-bin)");
        }
        Err(e) => panic!("rsvg-convert: {e}"),
    };
    assert!(
        status.success(),
        "rsvg-convert rejected {}",
        svg_path.display()
    );
    let png = std::fs::read(&png_path).unwrap();
    let root = parse_svg(&svg);
    let svg_el = root.children.iter().find(|n| n.name == "svg").unwrap();
    let dim = |k: &str| svg_el.attr(k).unwrap().parse::<u32>().unwrap();
    assert_eq!(png_size(&png), (dim("width"), dim("height")));
    assert!(dim("height") > 1000, "bar rows and two series rows");
    // Lines, text and colour on a 940-pixel-wide chart: far more than an empty image's bytes.
    assert!(png.len() > 50_000, "PNG of {} bytes", png.len());
}

#[test]
fn runs_of_jobs_with_slat_percentiles_report_them() {
    let mut r = sample(Accelerator::Kvm);
    r.runs = vec![
        ok("off", 1, summary("logs.json", 0)),
        ok("off", 2, summary("slat-percentiles.json", 0)),
        ok("on", 1, summary("logs.json", 0)),
        ok("on", 2, summary("slat-percentiles.json", 0)),
    ];
    let text = r.render_text();
    assert!(!text.contains("no run reported: slat"), "{text}");
    for column in ["slat p50", "slat p99", "slat p99.9"] {
        assert!(text.contains(column), "{column} missing:\n{text}");
    }
    let a = r.analyse();
    for m in [Metric::SlatP50Us, Metric::SlatP99Us, Metric::SlatP99_9Us] {
        let sides = &super::tests::metric(&a, m).sides;
        assert!(
            sides.iter().all(|s| s.as_ref().is_some_and(|s| s.n == 2)),
            "{m:?}"
        );
    }
    let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
    let slat = &json["runs"][0]["outcome"]["summary"]["slat"];
    assert!(slat["p99_9_ns"].as_u64().is_some_and(|v| v > 0), "{slat}");
}
