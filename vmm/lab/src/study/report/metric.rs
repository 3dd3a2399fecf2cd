//! The figures a report shows per run, and how each is read from fio's summary.
//!
//! Latencies are fio's `slat_ns` (submission: from fio queueing the I/O until the kernel
//! accepted it), `clat_ns` (completion: from submission until fio saw it complete) and `lat_ns`
//! (total: both), over all directions of the measured group, in µs. Percentiles are fio's own;
//! fio prints submission-latency percentiles only with `slat_percentiles=1`, so those columns
//! are empty for job files without it.
//!
//! [`Metric::IosPerCpuS`] is the group's completed I/Os divided by the CPU time its jobs used,
//! Σ over jobs of (usr + sys)/100 × job runtime ([`FioSummary::ios_per_cpu_second`]): the IOPS
//! one fully busy CPU delivers. It only counts the CPU time of fio's own threads: work the
//! kernel does on their behalf in other threads (io_uring's io-wq workers, softirqs) is not in
//! fio's usr/sys figures.

use serde::{Deserialize, Serialize};

use super::format::{si, sig3};
use crate::study::fio::FioSummary;

/// One figure reported per run, in the units the report shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// I/O operations per second, all directions.
    Iops,
    /// Bandwidth in MiB/s, all directions.
    BwMibS,
    /// Completed I/Os per CPU-second of the jobs (usr + sys).
    IosPerCpuS,
    /// User CPU, percent.
    UsrCpu,
    /// System CPU, percent.
    SysCpu,
    /// Context switches.
    Ctx,
    /// Minimum submission latency, µs.
    SlatMinUs,
    /// Mean submission latency, µs.
    SlatAvgUs,
    /// Maximum submission latency, µs.
    SlatMaxUs,
    /// Median submission latency, µs (needs fio's `slat_percentiles=1`).
    SlatP50Us,
    /// 99th percentile submission latency, µs.
    SlatP99Us,
    /// 99.9th percentile submission latency, µs.
    SlatP99_9Us,
    /// Minimum completion latency, µs.
    ClatMinUs,
    /// Mean completion latency, µs.
    ClatAvgUs,
    /// Median completion latency, µs.
    ClatP50Us,
    /// 99th percentile completion latency, µs.
    ClatP99Us,
    /// 99.9th percentile completion latency, µs.
    ClatP99_9Us,
    /// Minimum total latency (submission + completion), µs.
    LatMinUs,
    /// Mean total latency, µs.
    LatAvgUs,
}

