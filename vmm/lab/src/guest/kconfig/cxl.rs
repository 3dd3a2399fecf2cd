//! What a guest kernel needs for `--cxl-pmem`: Linux's CXL drivers, from the
//! CEDT to a pmem region. Not requirements of every guest (one without
//! `--cxl-pmem` boots and runs its jobs without them, so `kconfig --check`
//! does not fail on them), but named beside the check, option by option.
//!
//! Linux 6.1 (the guest image's `linux-source-6.1`) makes regions in a
//! virtual machine with these alone; from 6.2 on, `cxl_region` also refuses a
//! region on a CPU that cannot invalidate caches by memory region unless
//! `CONFIG_CXL_REGION_INVALIDATION_TEST` is set (named here when the kernel
//! has that option at all). Those kernels also read the device's poison list
//! and event records (6.3 on: `ctl media inject --cxl`), given what
//! [`EVENT_NEEDS`] names.

use super::{Kconfig, Requirement};

const fn need(option: &'static str, breaks: &'static str) -> Requirement {
    Requirement {
        option,
        breaks,
        module: None,
    }
}

/// The options `--cxl-pmem` needs, each built in.
pub const CXL_NEEDS: &[Requirement] = &[
    need(
        "CONFIG_PCI_MMCONFIG",
        "no extended configuration space (the MCFG's ECAM is unused): the CXL DVSECs \
         above offset 0x100 cannot be read, and the device is a bare PCI function",
    ),
    need("CONFIG_CXL_BUS", "no CXL bus: `cxl list` shows nothing"),
    need(
        "CONFIG_CXL_ACPI",
        "the CEDT is ignored: no root decoder (decoder0.0), so no region can be made",
    ),
    need(
        "CONFIG_CXL_PCI",
        "the Type-3 device gets no driver: no mailbox, no memdev (mem0)",
    ),
    need(
        "CONFIG_CXL_PORT",
        "no ports: the host bridge's and the device's HDM decoders are not enumerated",
    ),
    need(
        "CONFIG_CXL_MEM",
        "the memdev is not attached to the port topology: `cxl create-region` finds no \
         endpoint decoder",
    ),
    need(
        "CONFIG_CXL_PMEM",
        "no NVDIMM bridge: a pmem region gets no labels and no /dev/pmem",
    ),
    need(
        "CONFIG_CXL_REGION",
        "`cxl create-region` fails: there is no region driver",
    ),
];

/// Where a kernel has it (6.2 and later), the option a region in a virtual
/// machine needs: without it `cxl_region` refuses to commit one, as no CPU
/// instruction invalidates the caches of a memory range there.
const INVALIDATION_TEST: &str = "CONFIG_CXL_REGION_INVALIDATION_TEST";

/// What a kernel that reads CXL poison and events (6.3 on) needs for them:
/// `cxl_pci` reads event records only through an MSI and with CXL error
/// control granted by `_OSC`, which Linux asks for only with PCIe port
/// services, ASPM, MSI support and memory-failure handling.
pub const EVENT_NEEDS: &[Requirement] = &[
    need(
        "CONFIG_PCI_MSI",
        "no MSI: cxl_pci disables event processing (\"No interrupt support\"), so \
         `media inject --cxl` records are never read",
    ),
    need(
        "CONFIG_PCIEPORTBUS",
        "Linux requests no _OSC control: the firmware keeps CXL error control and \
         cxl_pci leaves the event records to it",
    ),
    need(
        "CONFIG_PCIEASPM",
        "Linux requests no _OSC control (it wants ASPM support first): no event records",
    ),
    need(
        "CONFIG_MEMORY_FAILURE",
        "Linux does not ask for CXL memory error reporting control: no event records",
    ),
    need(
        "CONFIG_DEBUG_FS",
        "no /sys/kernel/debug/cxl/memN/inject_poison or clear_poison (the guest's own \
         poison commands)",
    ),
];

