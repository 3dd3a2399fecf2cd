//! Placement of the CXL platform ([`CxlPlatform::place`]) and its ACPI
//! description ([`CxlPlatform::description`]), from which the `acpi` crate
//! builds the CEDT (a CHBS per host bridge, a CFMWS per window), the MCFG
//! (the ECAM) and the DSDT's `ACPI0017`/`ACPI0016` devices — every number in
//! them from the one placement.

use acpi::cedt::{self, FixedWindow, HostBridge};
use acpi::mcfg::EcamWindow;

use crate::config::{size_text, CxlPmemSpec};
use crate::layout;

/// Interleave granularity of a window with one target (any encodable value
/// works; Linux's default region granularity is the window's).
const WINDOW_GRANULARITY: u32 = 256;

/// Why the platform cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CxlError {
    /// More devices than host bridges pmemvm places.
    #[error("{0} --cxl-pmem devices are more than the {max} pmemvm places (one host bridge each)", max = layout::CXL_MAX_DEVICES)]
    TooMany(usize),
    /// The windows do not fit below the guest's physical address width.
    #[error("--cxl-pmem device {index} ({size}) would end at {end:#x}, beyond the guest's {bits}-bit physical address space (at most {limit:#x}); use smaller devices or fewer of them")]
    AddressSpace {
        /// Which device, from 0.
        index: usize,
        /// Its size as the user would type it.
        size: String,
        /// Where its window would end.
        end: u64,
        /// Guest physical address bits.
        bits: u8,
        /// 2^bits.
        limit: u64,
    },
}

/// One device in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedCxlDevice {
    /// The device as given.
    pub spec: CxlPmemSpec,
    /// Its host bridge (`_UID` = root bus, CHBCR, buses, BAR window).
    pub host_bridge: HostBridge,
    /// Its fixed memory window: exactly its capacity, one target.
    pub window: FixedWindow,
}

impl PlacedCxlDevice {
    /// The root port's bus (the host bridge's root bus), device 0, function 0.
    pub fn root_port_bus(&self) -> u8 {
        self.host_bridge.buses.0
    }

    /// The device's bus (the root port's secondary bus), device 0, function 0.
    pub fn device_bus(&self) -> u8 {
        self.host_bridge.buses.0 + 1
    }
}

/// The CXL platform of a machine: its devices in place and the ECAM.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CxlPlatform {
    /// Each device, in `--cxl-pmem` order.
    pub devices: Vec<PlacedCxlDevice>,
}

impl CxlPlatform {
    /// `specs` in place: host bridge *n* as the module says, the windows one
    /// after another from the first [`layout::CXL_CAPACITY_UNIT`] boundary
    /// at or above `above` (the end of everything else in the address space),
    /// each ending below 2^`phys_bits`.
    pub fn place(specs: &[CxlPmemSpec], above: u64, phys_bits: u8) -> Result<Self, CxlError> {
        if specs.len() > layout::CXL_MAX_DEVICES {
            return Err(CxlError::TooMany(specs.len()));
        }
        let bits = phys_bits.min(crate::memory::MAX_PHYS_ADDR_BITS);
        let limit = 1u64 << bits;
        let mut next = above;
        let mut devices = Vec::with_capacity(specs.len());
        for (n, spec) in specs.iter().enumerate() {
            let base = next.checked_next_multiple_of(layout::CXL_CAPACITY_UNIT);
            let end = base.and_then(|b| b.checked_add(spec.size));
            let (base, end) = match (base, end) {
                (Some(b), Some(e)) if e <= limit => (b, e),
                _ => {
                    return Err(CxlError::AddressSpace {
                        index: n,
                        size: size_text(spec.size),
                        end: end.unwrap_or(u64::MAX),
                        bits,
                        limit,
                    })
                }
            };
            devices.push(place_one(n, spec, base));
            next = end;
        }
        Ok(Self { devices })
    }

    /// Whether there is anything to describe.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// The first address above every window (`None` without devices).
    pub fn end(&self) -> Option<u64> {
        self.devices.last().map(|d| d.window.base + d.window.size)
    }

    /// The ECAM: segment 0 from bus 0 to the last bus a host bridge decodes.
    pub fn ecam(&self) -> Option<EcamWindow> {
        let last_bus = self.devices.last()?.host_bridge.buses.1;
        Some(EcamWindow {
            base: layout::CXL_ECAM_START.0,
            segment: 0,
            first_bus: 0,
            last_bus,
        })
    }

    /// What E820 must reserve: the ECAM (Linux takes an MMCONFIG window
    /// only where the firmware reserved it).
    pub fn e820_reserved(&self) -> Vec<(u64, u64)> {
        self.ecam()
            .map(|e| (e.base, e.size()))
            .into_iter()
            .collect()
    }

    /// The host bridges, in device order.
    pub fn host_bridges(&self) -> Vec<HostBridge> {
        self.devices.iter().map(|d| d.host_bridge).collect()
    }

    /// The platform as ACPI describes it (`None` without devices): the CEDT,
    /// the MCFG and the DSDT's CXL objects are built from it.
    pub fn description(&self) -> Option<acpi::CxlDescription> {
        Some(acpi::CxlDescription {
            host_bridges: self.host_bridges(),
            windows: self.devices.iter().map(|d| d.window.clone()).collect(),
            ecam: self.ecam()?,
        })
    }
}

