//! Runs the NVDIMM SSDT's `_DSM` AML in ACPICA's user-space interpreter
//! (`acpiexec`, Debian package `acpica-tools`) and checks what it stores into
//! the DSM page and what it returns.
//!
//! acpiexec simulates the SystemMemory region and ignores the doorbell I/O
//! write, so after a call the page still holds the request: the "response
//! length" (offset 0) then reads back as the NFIT handle and the returned
//! buffer is that many bytes from offset 4 (the revision field). That is
//! enough to check the marshalling, the length clamp and the return path
//! with the same interpreter Linux uses.
//!
//! Skips with `SKIP:` on stderr when `acpiexec` is not installed.
#![allow(clippy::unwrap_used)] // a failed step fails the test with its message

use acpi::{build_tables, nfit_handle, DsmTransport, GuestPlatform, NvdimmDescription};
use std::path::PathBuf;
use std::process::Command;

const INTEL_UUID: &str = "(30 ac 09 43 11 0d e4 11 91 91 08 00 20 0c 9a 66)";

fn acpiexec_available() -> bool {
    Command::new("acpiexec").arg("-v").output().is_ok()
}

/// Writes the SSDT of a machine with DIMMs whose handles are `handles`
/// and `slots` NVDIMM slots, and returns its path.
fn ssdt_file(tag: &str, handles: &[u32], slots: usize) -> PathBuf {
    let nvdimms = handles
        .iter()
        .enumerate()
        .map(|(i, h)| NvdimmDescription {
            handle: *h,
            spa_base: (4 + i as u64) << 30,
            spa_size: 1 << 30,
            flush_hint_addr: None,
            readonly: false,
            serial: 1,
            label_size: 128 << 10,
            proximity_domain: None,
        })
        .collect();
    let desc = GuestPlatform {
        nvdimms,
        nvdimm_slots: slots,
        dsm: Some(DsmTransport::example()),
        ..GuestPlatform::example(1)
    };
    let t = build_tables(&desc, 0xe_0000, 0xe_1000, 0x1_e000).unwrap();
    let ssdt = t.tables.iter().find(|t| t.name == "SSDT-1").unwrap();
    let dir = std::env::temp_dir().join(format!("pmemvm-acpiexec-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("SSDT-1.aml");
    std::fs::write(&path, &ssdt.bytes).unwrap();
    path
}

/// Runs acpiexec in batch mode with `commands` (separated by `;`) and
/// returns the printed results, in order: `Integer(v)` or `Buffer(bytes)`.
fn run(ssdt: &PathBuf, commands: &[String]) -> Vec<Result<Vec<u8>, u64>> {
    let out = Command::new("timeout")
        .arg("60")
        .arg("acpiexec")
        .arg("-b")
        .arg(commands.join("; "))
        .arg(ssdt)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "acpiexec failed:\n{text}");
    assert!(!text.contains("AE_"), "ACPICA exception:\n{text}");
    assert!(!text.contains("ACPI Error"), "ACPICA error:\n{text}");
    assert!(!text.contains("ACPI Warning"), "ACPICA warning:\n{text}");
    let mut results = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let l = line.trim();
        if let Some(v) = l.strip_prefix("[Integer] = ") {
            results.push(Err(u64::from_str_radix(v.trim(), 16).unwrap()));
        } else if let Some(rest) = l.strip_prefix("[Buffer] Length ") {
            // "[Buffer] Length 02 =     0000: 01 00    // .." and maybe more hex lines.
            let (len_hex, dump) = rest.split_once('=').unwrap();
            let len = usize::from_str_radix(len_hex.trim(), 16).unwrap();
            let mut bytes = Vec::new();
            parse_hex_line(dump, &mut bytes);
            while bytes.len() < len {
                parse_hex_line(lines.next().unwrap(), &mut bytes);
            }
            assert_eq!(bytes.len(), len, "{text}");
            results.push(Ok(bytes));
        }
    }
    results
}

/// Appends the bytes of one acpiexec hex-dump line (`0000: 01 02 ... // ..`).
fn parse_hex_line(line: &str, bytes: &mut Vec<u8>) {
    let line = line.split("//").next().unwrap_or("");
    if let Some((_, hex)) = line.split_once(':') {
        for b in hex.split_whitespace() {
            bytes.push(u8::from_str_radix(b, 16).unwrap());
        }
    }
}

