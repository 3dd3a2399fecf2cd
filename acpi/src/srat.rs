//! SRAT (System Resource Affinity Table), ACPI 6.5 §5.2.16: which NUMA
//! proximity domain each vCPU and each memory range belongs to.
//!
//! pmemvm's guest has the vCPUs and RAM in proximity domain 0 and each
//! NVDIMM in a domain of its own (the NFIT SPA range names the same domain
//! with its "proximity domain valid" flag), as on Optane platforms: Linux
//! then gives each region a real `numa_node` (the nearest node with CPUs)
//! and `target_node` (the DIMM's own node), and `daxctl reconfigure-device
//! --mode=system-ram` onlines the DIMM as a CPU-less NUMA node.
//!
//! Structures (little-endian):
//!
//! * Processor Local APIC Affinity (type 0, 16 bytes): 2 proximity domain
//!   bits 7:0, 3 APIC id, 4 flags (bit 0 enabled), 8 local SAPIC EID, 9
//!   proximity domain bits 31:8, 12 clock domain.
//! * Memory Affinity (type 1, 40 bytes): 2 proximity domain, 6 reserved, 8
//!   base, 16 length, 24 reserved, 28 flags, 32 reserved.
//!
//! Memory flags and what Linux 6.1 (`drivers/acpi/numa/srat.c`,
//! `acpi_parse_memory_affinity`) does with them: *enabled* (bit 0) — an
//! entry without it is ignored; *hot-pluggable* (bit 1) — the range is
//! marked hotplug in memblock (a no-op for NVDIMM ranges, which are not
//! E820 RAM) and counts towards `max_possible_pfn`; *non-volatile* (bit 2)
//! — only printed ("SRAT: Node 1 PXM 1 [mem ...] hotplug non-volatile").
//! An NVDIMM range is therefore enabled + hot-pluggable + non-volatile
//! (QEMU sets enabled + non-volatile; the hot-pluggable bit is what the
//! range becomes with `system-ram`). Linux moves a memory-affinity block
//! that covers no RAM to its reserved NUMA info, which is where
//! `phys_to_target_node()` finds the DIMM's node.
//!
//! Linux numbers its nodes densely in the order the SRAT first names each
//! proximity domain, processor entries before memory entries; pmemvm lists
//! the vCPUs (domain 0), then RAM (domain 0), then the DIMMs by ascending
//! domain, so guest node *N* is domain *N* when the domains have no gaps
//! (the VMM checks that).
//!
//! Why not rust-vmm's `acpi_tables` crate: its SRAT (0.2) has memory
//! affinity, generic initiator and RISC-V RINTC structures but no Processor
//! Local APIC affinity, which an x86 guest needs, and this crate builds
//! every other table with its own [`Sdt`] header (OEM ids, checksums) and
//! no dependencies; one more 60-line table does not justify a second table
//! builder.

use crate::sdt::{Sdt, OEM_TABLE_ID};
use crate::GuestPlatform;

/// SRAT revision 3 (ACPI 6.x): 32-bit proximity domains everywhere.
const SRAT_REVISION: u8 = 3;
/// Structure type: Processor Local APIC/SAPIC Affinity.
const TYPE_LAPIC_AFFINITY: u8 = 0;
/// Structure type: Memory Affinity.
const TYPE_MEMORY_AFFINITY: u8 = 1;
/// Length of a Processor Local APIC Affinity structure.
pub const LAPIC_AFFINITY_LEN: u8 = 16;
/// Length of a Memory Affinity structure.
pub const MEMORY_AFFINITY_LEN: u8 = 40;
/// Processor affinity flag: enabled.
const LAPIC_AFFINITY_ENABLED: u32 = 1;
/// Memory affinity flag: enabled.
pub const MEM_ENABLED: u32 = 1 << 0;
/// Memory affinity flag: hot-pluggable.
pub const MEM_HOT_PLUGGABLE: u32 = 1 << 1;
/// Memory affinity flag: non-volatile.
pub const MEM_NON_VOLATILE: u32 = 1 << 2;

/// One Processor Local APIC Affinity structure (type 0, 16 bytes).
pub fn lapic_affinity(apic_id: u8, domain: u32) -> Vec<u8> {
    let d = domain.to_le_bytes();
    let mut s = Vec::with_capacity(LAPIC_AFFINITY_LEN.into());
    s.push(TYPE_LAPIC_AFFINITY); // 0 type
    s.push(LAPIC_AFFINITY_LEN); // 1 length
    s.push(d[0]); // 2 proximity domain [7:0]
    s.push(apic_id); // 3 APIC id
    s.extend_from_slice(&LAPIC_AFFINITY_ENABLED.to_le_bytes()); // 4 flags
    s.push(0); // 8 local SAPIC EID
    s.extend_from_slice(&d[1..4]); // 9 proximity domain [31:8]
    s.extend_from_slice(&0u32.to_le_bytes()); // 12 clock domain
    s
}

