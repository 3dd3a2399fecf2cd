//! Disassembles every table pmemvm builds with the real ACPICA `iasl -d`
//! (Debian package `acpica-tools`) and checks the output.
//!
//! Skips with `SKIP:` on stderr when `iasl` is not installed.
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use acpi::{build_tables, nfit_handle, AcpiTables, DsmTransport, GuestPlatform, NvdimmDescription};
use std::path::{Path, PathBuf};
use std::process::Command;

const RSDP_ADDR: u64 = 0xe_0000;
const TABLES_ADDR: u64 = 0xe_1000;
const TABLES_MAX: u64 = 0xf_f000 - 0xe_1000;

fn iasl_available() -> bool {
    match Command::new("iasl").arg("-v").output() {
        Ok(o) => o.status.success(),
        Err(_) => false,
    }
}

fn machine(cpus: u32, nvdimms: Vec<NvdimmDescription>) -> GuestPlatform {
    GuestPlatform {
        serial_ports: vec![(0x3f8, 4), (0x2f8, 3)],
        pvpanic_port: Some(0x505),
        nvdimms,
        dsm: Some(DsmTransport::example()),
        ..GuestPlatform::example(cpus)
    }
}

fn dimm(i: u32, readonly: bool, label_size: u32) -> NvdimmDescription {
    NvdimmDescription {
        handle: nfit_handle(i),
        spa_base: (4 + u64::from(i)) << 30,
        spa_size: 256 << 20,
        flush_hint_addr: Some(0xfe00_0000 + u64::from(i) * 0x1000),
        readonly,
        serial: 0x1000 + i,
        label_size,
        proximity_domain: None,
    }
}

fn tmpdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pmemvm-iasl-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `iasl -d` on `file` in `dir`, asserts success and returns the `.dsl` text.
fn disassemble(dir: &Path, file: &str) -> String {
    let out = Command::new("iasl")
        .arg("-d")
        .arg(file)
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "iasl -d {file} failed:\n{stdout}\n{stderr}"
    );
    for line in stdout.lines().chain(stderr.lines()) {
        let l = line.to_ascii_lowercase();
        assert!(
            (!l.contains("error") || l.contains("0 errors")) && !l.contains("warning"),
            "iasl -d {file} complained: {line}\n{stdout}\n{stderr}"
        );
    }
    let dsl = dir.join(Path::new(file).with_extension("dsl"));
    std::fs::read_to_string(&dsl).unwrap_or_else(|e| panic!("no {}: {e}", dsl.display()))
}

fn write_all(t: &AcpiTables, dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for table in &t.tables {
        let f = format!("{}.aml", table.name);
        std::fs::write(dir.join(&f), &table.bytes).unwrap();
        files.push(f);
    }
    files
}

