//! The CXL step of building a VM: each `--cxl-pmem` device's backing file
//! opened (the NVDIMM layout: capacity, label area, identity page — its
//! serial number the device's), its capacity mapped, the devices put
//! together ([`super::assemble`]) and the range put on the MMIO bus, with a
//! KVM memory slot reserved per endpoint decoder ([`super::memory`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use devices::bus::{Bus, BusError};
use devices::pci_ecam::{Bdf, SharedFunction};
use kvm_ioctls::VmFd;

use super::assemble::{assemble, range_len, AssembleError, DeviceFile};
use super::memory::{slots_needed, CxlMmio};
use super::CxlPlatform;
use crate::config::{size_text, CxlPmemSpec, NvdimmSpec};
use crate::layout;
use crate::memory::backing::{open_all_as, BackingError, FileKind, NvdimmBacking};

/// Why the CXL devices cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum CxlSetupError {
    /// A backing file.
    #[error(transparent)]
    Backing(#[from] BackingError),
    /// Putting the devices together (a pmemvm bug).
    #[error(transparent)]
    Assemble(#[from] AssembleError),
    /// The range does not fit the MMIO bus (a pmemvm bug).
    #[error("placing the CXL platform's MMIO range failed: {0}")]
    Bus(#[from] BusError),
}

impl crate::exit_status::Classified for CxlSetupError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        match self {
            Self::Backing(e) => e.kind(),
            Self::Assemble(_) | Self::Bus(_) => crate::exit_status::ErrorKind::Internal,
        }
    }
}

/// The CXL devices of a running VM.
pub struct CxlMachine {
    /// Each device's backing file, in `--cxl-pmem` order.
    pub backings: Vec<NvdimmBacking>,
    /// The platform's MMIO range (the bus and what its decoders mapped).
    pub mmio: Arc<Mutex<CxlMmio>>,
}

impl std::fmt::Debug for CxlMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CxlMachine")
            .field("backings", &self.backings)
            .finish_non_exhaustive()
    }
}

/// The backing file layout of a `--cxl-pmem` device, as the NVDIMM backing
/// opens it: the capacity at offset 0, the label area, the identity page.
pub fn backing_spec(spec: &CxlPmemSpec) -> NvdimmSpec {
    NvdimmSpec {
        size_text: size_text(spec.size),
        file: spec.file.clone(),
        label_size: spec.label_size,
        ..NvdimmSpec::temporary(spec.size)
    }
}

/// Memory slots the devices of `platform` reserve (at most 16 × 4).
pub fn slots(platform: &CxlPlatform) -> u32 {
    u32::try_from(slots_needed(platform.devices.len())).unwrap_or(u32::MAX)
}

impl CxlMachine {
    /// The bus's PCI functions, for ports 0xCF8/0xCFC (shared with its ECAM).
    pub fn pci_functions(&self) -> BTreeMap<Bdf, SharedFunction> {
        self.mmio
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pci_functions()
    }

    /// The Type-3 devices, in `--cxl-pmem` order (the control socket's
    /// `media --cxl`).
    pub fn devices(&self) -> Vec<devices::cxl::bus::SharedType3> {
        let mmio = self.mmio.lock().unwrap_or_else(|e| e.into_inner());
        mmio.devices()
    }

    /// Keeps the backing files this VM created (setup succeeded).
    pub fn keep(&mut self) {
        self.backings.iter_mut().for_each(NvdimmBacking::keep);
    }
}

/// Opens the devices' files and puts the platform on `mmio`, its decoders'
/// memory slots from `first_slot` on. `None` without devices.
pub fn attach(
    vm_fd: &Arc<VmFd>,
    platform: &CxlPlatform,
    mmio: &mut Bus,
    first_slot: u32,
) -> Result<Option<CxlMachine>, CxlSetupError> {
    if platform.is_empty() {
        return Ok(None);
    }
    let specs: Vec<NvdimmSpec> = platform
        .devices
        .iter()
        .map(|d| backing_spec(&d.spec))
        .collect();
    let backings = open_all_as(&specs, FileKind::CxlPmem)?;
    let mut files = Vec::with_capacity(backings.len());
    let mut mappings = Vec::with_capacity(backings.len());
    for (i, b) in backings.iter().enumerate() {
        files.push(DeviceFile {
            // The identity page's serial; a file of this layout always has
            // one (`open_all_as` writes it), else one from the device's place.
            serial: b.serial.map_or(0x00c0_0000 + i as u64, u64::from),
            file: b.file.clone(),
            label_size: u32::try_from(b.spec.label_size).unwrap_or(0),
        });
        mappings.push(b.map()?);
    }
    let Some(bus) = assemble(platform, &files)? else {
        return Ok(None);
    };
    let range = CxlMmio::new(bus, mappings, vm_fd.clone(), first_slot);
    let range = Arc::new(Mutex::new(range));
    mmio.insert(
        range.clone(),
        layout::CXL_ECAM_START.0,
        range_len(platform.devices.len()),
    )?;
    Ok(Some(CxlMachine {
        backings,
        mmio: range,
    }))
}
