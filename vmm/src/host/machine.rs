//! The machine a run ran on, as every run and bench record states it: CPU
//! model, frequency driver and governor, SMT, transparent huge pages, KSM,
//! kernel mitigations, and — once the guest has run — the page sizes that
//! actually backed guest RAM and each DIMM, plus the run's vCPU pinning and
//! host NUMA binding. Field names are plain so results from many hosts can
//! be pooled or refused by them (docs/bench.md, "What the run was").

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::smaps::MappingPages;

/// Where sysfs and procfs are (`/` on a real host).
fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The selected value of a sysfs choice file ("always [madvise] never" → "madvise").
pub fn selected(choice: &str) -> String {
    choice
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .unwrap_or(choice)
        .to_string()
}

/// Which host a result came from: the one description of the host that run
/// results, bench reports and machine descriptions carry (flattened: its
/// fields stand beside theirs in the JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostIdentity {
    /// CPU model name from /proc/cpuinfo ("AMD EPYC 7B13").
    #[serde(alias = "cpu")]
    pub cpu_model: String,
    /// Online host CPUs.
    #[serde(alias = "cpus")]
    pub host_cpus: u32,
    /// `uname -r`.
    #[serde(alias = "kernel")]
    pub host_kernel: String,
    /// The host's name (empty in results written before it was recorded).
    #[serde(default)]
    pub hostname: String,
}

impl HostIdentity {
    /// This host, read once per process.
    pub fn probe() -> Self {
        static HOST: std::sync::OnceLock<HostIdentity> = std::sync::OnceLock::new();
        HOST.get_or_init(|| Self::probe_at(Path::new("/"))).clone()
    }

    /// The host whose /proc and /sys are under `root`.
    pub fn probe_at(root: &Path) -> Self {
        let cpuinfo = read(root, "proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let online = read(root, "sys/devices/system/cpu/online").unwrap_or_default();
        let host_cpus = crate::memory::placement::parse_cpu_list(&online)
            .map(|l| u32::try_from(l.len()).unwrap_or(u32::MAX))
            .unwrap_or(0);
        Self {
            cpu_model,
            host_cpus,
            host_kernel: read(root, "proc/sys/kernel/osrelease").unwrap_or_default(),
            hostname: read(root, "proc/sys/kernel/hostname").unwrap_or_default(),
        }
    }
}

/// What the run was: the host and how the guest was placed on it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineDescription {
    /// Which host (its fields stand at this level in the JSON).
    #[serde(flatten)]
    pub host: HostIdentity,
    /// cpufreq driver of CPU 0 (`scaling_driver`), "none" without cpufreq (VMs, containers).
    pub cpu_freq_driver: String,
    /// cpufreq governor of CPU 0 (`scaling_governor`), "none" without cpufreq.
    pub cpu_governor: String,
    /// SMT control (`on`, `off`, `forceoff`, `notsupported`, `notimplemented`).
    pub smt: String,
    /// SMT active (two or more threads per core in use).
    pub smt_active: bool,
    /// Transparent huge pages for anonymous memory (`always`, `madvise`, `never`).
    pub thp_enabled: String,
    /// THP defrag policy.
    pub thp_defrag: String,
    /// THP for shmem/tmpfs internal mounts (`never`, `advise`, `always`, ...).
    pub thp_shmem_enabled: String,
    /// KSM (`/sys/kernel/mm/ksm/run`: 0 off, 1 merging, 2 unmerging).
    pub ksm_run: String,
    /// Base page size of the host in bytes.
    pub host_page_size: u64,
    /// 2 MiB hugetlb pages configured (`nr_hugepages` of hugepages-2048kB).
    pub hugepages_2m_total: u64,
    /// Host NUMA nodes online.
    pub host_numa_nodes: u32,
    /// Kernel mitigations, one entry per file of /sys/devices/system/cpu/vulnerabilities.
    pub mitigations: BTreeMap<String, String>,
    /// Host CPU of each vCPU (`--pin`), empty when the vCPUs float.
    pub vcpu_pinning: Vec<u32>,
    /// Host NUMA node guest RAM and DIMMs are bound to (`--host-node`), None when unbound.
    pub host_node: Option<u32>,
    /// The memory policy vCPU 0's thread ran with (`bind:0` with `--host-node 0`,
    /// `default` without), as numa_maps spells policies: the page cache of a
    /// file-backed DIMM is allocated under it. Empty when not measured.
    #[serde(default)]
    pub vcpu_memory_policy: String,
    /// Page size in bytes that backed most of the guest RAM the guest touched
    /// (0 when not measured or nothing was resident).
    pub ram_page_size: u64,
    /// Page size in bytes that backed most of each DIMM's touched bytes, in DIMM order.
    pub dimm_page_size: Vec<u64>,
    /// The measurements behind `ram_page_size` and `dimm_page_size`.
    pub page_measurements: Vec<MappingPages>,
    /// The pages KVM mapped for the guest at each size when the run ended (RAM and DIMMs
    /// together; KVM's binary statistics), None when KVM does not report them.
    #[serde(default)]
    pub kvm_pages: Option<super::kvm_stats::KvmPages>,
}

