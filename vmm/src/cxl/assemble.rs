//! The CXL platform's devices put together from the placement
//! ([`CxlPlatform`]) and each device's backing file: the memory device's
//! commands over the file's label area and capacity, a Type-3 endpoint and
//! two root ports per host bridge (the device's, and an empty one) in the
//! ECAM, and the bus that routes the range.
//!
//! pmemvm is the machine's firmware too, so it leaves the functions as a
//! BIOS would: each root port's bus numbers set (its host bridge's root bus,
//! the device's bus below it) and its memory window over the host bridge's
//! window, and the device's register BAR placed at the start of that window
//! with memory decoding on. Linux keeps what the firmware assigned.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use devices::cxl::bus::{BusType3, CxlBus, SharedType3};
use devices::cxl::memdev::{MediaWrite, Memdev, MemdevError};
use devices::cxl::root_port::root_port;
use devices::cxl::type3::Type3Device;
use devices::nvdimm_labels::FileLabels;
use devices::pci_ecam::{Ecam, EcamError, SharedFunction};

use super::platform::{CxlPlatform, PlacedCxlDevice};
use crate::layout;

/// Why the devices cannot be put together (each a pmemvm bug or a file the
/// checks before let through).
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// The memory device refused its capacity.
    #[error("CXL memory device {index}: {source}")]
    Memdev {
        /// Which device.
        index: usize,
        /// Why.
        source: MemdevError,
    },
    /// A function does not fit the ECAM (a pmemvm bug).
    #[error("CXL device {index}'s PCI functions do not fit the ECAM (pmemvm bug): {source}")]
    Ecam {
        /// Which device.
        index: usize,
        /// Why.
        source: EcamError,
    },
    /// The backing file could not be opened a second time for the labels.
    #[error("CXL memory device {index}: the backing file could not be opened for its label area: {source}")]
    Io {
        /// Which device.
        index: usize,
        /// Why.
        source: io::Error,
    },
    /// Not one backing per placed device (a pmemvm bug).
    #[error("{backings} CXL backing files for {devices} placed devices (pmemvm bug)")]
    Count {
        /// Backings given.
        backings: usize,
        /// Devices placed.
        devices: usize,
    },
}

/// The file behind one device: its serial number, the file (capacity at
/// offset 0, then `label_size` bytes of label storage area) and whether the
/// guest may write it.
#[derive(Debug, Clone)]
pub struct DeviceFile {
    /// The device serial number (non-zero, the same for the file every boot).
    pub serial: u64,
    /// The backing file.
    pub file: Arc<File>,
    /// The label storage area's bytes after the capacity.
    pub label_size: u32,
}

/// Clear Poison's replacement data, written into the backing file.
struct FileMedia {
    file: Arc<File>,
}

impl MediaWrite for FileMedia {
    fn write_media(&self, dpa: u64, data: &[u8]) -> io::Result<()> {
        // The memdev checked dpa + len against the capacity, which starts at
        // offset 0 of the file.
        self.file.write_all_at(data, dpa)
    }
}

/// The devices of `platform` over `files` (one per device, in order), on a
/// bus whose range starts at [`layout::CXL_ECAM_START`]. `None` without devices.
pub fn assemble(
    platform: &CxlPlatform,
    files: &[DeviceFile],
) -> Result<Option<CxlBus>, AssembleError> {
    let Some(ecam_window) = platform.ecam() else {
        return Ok(None);
    };
    if files.len() != platform.devices.len() {
        return Err(AssembleError::Count {
            backings: files.len(),
            devices: platform.devices.len(),
        });
    }
    let mut ecam = Ecam::new(ecam_window.first_bus, ecam_window.last_bus);
    let mut devices = Vec::with_capacity(files.len());
    let mut chbcr_at = Vec::with_capacity(files.len());
    for (index, (placed, file)) in platform.devices.iter().zip(files).enumerate() {
        let device = type3(index, placed, file)?;
        let port: SharedFunction = Arc::new(Mutex::new(firmware_root_port(placed)));
        let spare: SharedFunction = Arc::new(Mutex::new(firmware_spare_root_port(placed)));
        let function: SharedFunction = device.clone();
        let ecam_err = |source| AssembleError::Ecam { index, source };
        ecam.add((placed.root_port_bus(), 0, 0), port)
            .map_err(ecam_err)?;
        ecam.add((placed.root_port_bus(), SPARE_ROOT_PORT, 0), spare)
            .map_err(ecam_err)?;
        ecam.add((placed.device_bus(), 0, 0), function)
            .map_err(ecam_err)?;
        chbcr_at.push(placed.host_bridge.registers - layout::CXL_ECAM_START.0);
        devices.push(BusType3 {
            device,
            window: (placed.window.base, placed.window.size),
        });
    }
    Ok(Some(CxlBus::new(
        layout::CXL_ECAM_START.0,
        0,
        ecam,
        &chbcr_at,
        devices,
    )))
}

