//! The kind of KVM this host has, for tests whose expected behaviour depends
//! on it. A test that applies to one kind is not skipped on the others: it
//! asks [`HostKind::detect`] and checks what that kind must do (PVM: Linux
//! ends in a clear emulation failure; hardware KVM: Linux boots), and the
//! hardware-KVM behaviour is proven on a host without it by running the same
//! test binaries inside the nested L1, whose KVM is real SVM
//! (tests/tests/hw_kvm_tier.rs).

use crate::skip::Skip;

/// What `/dev/kvm` is here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// VT-x or AMD-V (`vmx`/`svm` in /proc/cpuinfo) and a usable `/dev/kvm`:
    /// the kind our users have, and the nested L1's.
    Hardware,
    /// PVM (`kvm_pvm` loaded): ring-0 guest code is emulated, Linux cannot boot.
    Pvm,
}

impl std::fmt::Display for HostKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostKind::Hardware => write!(f, "hardware KVM"),
            HostKind::Pvm => write!(f, "PVM"),
        }
    }
}

impl HostKind {
    /// The kind of this host; a skip (missing hardware) when `/dev/kvm`
    /// cannot be opened read-write or is neither kind.
    pub fn detect() -> Result<HostKind, Skip> {
        crate::tiny::kvm_available()?;
        let host = vmm::host::HostKvm::probe();
        Self::classify(host.hw_virt, host.pvm).ok_or_else(|| {
            Skip::new(
                "this host's /dev/kvm is neither hardware virtualization (no vmx/svm in \
                 /proc/cpuinfo) nor PVM (no kvm_pvm module)",
            )
        })
    }

    /// The kind from the two facts [`vmm::host::HostKvm`] reads.
    pub fn classify(hw_virt: bool, pvm: bool) -> Option<HostKind> {
        match (hw_virt, pvm) {
            (_, true) => Some(HostKind::Pvm),
            (true, false) => Some(HostKind::Hardware),
            (false, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pvm_wins_over_flags_and_neither_is_none() {
        assert_eq!(HostKind::classify(true, false), Some(HostKind::Hardware));
        assert_eq!(HostKind::classify(false, true), Some(HostKind::Pvm));
        assert_eq!(HostKind::classify(true, true), Some(HostKind::Pvm));
        assert_eq!(HostKind::classify(false, false), None);
    }
}