fn ex(dimm: &str, uuid: &str, rev: u32, func: u32, arg3: &str) -> String {
    format!("execute \\_SB.NVDR.{dimm}._DSM {uuid} {rev} {func} {arg3}")
}

fn ev(name: &str) -> String {
    format!("evaluate \\_SB.NVDR.{name}")
}

#[test]
fn dsm_marshals_request_into_page() {
    if !acpiexec_available() {
        pmemvm_skip::skip!("acpiexec not found (install acpica-tools)");
    }
    let ssdt = ssdt_file("marshal", &[nfit_handle(0), nfit_handle(1)], 0);
    // Function 5 (get label data) for NV01, offset 0x10, length 8.
    let r = run(
        &ssdt,
        &[
            ex("NV01", INTEL_UUID, 1, 5, "[(10 00 00 00 08 00 00 00)]"),
            ev("NHDL"),
            ev("NREV"),
            ev("NFUN"),
            ev("NLEN"),
            ev("NDAT"),
        ],
    );
    assert_eq!(r.len(), 6, "{r:?}");
    // Page unchanged by a VMM: "length" = handle 2, data = revision bytes.
    assert_eq!(r[0], Ok(vec![1, 0]));
    assert_eq!(r[1], Err(2)); // NHDL = NV01's handle
    assert_eq!(r[2], Err(1)); // NREV
    assert_eq!(r[3], Err(5)); // NFUN
    assert_eq!(r[4], Err(8)); // NLEN
    let ndat = r[5].clone().unwrap();
    assert_eq!(ndat.len(), 4080);
    assert_eq!(&ndat[..8], &[0x10, 0, 0, 0, 8, 0, 0, 0]);
    assert!(ndat[8..].iter().all(|b| *b == 0));
}

#[test]
fn dsm_other_uuid_empty_package_and_root() {
    if !acpiexec_available() {
        pmemvm_skip::skip!("acpiexec not found (install acpica-tools)");
    }
    let ssdt = ssdt_file("uuid", &[nfit_handle(0)], 0);
    let other = "(a4 e7 10 2f 91 9e e4 11 89 d3 12 3b 93 f7 5c ba)"; // NFIT root UUID
    let r = run(
        &ssdt,
        &[
            // Another family's UUID: "no functions", page untouched.
            ex("NV00", other, 1, 0, "[0]"),
            ev("NFUN"),
            // Function 0 with a package of one integer (acpiexec cannot pass
            // the empty package Linux uses): no input.
            ex("NV00", INTEL_UUID, 1, 0, "[0]"),
            ev("NFUN"),
            ev("NLEN"),
            // A package whose element is not a buffer: no input either.
            ex("NV00", INTEL_UUID, 1, 4, "[7]"),
            ev("NFUN"),
            ev("NLEN"),
            // The root device's _DSM: the Intel UUID gets no functions, the
            // root UUID goes through the page with the root handle.
            format!("execute \\_SB.NVDR._DSM {INTEL_UUID} 1 0 [0]"),
            format!("execute \\_SB.NVDR._DSM {other} 1 3 [0]"),
            ev("NHDL"),
            ev("NFUN"),
        ],
    );
    assert_eq!(r.len(), 12, "{r:?}");
    assert_eq!(r[0], Ok(vec![0]));
    assert_eq!(r[1], Err(0)); // never written
    assert_eq!(r[2], Ok(vec![1])); // 1 byte (RLEN = handle 1) = low byte of NREV
    assert_eq!(r[3], Err(0));
    assert_eq!(r[4], Err(0));
    assert_eq!(r[5], Ok(vec![1]));
    assert_eq!(r[6], Err(4));
    assert_eq!(r[7], Err(0));
    assert_eq!(r[8], Ok(vec![0]));
    // Page unchanged by a VMM: "length" = the root handle, clamped to the page.
    assert_eq!(r[9].as_ref().map(Vec::len), Ok(4092));
    assert_eq!(r[10], Err(0xffff_ffff));
    assert_eq!(r[11], Err(3));
}

