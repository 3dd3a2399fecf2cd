//! A guest access to a DIMM that KVM could not complete: the DIMM's place
//! in guest memory, and the sentence naming its backing file and the free
//! space of its file system (a sparse file on a full disk is the usual
//! cause; `prealloc` avoids it).

use std::fs::File;
use std::sync::Arc;

use devices::exit::ExitRequest;

use crate::memory::backing;

/// Where a DIMM sits in guest memory, for telling an MMIO exit inside it
/// (KVM could not reach the backing file's page) from a device access.
#[derive(Debug)]
pub struct DimmRange {
    /// Guest base.
    pub base: u64,
    /// Guest length.
    pub size: u64,
    /// Read-only DIMM.
    pub readonly: bool,
    /// Backing file path for messages.
    pub path: String,
    /// The backing file.
    pub file: Arc<File>,
    /// Its memory slots around poisoned pages (`mce=on`).
    pub poison: Option<Arc<crate::nvdimm::mce::PoisonSlots>>,
}

impl DimmRange {
    pub(crate) fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr - self.base < self.size
    }

    /// Why a page of this DIMM could not be reached, naming the file.
    pub(crate) fn storage_failure(&self, vcpu: usize, access: &str, addr: u64) -> ExitRequest {
        ExitRequest::StorageFailure(format!(
            "vCPU {vcpu}: the guest's {access} at NVDIMM offset {:#x} (guest address {addr:#x}) \
             could not reach backing file {}: {} — use ',prealloc' to allocate it up front",
            addr - self.base,
            self.path,
            backing::space_report(&self.file)
        ))
    }
}

/// Every writable DIMM's file with its file system's free space (KVM's
/// plain EFAULT does not say which page failed).
pub(crate) fn dimm_space_report(dimms: &[DimmRange]) -> String {
    let all: Vec<String> = dimms
        .iter()
        .filter(|d| !d.readonly)
        .map(|d| {
            format!(
                "backing file {}: {}",
                d.path,
                backing::space_report(&d.file)
            )
        })
        .collect();
    if all.is_empty() {
        "no writable NVDIMM backing file".into()
    } else {
        all.join("; ")
    }
}

/// The request for a `KVM_EXIT_MEMORY_FAULT` (EFAULT tagged with the guest
/// address): a storage failure naming the DIMM when the address is in one.
pub fn memory_fault(vcpu: usize, dimms: &[DimmRange], gpa: u64, size: u64) -> ExitRequest {
    match dimms.iter().find(|d| d.contains(gpa)) {
        Some(d) => d.storage_failure(vcpu, "access", gpa),
        None => ExitRequest::StorageFailure(format!(
            "vCPU {vcpu}: KVM could not reach guest memory at {gpa:#x} (+{size:#x}), which is \
             no NVDIMM; {}",
            dimm_space_report(dimms)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dimm(base: u64, path: &str) -> DimmRange {
        DimmRange {
            base,
            size: 1 << 30,
            readonly: false,
            path: path.into(),
            file: Arc::new(File::open("/proc/self/exe").unwrap()),
            poison: None,
        }
    }

    #[test]
    fn memory_fault_in_a_dimm_names_it_with_status_6() {
        let dimms = [dimm(4 << 30, "pm0.img"), dimm(5 << 30, "pm1.img")];
        let r = memory_fault(1, &dimms, (5 << 30) + 0x1000, 0x1000);
        let ExitRequest::StorageFailure(m) = &r else {
            panic!("{r:?}")
        };
        assert!(m.contains("pm1.img") && m.contains("offset 0x1000"), "{m}");
        assert_eq!(crate::exit_status::for_request(&r), 6);
        let r = memory_fault(0, &dimms, 0x1000, 8);
        assert_eq!(crate::exit_status::for_request(&r), 6);
    }
}
