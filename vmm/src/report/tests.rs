use super::format::{csv_field, fio_bw, human_bytes, ratio_text, si, table};
use super::*;
use crate::fio::parse_fio_json;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

fn summary(fixture: &str, group: u64) -> FioSummary {
    let bytes = std::fs::read(format!("{FIXTURES}/{fixture}")).unwrap();
    parse_fio_json(&bytes)
        .unwrap()
        .group_summary(group)
        .unwrap()
}

fn ok(side: &str, run: u32, summary: FioSummary) -> RunRecord {
    RunRecord {
        side: side.into(),
        run,
        kernel_cmdline: Some(format!(
            "console=ttyS0 nd_pmem.nowait={}",
            u8::from(side == "on")
        )),
        outcome: RunOutcome::Ok {
            summary: Box::new(summary),
        },
    }
}

/// A report over real fio output: the "off" runs are the psync/io_uring groups, the "on"
/// runs io_uring ones, one run failed and one ended with a verify error.
fn sample(accelerator: Accelerator) -> BenchReport {
    BenchReport {
        experiment: "pmem-nowait".into(),
        description: "4k randread, io_uring, nd_pmem.nowait=0 vs 1".into(),
        engine: "pmemvm".into(),
        accelerator,
        host: HostInfo {
            cpu_model: "Test CPU".into(),
            host_cpus: 2,
            host_kernel: "6.1.0-test".into(),
            guest_vcpus: 2,
            guest_mem_mib: 1024,
            nvdimm_bytes: Some(2 << 30),
            jobs: 4,
        },
        sides: vec!["off".into(), "on".into()],
        runs: vec![
            ok("off", 1, summary("groups.json", 1)),
            ok("off", 2, summary("libaio-psync.json", 0)),
            RunRecord {
                side: "off".into(),
                run: 3,
                kernel_cmdline: None,
                outcome: RunOutcome::Failed {
                    error: "guest did not reach init within 120 s".into(),
                },
            },
            ok("on", 1, summary("group-reporting.json", 0)),
            ok("on", 2, summary("normal-json.out", 0)),
            ok("on", 3, summary("verify-fail.out", 0)),
        ],
        upstream: vec![
            UpstreamFigure {
                metric: Metric::Iops,
                off: Some((3.97e6, 4.08e6)),
                on: Some((5.91e6, 6.01e6)),
            },
            UpstreamFigure {
                metric: Metric::SlatAvgUs,
                off: Some((9.2, 9.2)),
                on: Some((7.4, 7.4)),
            },
            UpstreamFigure {
                metric: Metric::Ctx,
                off: Some((220e6, 220e6)),
                on: Some((24e3, 24e3)),
            },
        ],
        upstream_source: "issue 6 (upstream thread, fio io_uring, 3 runs each)".into(),
    }
}

fn golden(name: &str, actual: &str) {
    let path = format!("{FIXTURES}/golden/{name}");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(format!("{FIXTURES}/golden")).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (run with UPDATE_GOLDEN=1 to create)"));
    assert_eq!(
        actual, expected,
        "{name} differs from the golden file; inspect and rerun with UPDATE_GOLDEN=1 if intended"
    );
}