/// One Memory Affinity structure (type 1, 40 bytes).
pub fn memory_affinity(domain: u32, base: u64, length: u64, flags: u32) -> Vec<u8> {
    let mut s = Vec::with_capacity(MEMORY_AFFINITY_LEN.into());
    s.push(TYPE_MEMORY_AFFINITY); // 0 type
    s.push(MEMORY_AFFINITY_LEN); // 1 length
    s.extend_from_slice(&domain.to_le_bytes()); // 2 proximity domain
    s.extend_from_slice(&0u16.to_le_bytes()); // 6 reserved
    s.extend_from_slice(&base.to_le_bytes()); // 8 base address (low, high)
    s.extend_from_slice(&length.to_le_bytes()); // 16 length (low, high)
    s.extend_from_slice(&0u32.to_le_bytes()); // 24 reserved
    s.extend_from_slice(&flags.to_le_bytes()); // 28 flags
    s.extend_from_slice(&0u64.to_le_bytes()); // 32 reserved
    s
}

/// Builds the SRAT: every vCPU and RAM range in domain 0, then each NVDIMM
/// with a proximity domain, ordered by domain (stable within one domain).
pub fn build(desc: &GuestPlatform) -> Vec<u8> {
    let mut t = Sdt::new(*b"SRAT", SRAT_REVISION, OEM_TABLE_ID);
    t.u32(1); // 36 reserved, 1 for backward compatibility
    t.u64(0); // 40 reserved
    for cpu in 0..desc.cpus {
        t.append(&lapic_affinity(u8::try_from(cpu).unwrap_or(u8::MAX), 0));
    }
    for &(base, length) in &desc.ram {
        t.append(&memory_affinity(0, base, length, MEM_ENABLED));
    }
    let mut dimms: Vec<(u32, u64, u64)> = desc
        .nvdimms
        .iter()
        .filter_map(|d| Some((d.proximity_domain?, d.spa_base, d.spa_size)))
        .collect();
    dimms.sort_by_key(|d| d.0);
    for (domain, base, size) in dimms {
        let flags = MEM_ENABLED | MEM_HOT_PLUGGABLE | MEM_NON_VOLATILE;
        t.append(&memory_affinity(domain, base, size, flags));
    }
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sdt::checksum;
    use crate::{nfit_handle, NvdimmDescription};

    #[test]
    fn lapic_affinity_golden() {
        // Subtable Type 00 [Processor Local APIC/SAPIC Affinity], Length 10,
        // Proximity Domain Low(8) 02, Apic ID 01, Flags 00000001 (Enabled),
        // Local Sapic EID 00, Proximity Domain High(24) 000001, Clock Domain 0
        #[rustfmt::skip]
        let expected: [u8; 16] = [
            0x00, 0x10, 0x02, 0x01,             // type, length, domain[7:0], APIC id
            0x01, 0x00, 0x00, 0x00,             // flags: enabled
            0x00, 0x01, 0x00, 0x00,             // SAPIC EID, domain[31:8]
            0x00, 0x00, 0x00, 0x00,             // clock domain
        ];
        assert_eq!(lapic_affinity(1, 0x102), expected);
    }

    #[test]
    fn memory_affinity_golden() {
        // Subtable Type 01 [Memory Affinity], Length 28, Proximity Domain
        // 00000001, Reserved1 0000, Base Address 0000000100000000, Address
        // Length 0000000040000000, Reserved2 0, Flags 00000007 (Enabled,
        // Hot Pluggable, Non-Volatile), Reserved3 0
        #[rustfmt::skip]
        let expected: [u8; 40] = [
            0x01, 0x28, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // type, length, domain, reserved
            0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, // base 4 GiB
            0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, // length 1 GiB
            0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, // reserved, flags
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // reserved
        ];
        let flags = MEM_ENABLED | MEM_HOT_PLUGGABLE | MEM_NON_VOLATILE;
        assert_eq!(memory_affinity(1, 1 << 32, 1 << 30, flags), expected);
    }

    fn dimm(i: u32, domain: Option<u32>) -> NvdimmDescription {
        NvdimmDescription {
            handle: nfit_handle(i),
            spa_base: (4 + u64::from(i)) << 30,
            spa_size: 1 << 30,
            flush_hint_addr: None,
            readonly: false,
            serial: i,
            label_size: 0,
            proximity_domain: domain,
        }
    }

    #[test]
    fn table_golden() {
        let desc = GuestPlatform {
            // Listed out of domain order: the table sorts them.
            nvdimms: vec![dimm(0, Some(2)), dimm(1, Some(1)), dimm(2, None)],
            ..GuestPlatform::example(2)
        };
        let t = build(&desc);
        assert_eq!(checksum(&t), 0);
        assert_eq!(&t[0..4], b"SRAT");
        assert_eq!(t[8], 3, "revision");
        assert_eq!(t.len(), 48 + 2 * 16 + 3 * 40);
        assert_eq!(
            u32::from_le_bytes([t[4], t[5], t[6], t[7]]) as usize,
            t.len()
        );
        // [024h 0036   4]   Table Revision : 00000001
        // [028h 0040   8]   Reserved : 0000000000000000
        assert_eq!(t[36..48], [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(t[48..64], lapic_affinity(0, 0)[..]);
        assert_eq!(t[64..80], lapic_affinity(1, 0)[..]);
        // RAM [0, 512 MiB): domain 0, enabled.
        assert_eq!(
            t[80..120],
            memory_affinity(0, 0, 512 << 20, MEM_ENABLED)[..]
        );
        // DIMM 1 (domain 1, at 5 GiB) before DIMM 0 (domain 2, at 4 GiB); DIMM 2 has none.
        assert_eq!(t[120..160], memory_affinity(1, 5 << 30, 1 << 30, 7)[..]);
        assert_eq!(t[160..200], memory_affinity(2, 4 << 30, 1 << 30, 7)[..]);
    }
}
