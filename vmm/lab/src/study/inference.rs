//! Statistical inference for benchmark runs: what a handful of repetitions per side supports.
//!
//! - [`Described::of`]: n, mean, sample standard deviation (divisor n − 1) and the confidence
//!   interval of the mean, mean ± t(1 − α/2, n − 1) · s/√n, with the Student t quantile computed
//!   by [`student_t::quantile`] (no table).
//! - [`welch`]: Welch's unequal-variance t-test of two sides: t = (m₂ − m₁) / √(s₁²/n₁ + s₂²/n₂),
//!   Welch–Satterthwaite degrees of freedom
//!   ν = (s₁²/n₁ + s₂²/n₂)² / ((s₁²/n₁)²/(n₁ − 1) + (s₂²/n₂)²/(n₂ − 1)), two-sided p-value
//!   2 · P(T_ν > |t|).
//! - [`ratio_ci`]: the ratio of two means m₂/m₁ with a confidence interval by the **delta
//!   method on the log ratio**: Var(ln m₂ − ln m₁) ≈ s₁²/(n₁m₁²) + s₂²/(n₂m₂²) (first-order
//!   Taylor expansion of the logarithm), the interval exp(ln(m₂/m₁) ± t(1 − α/2, ν) · √Var) with
//!   ν from Welch–Satterthwaite applied to the two terms of that variance. It is approximate
//!   (good when each side's coefficient of variation s/(m√n) is small), always bounded and
//!   positive, asymmetric around the ratio as a ratio's uncertainty is, and needs positive means.
//!   Fieller's method was not used: its interval becomes unbounded or disjoint when the
//!   denominator's mean is not clearly away from zero, which a report cannot print as one range.
//!
//! - [`log_interval`]: for a positive metric (IOPS, bandwidth, latencies, CPU %), the interval
//!   of the geometric mean on the log scale: exp(mean(ln x) ± t(1 − α/2, n − 1) · s_ln/√n).
//!   Its bounds are positive, so an interval never claims a negative IOPS or latency, and it
//!   is asymmetric as the uncertainty of a skewed positive quantity is; it needs every value
//!   positive.
//!
//! All of them assume independent runs with roughly normal sampling distributions of the mean;
//! with 2–3 runs per side that is an assumption, not something the data can check. Where the
//! data cannot support a figure (fewer than two runs, no spread at all, a mean ≤ 0 for a ratio)
//! the functions return an [`InferenceError`] saying why, and the report prints that reason
//! instead of a number.

pub mod special;
pub mod student_t;

use serde::{Deserialize, Serialize};

/// Why a statistic could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InferenceError {
    /// Not enough runs on a side.
    #[error("n = {n}: at least {needed} runs are needed")]
    TooFewRuns {
        /// Runs available.
        n: usize,
        /// Runs needed.
        needed: usize,
    },
    /// Every run on both sides gave the same value.
    #[error("no spread: every run gave the same value, so no interval or test is defined")]
    NoSpread,
    /// A ratio's interval needs positive means.
    #[error("a mean is {mean}; the ratio's interval needs positive means")]
    NonPositiveMean {
        /// The offending mean.
        mean: f64,
    },
    /// A log-scale interval needs positive values.
    #[error("a value is {value}; an interval on the log scale needs positive values")]
    NonPositiveValue {
        /// The offending value.
        value: f64,
    },
    /// A value is NaN or infinite.
    #[error("value {value} is not a finite number")]
    NonFinite {
        /// The value.
        value: f64,
    },
    /// A parameter is outside its domain.
    #[error("{what} {value} is outside its domain")]
    InvalidParameter {
        /// Which parameter.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// An iteration did not converge.
    #[error("{what} did not converge")]
    NoConvergence {
        /// Which computation.
        what: &'static str,
    },
}

/// The confidence level of every interval in the reports.
pub const CONFIDENCE: f64 = 0.95;
/// p-values at or above this are reported as "not significant".
pub const ALPHA: f64 = 0.05;

/// A confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

/// One side's sample: size, mean, and (with n ≥ 2) spread and the mean's interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Described {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divisor n − 1); `None` with n < 2.
    pub sd: Option<f64>,
    /// Standard error of the mean, sd/√n; `None` with n < 2.
    pub sem: Option<f64>,
    /// Confidence interval of the mean at [`CONFIDENCE`]; `None` with n < 2.
    pub ci: Option<Interval>,
}

fn check_level(level: f64) -> Result<(), InferenceError> {
    if level > 0.0 && level < 1.0 {
        Ok(())
    } else {
        Err(InferenceError::InvalidParameter {
            what: "confidence level",
            value: level.to_string(),
        })
    }
}

