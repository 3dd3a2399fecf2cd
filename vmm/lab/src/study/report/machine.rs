//! The "machine" lines of a bench report: what each side's boots ran on
//! (CPU, frequency governor, SMT, THP, KSM, page sizes behind RAM and the
//! DIMMs, pinning, node binding, mitigations), and every field in which the
//! sides differ — so a reader sees when an A/B compared two machines.

use std::fmt::Write as _;

use super::BenchReport;
use vmm::host::machine::MachineDescription;

fn pages(bytes: u64) -> String {
    if bytes == 0 {
        "not measured".into()
    } else {
        vmm::config::size_text(bytes)
    }
}

/// One line naming the fields a reader compares first.
pub fn summary(m: &MachineDescription) -> String {
    let dimms = if m.dimm_page_size.is_empty() {
        "none".into()
    } else {
        m.dimm_page_size
            .iter()
            .map(|&b| pages(b))
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "{} ({} CPUs, cpufreq {}/{}, SMT {}), THP {} (shmem {}), KSM {}, RAM pages {}, DIMM pages {dimms}, \
         pinning {}, host node {}",
        m.host.cpu_model,
        m.host.host_cpus,
        m.cpu_freq_driver,
        m.cpu_governor,
        m.smt,
        m.thp_enabled,
        m.thp_shmem_enabled,
        m.ksm_run,
        pages(m.ram_page_size),
        if m.vcpu_pinning.is_empty() {
            "none".to_string()
        } else {
            format!("{:?}", m.vcpu_pinning)
        },
        m.host_node.map_or_else(|| "none".to_string(), |n| n.to_string()),
    )
}

impl BenchReport {
    /// The first recorded machine of each side, in side order.
    fn side_machines(&self) -> Vec<(&str, &MachineDescription)> {
        self.sides
            .iter()
            .filter_map(|side| {
                self.runs
                    .iter()
                    .filter(|r| &r.side == side)
                    .find_map(|r| r.machine.as_ref())
                    .map(|m| (side.as_str(), m))
            })
            .collect()
    }

    /// "machine (side): ..." lines and "machine differs between ..." lines.
    pub(super) fn machine_section(&self) -> String {
        let machines = self.side_machines();
        let mut out = String::new();
        let Some(&(first_side, first)) = machines.first() else {
            return out;
        };
        let _ = writeln!(out, "\nmachine ({first_side}): {}", summary(first));
        for &(side, m) in &machines[1..] {
            let diff = first.differences(m);
            if diff.is_empty() {
                let _ = writeln!(out, "machine ({side}): the same");
            } else {
                let _ = writeln!(
                    out,
                    "machine ({side}): {}\nmachine differs between sides {first_side} and {side}: {}",
                    summary(m),
                    diff.join("; ")
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_page_sizes_and_placement() {
        let m = MachineDescription::probe().with_run(&[1, 0], Some(0), Vec::new());
        let s = summary(&m);
        assert!(s.contains("pinning [1, 0]"), "{s}");
        assert!(s.contains("host node 0"), "{s}");
        assert!(s.contains("RAM pages not measured"), "{s}");
        let mut m2 = m.clone();
        m2.ram_page_size = 2 << 20;
        assert!(summary(&m2).contains("RAM pages 2M"));
        assert_eq!(m.differences(&m2).len(), 1);
    }
}
