//! What must match before the runs of two result directories may be pooled into one sample —
//! kept in ONE function, [`match_keys`], so that a new machine property (the page sizes backing
//! the DIMMs and the guest RAM, THP, the CPU governor, pinning) is added in one place.
//!
//! Two kinds of keys: the **machine** (engine, accelerator, CPU model, and from each run's
//! machine description the page sizes behind the host, guest RAM and DIMMs, THP, the CPU
//! governor, pinning and NUMA binding):
//! runs of different machines are refused unless `--pool-hosts`; and the **bench** itself
//! (vCPUs, guest RAM, NVDIMM size, fio jobs, sides; not `--runs`: more boots are more
//! repetitions): runs of different benches are never
//! pooled, since they measured different things. Optional fields are read from the raw JSON, so
//! results written before a key existed (or by a pmemvm that records more) still merge: a key
//! that one result lacks is "not recorded" there and compared as such.

use serde_json::Value;

use crate::study::report::BenchReport;

/// Which kind of property a key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// The machine the runs were measured on: pooled only with `--pool-hosts`.
    Machine,
    /// The bench's own parameters: never pooled across different values.
    Bench,
}

/// One property that must be equal for runs to be pooled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchKey {
    /// Its name, as the refusal names it.
    pub name: &'static str,
    /// Its value in this result (`not recorded` when absent).
    pub value: String,
    /// Machine or bench.
    pub kind: KeyKind,
}

const NOT_RECORDED: &str = "not recorded";