/// One line per option `--cxl-pmem` misses in `config`; empty when nothing.
pub fn notes(config: &Kconfig) -> Vec<String> {
    let mut notes: Vec<String> = CXL_NEEDS
        .iter()
        .filter(|r| config.get(r.option) != Some("y"))
        .map(|r| {
            let value = match config.get(r.option) {
                Some(v) => format!("={v}, not built in"),
                None => "not set".to_string(),
            };
            format!("{} ({value}): {}", r.option, r.breaks)
        })
        .collect();
    let has_invalidation_option = config.get("CONFIG_CXL_REGION") == Some("y")
        && config.has_option(INVALIDATION_TEST)
        && config.get(INVALIDATION_TEST) != Some("y");
    if has_invalidation_option {
        notes.push(format!(
            "{INVALIDATION_TEST} (not =y): this kernel refuses to commit a region in a \
             virtual machine (no cache invalidation by memory range)"
        ));
    }
    // A kernel new enough to have the invalidation option reads poison and events.
    if config.has_option(INVALIDATION_TEST) {
        notes.extend(
            EVENT_NEEDS
                .iter()
                .filter(|r| config.get(r.option) != Some("y"))
                .map(|r| format!("{} (not =y): {}", r.option, r.breaks)),
        );
    }
    notes
}

/// The fragment's lines for `--cxl-pmem`.
pub fn fragment() -> String {
    let mut s =
        String::from("\n# --- for --cxl-pmem (a guest without CXL devices does not need them)\n");
    for r in CXL_NEEDS {
        s.push_str(&format!("# without it: {}\n{}=y\n", r.breaks, r.option));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_missing_option_is_named_with_what_breaks() {
        let bare = Kconfig::parse("CONFIG_PCI_MMCONFIG=y\nCONFIG_CXL_BUS=m\n");
        let notes = notes(&bare);
        assert_eq!(notes.len(), CXL_NEEDS.len() - 1, "{notes:?}");
        assert!(
            notes[0].starts_with("CONFIG_CXL_BUS (=m, not built in): no CXL bus"),
            "{notes:?}"
        );
        assert!(notes[1].starts_with("CONFIG_CXL_ACPI (not set): the CEDT is ignored"));
    }

    #[test]
    fn a_kernel_with_everything_has_no_notes_and_the_fragment_parses_back() {
        let all = Kconfig::parse(&fragment());
        assert_eq!(all.len(), CXL_NEEDS.len());
        assert!(notes(&all).is_empty());
    }

    #[test]
    fn the_invalidation_test_option_is_named_only_where_the_kernel_has_it() {
        let unset = format!("{}# {INVALIDATION_TEST} is not set\n", fragment());
        let named = notes(&Kconfig::parse(&unset));
        assert_eq!(named.len(), 1 + EVENT_NEEDS.len(), "{named:?}");
        assert!(named[0].contains("refuses to commit a region"));
        let events: String = EVENT_NEEDS
            .iter()
            .map(|r| format!("{}=y\n", r.option))
            .collect();
        let set = format!("{}{INVALIDATION_TEST}=y\n{events}", fragment());
        assert!(notes(&Kconfig::parse(&set)).is_empty());
        assert!(
            notes(&Kconfig::parse(&fragment())).is_empty(),
            "a kernel without the option (6.1) needs nothing more"
        );
    }

    #[test]
    fn a_newer_kernel_is_told_what_poison_and_events_need() {
        let newer = format!("{}{INVALIDATION_TEST}=y\nCONFIG_PCI_MSI=y\n", fragment());
        let named = notes(&Kconfig::parse(&newer));
        let options: Vec<&str> = named
            .iter()
            .map(|n| n.split(' ').next().unwrap_or(""))
            .collect();
        assert_eq!(
            options,
            [
                "CONFIG_PCIEPORTBUS",
                "CONFIG_PCIEASPM",
                "CONFIG_MEMORY_FAILURE",
                "CONFIG_DEBUG_FS"
            ],
            "{named:?}"
        );
    }
}
