//! Emulated devices of pmemvm: the PIO/MMIO [`bus`], 16550 [`serial`] ports,
//! [`power`] devices (ACPI sleep/reset, i8042 reset, guest-exit port), the VM
//! [`exit`] notifier, the NVDIMM flush-hint device ([`nvdimm`]), the `_DSM`
//! transport ([`nvdimm_dsm`]), label storage ([`nvdimm_labels`]), the root
//! device's scrub and error injection ([`nvdimm_ars`]), DIMM health
//! ([`nvdimm_health`]), the media state both keep ([`nvdimm_media`]), and
//! the [`virtio`] block disks that carry root file systems and transfers, and
//! the [`platform_events`] register of the ACPI Generic Event Device.
//!
//! Every guest-supplied value reaching these devices is treated as hostile:
//! offsets and lengths are bound-checked and nothing here panics on them.

pub mod bus;
pub mod cxl;
pub mod exit;
pub mod interrupt_line;
pub mod mapped_write;
pub mod nvdimm;
pub mod nvdimm_ars;
pub mod nvdimm_dsm;
pub mod nvdimm_dsm_page;
pub mod nvdimm_fit;
pub mod nvdimm_health;
pub mod nvdimm_health_set;
pub mod nvdimm_labels;
pub mod nvdimm_media;
pub mod pci_ecam;
pub mod pci_host;
pub mod platform_events;
pub mod power;
pub mod serial;
pub mod store_gate;
pub mod virtio;

/// A scratch file for unit tests: read-write, already unlinked, `len` bytes of zeros.
#[cfg(test)]
pub(crate) fn scratch_file(len: u64) -> std::fs::File {
    let file = vmm_sys_util::tempfile::TempFile::new()
        .expect("create a scratch file")
        .into_file();
    file.set_len(len).expect("size the scratch file");
    file
}