impl MachineDescription {
    /// Reads this host's /proc and /sys.
    pub fn probe() -> Self {
        Self::probe_at(Path::new("/"))
    }

    /// Reads /proc and /sys under `root`.
    pub fn probe_at(root: &Path) -> Self {
        let freq = |f: &str| {
            read(root, &format!("sys/devices/system/cpu/cpu0/cpufreq/{f}"))
                .unwrap_or_else(|| "none".into())
        };
        let thp = |f: &str| {
            read(root, &format!("sys/kernel/mm/transparent_hugepage/{f}"))
                .map(|s| selected(&s))
                .unwrap_or_else(|| "unsupported".into())
        };
        let mut mitigations = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(root.join("sys/devices/system/cpu/vulnerabilities")) {
            for e in dir.flatten() {
                if let Ok(v) = std::fs::read_to_string(e.path()) {
                    mitigations.insert(
                        e.file_name().to_string_lossy().into_owned(),
                        v.trim().to_string(),
                    );
                }
            }
        }
        let nodes = read(root, "sys/devices/system/node/online").unwrap_or_default();
        Self {
            host: HostIdentity::probe_at(root),
            cpu_freq_driver: freq("scaling_driver"),
            cpu_governor: freq("scaling_governor"),
            smt: read(root, "sys/devices/system/cpu/smt/control")
                .unwrap_or_else(|| "notimplemented".into()),
            smt_active: read(root, "sys/devices/system/cpu/smt/active").as_deref() == Some("1"),
            thp_enabled: thp("enabled"),
            thp_defrag: thp("defrag"),
            thp_shmem_enabled: thp("shmem_enabled"),
            ksm_run: read(root, "sys/kernel/mm/ksm/run").unwrap_or_else(|| "unsupported".into()),
            // SAFETY: sysconf has no preconditions.
            host_page_size: u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .unwrap_or(4096),
            hugepages_2m_total: read(
                root,
                "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            )
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
            host_numa_nodes: crate::memory::placement::parse_cpu_list(&nodes)
                .map(|l| u32::try_from(l.len()).unwrap_or(u32::MAX))
                .unwrap_or(1),
            mitigations,
            ..Self::default()
        }
    }

    /// Adds the run's placement and the measured page sizes (`ram` first
    /// for RAM regions, `nvdimmN` for DIMMs, as [`super::smaps`] names them).
    pub fn with_run(
        mut self,
        pinning: &[u32],
        host_node: Option<u32>,
        pages: Vec<MappingPages>,
    ) -> Self {
        self.vcpu_pinning = pinning.to_vec();
        self.host_node = host_node;
        let ram: Vec<&MappingPages> = pages.iter().filter(|p| p.what == "ram").collect();
        self.ram_page_size = ram
            .iter()
            .filter(|p| p.resident > 0)
            .max_by_key(|p| p.resident)
            .map_or(0, |p| p.page_size);
        self.dimm_page_size = pages
            .iter()
            .filter(|p| p.what.starts_with("nvdimm"))
            .map(|p| p.page_size)
            .collect();
        self.page_measurements = pages;
        self
    }

    /// Every field in which `other` differs from `self`, as
    /// "cpu_governor: performance vs powersave" (empty when none does).
    /// Measurement details (`page_measurements`) are left out: their
    /// summary fields (`ram_page_size`, `dimm_page_size`) are compared.
    pub fn differences(&self, other: &Self) -> Vec<String> {
        let (a, b) = (self.fields(), other.fields());
        let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
        keys.sort();
        keys.dedup();
        let none = "none".to_string();
        keys.into_iter()
            .filter_map(|k| {
                let (x, y) = (a.get(k).unwrap_or(&none), b.get(k).unwrap_or(&none));
                (x != y).then(|| format!("{k}: {x} vs {y}"))
            })
            .collect()
    }

    /// Every compared field by name, its value as text (mitigations one
    /// entry each, as `mitigations.NAME`).
    fn fields(&self) -> BTreeMap<String, String> {
        let list = |v: &[u32]| format!("{v:?}");
        let mut f: BTreeMap<String, String> = [
            ("cpu_model", self.host.cpu_model.clone()),
            ("host_cpus", self.host.host_cpus.to_string()),
            ("host_kernel", self.host.host_kernel.clone()),
            ("cpu_freq_driver", self.cpu_freq_driver.clone()),
            ("cpu_governor", self.cpu_governor.clone()),
            ("smt", self.smt.clone()),
            ("smt_active", self.smt_active.to_string()),
            ("thp_enabled", self.thp_enabled.clone()),
            ("thp_defrag", self.thp_defrag.clone()),
            ("thp_shmem_enabled", self.thp_shmem_enabled.clone()),
            ("ksm_run", self.ksm_run.clone()),
            ("host_page_size", self.host_page_size.to_string()),
            ("hugepages_2m_total", self.hugepages_2m_total.to_string()),
            ("host_numa_nodes", self.host_numa_nodes.to_string()),
            ("vcpu_pinning", list(&self.vcpu_pinning)),
            ("host_node", format!("{:?}", self.host_node)),
            ("ram_page_size", self.ram_page_size.to_string()),
            ("dimm_page_size", format!("{:?}", self.dimm_page_size)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in &self.mitigations {
            f.insert(format!("mitigations.{k}"), v.clone());
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_matches_this_hosts_proc_and_sys() {
        let m = MachineDescription::probe();
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        assert!(
            cpuinfo.contains(&m.host.cpu_model),
            "{} not in cpuinfo",
            m.host.cpu_model
        );
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .map(|s| selected(s.trim()))
            .unwrap_or_else(|_| "unsupported".into());
        assert_eq!(m.thp_enabled, thp);
        assert!(m.host.host_cpus >= 1);
        assert_eq!(
            m.host.host_kernel,
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap()
                .trim()
        );
        let vulns = std::fs::read_dir("/sys/devices/system/cpu/vulnerabilities")
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(m.mitigations.len(), vulns);
        assert_eq!(m.host_page_size, 4096);
    }

    #[test]
    fn the_host_is_one_description_under_every_spelling_results_have_used() {
        let me = HostIdentity::probe();
        assert_eq!(
            me.hostname,
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap()
                .trim()
        );
        // Flattened: a machine description's JSON has the fields at its top.
        let m = serde_json::to_value(MachineDescription::probe()).unwrap();
        assert_eq!(m["cpu_model"], me.cpu_model.as_str());
        assert_eq!(m["hostname"], me.hostname.as_str());
        // A run result's host as it was written before (cpu, cpus, kernel).
        let old: HostIdentity =
            serde_json::from_str(r#"{"cpu":"EPYC","cpus":2,"kernel":"6.1.0"}"#).unwrap();
        assert_eq!(
            (
                old.cpu_model.as_str(),
                old.host_cpus,
                old.host_kernel.as_str()
            ),
            ("EPYC", 2, "6.1.0")
        );
        assert_eq!(old.hostname, "");
    }

    #[test]
    fn differences_name_each_field_that_differs() {
        let a = MachineDescription::probe();
        assert!(a.differences(&a).is_empty());
        let mut b = a.clone();
        b.cpu_governor = "other-governor".into();
        b.dimm_page_size = vec![2 << 20];
        b.mitigations
            .insert("spectre_v9".into(), "Vulnerable".into());
        let d = a.differences(&b);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d.iter().any(|l| l.starts_with("cpu_governor: ")));
        assert!(d.iter().any(|l| l.starts_with("dimm_page_size: ")));
        assert!(d
            .iter()
            .any(|l| l.starts_with("mitigations.spectre_v9: none vs Vulnerable")));
        assert_eq!(selected("always [madvise] never"), "madvise");
        assert_eq!(selected("0"), "0");
    }
}