/// Bytes of the bus's range for `devices` devices: from the ECAM to the end
/// of the last host bridge's component registers.
pub fn range_len(devices: usize) -> u64 {
    layout::CXL_CHBCR_START.0 + devices as u64 * acpi::cedt::CHBCR_SIZE - layout::CXL_ECAM_START.0
}

/// Device `index`'s Type-3 endpoint over `file`, its BAR placed.
fn type3(
    index: usize,
    placed: &PlacedCxlDevice,
    file: &DeviceFile,
) -> Result<SharedType3, AssembleError> {
    let labels = FileLabels::new(
        file.file
            .as_ref()
            .try_clone()
            .map_err(|source| AssembleError::Io { index, source })?,
        placed.spec.size,
        file.label_size,
        false,
    );
    let media = FileMedia {
        file: file.file.clone(),
    };
    let memdev = Memdev::new(placed.spec.size, Box::new(labels), Box::new(media))
        .map_err(|source| AssembleError::Memdev { index, source })?;
    let mut device = Type3Device::new(file.serial, memdev);
    // BAR0 (64-bit) at the start of the host bridge's window below 4 GiB.
    device.config_write(0x10, &placed.host_bridge.mmio32.0.to_le_bytes());
    device.config_write(0x14, &0u32.to_le_bytes());
    // Command: memory space and bus master on.
    device.config_write(0x04, &(1u16 << 1 | 1 << 2).to_le_bytes());
    Ok(Arc::new(Mutex::new(device)))
}

/// The PCI device number of each host bridge's second root port, which has
/// nothing below it. With one root port Linux 6.1 gives a host bridge a
/// single pass-through decoder (drivers/cxl/port.c: `rc == 1`), so a device
/// could hold one region at a time; with two it programs the host bridge's
/// own HDM decoders, one per region, as on a platform whose host bridges have
/// several root ports.
pub const SPARE_ROOT_PORT: u8 = 1;

/// The root port of `placed`'s host bridge as firmware leaves it: the
/// device's bus below it.
fn firmware_root_port(placed: &PlacedCxlDevice) -> devices::cxl::pci_config::ConfigSpace {
    let mut port = root_port(0);
    let first = placed.root_port_bus();
    // Primary, secondary and subordinate bus numbers.
    port.write(0x18, &[first, placed.device_bus(), placed.device_bus()]);
    // Memory base and limit (address bits 31:20 in bits 15:4).
    let (base, size) = placed.host_bridge.mmio32;
    let limit = base + (size - 1);
    let window = |a: u32| u16::try_from((a >> 16) & 0xfff0).unwrap_or(0);
    port.write(0x20, &window(base).to_le_bytes());
    port.write(0x22, &window(limit).to_le_bytes());
    // The prefetchable window closed (base above limit): nothing behind the
    // port is prefetchable.
    port.write(0x24, &[0xf1, 0xff, 0x01, 0x00]);
    port.write(0x28, &[0; 8]);
    port
}

/// `placed`'s host bridge's second root port as firmware leaves it: a bus
/// of its own with nothing on it, its windows closed (base above limit).
fn firmware_spare_root_port(placed: &PlacedCxlDevice) -> devices::cxl::pci_config::ConfigSpace {
    let mut port = root_port(SPARE_ROOT_PORT);
    let (first, _) = placed.host_bridge.buses;
    let empty = placed.device_bus() + 1;
    port.write(0x18, &[first, empty, empty]);
    port.write(0x20, &[0xf0, 0xff, 0x00, 0x00]);
    port.write(0x24, &[0xf1, 0xff, 0x01, 0x00]);
    port.write(0x28, &[0; 8]);
    port
}

#[cfg(test)]
#[path = "assemble_tests.rs"]
pub(crate) mod tests;