#[test]
fn dsm_clamps_response_length_to_page() {
    if !acpiexec_available() {
        pmemvm_skip::skip!("acpiexec not found (install acpica-tools)");
    }
    // A handle above 4092 makes the "response length" exceed the page: the
    // AML must clamp it to the 4092 bytes after the length field.
    let ssdt = ssdt_file("clamp", &[0x0001_2345], 0);
    let r = run(
        &ssdt,
        &[
            ex("NV00", INTEL_UUID, 1, 4, "[(ee)]"),
            ev("NHDL"),
            ev("NLEN"),
        ],
    );
    assert_eq!(r.len(), 3, "{r:?}");
    let out = r[0].clone().unwrap();
    assert_eq!(out.len(), 4092);
    assert_eq!(&out[..12], &[1, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0]); // NREV, NFUN, NLEN
    assert_eq!(out[12], 0xee); // the input byte
    assert_eq!(r[1], Err(0x1_2345));
    assert_eq!(r[2], Err(1));
}

#[test]
fn fit_asks_for_the_fit_through_the_page_and_gives_up_when_nothing_answers() {
    if !acpiexec_available() {
        pmemvm_skip::skip!("acpiexec not found (install acpica-tools)");
    }
    // Without a VMM the page still holds the request after the call: its
    // "length" is the root handle, clamped to the page's 4,092 bytes — longer
    // than any reply pmemvm gives — so _FIT gives up at once (no structures)
    // instead of taking the request for a FIT or reading on.
    let ssdt = ssdt_file("fit", &[nfit_handle(0)], 2);
    let r = run(
        &ssdt,
        &[
            ev("_FIT"),
            ev("NHDL"),
            ev("NREV"),
            ev("NFUN"),
            ev("NLEN"),
            ev("NDAT"),
        ],
    );
    assert_eq!(r.len(), 6, "{r:?}");
    assert_eq!(r[0], Ok(vec![]));
    assert_eq!(r[1], Err(0xffff_ffff)); // the root handle
    assert_eq!(r[2], Err(1));
    assert_eq!(r[3], Err(u64::from(acpi::nvdimm_ssdt::FUNC_READ_FIT)));
    assert_eq!(r[4], Err(8)); // the offset as an 8-byte buffer
    let ndat = r[5].clone().unwrap();
    assert_eq!(&ndat[..8], &[0; 8]); // offset 0: the first read
}

/// A test table beside the SSDT: `\TSET (v)` stores `v` into the GED's event
/// register, as pmemvm's port does before it raises the line (acpiexec keeps
/// what was stored in a simulated I/O region). Compiled by `iasl`.
const TSET_ASL: &str = r#"DefinitionBlock ("", "SSDT", 2, "PMTEST", "TSET", 1)
{
    External (\_SB.NGED.GEVT, FieldUnitObj)
    Method (\TSET, 1) { \_SB.NGED.GEVT = Arg0 }
}
"#;