/// The values of `key` in the machine description of every run (`runs[].machine.KEY`, written
/// since the machine description exists), distinct and in order, joined with `; `; `not
/// recorded` when no run has it.
fn run_machine_field(raw: &Value, key: &str) -> String {
    let mut values: Vec<String> = raw
        .get("runs")
        .and_then(Value::as_array)
        .map(|runs| {
            runs.iter()
                .filter_map(|r| r.get("machine").and_then(|m| m.get(key)))
                .filter(|v| !v.is_null())
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    values.sort();
    values.dedup();
    if values.is_empty() {
        NOT_RECORDED.to_owned()
    } else {
        values.join("; ")
    }
}

/// Every property that must match, with its value in `report` (`raw` is the same
/// `report.json` as JSON, for the optional machine fields).
pub fn match_keys(report: &BenchReport, raw: &Value) -> Vec<MatchKey> {
    let machine = |name, value: String| MatchKey {
        name,
        value,
        kind: KeyKind::Machine,
    };
    let bench = |name, value: String| MatchKey {
        name,
        value,
        kind: KeyKind::Bench,
    };
    let h = &report.host;
    vec![
        machine("engine", report.engine.clone()),
        machine("accelerator", report.accelerator.name().to_owned()),
        machine("CPU model", h.identity.cpu_model.clone()),
        // From each run's machine description (host page size, the page sizes measured behind
        // guest RAM and each DIMM, THP, the governor, pinning); read defensively: results
        // written before it existed have none.
        machine("host page size", run_machine_field(raw, "host_page_size")),
        machine(
            "page size backing guest RAM",
            run_machine_field(raw, "ram_page_size"),
        ),
        machine(
            "page sizes backing the NVDIMMs",
            run_machine_field(raw, "dimm_page_size"),
        ),
        machine(
            "transparent huge pages",
            run_machine_field(raw, "thp_enabled"),
        ),
        machine("CPU governor", run_machine_field(raw, "cpu_governor")),
        machine("vCPU pinning", run_machine_field(raw, "vcpu_pinning")),
        machine("host NUMA binding", run_machine_field(raw, "host_node")),
        bench("sides", report.sides_described()),
        bench("guest vCPUs", h.guest_vcpus.to_string()),
        bench("guest memory (MiB)", h.guest_mem_mib.to_string()),
        bench(
            "NVDIMM size",
            h.nvdimm_bytes
                .map_or_else(|| "none".to_owned(), |b| b.to_string()),
        ),
        bench(
            "persistent memory device",
            h.pmem_device.describe().to_owned(),
        ),
        bench("fio jobs", h.jobs.to_string()),
    ]
}

/// The first key in which `a` and `b` differ and that `pool_hosts` does not allow, as
/// (name, value in a, value in b).
pub fn first_difference(
    a: &[MatchKey],
    b: &[MatchKey],
    pool_hosts: bool,
) -> Option<(&'static str, String, String)> {
    a.iter()
        .zip(b)
        .find(|(x, y)| x.value != y.value && !(pool_hosts && x.kind == KeyKind::Machine))
        .map(|(x, y)| (x.name, x.value.clone(), y.value.clone()))
}

/// Whether `a` and `b` differ in any machine key (the report then breaks its figures down
/// per host).
pub fn machines_differ(a: &[MatchKey], b: &[MatchKey]) -> bool {
    a.iter()
        .zip(b)
        .any(|(x, y)| x.kind == KeyKind::Machine && x.value != y.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(cpu: &str, vcpus: u32, page: Option<u64>) -> Vec<MatchKey> {
        let report: BenchReport = serde_json::from_value(serde_json::json!({
            "experiment": "pmem-verify", "description": "", "engine": "qemu",
            "accelerator": "tcg",
            "host": {"cpu_model": cpu, "host_cpus": 2, "host_kernel": "6.1", "guest_vcpus": vcpus,
                     "guest_mem_mib": 1024, "nvdimm_bytes": null, "jobs": 1},
            "sides": ["off", "on"], "runs": [],
            "upstream": {"sources": [], "figures": []}, "upstream_source": ""
        }))
        .unwrap();
        let mut raw = serde_json::to_value(&report).unwrap();
        if let Some(p) = page {
            raw["runs"] = serde_json::json!([{"machine": {"host_page_size": p}}]);
        }
        match_keys(&report, &raw)
    }

    #[test]
    fn machine_keys_pool_only_when_asked_bench_keys_never() {
        let a = keys("EPYC", 1, None);
        assert_eq!(first_difference(&a, &keys("EPYC", 1, None), false), None);
        let cpu = keys("Xeon", 1, None);
        assert_eq!(
            first_difference(&a, &cpu, false),
            Some(("CPU model", "EPYC".into(), "Xeon".into()))
        );
        assert_eq!(first_difference(&a, &cpu, true), None);
        assert!(machines_differ(&a, &cpu));
        let vcpus = keys("Xeon", 2, None);
        assert_eq!(
            first_difference(&a, &vcpus, true),
            Some(("guest vCPUs", "1".into(), "2".into()))
        );
    }

    #[test]
    fn optional_machine_fields_are_read_when_present() {
        let a = keys("EPYC", 1, Some(4096));
        let b = keys("EPYC", 1, Some(2 << 20));
        assert_eq!(
            first_difference(&a, &b, false),
            Some(("host page size", "4096".into(), "2097152".into()))
        );
        let old = keys("EPYC", 1, None);
        assert_eq!(old[3].value, NOT_RECORDED);
    }

    #[test]
    fn runs_on_cxl_pmem_are_never_pooled_with_runs_on_an_nvdimm() {
        // A result written before CXL has no device: an NVDIMM.
        let nvdimm = keys("EPYC", 1, None);
        let mut report: BenchReport = serde_json::from_value(serde_json::json!({
            "experiment": "pmem-verify", "description": "", "engine": "qemu",
            "accelerator": "tcg",
            "host": {"cpu_model": "EPYC", "host_cpus": 2, "host_kernel": "6.1", "guest_vcpus": 1,
                     "guest_mem_mib": 1024, "nvdimm_bytes": null, "jobs": 1},
            "sides": ["off", "on"], "runs": [],
            "upstream": {"sources": [], "figures": []}, "upstream_source": ""
        }))
        .unwrap();
        report.host.pmem_device = crate::study::bench::cxl::PmemDevice::Cxl;
        let raw = serde_json::to_value(&report).unwrap();
        assert_eq!(raw["host"]["pmem_device"], "cxl");
        let cxl = match_keys(&report, &raw);
        let (name, a, b) = first_difference(&nvdimm, &cxl, true).unwrap();
        assert_eq!(name, "persistent memory device");
        assert!(a.contains("NVDIMM") && b.contains("CXL"), "{a} / {b}");
    }
}
