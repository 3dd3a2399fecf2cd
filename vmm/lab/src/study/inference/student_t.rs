//! Student's t distribution with ν > 0 degrees of freedom (ν need not be an integer: Welch's
//! test produces fractional ones).
//!
//! - Upper tail: P(T > t) = ½ · I_{ν/(ν+t²)}(ν/2, ½) for t ≥ 0 ([`sf`]), with
//!   1 − ν/(ν+t²) passed to the incomplete beta function as t²/(ν+t²), so small tail
//!   probabilities keep their relative precision; [`cdf`] by symmetry.
//! - Quantile ([`quantile`]): the root of P(T > t) = q for the upper tail q = min(p, 1 − p),
//!   found by Newton's method on ln P(T > t) inside a bracket that bisection keeps valid.

use super::special::{beta_inc, ln_beta};
use super::InferenceError;

fn check_df(df: f64) -> Result<(), InferenceError> {
    if df > 0.0 && df.is_finite() {
        Ok(())
    } else {
        Err(InferenceError::InvalidParameter {
            what: "degrees of freedom",
            value: df.to_string(),
        })
    }
}

/// Upper tail for t ≥ 0.
fn upper_tail(t: f64, df: f64) -> Result<f64, InferenceError> {
    let t2 = t * t;
    let (x, y) = if t2 > df {
        let r = df / t2;
        (r / (1.0 + r), 1.0 / (1.0 + r))
    } else {
        (df / (df + t2), t2 / (df + t2))
    };
    Ok(0.5 * beta_inc(df / 2.0, 0.5, x, y)?.0)
}

/// P(T > t), the survival function.
pub fn sf(t: f64, df: f64) -> Result<f64, InferenceError> {
    check_df(df)?;
    if t.is_nan() {
        return Err(InferenceError::NonFinite { value: t });
    }
    if t >= 0.0 {
        upper_tail(t, df)
    } else {
        Ok(1.0 - upper_tail(-t, df)?)
    }
}

/// P(T ≤ t), the cumulative distribution function.
pub fn cdf(t: f64, df: f64) -> Result<f64, InferenceError> {
    check_df(df)?;
    if t.is_nan() {
        return Err(InferenceError::NonFinite { value: t });
    }
    if t <= 0.0 {
        upper_tail(-t, df)
    } else {
        Ok(1.0 - upper_tail(t, df)?)
    }
}

/// The density at t.
pub fn pdf(t: f64, df: f64) -> Result<f64, InferenceError> {
    check_df(df)?;
    let ln = -(df + 1.0) / 2.0 * (t * t / df).ln_1p() - ln_beta(df / 2.0, 0.5) - 0.5 * df.ln();
    Ok(ln.exp())
}

/// The t with P(T ≤ t) = p, for 0 < p < 1.
pub fn quantile(p: f64, df: f64) -> Result<f64, InferenceError> {
    check_df(df)?;
    if !(p > 0.0 && p < 1.0) {
        return Err(InferenceError::InvalidParameter {
            what: "probability",
            value: p.to_string(),
        });
    }
    if p == 0.5 {
        return Ok(0.0);
    }
    let q = p.min(1.0 - p);
    let t = upper_quantile(q, df)?;
    Ok(if p < 0.5 { -t } else { t })
}