#[test]
fn analysis_uses_good_runs_only() {
    let r = sample(Accelerator::Kvm);
    let a = r.analyse();
    assert_eq!((a.good_runs, a.total_runs), (4, 6));
    let iops = &a.metrics[0];
    assert_eq!(iops.metric, Metric::Iops);
    let off = iops.sides[0].clone().unwrap();
    let on = iops.sides[1].clone().unwrap();
    assert_eq!(
        (off.n, on.n),
        (2, 2),
        "failed and fio-error runs are left out"
    );
    let off_values = [
        summary("groups.json", 1).iops,
        summary("libaio-psync.json", 0).iops,
    ];
    assert!((off.mean - (off_values[0] + off_values[1]) / 2.0).abs() < 1e-6);
    assert_eq!(off.min, off_values[0].min(off_values[1]));
    assert_eq!(off.max, off_values[0].max(off_values[1]));
    let sd = ((off_values[0] - off_values[1]).abs()) / 2f64.sqrt();
    assert!((off.stddev - sd).abs() < 1e-6);
    assert!((iops.ratio.unwrap() - on.mean / off.mean).abs() < 1e-12);
    // (5.91+6.01)/(3.97+4.08)
    assert!((iops.upstream_ratio.unwrap() - 11.92 / 8.05).abs() < 1e-9);
    // psync has no slat: the off side's slat comes from the io_uring/libaio runs only.
    let slat = a
        .metrics
        .iter()
        .find(|m| m.metric == Metric::SlatAvgUs)
        .unwrap();
    assert_eq!(slat.sides[0].as_ref().unwrap().n, 1);
}

#[test]
fn text_report_golden() {
    let text = sample(Accelerator::Kvm).render_text();
    assert!(!text.contains(FUNCTIONAL_ONLY));
    assert!(text.contains("failed: guest did not reach init within 120 s"));
    assert!(text.contains("fio error 84 in job verify-garbage"));
    golden("report-kvm.txt", &text);
}

#[test]
fn tcg_and_nested_are_marked_functional_only() {
    for acc in [Accelerator::Tcg, Accelerator::Nested] {
        let r = sample(acc);
        let text = r.render_text();
        assert!(
            text.lines().nth(1).unwrap().contains(FUNCTIONAL_ONLY),
            "{text}"
        );
        assert!(r.render_svg().contains(FUNCTIONAL_ONLY));
        let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
        assert_eq!(json["performance"], false);
        assert_eq!(json["note"], FUNCTIONAL_ONLY);
        assert_eq!(json["accelerator"], acc.name());
        assert!(r
            .runs_csv()
            .lines()
            .nth(1)
            .unwrap()
            .contains(&format!(",{},false,", acc.name())));
    }
    golden(
        "report-nested.txt",
        &sample(Accelerator::Nested).render_text(),
    );
}

#[test]
fn json_round_trips_and_carries_analysis() {
    let r = sample(Accelerator::Kvm);
    let text = r.to_json().unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["experiment"], "pmem-nowait");
    assert_eq!(v["runs"][2]["outcome"]["status"], "failed");
    assert_eq!(v["runs"][0]["outcome"]["status"], "ok");
    assert_eq!(v["analysis"]["metrics"][0]["metric"], "iops");
    // The report part deserialises back into the same BenchReport.
    let back: BenchReport = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
}

#[test]
fn csv_shapes() {
    let r = sample(Accelerator::Kvm);
    let runs = r.runs_csv();
    let lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 7);
    let cols = lines[0].split(',').count();
    assert_eq!(cols, 8 + Metric::ALL.len());
    for l in &lines[1..] {
        // No field of these rows needs quoting, so a plain split counts the columns.
        assert_eq!(l.split(',').count(), cols, "{l}");
    }
    let summary = r.summary_csv();
    assert_eq!(summary.lines().count(), 1 + Metric::ALL.len() * 2);
    let iops_on = summary.lines().find(|l| l.contains(",iops,on,")).unwrap();
    let f: Vec<&str> = iops_on.split(',').collect();
    assert_eq!(f[5], "2");
    assert!(!f[10].is_empty(), "ratio on the 'on' row");
    assert_eq!(f[11], "5910000");
    assert_eq!(csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
    golden("runs.csv", &runs);
    golden("summary.csv", &summary);
}

