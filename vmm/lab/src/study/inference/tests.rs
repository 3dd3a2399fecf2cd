//! pmemvm's statistics against an independent implementation: SciPy's, through the values
//! `vmm/lab/tests/fixtures/stats/make-expected.py` wrote to `expected.json`.

use super::*;

use serde_json::Value;

const EXPECTED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/stats/expected.json"
);

/// Relative tolerance of every comparison with SciPy.
const TOLERANCE: f64 = 1e-9;

fn expected() -> Value {
    let text = std::fs::read_to_string(EXPECTED).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

fn values(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(num).collect()
}

#[track_caller]
fn assert_close(actual: f64, expected: f64, what: &str) {
    let scale = expected.abs().max(actual.abs());
    assert!(
        (actual - expected).abs() <= TOLERANCE * scale,
        "{what}: pmemvm {actual:e}, SciPy {expected:e} (relative difference {:e})",
        (actual - expected).abs() / scale
    );
}

#[test]
fn t_quantiles_match_scipy() {
    let doc = expected();
    let cases = doc["t_quantile"].as_array().unwrap();
    assert!(cases.len() > 100);
    for c in cases {
        let (p, df) = (num(&c["p"]), num(&c["df"]));
        let q = student_t::quantile(p, df).unwrap();
        assert_close(q, num(&c["q"]), &format!("t quantile p={p} df={df}"));
    }
}

#[test]
fn t_cdf_and_sf_match_scipy() {
    let doc = expected();
    let cases = doc["t_cdf"].as_array().unwrap();
    assert!(cases.len() > 100);
    for c in cases {
        let (t, df) = (num(&c["t"]), num(&c["df"]));
        let what = format!("t={t} df={df}");
        assert_close(
            student_t::cdf(t, df).unwrap(),
            num(&c["cdf"]),
            &format!("cdf {what}"),
        );
        assert_close(
            student_t::sf(t, df).unwrap(),
            num(&c["sf"]),
            &format!("sf {what}"),
        );
    }
}

#[test]
fn descriptions_match_python() {
    let doc = expected();
    let level = num(&doc["level"]);
    assert_eq!(level, CONFIDENCE);
    let samples = doc["samples"].as_object().unwrap();
    assert!(samples.len() >= 20);
    for (name, s) in samples {
        let d = Described::of(&values(&s["values"]), level).unwrap();
        assert_eq!(d.n as u64, s["n"].as_u64().unwrap(), "{name}");
        assert_close(d.mean, num(&s["mean"]), &format!("{name} mean"));
        if s["sd"].is_null() {
            assert_eq!((d.sd, d.ci), (None, None), "{name}: n < 2 has no spread");
            continue;
        }
        assert_close(d.sd.unwrap(), num(&s["sd"]), &format!("{name} sd"));
        let ci = d.ci.unwrap();
        assert_close(ci.low, num(&s["ci_low"]), &format!("{name} CI low"));
        assert_close(ci.high, num(&s["ci_high"]), &format!("{name} CI high"));
    }
}

#[test]
fn comparisons_match_scipy() {
    let doc = expected();
    let samples = &doc["samples"];
    let describe = |name: &Value| {
        let name = name.as_str().unwrap();
        Described::of(&values(&samples[name]["values"]), CONFIDENCE).unwrap()
    };
    let comparisons = doc["comparisons"].as_array().unwrap();
    assert!(comparisons.len() >= 10);
    for c in comparisons {
        let name = c["name"].as_str().unwrap();
        let (first, second) = (describe(&c["first"]), describe(&c["second"]));
        let w = welch(&first, &second).unwrap();
        assert_close(w.t, num(&c["welch_t"]), &format!("{name} Welch t"));
        assert_close(w.df, num(&c["welch_df"]), &format!("{name} Welch df"));
        assert_close(w.p, num(&c["welch_p"]), &format!("{name} Welch p"));
        let r = ratio_ci(&second, &first, CONFIDENCE).unwrap();
        assert_close(r.ratio, num(&c["ratio"]), &format!("{name} ratio"));
        assert_close(r.df, num(&c["ratio_df"]), &format!("{name} ratio df"));
        assert_close(
            r.ci.low,
            num(&c["ratio_ci_low"]),
            &format!("{name} ratio low"),
        );
        assert_close(
            r.ci.high,
            num(&c["ratio_ci_high"]),
            &format!("{name} ratio high"),
        );
    }
}

#[test]
fn upstream_v1_iops_difference_is_significant_and_close_is_not() {
    // Beyond matching SciPy: the verdicts a reader sees for two of the data sets.
    let off = Described::of(&[3968e3, 4084e3, 3995e3], CONFIDENCE).unwrap();
    let on = Described::of(&[5909e3, 5997e3, 6006e3], CONFIDENCE).unwrap();
    assert!(welch(&off, &on).unwrap().significant());
    let a = Described::of(&[100.0, 104.0, 98.0], CONFIDENCE).unwrap();
    let b = Described::of(&[101.0, 99.0, 105.0], CONFIDENCE).unwrap();
    let w = welch(&a, &b).unwrap();
    assert!(!w.significant(), "p = {}", w.p);
    let r = ratio_ci(&b, &a, CONFIDENCE).unwrap();
    assert!(r.ci.low < 1.0 && r.ci.high > 1.0, "{r:?}");
}

#[test]
fn what_the_data_cannot_support_is_an_error() {
    let one = Described::of(&[7.0], CONFIDENCE).unwrap();
    let three = Described::of(&[1.0, 2.0, 3.0], CONFIDENCE).unwrap();
    let flat = Described::of(&[5.0, 5.0], CONFIDENCE).unwrap();
    let negative = Described::of(&[-1.0, -2.0], CONFIDENCE).unwrap();
    assert_eq!(
        welch(&one, &three),
        Err(InferenceError::TooFewRuns { n: 1, needed: 2 })
    );
    assert!(matches!(
        ratio_ci(&three, &one, CONFIDENCE),
        Err(InferenceError::TooFewRuns { n: 1, .. })
    ));
    assert_eq!(welch(&flat, &flat), Err(InferenceError::NoSpread));
    assert_eq!(
        ratio_ci(&flat, &flat, CONFIDENCE),
        Err(InferenceError::NoSpread)
    );
    assert!(matches!(
        ratio_ci(&three, &negative, CONFIDENCE),
        Err(InferenceError::NonPositiveMean { .. })
    ));
    assert!(Described::of(&[], CONFIDENCE).is_err());
    assert!(Described::of(&[1.0, f64::NAN], CONFIDENCE).is_err());
    assert!(Described::of(&[1.0, 2.0], 1.0).is_err());
}

#[test]
fn log_scale_intervals_of_positive_values_stay_positive() {
    // Values 0.1, 0.2, 5.0 (by hand): mean 1.7667, s = 2.8006, t(0.975, 2) = 4.3027, so the
    // interval of the arithmetic mean is 1.7667 ± 4.3027 · 2.8006/√3 = [-5.19, 8.72]: below
    // zero. On the log scale: ln values -2.3026, -1.6094, 1.6094; mean -0.76753, s_ln =
    // 2.08748; geometric mean exp(-0.76753) = 0.46416 (= ∛0.1); interval
    // exp(-0.76753 ± 4.3027 · 2.08748/√3) = [0.0025977, 82.936].
    let v = [0.1, 0.2, 5.0];
    let naive = Described::of(&v, CONFIDENCE).unwrap().ci.unwrap();
    assert!((naive.low - -5.190_397).abs() < 1e-5, "{naive:?}");
    let e = log_interval(&v, CONFIDENCE).unwrap();
    assert!((e.geo_mean - 0.464_158_883).abs() < 1e-8, "{e:?}");
    assert!((e.ci.low - 0.002_597_707).abs() < 1e-8, "{e:?}");
    assert!((e.ci.high - 82.936_027).abs() < 1e-5, "{e:?}");
    assert!(e.ci.low > 0.0);
    assert_eq!(
        log_interval(&[1.0, 0.0], CONFIDENCE),
        Err(InferenceError::NonPositiveValue { value: 0.0 })
    );
    assert!(matches!(
        log_interval(&[3.0], CONFIDENCE),
        Err(InferenceError::TooFewRuns { n: 1, .. })
    ));
}
