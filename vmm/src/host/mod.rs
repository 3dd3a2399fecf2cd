//! Facts about the host that decide what a guest can do here: hardware
//! virtualization flags, and whether /dev/kvm is PVM (pagetable-based
//! virtualization, which emulates guest kernel code and cannot run an
//! unmodified Linux kernel); [`machine`] describes the host for run and
//! bench records, [`smaps`] measures the page sizes backing guest memory on
//! the host, [`kvm_stats`] the sizes KVM maps it to the guest with.

use std::path::Path;

pub mod kvm_stats;
pub mod machine;
pub mod smaps;

/// Whether the `flags` lines of /proc/cpuinfo's text list `flag` ("svm").
pub fn cpu_flag(cpuinfo: &str, flag: &str) -> bool {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == flag))
}

/// The hypervisor's CPUID signature (leaf 0x4000_0000: "KVMKVMKVM",
/// "TCGTCGTCGTCG", ...) when this machine is itself a guest.
pub fn hypervisor_signature() -> Option<String> {
    use std::arch::x86_64::__cpuid;
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86-64 CPU and only reads; leaf 1 and
    // the hypervisor leaf have no side effects.
    let (hv, sig) = unsafe { (__cpuid(1).ecx & (1 << 31) != 0, __cpuid(0x4000_0000)) };
    if !hv {
        return None;
    }
    let bytes: Vec<u8> = [sig.ebx, sig.ecx, sig.edx]
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .collect();
    Some(
        String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .to_string(),
    )
}

/// True when this machine is a QEMU TCG guest (the nested tier's L1):
/// its emulated SVM gives a nested guest's `int3` to the guest even when
/// KVM intercepts #BP, so the gdb stub uses debug registers for breakpoints.
pub fn under_tcg() -> bool {
    hypervisor_signature().is_some_and(|s| s.starts_with("TCGTCG"))
}

/// The way on for a Linux guest on a KVM that cannot run it.
pub const WAY_ON: &str = "use a host with hardware virtualization, or add --engine nested to \
     run pmemvm inside a QEMU TCG L1 on this host (slow, figures functional only)";

/// What pmemvm knows about the host's KVM.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostKvm {
    /// `vmx` or `svm` present in /proc/cpuinfo.
    pub hw_virt: bool,
    /// The `kvm_pvm` module is loaded.
    pub pvm: bool,
}

impl HostKvm {
    /// This host's KVM: /proc/cpuinfo and /sys/module read once per process
    /// (every later call gets the first answer).
    pub fn probe() -> Self {
        static HOST: std::sync::OnceLock<HostKvm> = std::sync::OnceLock::new();
        HOST.get_or_init(|| {
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            Self::from_sources(&cpuinfo, Path::new("/sys/module/kvm_pvm").exists())
        })
        .clone()
    }

    /// Decides from the text of /proc/cpuinfo and whether kvm_pvm is loaded.
    pub fn from_sources(cpuinfo: &str, pvm_module: bool) -> Self {
        let hw_virt = cpu_flag(cpuinfo, "vmx") || cpu_flag(cpuinfo, "svm");
        Self {
            hw_virt,
            pvm: pvm_module,
        }
    }

    /// True when an unmodified Linux kernel cannot be expected to boot on this KVM.
    pub fn cannot_run_linux(&self) -> bool {
        self.pvm || !self.hw_virt
    }

    /// Why an unmodified kernel cannot run on this KVM (the cause only: each
    /// caller adds the way on that fits its command, e.g. [`WAY_ON`]).
    pub fn explanation(&self) -> Option<String> {
        self.cannot_run_linux().then(|| {
            format!(
                "this host's KVM cannot run an unmodified kernel: {} — guest kernel code is \
                 emulated instruction by instruction and Linux stops in that emulator",
                match (self.pvm, self.hw_virt) {
                    (true, false) => "it is PVM (kvm_pvm loaded, no vmx/svm in /proc/cpuinfo)",
                    (true, true) => "it is PVM (kvm_pvm loaded)",
                    _ => "/proc/cpuinfo has no vmx/svm flag",
                }
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_hosts() {
        let intel = "processor : 0\nflags : fpu vme vmx sse2\n";
        let plain = "processor : 0\nflags : fpu vme sse2 hypervisor\n";
        assert!(!HostKvm::from_sources(intel, false).cannot_run_linux());
        assert!(HostKvm::from_sources(intel, false).explanation().is_none());
        let pvm = HostKvm::from_sources(plain, true);
        assert!(pvm.cannot_run_linux());
        assert!(pvm.explanation().unwrap().contains("PVM"));
        assert!(HostKvm::from_sources("flags : svm\n", false).hw_virt);
        assert!(!HostKvm::from_sources("flags : svmx\n", false).hw_virt);
    }
}
