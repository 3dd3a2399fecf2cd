//! The buses ndctl's tests use and the machines the suite's boots run on.

use serde::{Deserialize, Serialize};

/// The buses ndctl's tests use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bus {
    /// The platform's NFIT bus (pmemvm's NVDIMMs); the destructive tests that name it.
    #[serde(rename = "ACPI.NFIT")]
    AcpiNfit,
    /// Tests written for the kernel's `nfit_test.0` emulation, pointed at ACPI.NFIT at run
    /// time (`ndctl-suite.sh --bus ACPI.NFIT`): the error, scrub and SMART paths.
    #[serde(rename = "nfit_test → ACPI.NFIT")]
    NfitTestOnAcpi,
    /// Legacy persistent memory (E820 type 12, `--pmem-legacy`).
    #[serde(rename = "e820")]
    E820,
    /// The kernel's own `nfit_test.0`/`nfit_test.1` emulation (`--nfit-test`: the modules
    /// of tools/testing/nvdimm built against the user's modular kernel).
    #[serde(rename = "nfit_test")]
    NfitTest,
    /// Tests written for the kernel's `cxl_test` emulation, pointed at the platform's CXL
    /// bus (pmemvm's `--cxl-pmem` devices, `ACPI.CXL`) at run time
    /// (`ndctl-suite.sh --cxl-bus ACPI.CXL`).
    #[serde(rename = "cxl_test → ACPI.CXL")]
    CxlTestOnAcpi,
}

impl Bus {
    /// As in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            Bus::AcpiNfit => "ACPI.NFIT",
            Bus::NfitTestOnAcpi => "nfit_test → ACPI.NFIT",
            Bus::E820 => "e820",
            Bus::NfitTest => "nfit_test",
            Bus::CxlTestOnAcpi => "cxl_test → ACPI.CXL",
        }
    }
}

/// The machines the boots run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Two 1 GiB NVDIMMs with label areas and a 3 GiB legacy range: `pmem-ns` and
    /// `sub-section.sh` (the sizes they ask for), the nfit_test error scripts, the e820
    /// tests (`dax-ext4.sh`/`dax-xfs.sh` fallocate 1 GiB on a namespace with its memmap on
    /// the device).
    Small,
    /// One 8 GiB NVDIMM: `align.sh` (1 GiB + 8 KiB and 2 GiB namespaces in one empty
    /// region), `dm.sh` (two 1 GiB namespaces with the bus's other regions enabled),
    /// `daxctl-devices.sh` (a 4 GiB devdax namespace hot-added as memory).
    Large,
    /// No NVDIMM and no legacy range: the user's modular kernel with the nfit_test
    /// modules, whose buses are the kernel's own emulation (`--nfit-test`).
    NfitTest,
    /// One 512 MiB CXL persistent memory device (`--cxl-pmem 512M`, alone behind its host
    /// bridge and window) and no NVDIMM: the `cxl-*.sh` tests (`cxl-create-region.sh`
    /// cuts it into two 256 MiB regions).
    Cxl,
}

impl Shape {
    /// Its name in the table and the results directory.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Small => "small",
            Shape::Large => "large",
            Shape::NfitTest => "nfit-test",
            Shape::Cxl => "cxl",
        }
    }

    /// `--nvdimm` specs.
    pub fn nvdimms(self) -> &'static [&'static str] {
        match self {
            Shape::Small => &["1G", "1G"],
            Shape::Large => &["8G"],
            Shape::NfitTest | Shape::Cxl => &[],
        }
    }

    /// `--pmem-legacy` specs.
    pub fn legacy(self) -> &'static [&'static str] {
        match self {
            Shape::Small => &["3G"],
            Shape::Large | Shape::NfitTest | Shape::Cxl => &[],
        }
    }

    /// `--cxl-pmem` specs.
    pub fn cxl_pmem(self) -> &'static [&'static str] {
        match self {
            Shape::Cxl => &["512M"],
            Shape::Small | Shape::Large | Shape::NfitTest => &[],
        }
    }
}
