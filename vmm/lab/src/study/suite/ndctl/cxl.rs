//! ndctl's `cxl-*.sh` tests on pmemvm's CXL bus: written for the kernel's `cxl_test`
//! emulation, pointed at the platform's `ACPI.CXL` bus (pmemvm's `--cxl-pmem` devices) the
//! way the nfit_test ones are pointed at `ACPI.NFIT`. They run when named (`pmemvm suite
//! ndctl cxl-labels.sh cxl-create-region.sh`), in one boot of [`Shape::Cxl`];
//! docs/ndctl-suite.md says where each one stands and, for those that fail, the line of
//! their `cxl_test` assumption.

use super::{t, Bus, KnownTest, Shape};

/// The `cxl-*.sh` tests this command places, in the order they run: ndctl v81's seven
/// region, label, topology, poison and event tests.
pub const TESTS: &[KnownTest] = &[
    t("cxl-topology.sh", Bus::CxlTestOnAcpi, Shape::Cxl),
    t("cxl-region-sysfs.sh", Bus::CxlTestOnAcpi, Shape::Cxl),
    t("cxl-labels.sh", Bus::CxlTestOnAcpi, Shape::Cxl),
    t("cxl-create-region.sh", Bus::CxlTestOnAcpi, Shape::Cxl),
    t("cxl-destroy-region.sh", Bus::CxlTestOnAcpi, Shape::Cxl),
    t("cxl-poison.sh", Bus::CxlTestOnAcpi, Shape::Cxl),
    t("cxl-events.sh", Bus::CxlTestOnAcpi, Shape::Cxl),
];

/// The bus name `cxl list -b` gives pmemvm's CXL root (ACPI0017), which the guest's
/// `ndctl-suite.sh --cxl-bus` puts where the tests name `cxl_test`.
pub const GUEST_BUS: &str = "ACPI.CXL";

#[cfg(test)]
mod tests {
    use super::super::{plan, PlanError};
    use super::*;

    #[test]
    fn named_cxl_tests_run_in_one_cxl_boot_pointed_at_acpi_cxl() {
        let boots = plan(&["cxl-labels.sh".into(), "clear.sh".into()]).unwrap();
        assert_eq!(boots.len(), 2);
        let cxl = boots.iter().find(|b| b.shape == Shape::Cxl).unwrap();
        assert_eq!(cxl.shape.cxl_pmem(), ["512M"]);
        assert!(cxl.shape.nvdimms().is_empty() && cxl.legacy_specs().is_empty());
        assert_eq!(
            cxl.argv(),
            [
                "sh",
                "/job/ndctl-suite.sh",
                "--cxl-bus",
                GUEST_BUS,
                "/job/ndctl",
                "cxl-labels.sh"
            ]
        );
        // The NFIT boot is not pointed at the CXL bus.
        let nfit = boots.iter().find(|b| b.shape == Shape::Small).unwrap();
        assert!(!nfit.argv().iter().any(|a| a == "--cxl-bus"));
    }

    #[test]
    fn the_default_set_leaves_the_cxl_tests_to_be_named() {
        let boots = plan(&[]).unwrap();
        assert!(boots.iter().all(|b| b.shape != Shape::Cxl));
        let all: Vec<String> = TESTS.iter().map(|k| k.name.to_string()).collect();
        let boots = plan(&all).unwrap();
        assert_eq!(boots.len(), 1);
        assert_eq!(boots[0].tests, TESTS);
        // An unknown name's sentence lists the CXL tests too.
        let e = plan(&["cxl-nope.sh".into()]).unwrap_err();
        assert_eq!(e, PlanError::Unknown("cxl-nope.sh".into()));
        assert!(e.to_string().contains("cxl-poison.sh"), "{e}");
    }

    #[test]
    fn ndctl_v81_has_each_planned_cxl_test() {
        // Where ndctl v81's tree is beside the workspace (this workplace's shared directory).
        let tree = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/third-party/ndctl-v81/test/meson.build");
        if let Ok(meson) = std::fs::read_to_string(&tree) {
            for k in TESTS {
                assert!(meson.contains(&format!("[ '{}',", k.name)), "{}", k.name);
            }
        }
    }
}
