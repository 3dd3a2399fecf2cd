//! Writes the tables of a sample machine (2 vCPUs, 2 NVDIMMs, one of them
//! read-only and label-less) to a folder as `<name>.aml` plus `RSDP.aml`,
//! for `iasl -d`:
//!
//! ```text
//! cargo run -p acpi --example dump -- /tmp/acpi && cd /tmp/acpi && iasl -d *.aml
//! ```
//! `--no-dsm` leaves the `_DSM` label transport out (as for a machine whose
//! DIMMs are all label-less). `pmemvm acpi --out DIR` does the same for a
//! real configuration.

use acpi::{build_tables, nfit_handle, DsmTransport, GuestPlatform, NvdimmDescription};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: dump OUT_DIR [--no-dsm]")?;
    let no_dsm = std::env::args().nth(2).as_deref() == Some("--no-dsm");
    let dimm = |i: u32, readonly: bool, label_size: u32| NvdimmDescription {
        handle: nfit_handle(i),
        spa_base: (4 + u64::from(i)) << 30,
        spa_size: 256 << 20,
        flush_hint_addr: Some(0xfe00_0000 + u64::from(i) * 0x1000),
        readonly,
        serial: 0x1000 + i,
        label_size,
        proximity_domain: None,
    };
    let desc = GuestPlatform {
        serial_ports: vec![(0x3f8, 4), (0x2f8, 3)],
        nvdimms: vec![dimm(0, false, 128 << 10), dimm(1, true, 0)],
        dsm: (!no_dsm).then_some(DsmTransport::example()),
        ..GuestPlatform::example(2)
    };
    let t = build_tables(&desc, 0xe_0000, 0xe_1000, 0x1_e000)?;
    std::fs::create_dir_all(&dir)?;
    std::fs::write(format!("{dir}/RSDP.aml"), &t.rsdp)?;
    for table in &t.tables {
        std::fs::write(format!("{dir}/{}.aml", table.name), &table.bytes)?;
        println!(
            "{:#010x} {:5} {}",
            table.addr,
            table.bytes.len(),
            table.name
        );
    }
    Ok(())
}