/// Minimal well-formedness check: every tag closes in order, attributes are quoted,
/// no bare '&' or '<' in text.
fn check_xml(s: &str) {
    let body = s.split_once("?>").map_or(s, |(_, b)| b);
    let mut stack: Vec<String> = Vec::new();
    let mut rest = body;
    while let Some(lt) = rest.find('<') {
        let text = &rest[..lt];
        assert!(!text.contains('>'), "stray '>' in text {text:?}");
        for (i, _) in text.match_indices('&') {
            let ent = &text[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| ent.starts_with(e)),
                "bare & in {text:?}"
            );
        }
        let gt = rest[lt..].find('>').unwrap() + lt;
        let tag = &rest[lt + 1..gt];
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in <{tag}>"
        );
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().unwrap().to_owned());
        }
        rest = &rest[gt + 1..];
    }
    assert!(stack.is_empty(), "unclosed tags {stack:?}");
}

#[test]
fn svg_is_well_formed_with_whiskers() {
    let mut r = sample(Accelerator::Tcg);
    r.description = "quotes \" & <angles>".into();
    let svg = r.render_svg();
    check_xml(&svg);
    assert!(svg.contains("quotes &quot; &amp; &lt;angles&gt;"));
    // One panel per metric with data, each side with a bar and a whisker.
    assert_eq!(
        svg.matches(r#"<g class="panel""#).count(),
        Metric::ALL.len()
    );
    assert_eq!(
        svg.matches(r#"class="whisker""#).count(),
        Metric::ALL.len() * 2
    );
    assert!(svg.contains("upstream 1.48x"));

    // xmllint, when installed (Debian libxml2-utils), as an independent parser.
    let dir = std::env::temp_dir().join(format!("pmemvm-report-test-{}", std::process::id()));
    let files = sample(Accelerator::Kvm).write_files(&dir, false).unwrap();
    assert_eq!(files.len(), 5);
    match std::process::Command::new("xmllint").arg("--noout").arg(dir.join("chart.svg")).status() {
        Ok(status) => assert!(status.success(), "xmllint rejected chart.svg"),
        Err(_) => eprintln!("SKIP: xmllint not installed (apt-get install libxml2-utils); used the built-in check only"),
    }
    check_xml(&std::fs::read_to_string(dir.join("chart.svg")).unwrap());
    // Written files are not overwritten unless asked.
    let e = sample(Accelerator::Kvm)
        .write_files(&dir, false)
        .unwrap_err();
    assert!(matches!(e, ReportError::FileExists { .. }), "{e}");
    sample(Accelerator::Kvm).write_files(&dir, true).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn svg_golden() {
    golden("chart.svg", &sample(Accelerator::Kvm).render_svg());
}

#[test]
fn single_sided_report() {
    let mut r = sample(Accelerator::Kvm);
    r.experiment = "xfs-dax-write".into();
    r.sides = vec!["default".into()];
    for run in &mut r.runs {
        run.side = "default".into();
    }
    r.upstream = vec![UpstreamFigure {
        metric: Metric::BwMibS,
        off: Some((12.8 * 1024.0, 12.8 * 1024.0)),
        on: None,
    }];
    let text = r.render_text();
    assert!(!text.contains("on/off"));
    assert!(text.contains("13107"), "{text}");
    let a = r.analyse();
    assert!(a.metrics.iter().all(|m| m.ratio.is_none()));
    check_xml(&r.render_svg());
}

#[test]
fn number_formats() {
    assert_eq!(si(3_968_000.0), "3.968M");
    assert_eq!(si(546_123.0), "546.1k");
    assert_eq!(si(24_000.0), "24.00k");
    assert_eq!(si(4691.0), "4691");
    assert_eq!(si(220e6), "220.0M");
    assert_eq!(fio_bw(16_212_000_000), "15.1GiB/s");
    assert_eq!(fio_bw(306_565_754), "292MiB/s");
    assert_eq!(Metric::SlatAvgUs.format(9.424), "9.42");
    assert_eq!(human_bytes(2 << 30), "2 GiB");
    assert_eq!(ratio_text(1.4807), "1.48x");
    assert_eq!(ratio_text(24e3 / 220e6), "1/9167x");
    assert_eq!(
        table(
            &[
                vec!["a".into(), "bb".into()],
                vec!["ccc".into(), "d".into()]
            ],
            2
        ),
        "a    bb\nccc  d\n"
    );
}
