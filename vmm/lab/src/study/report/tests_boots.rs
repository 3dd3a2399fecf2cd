//! The boot is the unit of the statistics: the runs of one boot are not independent samples
//! of the side, so the side's samples are its boots' means.

use super::analysis::ONE_BOOT;
use super::tests::{metric, synthetic, synthetic_report};
use super::*;
use crate::study::inference::{welch, Described, CONFIDENCE};

/// A report with the given (side, boot, IOPS, sys %) runs, numbered per side in order.
fn report(runs: &[(&str, u32, f64, f64)]) -> BenchReport {
    let mut r = synthetic_report();
    let mut next = std::collections::HashMap::new();
    r.runs = runs
        .iter()
        .map(|&(side, boot, iops, sys)| {
            let run = next.entry(side).or_insert(0);
            *run += 1;
            let mut record = synthetic(side, *run, iops, sys);
            record.boot = boot;
            record
        })
        .collect();
    r
}

#[test]
fn one_boot_per_side_prints_no_interval_and_no_test() {
    // The thread's shape: three randreads in one boot per side.
    let r = report(&[
        ("off", 1, 100.0, 30.0),
        ("off", 1, 104.0, 31.0),
        ("off", 1, 98.0, 29.5),
        ("on", 1, 101.0, 88.0),
        ("on", 1, 99.0, 89.0),
        ("on", 1, 105.0, 87.5),
    ]);
    let a = r.analyse();
    let iops = metric(&a, Metric::Iops);
    let off = iops.sides[0].as_ref().unwrap();
    assert_eq!((off.n, off.boots, off.stddev, off.ci95), (3, 1, None, None));
    // The spread of the boot's three runs is shown, as such: sd of 100, 104, 98 = 3.0551.
    let within = off.within_boot_sd.unwrap();
    assert!((within - 3.055_050_463).abs() < 1e-8, "{within}");
    assert!(iops.ratio.is_some(), "the point ratio is still shown");
    assert_eq!(
        (iops.welch, iops.significant, iops.ratio_ci95),
        (None, None, None)
    );
    assert_eq!(iops.not_tested.as_deref(), Some(ONE_BOOT));
    // sys % differs 3-fold with tiny within-boot spread: still no test across one boot.
    assert_eq!(metric(&a, Metric::SysCpu).significant, None);

    let text = r.render_text();
    assert!(
        text.contains("n = 1 boot per side: no confidence interval or test across boots"),
        "{text}"
    );
    assert!(!text.contains("significant"), "{text}");
    assert!(!text.contains("Welch"), "{text}");
    assert!(text.contains("within-boot sd"), "{text}");
    let comparison = text
        .lines()
        .skip_while(|l| !l.starts_with("Comparison"))
        .nth(1)
        .unwrap();
    assert!(!comparison.contains(" p "), "{comparison}");
    let json: serde_json::Value = serde_json::from_str(&r.to_json().unwrap()).unwrap();
    let m = &json["analysis"]["metrics"][0];
    assert!(m["welch"].is_null() && m["significant"].is_null(), "{m:#}");
    let csv = r.summary_csv();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let on: Vec<&str> = csv
        .lines()
        .find(|l| l.contains(",iops,on,"))
        .unwrap()
        .split(',')
        .collect();
    assert_eq!((on[col("p_value")], on[col("significant")]), ("", ""));
    assert_eq!(on[col("boots")], "1");
}

#[test]
fn the_samples_of_three_boots_of_three_runs_are_the_three_boot_means() {
    // Off: boots (100, 102, 104), (110, 111, 112), (95, 96, 97): boot means 102, 111, 96;
    // on: (150, 151, 152), (160, 161, 162), (140, 141, 142): boot means 151, 161, 141.
    // By hand: off mean 103, s² = (1 + 64 + 49)/2 = 57; on mean 151, s² = (0 + 100 + 100)/2
    // = 100. Welch on the boot means: a = 57/3 = 19, b = 100/3 = 33.33;
    // t = 48/√52.33 = 6.6352; ν = 52.33²/(19²/2 + 33.33²/2) = 3.7209.
    // (Over the nine runs as if independent, t would be 13.1 with ν ≈ 15: far too sure.)
    // Within-boot sd of off: the boots' variances 4, 1, 1, each with 2 degrees of freedom,
    // pooled: √((2·4 + 2·1 + 2·1)/6) = √2.
    let boots = |side, base: [f64; 3]| -> Vec<(&str, u32, f64, f64)> {
        let mut v = Vec::new();
        for (b, first) in (1..).zip(base) {
            let step = if side == "off" && b == 1 { 2.0 } else { 1.0 };
            for k in 0..3u32 {
                v.push((side, b, first + step * f64::from(k), 10.0));
            }
        }
        v
    };
    let mut runs = boots("off", [100.0, 110.0, 95.0]);
    runs.extend(boots("on", [150.0, 160.0, 140.0]));
    let r = report(&runs);
    let a = r.analyse();
    let iops = metric(&a, Metric::Iops);
    let off = iops.sides[0].as_ref().unwrap();
    let on = iops.sides[1].as_ref().unwrap();
    assert_eq!((off.n, off.boots, on.n, on.boots), (9, 3, 9, 3));
    assert!((off.mean - 103.0).abs() < 1e-12 && (on.mean - 151.0).abs() < 1e-12);
    assert!((off.stddev.unwrap() - 57f64.sqrt()).abs() < 1e-9);
    assert!((off.within_boot_sd.unwrap() - 2f64.sqrt()).abs() < 1e-9);
    let w = iops.welch.unwrap();
    assert!((w.t - 6.635_169_757).abs() < 1e-8, "{w:?}");
    assert!((w.df - 3.720_884_595).abs() < 1e-8, "{w:?}");
    let by_hand = welch(
        &Described::of(&[102.0, 111.0, 96.0], CONFIDENCE).unwrap(),
        &Described::of(&[151.0, 161.0, 141.0], CONFIDENCE).unwrap(),
    )
    .unwrap();
    assert_eq!(w, by_hand);
    let text = r.render_text();
    assert!(
        text.contains("Welch's t-test on the boots' means"),
        "{text}"
    );
    assert!(!text.contains(ONE_BOOT), "{text}");
}

#[test]
fn a_positive_metric_never_gets_an_interval_below_zero() {
    // sys % of three boots, one run each: 0.1, 0.2, 5.0. The interval of the arithmetic mean
    // would be [-5.19, 8.72]; on the log scale it is [0.0025977, 82.936] around the
    // geometric mean 0.46416 (inference::tests has the hand computation).
    let r = report(&[
        ("off", 1, 100.0, 0.1),
        ("off", 2, 100.0, 0.2),
        ("off", 3, 100.0, 5.0),
        ("on", 1, 100.0, 1.0),
        ("on", 2, 101.0, 2.0),
    ]);
    let a = r.analyse();
    let sys = metric(&a, Metric::SysCpu).sides[0].clone().unwrap();
    let ci = sys.ci95.unwrap();
    assert!(ci.low > 0.0, "{ci:?}");
    assert!((ci.low - 0.002_597_707).abs() < 1e-8, "{ci:?}");
    assert!((ci.high - 82.936_027).abs() < 1e-5, "{ci:?}");
    assert!((sys.geo_mean.unwrap() - 0.464_158_883).abs() < 1e-8);
    // Every interval of the report is positive.
    for m in &a.metrics {
        for s in m.sides.iter().flatten() {
            if let Some(ci) = s.ci95 {
                assert!(ci.low > 0.0, "{:?} {}: {ci:?}", m.metric, s.side);
            }
        }
    }
}
