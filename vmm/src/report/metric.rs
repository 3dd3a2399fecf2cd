//! The figures a report shows per run, and how each is read from fio's summary.

use serde::{Deserialize, Serialize};

use super::format::{si, sig3};
use crate::fio::FioSummary;

/// One figure reported per run, in the units the report shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// I/O operations per second, all directions.
    Iops,
    /// Bandwidth in MiB/s, all directions.
    BwMibS,
    /// Minimum submission latency, µs.
    SlatMinUs,
    /// Mean submission latency, µs.
    SlatAvgUs,
    /// Maximum submission latency, µs.
    SlatMaxUs,
    /// Median completion latency, µs.
    ClatP50Us,
    /// 99th percentile completion latency, µs.
    ClatP99Us,
    /// 99.9th percentile completion latency, µs.
    ClatP99_9Us,
    /// User CPU, percent.
    UsrCpu,
    /// System CPU, percent.
    SysCpu,
    /// Context switches.
    Ctx,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 11] = [
        Metric::Iops,
        Metric::BwMibS,
        Metric::SlatMinUs,
        Metric::SlatAvgUs,
        Metric::SlatMaxUs,
        Metric::ClatP50Us,
        Metric::ClatP99Us,
        Metric::ClatP99_9Us,
        Metric::UsrCpu,
        Metric::SysCpu,
        Metric::Ctx,
    ];

    /// Column heading.
    pub fn label(self) -> &'static str {
        match self {
            Metric::Iops => "IOPS",
            Metric::BwMibS => "BW MiB/s",
            Metric::SlatMinUs => "slat min us",
            Metric::SlatAvgUs => "slat avg us",
            Metric::SlatMaxUs => "slat max us",
            Metric::ClatP50Us => "clat p50 us",
            Metric::ClatP99Us => "clat p99 us",
            Metric::ClatP99_9Us => "clat p99.9 us",
            Metric::UsrCpu => "usr %",
            Metric::SysCpu => "sys %",
            Metric::Ctx => "ctx",
        }
    }

    /// Machine-readable name (CSV column, JSON key).
    pub fn key(self) -> &'static str {
        match self {
            Metric::Iops => "iops",
            Metric::BwMibS => "bw_mib_s",
            Metric::SlatMinUs => "slat_min_us",
            Metric::SlatAvgUs => "slat_avg_us",
            Metric::SlatMaxUs => "slat_max_us",
            Metric::ClatP50Us => "clat_p50_us",
            Metric::ClatP99Us => "clat_p99_us",
            Metric::ClatP99_9Us => "clat_p99_9_us",
            Metric::UsrCpu => "usr_cpu",
            Metric::SysCpu => "sys_cpu",
            Metric::Ctx => "ctx",
        }
    }

    /// The metric's value in one run, `None` where fio measured nothing (e.g. no slat samples
    /// with a synchronous engine, no percentiles).
    #[allow(clippy::cast_precision_loss)]
    pub fn value(self, s: &FioSummary) -> Option<f64> {
        let us = |ns: u64| ns as f64 / 1000.0;
        let has_slat = s.slat.samples > 0;
        match self {
            Metric::Iops => Some(s.iops),
            Metric::BwMibS => Some(s.bw_bytes as f64 / (1024.0 * 1024.0)),
            Metric::SlatMinUs => has_slat.then(|| us(s.slat.min_ns)),
            Metric::SlatAvgUs => has_slat.then(|| s.slat.mean_ns / 1000.0),
            Metric::SlatMaxUs => has_slat.then(|| us(s.slat.max_ns)),
            Metric::ClatP50Us => s.clat.p50_ns.map(us),
            Metric::ClatP99Us => s.clat.p99_ns.map(us),
            Metric::ClatP99_9Us => s.clat.p99_9_ns.map(us),
            Metric::UsrCpu => Some(s.usr_cpu),
            Metric::SysCpu => Some(s.sys_cpu),
            Metric::Ctx => Some(s.ctx as f64),
        }
    }

    /// Formats a value of this metric compactly for tables.
    pub fn format(self, v: f64) -> String {
        match self {
            Metric::Iops | Metric::Ctx => si(v),
            Metric::UsrCpu | Metric::SysCpu => format!("{v:.1}"),
            _ => sig3(v),
        }
    }
}
