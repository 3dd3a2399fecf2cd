//! `pmemvm bench --cxl-pmem [SIZE]`: the experiment's persistent memory on a CXL Type-3
//! device (`run --cxl-pmem`'s, a temporary file per boot) instead of an NVDIMM. Before the
//! experiment's own setup the guest makes the device's region and a raw namespace on it,
//! so `/dev/pmem0` is the same pmem driver's disk a label-less NVDIMM gives, and every
//! experiment's fio jobs and setup run unchanged.

use vmm::config::{CxlPmemSpec, NvdimmSpec};
use vmm::layout::CXL_CAPACITY_UNIT;

/// The device that holds an experiment's persistent memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PmemDevice {
    /// An ACPI NFIT NVDIMM (`--nvdimm`).
    #[default]
    Nvdimm,
    /// A CXL Type-3 persistent memory device (`--cxl-pmem`).
    Cxl,
}

impl PmemDevice {
    /// As the plan and the report name it.
    pub fn describe(self) -> &'static str {
        match self {
            PmemDevice::Nvdimm => "an NVDIMM",
            PmemDevice::Cxl => "a CXL Type-3 device (its region and a raw namespace)",
        }
    }

    /// As the report's host line names it, before the size.
    pub fn label(self) -> &'static str {
        match self {
            PmemDevice::Nvdimm => "NVDIMM",
            PmemDevice::Cxl => "CXL pmem",
        }
    }
}

/// The plan's line for a boot on `device` whose experiment wants `bytes` of persistent
/// memory: `None` on an NVDIMM (the plan's own text says it).
pub fn plan_line(device: PmemDevice, bytes: Option<u64>) -> Option<String> {
    let (_, cxl) = devices(device, bytes);
    cxl.first().map(|c| {
        format!(
            "The persistent memory is a CXL Type-3 device instead (--cxl-pmem {}): before the \
             setup above, the guest makes its region and a raw namespace, /dev/pmem0.",
            vmm::config::size_text(c.size)
        )
    })
}

/// The guest's first step on a CXL device: the region on its one window
/// (`decoder0.0`), then a raw namespace, which the pmem driver serves as `/dev/pmem0`.
pub const REGION_SETUP: &str = r#"#!/bin/sh
# pmemvm bench --cxl-pmem: the experiment's persistent memory is a CXL Type-3 device. Its
# region and a raw namespace on it make /dev/pmem0, as a label-less NVDIMM does.
set -eu
cxl create-region -m -t pmem -d decoder0.0 mem0 >/dev/null
region=$(ndctl list -R | grep -o '"dev":"region[0-9]*"' | head -n 1 | cut -d'"' -f4)
[ -n "$region" ] || { echo "setup: cxl create-region made no nvdimm region" >&2; exit 1; }
ndctl create-namespace -r "$region" -m raw >/dev/null
[ -b /dev/pmem0 ] || { echo "setup: no /dev/pmem0 on the CXL region $region" >&2; exit 1; }
"#;

/// The setup script of a boot on `device`: the experiment's `own`, after
/// [`REGION_SETUP`] on a CXL device.
pub fn setup(device: PmemDevice, own: Option<String>) -> Option<String> {
    match device {
        PmemDevice::Nvdimm => own,
        PmemDevice::Cxl => Some(format!(
            "{REGION_SETUP}{}",
            own.map(|s| format!("\n# The experiment's own setup.\n{s}"))
                .unwrap_or_default()
        )),
    }
}

/// The `--nvdimm` and `--cxl-pmem` devices of a boot whose experiment wants `bytes` of
/// persistent memory (none: no device). A CXL device's capacity is counted in 256 MiB
/// units: `bytes` is rounded up to one (the experiment uses what it asked for).
pub fn devices(device: PmemDevice, bytes: Option<u64>) -> (Vec<NvdimmSpec>, Vec<CxlPmemSpec>) {
    match (device, bytes) {
        (_, None) => (Vec::new(), Vec::new()),
        (PmemDevice::Nvdimm, Some(b)) => (vec![NvdimmSpec::temporary(b)], Vec::new()),
        (PmemDevice::Cxl, Some(b)) => (
            Vec::new(),
            vec![CxlPmemSpec::temporary(
                b.div_ceil(CXL_CAPACITY_UNIT)
                    .saturating_mul(CXL_CAPACITY_UNIT),
            )],
        ),
    }
}

/// Errors of `--cxl-pmem` with an experiment.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CxlBenchError {
    /// An experiment without persistent memory.
    #[error("--cxl-pmem: {0} has no persistent memory to put on a CXL device; use it with pmem-nowait, pmem-randwrite, pmem-verify or xfs-dax-write")]
    NoPmem(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cxl_device_is_rounded_up_to_whole_256_mib_units_and_an_nvdimm_is_not() {
        let (n, c) = devices(PmemDevice::Cxl, Some((896 << 20) + 1));
        assert!(n.is_empty());
        assert_eq!(c[0].size, 1 << 30);
        assert_eq!(c[0].file, None);
        let (_, c) = devices(PmemDevice::Cxl, Some(512 << 20));
        assert_eq!(c[0].size, 512 << 20);
        let (n, c) = devices(PmemDevice::Nvdimm, Some((896 << 20) + 1));
        assert!(c.is_empty());
        assert_eq!(n.len(), 1);
        assert_eq!(devices(PmemDevice::Cxl, None), (Vec::new(), Vec::new()));
    }

    #[test]
    fn the_region_comes_before_the_experiments_own_setup() {
        assert_eq!(setup(PmemDevice::Nvdimm, None), None);
        assert_eq!(
            setup(PmemDevice::Nvdimm, Some("mkfs".into())).as_deref(),
            Some("mkfs")
        );
        let s = setup(
            PmemDevice::Cxl,
            Some("ndctl create-namespace --reconfig=namespace0.0".into()),
        )
        .unwrap();
        let region = s
            .find("cxl create-region -m -t pmem -d decoder0.0 mem0")
            .unwrap();
        let raw = s.find("-m raw").unwrap();
        let own = s.find("--reconfig=namespace0.0").unwrap();
        assert!(region < raw && raw < own, "{s}");
        assert!(setup(PmemDevice::Cxl, None)
            .unwrap()
            .ends_with("exit 1; }\n"));
    }

    #[test]
    fn the_plan_says_cxl_with_the_rounded_size_and_nothing_for_an_nvdimm() {
        let line = plan_line(PmemDevice::Cxl, Some((896 << 20) + 1)).unwrap();
        assert!(line.contains("(--cxl-pmem 1G)"), "{line}");
        assert_eq!(plan_line(PmemDevice::Nvdimm, Some(1 << 30)), None);
        assert_eq!(plan_line(PmemDevice::Cxl, None), None);
    }

    #[test]
    fn the_device_is_kebab_case_in_a_request_file_and_nvdimm_by_default() {
        assert_eq!(serde_json::to_string(&PmemDevice::Cxl).unwrap(), "\"cxl\"");
        assert_eq!(PmemDevice::default(), PmemDevice::Nvdimm);
    }
}