/// Which table of the text report shows a metric per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricGroup {
    /// Throughput and CPU: the "Runs" table.
    Throughput,
    /// Latencies: the "Latency per run" table.
    Latency,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 19] = [
        Metric::Iops,
        Metric::BwMibS,
        Metric::IosPerCpuS,
        Metric::UsrCpu,
        Metric::SysCpu,
        Metric::Ctx,
        Metric::SlatMinUs,
        Metric::SlatAvgUs,
        Metric::SlatMaxUs,
        Metric::SlatP50Us,
        Metric::SlatP99Us,
        Metric::SlatP99_9Us,
        Metric::ClatMinUs,
        Metric::ClatAvgUs,
        Metric::ClatP50Us,
        Metric::ClatP99Us,
        Metric::ClatP99_9Us,
        Metric::LatMinUs,
        Metric::LatAvgUs,
    ];

    /// The per-run table the metric belongs to.
    pub fn group(self) -> MetricGroup {
        match self {
            Metric::Iops
            | Metric::BwMibS
            | Metric::IosPerCpuS
            | Metric::UsrCpu
            | Metric::SysCpu
            | Metric::Ctx => MetricGroup::Throughput,
            _ => MetricGroup::Latency,
        }
    }

    /// Column heading.
    pub fn label(self) -> &'static str {
        match self {
            Metric::Iops => "IOPS",
            Metric::BwMibS => "BW MiB/s",
            Metric::IosPerCpuS => "IOs/CPU-s",
            Metric::UsrCpu => "usr %",
            Metric::SysCpu => "sys %",
            Metric::Ctx => "ctx",
            Metric::SlatMinUs => "slat min us",
            Metric::SlatAvgUs => "slat avg us",
            Metric::SlatMaxUs => "slat max us",
            Metric::SlatP50Us => "slat p50 us",
            Metric::SlatP99Us => "slat p99 us",
            Metric::SlatP99_9Us => "slat p99.9 us",
            Metric::ClatMinUs => "clat min us",
            Metric::ClatAvgUs => "clat avg us",
            Metric::ClatP50Us => "clat p50 us",
            Metric::ClatP99Us => "clat p99 us",
            Metric::ClatP99_9Us => "clat p99.9 us",
            Metric::LatMinUs => "lat min us",
            Metric::LatAvgUs => "lat avg us",
        }
    }

    /// Short heading for the per-run latency table, whose title gives the unit.
    pub fn short_label(self) -> &'static str {
        self.label().trim_end_matches(" us")
    }

    /// Machine-readable name (CSV column, JSON key).
    pub fn key(self) -> &'static str {
        match self {
            Metric::Iops => "iops",
            Metric::BwMibS => "bw_mib_s",
            Metric::IosPerCpuS => "ios_per_cpu_s",
            Metric::UsrCpu => "usr_cpu",
            Metric::SysCpu => "sys_cpu",
            Metric::Ctx => "ctx",
            Metric::SlatMinUs => "slat_min_us",
            Metric::SlatAvgUs => "slat_avg_us",
            Metric::SlatMaxUs => "slat_max_us",
            Metric::SlatP50Us => "slat_p50_us",
            Metric::SlatP99Us => "slat_p99_us",
            Metric::SlatP99_9Us => "slat_p99_9_us",
            Metric::ClatMinUs => "clat_min_us",
            Metric::ClatAvgUs => "clat_avg_us",
            Metric::ClatP50Us => "clat_p50_us",
            Metric::ClatP99Us => "clat_p99_us",
            Metric::ClatP99_9Us => "clat_p99_9_us",
            Metric::LatMinUs => "lat_min_us",
            Metric::LatAvgUs => "lat_avg_us",
        }
    }

    /// The metric's value in one run, `None` where fio measured nothing (e.g. no slat samples
    /// with a synchronous engine, no percentiles).
    #[allow(clippy::cast_precision_loss)]
    pub fn value(self, s: &FioSummary) -> Option<f64> {
        let us = |ns: u64| ns as f64 / 1000.0;
        let has_slat = s.slat.samples > 0;
        let has_clat = s.clat.samples > 0;
        let has_lat = s.lat.samples > 0;
        match self {
            Metric::Iops => Some(s.iops),
            Metric::BwMibS => Some(s.bw_bytes as f64 / (1024.0 * 1024.0)),
            Metric::IosPerCpuS => s.ios_per_cpu_second(),
            Metric::UsrCpu => Some(s.usr_cpu),
            Metric::SysCpu => Some(s.sys_cpu),
            Metric::Ctx => Some(s.ctx as f64),
            Metric::SlatMinUs => has_slat.then(|| us(s.slat.min_ns)),
            Metric::SlatAvgUs => has_slat.then(|| s.slat.mean_ns / 1000.0),
            Metric::SlatMaxUs => has_slat.then(|| us(s.slat.max_ns)),
            Metric::SlatP50Us => s.slat.p50_ns.map(us),
            Metric::SlatP99Us => s.slat.p99_ns.map(us),
            Metric::SlatP99_9Us => s.slat.p99_9_ns.map(us),
            Metric::ClatMinUs => has_clat.then(|| us(s.clat.min_ns)),
            Metric::ClatAvgUs => has_clat.then(|| s.clat.mean_ns / 1000.0),
            Metric::ClatP50Us => s.clat.p50_ns.map(us),
            Metric::ClatP99Us => s.clat.p99_ns.map(us),
            Metric::ClatP99_9Us => s.clat.p99_9_ns.map(us),
            Metric::LatMinUs => has_lat.then(|| us(s.lat.min_ns)),
            Metric::LatAvgUs => has_lat.then(|| s.lat.mean_ns / 1000.0),
        }
    }

    /// Formats a value of this metric compactly for tables.
    pub fn format(self, v: f64) -> String {
        match self {
            Metric::Iops | Metric::Ctx | Metric::IosPerCpuS => si(v),
            Metric::UsrCpu | Metric::SysCpu => format!("{v:.1}"),
            _ => sig3(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::fio::parse_fio_json;

    fn summary(name: &str) -> FioSummary {
        let path = format!("{}/tests/fixtures/fio/{name}", env!("CARGO_MANIFEST_DIR"));
        let out = parse_fio_json(&std::fs::read(path).unwrap()).unwrap();
        out.group_summary(0).unwrap()
    }

    #[test]
    fn values_come_from_the_matching_fio_fields() {
        let s = summary("slat-percentiles.json");
        let raw: serde_json::Value = serde_json::from_slice(
            &std::fs::read(format!(
                "{}/tests/fixtures/fio/slat-percentiles.json",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap(),
        )
        .unwrap();
        let read = &raw["jobs"][0]["read"];
        let us = |v: &serde_json::Value| v.as_f64().unwrap() / 1000.0;
        let v = |m: Metric| m.value(&s).unwrap();
        assert_eq!(v(Metric::LatMinUs), us(&read["lat_ns"]["min"]));
        assert!((v(Metric::LatAvgUs) - us(&read["lat_ns"]["mean"])).abs() < 1e-9);
        assert_eq!(v(Metric::ClatMinUs), us(&read["clat_ns"]["min"]));
        assert!((v(Metric::ClatAvgUs) - us(&read["clat_ns"]["mean"])).abs() < 1e-9);
        assert_eq!(
            v(Metric::SlatP99Us),
            us(&read["slat_ns"]["percentile"]["99.000000"])
        );
        assert_eq!(
            v(Metric::SlatP99_9Us),
            us(&read["slat_ns"]["percentile"]["99.900000"])
        );
        assert_eq!(v(Metric::IosPerCpuS), s.ios_per_cpu_second().unwrap());
        // Without slat_percentiles=1 there are no slat percentiles.
        assert_eq!(Metric::SlatP50Us.value(&summary("normal-json.out")), None);
    }

    #[test]
    fn every_metric_has_distinct_names_and_a_group() {
        let keys: std::collections::BTreeSet<&str> = Metric::ALL.iter().map(|m| m.key()).collect();
        assert_eq!(keys.len(), Metric::ALL.len());
        assert_eq!(
            Metric::ALL
                .iter()
                .filter(|m| m.group() == MetricGroup::Throughput)
                .count(),
            6
        );
        assert_eq!(Metric::ClatP99_9Us.short_label(), "clat p99.9");
        // JSON names the metric as the CSV column does.
        for m in Metric::ALL {
            assert_eq!(serde_json::to_value(m).unwrap(), m.key(), "{m:?}");
        }
    }
}