#[test]
fn the_geds_evt_sends_the_notifications_its_register_names() {
    if !acpiexec_available() {
        pmemvm_skip::skip!("acpiexec not found (install acpica-tools)");
    }
    let ssdt = ssdt_file("ged", &[nfit_handle(0), nfit_handle(1)], 0);
    let dir = ssdt.parent().unwrap().to_path_buf();
    let asl = dir.join("tset.asl");
    std::fs::write(&asl, TSET_ASL).unwrap();
    let iasl = Command::new("iasl")
        .arg("-p")
        .arg(dir.join("tset"))
        .arg(&asl)
        .output()
        .expect("iasl (acpica-tools, beside acpiexec)");
    assert!(
        iasl.status.success(),
        "{}",
        String::from_utf8_lossy(&iasl.stdout)
    );
    let notifies = |value: &str| {
        let out = Command::new("timeout")
            .arg("60")
            .arg("acpiexec")
            .arg("-b")
            .arg(format!(
                "execute \\TSET {value}; execute \\_SB.NGED._EVT 16"
            ))
            .arg(&ssdt)
            .arg(dir.join("tset.aml"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "acpiexec failed:\n{text}");
        assert!(!text.contains("ACPI Error"), "ACPICA error:\n{text}");
        // acpiexec runs notify handlers on its own threads (AcpiOsExecute),
        // so the order they print in is not the order the AML sent them.
        let mut got: Vec<String> = text
            .lines()
            .filter_map(|l| l.split_once("Received a Device Notify on ["))
            .map(|(_, rest)| {
                let dev = rest.split(']').next().unwrap_or("");
                let value = rest.split("Value ").nth(1).unwrap_or("");
                format!("{dev} {}", value.split_whitespace().next().unwrap_or(""))
            })
            .collect();
        got.sort();
        got
    };
    // Nothing pending: no notification.
    assert!(notifies("0").is_empty());
    // Bit 0: new media errors, 0x81 on the root.
    assert_eq!(notifies("1"), ["NVDR 0x81"]);
    // Bits 1 and 3: NFIT changed on the root, DIMM 1's health on NV01.
    assert_eq!(notifies("0xA"), ["NV01 0x81", "NVDR 0x80"]);
    // Bit 4 would be DIMM 2's, which this machine does not have.
    assert!(notifies("0x10").is_empty());
}

/// An SSDT with the CXL root and [`acpi::CxlDescription::example`]'s host bridge (`\_SB.CH00`).
fn cxl_ssdt_file() -> PathBuf {
    let cxl = acpi::CxlDescription::example();
    let mut t = acpi::sdt::Sdt::new(*b"SSDT", 2, *b"PMEMVMCX");
    t.append(&acpi::aml::scope("\\_SB", &acpi::cxl_dsdt::devices(&cxl)));
    let dir = std::env::temp_dir().join(format!("pmemvm-acpiexec-{}-osc", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("SSDT-CXL.aml");
    std::fs::write(&path, t.finish()).unwrap();
    path
}

/// acpiexec's spelling of a buffer of little-endian dwords.
fn dwords(values: &[u32]) -> String {
    let bytes: Vec<String> = values
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("({})", bytes.join(" "))
}

/// acpiexec's spelling of `ToUUID (text)`.
fn uuid_arg(text: &str) -> String {
    let bytes = acpi::aml::uuid(text).unwrap();
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("({})", hex.join(" "))
}

fn as_dwords(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn the_cxl_host_bridges_osc_grants_pcie_capability_and_cxl_error_control_only() {
    if !acpiexec_available() {
        pmemvm_skip::skip!("acpiexec not found (install acpica-tools)");
    }
    use acpi::cxl_dsdt::{CXL_OSC_UUID, PCI_OSC_UUID};
    let ssdt = cxl_ssdt_file();
    let osc = |uuid: &str, rev: u32, caps: &[u32]| {
        format!(
            "execute \\_SB.CH00._OSC {} {rev} {} {}",
            uuid_arg(uuid),
            caps.len(),
            dwords(caps)
        )
    };
    // What Linux 6.12 asks (`negotiate_os_control`): a query for PCIe
    // capability, PME, AER and LTR control and CXL memory error reporting,
    // then the request of what the query granted.
    let r = run(
        &ssdt,
        &[
            osc(CXL_OSC_UUID, 1, &[1, 0x1f, 0x3d, 0x3, 1]),
            osc(CXL_OSC_UUID, 1, &[0, 0x1f, 0x10, 0x3, 1]),
            osc(PCI_OSC_UUID, 1, &[0, 0x1f, 0x1f]),
            osc("4309ac30-0d11-11e4-9191-0800200c9a66", 1, &[0, 0, 0x10]),
            osc(CXL_OSC_UUID, 2, &[0, 0x1f, 0x10, 0x3, 1]),
            osc(CXL_OSC_UUID, 1, &[0, 0x1f, 0x10]),
        ],
    );
    let got: Vec<Vec<u32>> = r.into_iter().map(|b| as_dwords(&b.unwrap())).collect();
    assert_eq!(got[0], [0x11, 0x1f, 0x10, 0x3, 1], "query: masked to 0x10");
    assert_eq!(got[1], [0, 0x1f, 0x10, 0x3, 1], "request: granted");
    assert_eq!(got[2], [0x10, 0x1f, 0x10], "PCI UUID: masked to 0x10");
    assert_eq!(got[3], [0x4, 0, 0x10], "another UUID: unrecognized");
    assert_eq!(got[4][0], 0x8, "revision 2: unrecognized revision");
    assert_eq!(got[5][0], 0x2, "a three-dword CXL buffer: failure");
    let _ = std::fs::remove_dir_all(ssdt.parent().unwrap());
}
