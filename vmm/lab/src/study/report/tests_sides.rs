//! Upstream's figures beside the sides they belong to: the experiment's own `off`/`on`, or
//! sides declared with `--side NAME:...,as=off|on`; never beside a user's `good`/`broken`.

use super::tests::sample;
use super::*;

/// The sample report with its sides renamed to `good` (was off) and `broken` (was on).
fn user_sides(thread_sides: Vec<Option<ThreadSide>>) -> BenchReport {
    let mut r = sample(Accelerator::Kvm);
    r.sides = vec!["good".into(), "broken".into()];
    for run in &mut r.runs {
        run.side = if run.side == "off" { "good" } else { "broken" }.into();
    }
    r.thread_sides = thread_sides;
    r
}

fn json(r: &BenchReport) -> serde_json::Value {
    serde_json::from_str(&r.to_json().unwrap()).unwrap()
}

#[test]
fn user_named_sides_get_no_upstream_figures() {
    let r = user_sides(Vec::new());
    let text = r.render_text();
    assert!(text.contains("Comparison broken/good"), "{text}");
    assert!(!text.contains("V1 broken/good"), "{text}");
    assert!(!text.contains("V2 broken/good"), "{text}");
    assert!(!text.contains("metric  post"), "an upstream table:\n{text}");
    assert!(
        !text.contains("3.968M"),
        "upstream's V1 off run 1 is shown:\n{text}"
    );
    assert!(
        text.contains(
            "Upstream's figures are not shown: sides good and broken are not the thread's off and on"
        ),
        "{text}"
    );
    // The posts are still cited: they are the thread the experiment repeats.
    assert!(text.contains("V1: \"[PATCH 0/1] pmem: allow user to set QUEUE_FLAG_NOWAIT\""));
    let v = json(&r);
    assert!(
        v["upstream"]["figures"].as_array().unwrap().is_empty(),
        "{v:#}"
    );
    for m in v["analysis"]["metrics"].as_array().unwrap() {
        assert!(m["upstream"].as_array().unwrap().is_empty(), "{m:#}");
    }
    assert_eq!(r.upstream_csv().lines().count(), 1, "{}", r.upstream_csv());
    assert!(!r.render_svg().contains("upstream:"));
}

#[test]
fn sides_declared_as_the_threads_get_upstream_figures() {
    let r = user_sides(vec![Some(ThreadSide::Off), Some(ThreadSide::On)]);
    let text = r.render_text();
    assert!(text.contains("V1 broken/good"), "{text}");
    assert!(text.contains("good runs (thread's off)"), "{text}");
    assert!(text.contains("broken runs (thread's on)"), "{text}");
    let v = json(&r);
    let iops = &v["analysis"]["metrics"][0];
    assert_eq!(iops["metric"], "iops");
    let ratio = iops["upstream"][0]["ratio"].as_f64().unwrap();
    assert!((ratio - 17912.0 / 12047.0).abs() < 1e-12, "{ratio}");
    assert!(!v["upstream"]["figures"].as_array().unwrap().is_empty());
    let csv = r.upstream_csv();
    assert!(csv.contains(",iops,good,1,3968000\n"), "{csv}");
    assert!(csv.contains(",iops,broken,1,5909000\n"), "{csv}");
    assert!(r.render_svg().contains("upstream: V1 1.49x, V2 1.54x"));

    // One side declared: the thread's runs beside it, but no upstream ratio anywhere.
    let r = user_sides(vec![None, Some(ThreadSide::On)]);
    let text = r.render_text();
    assert!(text.contains("broken runs (thread's on)"), "{text}");
    assert!(!text.contains("good runs ("), "{text}");
    assert!(!text.contains("V1 broken/good"), "{text}");
    let v = json(&r);
    let up = &v["analysis"]["metrics"][0]["upstream"][0];
    assert!(up["ratio"].is_null() && up["welch"].is_null(), "{up:#}");
    let csv = r.upstream_csv();
    assert!(!csv.contains(",good,"), "{csv}");
    assert!(!r.render_svg().contains("upstream:"));
}

#[test]
fn the_experiments_own_sides_keep_upstreams_figures() {
    let r = sample(Accelerator::Kvm);
    assert!(r.thread_sides.is_empty());
    let text = r.render_text();
    assert!(text.contains("V1 on/off"), "{text}");
    assert!(text.contains("off runs"), "{text}");
    assert!(!text.contains("thread's off"), "{text}");
    assert_eq!(
        r.thread_side_map(),
        [Some(ThreadSide::Off), Some(ThreadSide::On)]
    );
    // The declaration travels in report.json and back.
    let declared = user_sides(vec![Some(ThreadSide::Off), None]);
    let v = json(&declared);
    assert_eq!(v["thread_sides"], serde_json::json!(["off", null]));
    let back: BenchReport = serde_json::from_value(v).unwrap();
    assert_eq!(back.thread_sides, declared.thread_sides);
    assert_eq!(back.sides_described(), "good (as off), broken");
}