/// Device `n` of `spec` with its window at `base`.
fn place_one(n: usize, spec: &CxlPmemSpec, base: u64) -> PlacedCxlDevice {
    // n < CXL_MAX_DEVICES (16): layout.rs checks at compile time that every
    // bus, BAR window and CHBCR of 16 host bridges fits its range, all of
    // which are below 4 GiB.
    let index = n as u64;
    let root_bus =
        u64::from(layout::CXL_FIRST_BUS) + u64::from(layout::CXL_BUSES_PER_HOST_BRIDGE) * index;
    let root_bus = u8::try_from(root_bus).unwrap_or(u8::MAX);
    let mmio32 = layout::CXL_HOST_BRIDGE_MMIO_START.0 + index * layout::CXL_HOST_BRIDGE_MMIO_SIZE;
    let mmio32 = (
        u32::try_from(mmio32).unwrap_or(u32::MAX),
        u32::try_from(layout::CXL_HOST_BRIDGE_MMIO_SIZE).unwrap_or(u32::MAX),
    );
    let host_bridge = HostBridge {
        uid: u32::from(root_bus),
        registers: layout::CXL_CHBCR_START.0 + index * cedt::CHBCR_SIZE,
        buses: (root_bus, root_bus + layout::CXL_BUSES_PER_HOST_BRIDGE - 1),
        mmio32,
    };
    let window = FixedWindow {
        base,
        size: spec.size,
        granularity: WINDOW_GRANULARITY,
        restrictions: cedt::RESTRICT_TYPE3 | cedt::RESTRICT_PMEM,
        qtg_id: 0,
        targets: vec![host_bridge.uid],
    };
    PlacedCxlDevice {
        spec: spec.clone(),
        host_bridge,
        window,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(sizes: &[u64]) -> Vec<CxlPmemSpec> {
        sizes.iter().map(|&s| CxlPmemSpec::temporary(s)).collect()
    }

    #[test]
    fn each_device_has_its_bridge_buses_and_a_window_of_its_size_above_the_rest() {
        let p = CxlPlatform::place(&specs(&[1 << 30, 512 << 20]), (6 << 30) + 4096, 46).unwrap();
        let [a, b] = &p.devices[..] else {
            panic!("{p:?}")
        };
        assert_eq!(a.host_bridge.uid, 0x0c);
        assert_eq!(a.host_bridge.buses, (0x0c, 0x0f));
        assert_eq!((a.root_port_bus(), a.device_bus()), (0x0c, 0x0d));
        assert_eq!(b.host_bridge.buses, (0x10, 0x13));
        assert_eq!(a.host_bridge.registers, 0xf000_0000);
        assert_eq!(b.host_bridge.registers, 0xf001_0000);
        assert_eq!(a.host_bridge.mmio32, (0xe800_0000, 4 << 20));
        assert_eq!(b.host_bridge.mmio32, (0xe840_0000, 4 << 20));
        // The first 256 MiB boundary above what was there, then back to back.
        assert_eq!(a.window.base, (6 << 30) + (256 << 20));
        assert_eq!(b.window.base, a.window.base + (1 << 30));
        assert_eq!(b.window.targets, vec![0x10]);
        assert_eq!(p.end(), Some(b.window.base + (512 << 20)));
        let ecam = p.ecam().unwrap();
        assert_eq!((ecam.first_bus, ecam.last_bus), (0, 0x13));
        assert_eq!(p.e820_reserved(), vec![(0xe000_0000, 0x14 << 20)]);
    }

    #[test]
    fn no_devices_is_no_platform_and_too_many_or_too_large_are_refused() {
        let none = CxlPlatform::place(&[], 1 << 32, 46).unwrap();
        assert!(none.is_empty() && none.ecam().is_none() && none.description().is_none());
        assert!(none.e820_reserved().is_empty());
        let seventeen = specs(&[256 << 20; 17]);
        assert_eq!(
            CxlPlatform::place(&seventeen, 1 << 32, 46),
            Err(CxlError::TooMany(17))
        );
        let sixteen = CxlPlatform::place(&seventeen[..16], 1 << 32, 46).unwrap();
        assert_eq!(sixteen.ecam().unwrap().last_bus, 0x4b);
        let e =
            CxlPlatform::place(&specs(&[1 << 30, 1 << 30]), (1 << 36) - (1 << 30), 36).unwrap_err();
        assert!(
            matches!(
                e,
                CxlError::AddressSpace {
                    index: 1,
                    bits: 36,
                    ..
                }
            ),
            "{e:?}"
        );
        let m = e.to_string();
        assert!(m.contains("device 1 (1G)") && m.contains("36-bit"), "{m}");
    }

    #[test]
    fn the_tables_carry_the_placement() {
        let p = CxlPlatform::place(&specs(&[2 << 30]), 1 << 32, 46).unwrap();
        let desc = p.description().unwrap();
        let cedt = cedt::build(&desc.host_bridges, &desc.windows).unwrap();
        let d = &p.devices[0];
        let at = |o: usize| u64::from_le_bytes(cedt[o..o + 8].try_into().unwrap());
        // CHBS at 36: uid at +4, base at +16; CFMWS at 36 + 32: base at +8, size at +16.
        assert_eq!(u32::from_le_bytes(cedt[40..44].try_into().unwrap()), 0x0c);
        assert_eq!(at(52), d.host_bridge.registers);
        assert_eq!(at(68 + 8), d.window.base);
        assert_eq!(at(68 + 16), 2 << 30);
        let mcfg = acpi::mcfg::build(&[desc.ecam]);
        assert_eq!(&mcfg[0..4], b"MCFG");
        assert_eq!(
            u64::from_le_bytes(mcfg[44..52].try_into().unwrap()),
            0xe000_0000
        );
        assert_eq!((mcfg[54], mcfg[55]), (0, 0x0f));
        assert_eq!(
            acpi::cxl_dsdt::devices(&desc).len(),
            3,
            "the CXL root, one host bridge and the ECAM's reservation"
        );
    }
}