/// Disassembles every table; returns (file, dsl) pairs.
fn check_all(tag: &str, desc: &GuestPlatform) -> Vec<(String, String)> {
    let t = build_tables(desc, RSDP_ADDR, TABLES_ADDR, TABLES_MAX).unwrap();
    let dir = tmpdir(tag);
    let files = write_all(&t, &dir);
    let out: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.clone(), disassemble(&dir, f)))
        .collect();
    // Every disassembly reports a correct checksum (iasl prints "Incorrect checksum" otherwise).
    for (f, dsl) in &out {
        assert!(!dsl.contains("Incorrect"), "{f}: {dsl}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn get<'a>(all: &'a [(String, String)], file: &str) -> &'a str {
    &all.iter()
        .find(|(f, _)| f == file)
        .unwrap_or_else(|| panic!("no {file}"))
        .1
}

/// Recompiles the disassembly of each AML table (DSDT, SSDT) with `iasl -oa`
/// (no optimizations) and checks that iasl encodes exactly the body we
/// encoded: our AML encoder agrees with ACPICA's compiler byte for byte.
fn recompile_matches(tag: &str, desc: &GuestPlatform) {
    let t = build_tables(desc, RSDP_ADDR, TABLES_ADDR, TABLES_MAX).unwrap();
    let dir = tmpdir(tag);
    for table in t
        .tables
        .iter()
        .filter(|t| t.name == "DSDT" || t.name.starts_with("SSDT"))
    {
        let f = format!("{}.aml", table.name);
        std::fs::write(dir.join(&f), &table.bytes).unwrap();
        disassemble(&dir, &f);
        std::fs::remove_file(dir.join(&f)).unwrap();
        let dsl = format!("{}.dsl", table.name);
        let out = Command::new("iasl")
            .arg("-oa")
            .arg(&dsl)
            .current_dir(&dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "iasl {dsl}:\n{text}");
        assert!(text.contains("0 Errors, 0 Warnings, 0 Remarks"), "{text}");
        let again = std::fs::read(dir.join(&f)).unwrap();
        assert_eq!(again.len(), table.bytes.len(), "{} length", table.name);
        assert!(
            again[36..] == table.bytes[36..],
            "{}: iasl encodes the body differently",
            table.name
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn aml_matches_iasl_encoding() {
    if !iasl_available() {
        pmemvm_skip::skip!("iasl not found (install acpica-tools)");
    }
    recompile_matches("re-nodsm", &{
        let mut d = machine(2, vec![dimm(0, false, 0), dimm(1, true, 0)]);
        d.dsm = None;
        d
    });
    recompile_matches(
        "re-dsm",
        &machine(
            4,
            vec![
                dimm(0, false, 128 << 10),
                dimm(1, true, 128 << 10),
                dimm(2, false, 0),
            ],
        ),
    );
    // Empty slots: their devices and `_FIT`.
    recompile_matches("re-slots", &{
        let mut d = machine(2, vec![dimm(0, false, 128 << 10)]);
        d.nvdimm_slots = 3;
        d
    });
    // No DIMM at boot, only slots: the root device, its transport and `_FIT`.
    recompile_matches("re-slots-only", &{
        let mut d = machine(1, vec![]);
        d.nvdimm_slots = 2;
        d
    });
}

#[test]
fn one_cpu_no_dimms() {
    if !iasl_available() {
        pmemvm_skip::skip!("iasl not found (install acpica-tools)");
    }
    let all = check_all("1cpu", &machine(1, vec![]));
    let names: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(names, ["DSDT.aml", "FACP.aml", "APIC.aml", "XSDT.aml"]);
    let facp = get(&all, "FACP.aml");
    assert!(facp.contains("Hardware Reduced (V5) : 1"), "{facp}");
    assert!(facp.contains("Reset Register Supported (V2) : 1"), "{facp}");
    assert!(
        facp.contains("[08Ch 0140   8]                 DSDT Address : 00000000000E1000"),
        "{facp}"
    );
    let apic = get(&all, "APIC.aml");
    assert_eq!(
        apic.matches("Subtable Type : 00 [Processor Local APIC]")
            .count(),
        1,
        "{apic}"
    );
    assert!(apic.contains("Subtable Type : 01 [I/O APIC]"), "{apic}");
    assert!(apic.contains("Interrupt : 00000002"), "{apic}");
    let dsdt = get(&all, "DSDT.aml");
    assert!(dsdt.contains("EisaId (\"PNP0501\")"), "{dsdt}");
    assert!(dsdt.contains("0x03F8"), "{dsdt}");
    assert!(dsdt.contains("IRQNoFlags ()"), "{dsdt}");
    assert!(dsdt.contains("Name (_S5, Package"), "{dsdt}");
    // The pvpanic device as QEMU describes it, which Linux's pvpanic driver binds.
    assert!(dsdt.contains("Name (_HID, \"QEMU0001\")"), "{dsdt}");
    assert!(dsdt.contains("0x0505"), "{dsdt}");
}

#[test]
fn virtio_disks_disassemble_and_recompile() {
    if !iasl_available() {
        pmemvm_skip::skip!("iasl not found (install acpica-tools)");
    }
    let mut desc = machine(2, vec![dimm(0, false, 0)]);
    desc.virtio_mmio = vec![(0xd000_0000, 5), (0xd000_1000, 6), (0xd000_2000, 7)];
    let all = check_all("virtio", &desc);
    let dsdt = get(&all, "DSDT.aml");
    assert_eq!(
        dsdt.matches("Name (_HID, \"LNRO0005\")").count(),
        3,
        "{dsdt}"
    );
    assert!(
        dsdt.contains("Memory32Fixed (ReadWrite,\n                    0xD0001000,"),
        "{dsdt}"
    );
    assert!(
        dsdt.contains("IRQNoFlags ()\n                    {7}"),
        "{dsdt}"
    );
    recompile_matches("virtio", &desc);
}

#[test]
fn two_cpus_one_dimm() {
    if !iasl_available() {
        pmemvm_skip::skip!("iasl not found (install acpica-tools)");
    }
    let all = check_all("2cpu", &machine(2, vec![dimm(0, false, 128 << 10)]));
    let names: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        names,
        [
            "DSDT.aml",
            "FACP.aml",
            "APIC.aml",
            "NFIT.aml",
            "SSDT-1.aml",
            "XSDT.aml"
        ]
    );
    let nfit = get(&all, "NFIT.aml");
    assert!(
        nfit.contains("Subtable Type : 0000 [System Physical Address Range]"),
        "{nfit}"
    );
    assert!(
        nfit.contains("[048h 0072   8]           Address Range Base : 0000000100000000"),
        "{nfit}"
    );
    assert!(
        nfit.contains("Address Range Length : 0000000010000000"),
        "{nfit}"
    );
    assert!(
        nfit.contains("66F0D379-B4F3-4074-AC43-0D3318B78CDB"),
        "{nfit}"
    );
    assert!(
        nfit.contains("Subtable Type : 0006 [Flush Hint Address]"),
        "{nfit}"
    );
    assert!(
        nfit.contains("[0F0h 0240   8]                 Hint Address : 00000000FE000000"),
        "{nfit}"
    );
    assert!(
        nfit.contains("Subtable Type : 0007 [Platform Capabilities]"),
        "{nfit}"
    );
    let ssdt = get(&all, "SSDT-1.aml");
    assert!(ssdt.contains("\"ACPI0012\""), "{ssdt}");
    assert!(
        ssdt.contains("4309ac30-0d11-11e4-9191-0800200c9a66"),
        "{ssdt}"
    );
    assert!(ssdt.contains("Device (NV00)"), "{ssdt}");
    assert!(ssdt.contains("Method (NCAL, 5, Serialized)"), "{ssdt}");
    assert!(
        ssdt.contains("OperationRegion (NPAG, SystemMemory, 0x000FF000, 0x1000)"),
        "{ssdt}"
    );
    assert!(
        ssdt.contains("OperationRegion (NDBL, SystemIO, 0x0510, 0x04)"),
        "{ssdt}"
    );
    assert!(
        ssdt.contains("Return (NCAL (Arg0, Arg1, Arg2, Arg3, One))"),
        "{ssdt}"
    );
    let xsdt = get(&all, "XSDT.aml");
    assert_eq!(xsdt.matches("ACPI Table Address").count(), 4, "{xsdt}");
}

#[test]
fn four_cpus_three_dimms() {
    if !iasl_available() {
        pmemvm_skip::skip!("iasl not found (install acpica-tools)");
    }
    let dimms = vec![
        dimm(0, false, 128 << 10),
        dimm(1, true, 128 << 10),
        dimm(2, false, 0),
    ];
    let all = check_all("4cpu", &machine(4, dimms));
    let apic = get(&all, "APIC.aml");
    assert_eq!(apic.matches("[Processor Local APIC]").count(), 4, "{apic}");
    assert!(
        apic.contains("[04Eh 0078   1]                  I/O Apic ID : 04"),
        "{apic}"
    );
    let nfit = get(&all, "NFIT.aml");
    assert_eq!(
        nfit.matches("[System Physical Address Range]").count(),
        3,
        "{nfit}"
    );
    assert_eq!(nfit.matches("[Memory Range Map]").count(), 3, "{nfit}");
    assert_eq!(nfit.matches("[NVDIMM Control Region]").count(), 3, "{nfit}");
    assert_eq!(nfit.matches("Device not armed : 1").count(), 1, "{nfit}");
    assert!(nfit.contains("Memory Flush to NVDIMM : 1"), "{nfit}");
    assert!(nfit.contains("Cache Flush to NVDIMM : 0"), "{nfit}");
    let ssdt = get(&all, "SSDT-1.aml");
    for n in ["NV00", "NV01", "NV02"] {
        assert!(ssdt.contains(&format!("Device ({n})")), "{ssdt}");
    }
}

#[test]
fn srat_with_numa_dimms() {
    if !iasl_available() {
        pmemvm_skip::skip!("iasl not found (install acpica-tools)");
    }
    let mut dimms = vec![dimm(0, false, 128 << 10), dimm(1, false, 0)];
    dimms[0].proximity_domain = Some(1);
    dimms[1].proximity_domain = Some(2);
    let mut desc = machine(2, dimms);
    desc.ram = vec![(0, 0xc000_0000), (1 << 32, 1 << 30)];
    let all = check_all("srat", &desc);
    let names: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        names,
        [
            "DSDT.aml",
            "FACP.aml",
            "APIC.aml",
            "SRAT.aml",
            "NFIT.aml",
            "SSDT-1.aml",
            "XSDT.aml"
        ]
    );
    let srat = get(&all, "SRAT.aml");
    for want in [
        "[008h 0008   1]                     Revision : 03",
        "[024h 0036   4]               Table Revision : 00000001",
        // One processor affinity entry per vCPU, domain 0, enabled.
        "[033h 0051   1]                      Apic ID : 00",
        "[043h 0067   1]                      Apic ID : 01",
        // RAM below the hole and above 4 GiB in domain 0.
        "[060h 0096   8]               Address Length : 00000000C0000000",
        "[080h 0128   8]                 Base Address : 0000000100000000",
        // DIMM 0 in domain 1, DIMM 1 in domain 2: enabled, hot-pluggable, non-volatile.
        "[0A2h 0162   4]             Proximity Domain : 00000001",
        "[0A8h 0168   8]                 Base Address : 0000000100000000",
        "[0CAh 0202   4]             Proximity Domain : 00000002",
        "[0D0h 0208   8]                 Base Address : 0000000140000000",
        "[0E4h 0228   4]        Flags (decoded below) : 00000007",
    ] {
        assert!(srat.contains(want), "no '{want}' in\n{srat}");
    }
    assert_eq!(
        srat.matches("[Processor Local APIC/SAPIC Affinity]")
            .count(),
        2,
        "{srat}"
    );
    assert_eq!(srat.matches("[Memory Affinity]").count(), 4, "{srat}");
    assert_eq!(srat.matches("Non-Volatile : 1").count(), 2, "{srat}");
    assert_eq!(srat.matches("Hot Pluggable : 1").count(), 2, "{srat}");
    let nfit = get(&all, "NFIT.aml");
    assert_eq!(
        nfit.matches("Proximity Domain Valid : 1").count(),
        2,
        "{nfit}"
    );
    assert!(
        nfit.contains("[034h 0052   4]             Proximity Domain : 00000001"),
        "{nfit}"
    );
    let xsdt = get(&all, "XSDT.aml");
    assert_eq!(xsdt.matches("ACPI Table Address").count(), 5, "{xsdt}");
}

/// The MCFG as ACPICA reads it: the ECAM window's base, segment and buses.
#[test]
fn mcfg_disassembles_to_its_ecam_window() {
    if !iasl_available() {
        pmemvm_skip::skip!("iasl not found (install acpica-tools)");
    }
    let window = acpi::mcfg::EcamWindow {
        base: 0xe000_0000,
        segment: 0,
        first_bus: 0,
        last_bus: 15,
    };
    let dir = tmpdir("mcfg");
    std::fs::write(dir.join("mcfg.aml"), acpi::mcfg::build(&[window])).unwrap();
    let dsl = disassemble(&dir, "mcfg.aml");
    let field = |key: &str| -> Vec<String> {
        dsl.lines()
            .filter_map(|l| l.split_once(" : "))
            .filter(|(k, _)| k.trim_end().ends_with(key))
            .map(|(_, v)| v.trim().to_string())
            .collect()
    };
    assert_eq!(field("Base Address"), ["00000000E0000000"], "{dsl}");
    assert_eq!(field("Segment Group Number"), ["0000"], "{dsl}");
    assert_eq!(field("Start Bus Number"), ["00"], "{dsl}");
    assert_eq!(field("End Bus Number"), ["0F"], "{dsl}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cxl_root_and_host_bridges_disassemble_as_linux_matches_them() {
    if !iasl_available() {
        pmemvm_skip::skip!("iasl not found (install acpica-tools)");
    }
    let cxl = acpi::CxlDescription::example();
    let mut t = acpi::sdt::Sdt::new(*b"SSDT", 2, *b"PMEMVMCX");
    t.append(&acpi::aml::scope("\\_SB", &acpi::cxl_dsdt::devices(&cxl)));
    let dir = tmpdir("cxl-dsdt");
    std::fs::write(dir.join("cxl.aml"), t.finish()).unwrap();
    let dsl = disassemble(&dir, "cxl.aml");
    let squeezed: String = dsl.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        "Device (CXLM) { Name (_HID, \"ACPI0017\")",
        "Device (CH00) { Name (_HID, \"ACPI0016\")",
        "EisaId (\"PNP0A08\") /* PCI Express Bus */, EisaId (\"PNP0A03\")",
        "Name (_UID, 0x0C)",
        "Name (_BBN, 0x0C)",
        "WordBusNumber (ResourceProducer, MinFixed, MaxFixed, PosDecode, 0x0000, // Granularity 0x000C, // Range Minimum 0x000F, // Range Maximum 0x0000, // Translation Offset 0x0004, // Length",
        "DWordMemory (ResourceProducer, PosDecode, MinFixed, MaxFixed, NonCacheable, ReadWrite, 0x00000000, // Granularity 0xFE000000, // Range Minimum 0xFE0FFFFF, // Range Maximum 0x00000000, // Translation Offset 0x00100000, // Length",
        "Method (_OSC, 4, Serialized) // _OSC: Operating System Capabilities { CreateDWordField (Arg3, Zero, CDW1)",
        "(Arg0 == ToUUID (\"68f2d50b-c469-4d8a-bd3d-941a103fd3fc\")",
        "Local0 = (CDW3 & 0x10)",
        "Local1 = (CDW5 & One)",
        "CDW1 |= 0x04 } Return (Arg3)",
        "Device (CXLR) { Name (_HID, EisaId (\"PNP0C02\")",
        "Memory32Fixed (ReadWrite, 0xE0000000, // Address Base 0x01000000, // Address Length",
    ] {
        assert!(squeezed.contains(want), "no {want:?} in\n{dsl}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