/// The t ≥ 0 with P(T > t) = q, 0 < q < ½.
fn upper_quantile(q: f64, df: f64) -> Result<f64, InferenceError> {
    // Bracket: P(T > lo) > q ≥ P(T > hi).
    let mut lo = 0.0_f64;
    let mut hi = 1.0_f64;
    let mut doublings = 0;
    while upper_tail(hi, df)? > q {
        lo = hi;
        hi *= 2.0;
        doublings += 1;
        if doublings > 2000 || !hi.is_finite() {
            return Err(InferenceError::NoConvergence {
                what: "the t quantile's bracket",
            });
        }
    }
    let ln_q = q.ln();
    let mut t = 0.5 * (lo + hi);
    for _ in 0..500 {
        let s = upper_tail(t, df)?;
        if s > q {
            lo = t;
        } else {
            hi = t;
        }
        // Newton on g(t) = ln P(T > t) − ln q, g'(t) = −pdf(t) / P(T > t).
        let density = pdf(t, df)?;
        let mut next = if density > 0.0 && s > 0.0 {
            t + (s.ln() - ln_q) * s / density
        } else {
            f64::NAN
        };
        if !(next > lo && next < hi) {
            next = 0.5 * (lo + hi);
        }
        if (next - t).abs() <= 4.0 * f64::EPSILON * t.abs() || hi - lo <= f64::EPSILON * hi {
            return Ok(next);
        }
        t = next;
    }
    Err(InferenceError::NoConvergence {
        what: "the t quantile",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(a: f64, b: f64) -> f64 {
        (a - b).abs() / b.abs()
    }

    #[test]
    fn closed_forms() {
        // ν = 1 is the Cauchy distribution: F(t) = ½ + atan(t)/π, Q(p) = tan(π(p − ½)).
        for t in [-30.0, -1.0, -0.1, 0.3, 2.0, 1e6] {
            let expected = 0.5 + f64::atan(t) / std::f64::consts::PI;
            assert!(rel(cdf(t, 1.0).unwrap(), expected) < 1e-13, "t={t}");
        }
        for p in [0.001, 0.2, 0.975, 0.999_999] {
            let expected = (std::f64::consts::PI * (p - 0.5)).tan();
            assert!(rel(quantile(p, 1.0).unwrap(), expected) < 1e-10, "p={p}");
        }
        // ν = 2: F(t) = ½ + t / (2 √(2 + t²)); Q(p) = (2p − 1) √(2 / (4p(1 − p))).
        for p in [0.01_f64, 0.3, 0.95, 0.975] {
            let a = 4.0 * p * (1.0 - p);
            let expected = (2.0 * p - 1.0) * (2.0 / a).sqrt();
            assert!(rel(quantile(p, 2.0).unwrap(), expected) < 1e-12, "p={p}");
            let t = expected;
            assert!(rel(cdf(t, 2.0).unwrap(), p) < 1e-13, "t={t}");
        }
    }

    #[test]
    fn symmetry_and_tails() {
        let df = 3.7;
        for t in [0.0, 0.5, 4.0, 80.0] {
            let (up, low) = (sf(t, df).unwrap(), cdf(-t, df).unwrap());
            assert!((up - low).abs() <= 1e-16 * up.max(1e-300), "t={t}");
            assert!((cdf(t, df).unwrap() + sf(t, df).unwrap() - 1.0).abs() < 1e-15);
        }
        // The far tail keeps relative precision instead of rounding to 0.
        let tiny = sf(1e8, 4.0).unwrap();
        assert!(tiny > 0.0 && tiny < 1e-30, "{tiny}");
        assert!(rel(quantile(tiny, 4.0).unwrap(), -1e8) < 1e-9);
        assert_eq!(quantile(0.5, 7.0).unwrap(), 0.0);
    }

    #[test]
    fn pdf_integrates_to_the_cdf() {
        // Simpson's rule over [0, 2] for ν = 5 against F(2) − F(0).
        let (df, n) = (5.0, 2000);
        let h = 2.0 / f64::from(n);
        let mut sum = pdf(0.0, df).unwrap() + pdf(2.0, df).unwrap();
        for i in 1..n {
            let w = if i % 2 == 1 { 4.0 } else { 2.0 };
            sum += w * pdf(f64::from(i) * h, df).unwrap();
        }
        let integral = sum * h / 3.0;
        assert!(rel(integral, cdf(2.0, df).unwrap() - 0.5) < 1e-10);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(quantile(0.0, 3.0).is_err());
        assert!(quantile(1.0, 3.0).is_err());
        assert!(quantile(f64::NAN, 3.0).is_err());
        assert!(quantile(0.9, 0.0).is_err());
        assert!(cdf(1.0, f64::INFINITY).is_err());
        assert!(sf(f64::NAN, 3.0).is_err());
    }
}
