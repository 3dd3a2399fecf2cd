use super::format::{csv_field, csv_precise, fio_bw, human_bytes, p_text, ratio_text, si, table};
use super::*;
use crate::study::fio::parse_fio_json;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fio");

pub(super) fn summary(fixture: &str, group: u64) -> FioSummary {
    let bytes = std::fs::read(format!("{FIXTURES}/{fixture}")).unwrap();
    parse_fio_json(&bytes)
        .unwrap()
        .group_summary(group)
        .unwrap()
}

pub(super) fn ok(side: &str, run: u32, summary: FioSummary) -> RunRecord {
    let outcome = RunOutcome::Ok {
        summary: Box::new(summary),
    };
    RunRecord {
        kernel_cmdline: Some(format!(
            "console=ttyS0 nd_pmem.nowait={}",
            u8::from(side == "on")
        )),
        boot: run,
        ..super::failures::tests::run(side, run, outcome)
    }
}

/// A report over real fio output: the "off" runs are the psync/io_uring groups, the "on"
/// runs io_uring ones, one run failed and one ended with a verify error.
/// Upstream's figures are the catalogue's, from the posts.
pub(super) fn sample(accelerator: Accelerator) -> BenchReport {
    let catalogue = crate::study::experiments::find_experiment("pmem-nowait").unwrap();
    BenchReport {
        experiment: "pmem-nowait".into(),
        description: "4k randread, io_uring, nd_pmem.nowait=0 vs 1".into(),
        engine: "pmemvm".into(),
        accelerator,
        host: HostInfo {
            identity: vmm::host::machine::HostIdentity {
                cpu_model: "Test CPU".into(),
                host_cpus: 2,
                host_kernel: "6.1.0-test".into(),
                hostname: "test-host".into(),
            },
            guest_vcpus: 2,
            guest_mem_mib: 1024,
            nvdimm_bytes: Some(2 << 30),
            pmem_device: crate::study::bench::cxl::PmemDevice::Nvdimm,
            jobs: 4,
        },
        sides: vec!["off".into(), "on".into()],
        thread_sides: vec![],
        runs: vec![
            ok("off", 1, summary("groups.json", 1)),
            ok("off", 2, summary("libaio-psync.json", 0)),
            RunRecord {
                boot: 3,
                ..super::failures::tests::run(
                    "off",
                    3,
                    RunOutcome::Failed {
                        error: "guest did not reach init within 120 s".into(),
                    },
                )
            },
            ok("on", 1, summary("group-reporting.json", 0)),
            ok("on", 2, summary("normal-json.out", 0)),
            ok("on", 3, summary("verify-fail.out", 0)),
        ],
        upstream: catalogue.upstream_figures(),
        upstream_source: catalogue.upstream_source.into(),
        checks: vec![],
        verify_expectation: None,
        deviations: vec![],
        job_files: vec![],
        result: None,
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
    assert!((off.stddev.unwrap() - sd).abs() < 1e-6);
    assert!((iops.ratio.unwrap() - on.mean / off.mean).abs() < 1e-12);
    // Upstream's ratios are of the means of the posted runs, per post.
    let up: Vec<(&str, f64)> = iops
        .upstream
        .iter()
        .map(|u| (u.source.as_str(), u.ratio.unwrap()))
        .collect();
    assert_eq!(up.len(), 2);
    assert_eq!(up[0].0, "V1");
    assert!((up[0].1 - 17912.0 / 12047.0).abs() < 1e-12);
    assert!((up[1].1 - 17718.0 / 11501.0).abs() < 1e-12);
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
    // Upstream is cited by post, with subject, date and Message-ID.
    assert!(text.contains(
        "V1: \"[PATCH 0/1] pmem: allow user to set QUEUE_FLAG_NOWAIT\", Chaitanya Kulkarni, \
         Fri, 12 May 2023 03:43:01 -0700, Message-ID <20230512104302.8527-1-kch@nvidia.com>"
    ));
    assert!(text.contains("V2: \"[PATCH V2 1/1] pmem: set QUEUE_FLAG_NOWAIT\""));
    assert!(!text.to_lowercase().contains("issue"), "{text}");
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
    let header: Vec<&str> = summary.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let iops_on = summary.lines().find(|l| l.contains(",iops,on,")).unwrap();
    let f: Vec<&str> = iops_on.split(',').collect();
    assert_eq!(f.len(), header.len());
    assert_eq!(f[col("n")], "2");
    for c in ["ratio", "ratio_ci95_low", "p_value", "significant"] {
        assert!(!f[col(c)].is_empty(), "{c} on the 'on' row: {iops_on}");
    }
    let iops_off = summary.lines().find(|l| l.contains(",iops,off,")).unwrap();
    let f: Vec<&str> = iops_off.split(',').collect();
    assert!(f[col("ratio")].is_empty() && f[col("p_value")].is_empty());
    assert!(!f[col("ci95_low")].is_empty());
    let upstream = r.upstream_csv();
    // V1 and V2: 8 metrics x 2 sides x 3 runs each.
    assert_eq!(upstream.lines().count(), 1 + 2 * 8 * 2 * 3);
    assert!(upstream.contains(
        "pmem-nowait,V1,[PATCH 0/1] pmem: allow user to set QUEUE_FLAG_NOWAIT,Chaitanya Kulkarni,\
         \"Fri, 12 May 2023 03:43:01 -0700\",20230512104302.8527-1-kch@nvidia.com,iops,off,1,3968000\n"
    ));
    golden("upstream.csv", &upstream);
    assert_eq!(csv_field("a,\"b\""), "\"a,\"\"b\"\"\"");
    golden("runs.csv", &runs);
    golden("summary.csv", &summary);
}

/// Minimal well-formedness check: every tag closes in order, attributes are quoted,
/// no bare '&' or '<' in text.
pub(super) fn check_xml(s: &str) {
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
    // One panel per metric with data, each side with data a bar and a whisker.
    let a = r.analyse();
    let with_data: Vec<_> = a
        .metrics
        .iter()
        .filter(|m| m.sides.iter().any(Option::is_some))
        .collect();
    assert!(
        with_data.len() < Metric::ALL.len(),
        "no slat percentiles here"
    );
    assert_eq!(svg.matches(r#"<g class="panel""#).count(), with_data.len());
    let bars: usize = with_data
        .iter()
        .map(|m| m.sides.iter().flatten().count())
        .sum();
    assert_eq!(svg.matches(r#"class="whisker""#).count(), bars);
    assert!(svg.contains("upstream: V1 1.49x, V2 1.54x"), "{svg}");

    // xmllint, when installed (Debian libxml2-utils), as an independent parser.
    let dir = std::env::temp_dir().join(format!("pmemvm-report-test-{}", std::process::id()));
    let files = sample(Accelerator::Kvm).write_files(&dir, false).unwrap();
    assert_eq!(files.len(), 6);
    match std::process::Command::new("xmllint")
        .arg("--noout")
        .arg(dir.join("chart.svg"))
        .status()
    {
        Ok(status) => assert!(status.success(), "xmllint rejected chart.svg"),
        Err(_) => pmemvm_skip::skip(
            "xmllint not installed (apt-get install libxml2-utils); used the built-in check only",
        ),
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
    let xfs = crate::study::experiments::find_experiment("xfs-dax-write").unwrap();
    r.upstream = xfs.upstream_figures();
    r.upstream_source = xfs.upstream_source.into();
    let text = r.render_text();
    assert!(!text.contains("on/off"));
    assert!(!text.contains("Comparison"));
    assert!(text.contains("13107"), "{text}");
    assert!(text.contains("mw4yhbmza4idassgbqeiti4ue7jq377ezxfrqrcbsbzsrmfiln@kn7qmqljvswl"));
    let up = r.upstream_csv();
    assert!(up.lines().all(|l| !l.contains(",on,")), "{up}");
    assert!(up.contains(",bw_mib_s,default,1,13107.2"), "{up}");
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
    assert_eq!(ratio_text(132.91), "133x");
    assert_eq!(ratio_text(12.06), "12.1x");
    assert_eq!(ratio_text(1.0 / 27.13), "1/27.1x");
    assert_eq!(ratio_text(170_428.3), "170.4kx");
    assert_eq!(p_text(0.2851), "0.285");
    assert_eq!(p_text(2.3e-6), "2.3e-6");
    assert_eq!(csv_precise(3.25e-7), "3.25e-7");
    assert_eq!(csv_precise(0.125), "0.125");
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

/// A run whose only figures are IOPS and sys CPU (the other metrics are empty or constant).
pub(super) fn synthetic(side: &str, run: u32, iops: f64, sys: f64) -> RunRecord {
    ok(
        side,
        run,
        FioSummary {
            iops,
            sys_cpu: sys,
            usr_cpu: 1.0,
            job_runtime_ms: 1000,
            ..FioSummary::default()
        },
    )
}

/// Three runs per side: IOPS indistinguishable (p = 0.71), sys CPU clearly different.
pub(super) fn synthetic_report() -> BenchReport {
    let mut r = sample(Accelerator::Kvm);
    r.runs = vec![
        synthetic("off", 1, 100.0, 30.0),
        synthetic("on", 1, 101.0, 88.0),
        synthetic("off", 2, 104.0, 31.0),
        synthetic("on", 2, 99.0, 89.0),
        synthetic("off", 3, 98.0, 29.5),
        synthetic("on", 3, 105.0, 87.5),
    ];
    r
}

pub(super) fn metric(a: &Analysis, m: Metric) -> &MetricAnalysis {
    a.metrics.iter().find(|x| x.metric == m).unwrap()
}

#[test]
fn analysis_uses_the_inference_module_on_the_good_runs() {
    use crate::study::inference::{log_interval, ratio_ci, welch, Described, CONFIDENCE};
    let r = synthetic_report();
    let a = r.analyse();
    let off = Described::of(&[100.0, 104.0, 98.0], CONFIDENCE).unwrap();
    let on = Described::of(&[101.0, 99.0, 105.0], CONFIDENCE).unwrap();
    let iops = metric(&a, Metric::Iops);
    let s = iops.sides[0].as_ref().unwrap();
    // One run per boot: the boots' means are the runs; the interval is the log-scale one.
    let log = log_interval(&[100.0, 104.0, 98.0], CONFIDENCE).unwrap();
    assert_eq!(
        (s.n, s.boots, s.stddev, s.ci95, s.geo_mean),
        (3, 3, off.sd, Some(log.ci), Some(log.geo_mean))
    );
    assert_eq!(
        iops.ratio_ci95,
        Some(ratio_ci(&on, &off, CONFIDENCE).unwrap().ci)
    );
    assert_eq!(iops.welch, Some(welch(&off, &on).unwrap()));
    assert_eq!(iops.significant, Some(false));
    assert_eq!(metric(&a, Metric::SysCpu).significant, Some(true));
    // BW is 0 on every run: a ratio of zeros is not a ratio, and there is no spread to test.
    let bw = metric(&a, Metric::BwMibS);
    assert_eq!((bw.ratio, bw.welch), (None, None));
    assert_eq!(bw.not_tested.as_deref(), Some("mean <= 0; no spread"));
}

#[test]
fn not_significant_is_flagged_in_text_json_and_csv() {
    let r = synthetic_report();
    let text = r.render_text();
    let row = |label: &str| {
        text.lines()
            .skip_while(|l| !l.starts_with("Comparison"))
            .find(|l| l.starts_with(label))
            .unwrap()
            .to_owned()
    };
    assert!(row("IOPS ").contains("not significant"), "{text}");
    let sys = row("sys % ");
    assert!(
        sys.contains("significant") && !sys.contains("not significant"),
        "{sys}"
    );

    let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
    let metrics = json["analysis"]["metrics"].as_array().unwrap();
    let by_key = |k: &str| metrics.iter().find(|m| m["metric"] == k).unwrap();
    assert_eq!(by_key("iops")["significant"], false);
    assert!(by_key("iops")["welch"]["p"].as_f64().unwrap() >= 0.05);
    assert_eq!(by_key("sys_cpu")["significant"], true);

    let csv = r.summary_csv();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "significant").unwrap();
    let field = |prefix: &str| {
        let line = csv.lines().find(|l| l.contains(prefix)).unwrap();
        line.split(',').nth(col).unwrap().to_owned()
    };
    assert_eq!(field(",iops,on,"), "false");
    assert_eq!(field(",sys_cpu,on,"), "true");
    assert_eq!(
        field(",iops,off,"),
        "",
        "the verdict is on the last side's row"
    );
}

#[test]
fn one_run_on_a_side_is_said_not_computed() {
    let mut r = synthetic_report();
    r.runs.retain(|run| run.side == "on" || run.run == 1);
    let a = r.analyse();
    let iops = metric(&a, Metric::Iops);
    let off = iops.sides[0].as_ref().unwrap();
    assert_eq!((off.n, off.stddev, off.ci95), (1, None, None));
    assert!(iops.ratio.is_some(), "the point ratio is still shown");
    assert_eq!(
        (iops.ratio_ci95, iops.welch, iops.significant),
        (None, None, None)
    );
    assert_eq!(iops.not_tested.as_deref(), Some("n=1 off"));
    let text = r.render_text();
    assert!(text.contains("not tested: n=1 off"), "{text}");
    let summary_row = text
        .lines()
        .find(|l| l.starts_with("IOPS") && l.contains(" off "))
        .unwrap();
    assert!(summary_row.contains("n<2"), "{summary_row}");
    let csv = r.summary_csv();
    assert!(
        csv.lines()
            .any(|l| l.contains(",iops,on,") && l.contains(",n=1 off,")),
        "{csv}"
    );
}

#[test]
fn the_report_names_every_machine_field_in_which_the_sides_differ() {
    let mut r = synthetic_report();
    let off = vmm::host::machine::MachineDescription::probe().with_run(&[], None, Vec::new());
    let mut on = off.clone();
    on.ram_page_size = 2 << 20;
    on.thp_enabled = format!("not-{}", off.thp_enabled);
    for run in &mut r.runs {
        run.machine = Some(if run.side == "off" {
            off.clone()
        } else {
            on.clone()
        });
    }
    let text = r.render_text();
    assert!(text.contains("machine (off): "), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("machine differs between sides off and on: "))
        .unwrap_or_else(|| panic!("no difference line:\n{text}"));
    assert!(line.contains("ram_page_size: 0 vs 2097152"), "{line}");
    assert!(line.contains("thp_enabled: "), "{line}");
    for run in &mut r.runs {
        run.machine = Some(off.clone());
    }
    assert!(r.render_text().contains("machine (on): the same"));
    // The machine travels in report.json.
    let json = r.to_json().unwrap();
    assert!(json.contains("\"ram_page_size\""), "{json}");
}