impl Described {
    /// Describes `values` with intervals at `level` (e.g. 0.95). Needs at least one value, all
    /// finite.
    pub fn of(values: &[f64], level: f64) -> Result<Self, InferenceError> {
        check_level(level)?;
        if let Some(&bad) = values.iter().find(|v| !v.is_finite()) {
            return Err(InferenceError::NonFinite { value: bad });
        }
        if values.is_empty() {
            return Err(InferenceError::TooFewRuns { n: 0, needed: 1 });
        }
        #[allow(clippy::cast_precision_loss)]
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        if values.len() < 2 {
            return Ok(Self {
                n: values.len(),
                mean,
                sd: None,
                sem: None,
                ci: None,
            });
        }
        // Two-pass variance; the correction term removes the first pass's rounding error.
        let (sq, lin) = values.iter().fold((0.0, 0.0), |(sq, lin), v| {
            let d = v - mean;
            (sq + d * d, lin + d)
        });
        let var = (sq - lin * lin / n) / (n - 1.0);
        let sd = var.max(0.0).sqrt();
        let sem = sd / n.sqrt();
        let t = student_t::quantile(0.5 + level / 2.0, n - 1.0)?;
        Ok(Self {
            n: values.len(),
            mean,
            sd: Some(sd),
            sem: Some(sem),
            ci: Some(Interval {
                low: mean - t * sem,
                high: mean + t * sem,
            }),
        })
    }

    /// (n, mean, variance) for the two-sample statistics; needs n ≥ 2.
    fn moments(&self) -> Result<(f64, f64, f64), InferenceError> {
        match self.sd {
            #[allow(clippy::cast_precision_loss)]
            Some(sd) if self.n >= 2 => Ok((self.n as f64, self.mean, sd * sd)),
            _ => Err(InferenceError::TooFewRuns {
                n: self.n,
                needed: 2,
            }),
        }
    }
}

/// Welch–Satterthwaite degrees of freedom of a sum of two variance terms `a = s₁²/n₁`,
/// `b = s₂²/n₂`.
fn satterthwaite(a: f64, n1: f64, b: f64, n2: f64) -> f64 {
    (a + b).powi(2) / (a * a / (n1 - 1.0) + b * b / (n2 - 1.0))
}

/// Welch's t-test of `second` against `first`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Welch {
    /// t = (mean₂ − mean₁) / standard error of the difference.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

impl Welch {
    /// Whether p < [`ALPHA`].
    pub fn significant(&self) -> bool {
        self.p < ALPHA
    }
}

/// Welch's unequal-variance t-test: is `second`'s mean different from `first`'s?
pub fn welch(first: &Described, second: &Described) -> Result<Welch, InferenceError> {
    let (n1, m1, v1) = first.moments()?;
    let (n2, m2, v2) = second.moments()?;
    let (a, b) = (v1 / n1, v2 / n2);
    if a + b == 0.0 {
        return Err(InferenceError::NoSpread);
    }
    let t = (m2 - m1) / (a + b).sqrt();
    let df = satterthwaite(a, n1, b, n2);
    // Two-sided: 2 P(T > |t|) = I_{ν/(ν+t²)}(ν/2, ½).
    let p = (2.0 * student_t::sf(t.abs(), df)?).min(1.0);
    Ok(Welch { t, df, p })
}

/// The ratio of two means and its confidence interval (delta method on the log ratio).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RatioEstimate {
    /// mean(numerator) / mean(denominator).
    pub ratio: f64,
    /// The interval at the requested level.
    pub ci: Interval,
    /// Degrees of freedom of the t quantile (Welch–Satterthwaite on the log-scale variances).
    pub df: f64,
}

/// `numerator.mean / denominator.mean` with its interval at `level`; see the module docs.
pub fn ratio_ci(
    numerator: &Described,
    denominator: &Described,
    level: f64,
) -> Result<RatioEstimate, InferenceError> {
    check_level(level)?;
    let (n1, m1, v1) = denominator.moments()?;
    let (n2, m2, v2) = numerator.moments()?;
    for m in [m1, m2] {
        if m <= 0.0 {
            return Err(InferenceError::NonPositiveMean { mean: m });
        }
    }
    let (a, b) = (v1 / (n1 * m1 * m1), v2 / (n2 * m2 * m2));
    if a + b == 0.0 {
        return Err(InferenceError::NoSpread);
    }
    let df = satterthwaite(a, n1, b, n2);
    let t = student_t::quantile(0.5 + level / 2.0, df)?;
    let ln_ratio = m2.ln() - m1.ln();
    let half = t * (a + b).sqrt();
    Ok(RatioEstimate {
        ratio: m2 / m1,
        ci: Interval {
            low: (ln_ratio - half).exp(),
            high: (ln_ratio + half).exp(),
        },
        df,
    })
}

/// The geometric mean of a positive sample and its confidence interval on the log scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogEstimate {
    /// exp(mean(ln x)).
    pub geo_mean: f64,
    /// exp(mean(ln x) ± t · s_ln/√n) at the requested level.
    pub ci: Interval,
}

/// The geometric mean of `values` with its interval at `level`, computed on the log scale
/// (see the module docs). Needs at least two values, all positive and finite.
pub fn log_interval(values: &[f64], level: f64) -> Result<LogEstimate, InferenceError> {
    if let Some(&bad) = values.iter().find(|v| v.is_finite() && **v <= 0.0) {
        return Err(InferenceError::NonPositiveValue { value: bad });
    }
    let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
    let d = Described::of(&logs, level)?;
    let ci =
        d.ci.ok_or(InferenceError::TooFewRuns { n: d.n, needed: 2 })?;
    Ok(LogEstimate {
        geo_mean: d.mean.exp(),
        ci: Interval {
            low: ci.low.exp(),
            high: ci.high.exp(),
        },
    })
}

#[cfg(test)]
mod tests;
