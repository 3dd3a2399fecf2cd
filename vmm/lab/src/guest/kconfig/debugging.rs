//! What a kernel configuration gives `pmemvm --gdb` and memory dumps
//! (`pmemvm ctl SOCKET dump`, `--dump-on-panic`), and (from [`super::cxl`])
//! `--cxl-pmem`: not requirements (a
//! guest boots and runs its jobs without them, so `kconfig --check` does
//! not fail on them) but what a debugger, `crash` or `drgn` will miss,
//! said beside the check.

use super::Kconfig;

/// DWARF in vmlinux: any of the kernel's "Debug information" choices but none.
const DEBUG_INFO: &[&str] = &[
    "CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT",
    "CONFIG_DEBUG_INFO_DWARF4",
    "CONFIG_DEBUG_INFO_DWARF5",
];

/// One line per thing `--gdb` will miss with `config`; empty when nothing.
pub fn gdb_notes(config: &Kconfig) -> Vec<String> {
    let mut notes = Vec::new();
    if !DEBUG_INFO.iter().any(|o| config.get(o) == Some("y")) {
        notes.push(
            "CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT (not set, nor DWARF4/DWARF5): gdb \
             (--gdb) sees symbols only: no source lines, no types, and backtraces end after \
             the first frame"
                .to_string(),
        );
    }
    if config.get("CONFIG_RANDOMIZE_BASE") == Some("y") {
        notes.push(
            "CONFIG_RANDOMIZE_BASE=y: KASLR moves the kernel away from where vmlinux says; \
             boot with --append nokaslr for gdb's (--gdb) breakpoints and symbols to match"
                .to_string(),
        );
    }
    notes
}

/// One line per thing a memory dump will miss with `config`.
pub fn dump_notes(config: &Kconfig) -> Vec<String> {
    let mut notes = Vec::new();
    if config.get("CONFIG_CRASH_CORE") != Some("y") {
        notes.push(
            "CONFIG_CRASH_CORE (not set; CONFIG_KEXEC or CONFIG_CRASH_DUMP selects it): the \
             kernel keeps no VMCOREINFO note, and crash and drgn cannot open a dump of it"
                .to_string(),
        );
    }
    if config.get("CONFIG_PVPANIC") != Some("y") || config.get("CONFIG_PVPANIC_MMIO") != Some("y") {
        notes.push(
            "CONFIG_PVPANIC and CONFIG_PVPANIC_MMIO (not both =y): the kernel does not tell \
             pmemvm it panicked, so --dump-on-panic never fires and a panic ends as a reset"
                .to_string(),
        );
    }
    notes
}

/// The lines `kconfig --check` prints after its result.
pub fn render(config: &Kconfig) -> String {
    let mut text = String::new();
    for (what, notes, fine) in [
        (
            "--gdb",
            gdb_notes(config),
            "DWARF debug information and a kernel where vmlinux says (no KASLR)",
        ),
        (
            "dumps",
            dump_notes(config),
            "VMCOREINFO (CONFIG_CRASH_CORE) and the pvpanic driver",
        ),
        (
            "--cxl-pmem",
            super::cxl::notes(config),
            "the CXL drivers, from the CEDT to pmem regions",
        ),
    ] {
        if notes.is_empty() {
            text.push_str(&format!("for {what}: {fine}\n"));
        }
        for n in notes {
            text.push_str(&format!("  for {what}: {n}\n"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_debug_info_and_kaslr_are_named() {
        let bare =
            Kconfig::parse("CONFIG_64BIT=y\nCONFIG_DEBUG_INFO_NONE=y\nCONFIG_RANDOMIZE_BASE=y\n");
        let notes = gdb_notes(&bare);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT"));
        assert!(notes[1].contains("--append nokaslr"));
        let good =
            Kconfig::parse("CONFIG_DEBUG_INFO_DWARF5=y\n# CONFIG_RANDOMIZE_BASE is not set\n");
        assert!(gdb_notes(&good).is_empty());
        assert!(render(&good).starts_with("for --gdb: DWARF"));
        assert!(render(&bare).contains("  for --gdb: CONFIG_RANDOMIZE_BASE=y"));
    }

    #[test]
    fn what_dumps_need_is_named() {
        let bare = Kconfig::parse("CONFIG_64BIT=y\n# CONFIG_KEXEC is not set\nCONFIG_PVPANIC=y\n");
        let notes = dump_notes(&bare);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("CONFIG_CRASH_CORE"));
        assert!(notes[1].contains("--dump-on-panic never fires"));
        let good = Kconfig::parse(
            "CONFIG_CRASH_CORE=y\nCONFIG_PVPANIC=y\nCONFIG_PVPANIC_MMIO=y\nCONFIG_DEBUG_INFO_DWARF5=y\n",
        );
        assert!(dump_notes(&good).is_empty());
        let text = render(&good);
        assert!(text.contains("\nfor dumps: VMCOREINFO"), "{text}");
        assert!(render(&bare).contains("  for dumps: CONFIG_CRASH_CORE"));
    }
}
