//! What a vCPU thread makes of an exit KVM could not finish: a machine
//! check when the instruction lies in a poisoned line, else the sentence
//! that ends the VM (the RIP and the instruction's bytes).

use devices::exit::ExitRequest;
use vm_memory::GuestAddress;

use crate::vstate::vcpu::VcpuContext;

impl VcpuContext {
    /// After an emulation failure: a machine check when the instruction at
    /// RIP lies in a poisoned line of an `mce=on` DIMM (`None` otherwise).
    pub(crate) fn fetch_from_poison(&mut self) -> Option<Option<ExitRequest>> {
        // SAFETY: reading the `internal` member of the kvm_run union is valid
        // right after KVM_RUN returned KVM_EXIT_INTERNAL_ERROR.
        let suberror = unsafe { self.vcpu.get_kvm_run().__bindgen_anon_1.internal.suberror };
        if suberror != kvm_bindings::KVM_INTERNAL_ERROR_EMULATION || self.mce_vendor.is_none() {
            return None;
        }
        let rip = self.vcpu.get_regs().ok()?.rip;
        let linear = self.vcpu.get_sregs().ok()?.cs.base.wrapping_add(rip);
        let gpa = match self.vcpu.translate_gva(linear) {
            Ok(t) if t.valid != 0 => t.physical_address,
            _ => return None,
        };
        let p = self
            .dimms
            .iter()
            .find(|d| d.contains(gpa))
            .and_then(|d| d.poison.clone())?;
        let mce = (self.mce_vendor, self.mce_broadcast.as_deref());
        crate::nvdimm::mce::vcpu_side::fetch(self.index, &self.vcpu, mce, &p, gpa)
    }

    /// "KVM internal error" with the vCPU's RIP and the instruction bytes there.
    pub(crate) fn internal_error(&mut self) -> String {
        // SAFETY: reading the `internal` member of the kvm_run union is valid
        // right after KVM_RUN returned KVM_EXIT_INTERNAL_ERROR.
        let suberror = unsafe { self.vcpu.get_kvm_run().__bindgen_anon_1.internal.suberror };
        let what = match suberror {
            kvm_bindings::KVM_INTERNAL_ERROR_EMULATION => "a KVM emulation failure",
            kvm_bindings::KVM_INTERNAL_ERROR_SIMUL_EX => {
                "a KVM internal error (exception during exception delivery)"
            }
            kvm_bindings::KVM_INTERNAL_ERROR_DELIVERY_EV => "a KVM internal error (event delivery)",
            _ => "a KVM internal error",
        };
        let mut msg = format!("vCPU {} stopped on {what}", self.index);
        if let Ok(regs) = self.vcpu.get_regs() {
            msg.push_str(&format!(" at RIP {:#x}", regs.rip));
            let linear = self
                .vcpu
                .get_sregs()
                .map(|s| s.cs.base.wrapping_add(regs.rip))
                .unwrap_or(regs.rip);
            let phys = match self.vcpu.translate_gva(linear) {
                Ok(t) if t.valid != 0 => Some(t.physical_address),
                _ => None,
            };
            if let Some(pa) = phys {
                let mut bytes = [0u8; 16];
                if vm_memory::Bytes::read_slice(&self.mem, &mut bytes, GuestAddress(pa)).is_ok() {
                    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
                    msg.push_str(&format!(", instruction bytes {}", hex.join(" ")));
                }
            }
        }
        msg
    }
}
