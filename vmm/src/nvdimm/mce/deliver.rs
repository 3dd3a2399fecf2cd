//! The machine check itself, through KVM: the vCPUs' machine-check banks
//! (`KVM_X86_SETUP_MCE`), the CPUID bits a guest needs to recover from one,
//! and the delivery of an uncorrected, address-valid error on the vCPU whose
//! load reached a poisoned line (`KVM_X86_SET_MCE`).
//!
//! The load came to pmemvm as an MMIO exit: KVM has decoded it and waits for
//! its data. Raising the #MC right away would let KVM finish the load first
//! and report the *next* instruction, which a kernel's machine-check-safe
//! copy (`copy_mc_*`) cannot recover from. So the load is finished without
//! running the guest (`KVM_RUN` with `immediate_exit`, which completes
//! pending MMIO and returns before any guest instruction — KVM's API
//! documentation), the registers from before it are put back, and only
//! then the #MC is queued: the guest sees it at the load, as on hardware
//! (MCG_STATUS.EIPV and RIPV set).

use kvm_bindings::{kvm_msr_entry, kvm_x86_mce, CpuId, Msrs};
use kvm_ioctls::{Kvm, VcpuExit, VcpuFd};
use vmm_sys_util::ioctl::{ioctl_with_mut_ref, ioctl_with_ref};

use super::McError;

const KVMIO: u32 = 0xAE;
vmm_sys_util::ioctl_iow_nr!(KVM_X86_SETUP_MCE, KVMIO, 0x9c, u64);
vmm_sys_util::ioctl_ior_nr!(KVM_X86_GET_MCE_CAP_SUPPORTED, KVMIO, 0x9d, u64);
vmm_sys_util::ioctl_iow_nr!(KVM_X86_SET_MCE, KVMIO, 0x9e, kvm_x86_mce);

/// `KVM_CAP_MCE`: the number of banks KVM emulates at most.
const KVM_CAP_MCE: libc::c_ulong = 31;

/// Banks the guest gets (as QEMU gives): Intel's error goes in bank 9,
/// AMD's in bank 4 (the northbridge's, where Linux looks for DRAM errors).
pub const BANKS: u64 = BANK_COUNT as u64;
const BANK_COUNT: u32 = 10;

const MCG_CTL_P: u64 = 1 << 8;
const MCG_SER_P: u64 = 1 << 24;
const MSR_IA32_MCG_STATUS: u32 = 0x17a;
const MSR_IA32_MCG_CTL: u32 = 0x17b;
const MSR_IA32_MC0_CTL: u32 = 0x400;
pub(super) const MCG_STATUS_RIPV: u64 = 1 << 0;
const MCG_STATUS_EIPV: u64 = 1 << 1;
pub(super) const MCG_STATUS_MCIP: u64 = 1 << 2;

pub(super) const MCI_STATUS_VAL: u64 = 1 << 63;
pub(super) const MCI_STATUS_UC: u64 = 1 << 61;
const MCI_STATUS_EN: u64 = 1 << 60;
const MCI_STATUS_MISCV: u64 = 1 << 59;
const MCI_STATUS_ADDRV: u64 = 1 << 58;
const MCI_STATUS_S: u64 = 1 << 56;
const MCI_STATUS_AR: u64 = 1 << 55;

/// The guest's CPU vendor, which decides how an error is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// GenuineIntel (and anything not AMD's).
    Intel,
    /// AuthenticAMD or HygonGenuine.
    Amd,
}

impl Vendor {
    /// The vendor CPUID leaf 0 names.
    pub fn of(cpuid: &CpuId) -> Self {
        let amd = cpuid.as_slice().iter().any(|e| {
            e.function == 0 && (e.ebx.to_le_bytes() == *b"Auth" || e.ebx.to_le_bytes() == *b"Hygo")
        });
        if amd {
            Vendor::Amd
        } else {
            Vendor::Intel
        }
    }

    /// The bank this vendor's memory errors go in when the guest leaves it
    /// enabled: Intel 9 (as QEMU's injections), AMD 4 (where Linux looks
    /// for DRAM errors on parts without scalable MCA).
    pub fn bank(self) -> u8 {
        match self {
            Vendor::Intel => 9,
            Vendor::Amd => 4,
        }
    }

    /// The error KVM writes into `bank` for a load from `gpa`:
    /// uncorrected, enabled, address valid, the physical address at page
    /// granularity, and the instruction pointers valid (the load can be
    /// restarted once the page is handled).
    pub fn load_error(self, gpa: u64, bank: u8) -> kvm_x86_mce {
        let common = MCI_STATUS_VAL | MCI_STATUS_UC | MCI_STATUS_EN | MCI_STATUS_ADDRV;
        let mcg_status = MCG_STATUS_MCIP | MCG_STATUS_RIPV | MCG_STATUS_EIPV;
        match self {
            // SRAR "data load" (MCACOD 0x134), software recoverable, action
            // required; MISC: physical address mode (2), LSB 12.
            Vendor::Intel => kvm_x86_mce {
                status: common | MCI_STATUS_MISCV | MCI_STATUS_S | MCI_STATUS_AR | 0x134,
                addr: gpa,
                misc: (2 << 6) | 12,
                mcg_status,
                bank,
                ..Default::default()
            },
            // Bank 4 with extended error code 8 is what Linux takes for a
            // DRAM error on AMD parts without scalable MCA (its
            // `amd_mce_is_memory_error`); error code 0x0833 is a bus error
            // on a generic memory data read.
            Vendor::Amd => kvm_x86_mce {
                status: common | (0x8 << 16) | 0x0833,
                addr: gpa & !0xfff,
                misc: 0,
                mcg_status,
                bank,
                ..Default::default()
            },
        }
    }

    /// The error for an instruction fetch from `gpa`: as [`Self::load_error`]
    /// (Intel's MCACOD an instruction fetch, 0x150), with MCG_STATUS EIPV
    /// and not RIPV — the fetched instruction never ran, so the interrupted
    /// RIP is where the error is and cannot be restarted.
    pub fn fetch_error(self, gpa: u64, bank: u8) -> kvm_x86_mce {
        let mut e = self.load_error(gpa, bank);
        e.mcg_status = MCG_STATUS_MCIP | MCG_STATUS_EIPV;
        if self == Vendor::Intel {
            e.status = (e.status & !0xffff) | 0x150;
        }
        e
    }
}

/// CPUID as a guest needs it to take machine checks and recover: MCE and
/// MCA in leaf 1, and on AMD the MCA overflow recovery and SUCCOR bits of
/// leaf 0x8000_0007 (without SUCCOR Linux treats every uncorrected error as
/// fatal on AMD).
pub fn patch_cpuid(cpuid: &mut CpuId, vendor: Vendor) {
    for e in cpuid.as_mut_slice() {
        match e.function {
            0x1 => e.edx |= (1 << 7) | (1 << 14),
            0x8000_0007 if vendor == Vendor::Amd => e.ebx |= 0b11,
            _ => {}
        }
    }
}

/// The MCG_CAP the vCPUs get: [`BANKS`] banks, MCG_CTL, and software error
/// recovery (MCG_SER_P: without it an uncorrected error is fatal to Linux
/// on Intel); refuses a KVM without machine-check injection.
pub fn mcg_cap(kvm: &Kvm) -> Result<u64, McError> {
    let banks = match u64::try_from(kvm.check_extension_raw(KVM_CAP_MCE)) {
        Ok(b) if b > 0 => BANKS.min(b),
        _ => return Err(McError::NoMce),
    };
    if banks < BANKS {
        return Err(McError::FewBanks(banks));
    }
    let mut supported = 0u64;
    // SAFETY: the ioctl writes one u64 into `supported`, which lives for the
    // call; the fd is /dev/kvm's.
    let r = unsafe { ioctl_with_mut_ref(kvm, KVM_X86_GET_MCE_CAP_SUPPORTED(), &mut supported) };
    if r < 0 {
        return Err(McError::Kvm {
            what: "KVM_X86_GET_MCE_CAP_SUPPORTED",
            source: std::io::Error::last_os_error(),
        });
    }
    if supported & MCG_SER_P == 0 {
        return Err(McError::NoRecovery);
    }
    Ok(banks | (supported & (MCG_CTL_P | MCG_SER_P)))
}

/// Gives `vcpu` the machine-check banks of `cap` (before it first runs).
pub fn setup(vcpu: &VcpuFd, cap: u64) -> Result<(), McError> {
    // SAFETY: the ioctl reads one u64 from `cap`, alive for the call; the
    // fd is the vCPU's.
    let r = unsafe { ioctl_with_ref(vcpu, KVM_X86_SETUP_MCE(), &cap) };
    if r < 0 {
        return Err(McError::Kvm {
            what: "KVM_X86_SETUP_MCE",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// What became of a poisoned load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The #MC is queued at the load, its error in this bank.
    Raised(u8),
    /// The vCPU was still in a machine-check handler (MCG_STATUS.MCIP): a
    /// second #MC would shut it down (on hardware too), so the load was
    /// completed with the line's bytes instead.
    InHandler,
    /// The guest disabled uncorrected-error reporting (MCG_CTL, or MCi_CTL
    /// of every bank): as hardware, nothing is signalled, and the load was
    /// completed with the line's bytes.
    Masked,
}

/// MCi_CTL bit 10 of bank 4 on AMD: GART table walk errors only. Linux on
/// AMD families 0x10 to 0x15 clears it (a quirk for old BIOSes), which
/// leaves DRAM errors enabled on hardware; KVM, though, drops an
/// uncorrected error in any bank whose MCi_CTL is not all ones.
const GART_TBL_WALK: u64 = 1 << 10;

/// True when a bank with MCi_CTL `ctl` reports an uncorrected memory error:
/// all ones, or all ones but bank 4's GART table walk bit.
fn reports_memory_errors(bank: usize, ctl: u64) -> bool {
    ctl == u64::MAX || (bank == 4 && ctl | GART_TBL_WALK == u64::MAX)
}

/// The bank to put the error in: `preferred` when the guest left it
/// enabled for memory errors (see [`reports_memory_errors`]: Linux on the
/// nested tests' AMD family 0x15 CPU clears bank 4's GART bit, and bank 4
/// is the only one `amd_mce_is_memory_error` takes), else the highest
/// enabled bank; `None` when `mcg_ctl` (with MCG_CTL_P) is not all ones or
/// no bank is enabled.
pub fn choose_bank(preferred: u8, mcg_ctl: Option<u64>, ctls: &[u64]) -> Option<u8> {
    if mcg_ctl.is_some_and(|c| c != u64::MAX) {
        return None;
    }
    let enabled = |b: usize| ctls.get(b).is_some_and(|&c| reports_memory_errors(b, c));
    if enabled(usize::from(preferred)) {
        return Some(preferred);
    }
    (0..ctls.len())
        .rev()
        .find(|&b| enabled(b))
        .and_then(|b| u8::try_from(b).ok())
}

/// Most MMIO round trips one instruction may need to finish: a string move
/// over a hole exits once per element (`rep movsb` of a page: 4,096; the
/// kernel's machine-check-safe copy is one), so sixteen pages of bytes.
const COMPLETION_ROUNDS: usize = 1 << 16;

/// Raises a machine check for the load from `gpa` that `vcpu` just exited
/// with. `access` serves the data of any further MMIO exit the load's
/// completion makes (reads fill the buffer, writes store it).
pub fn raise(
    vcpu: &mut VcpuFd,
    vendor: Vendor,
    gpa: u64,
    mut access: impl FnMut(u64, MmioData<'_>),
) -> Result<Delivery, McError> {
    let kvm = |what| {
        move |e: kvm_ioctls::Error| McError::Kvm {
            what,
            source: std::io::Error::from_raw_os_error(e.errno()),
        }
    };
    let before = vcpu.get_regs().map_err(kvm("KVM_GET_REGS"))?;
    let mut finished = false;
    for _ in 0..COMPLETION_ROUNDS {
        vcpu.set_kvm_immediate_exit(1);
        let r = vcpu.run();
        match r {
            Err(e) if e.errno() == libc::EINTR => {
                finished = true;
                break;
            }
            Ok(VcpuExit::MmioRead(addr, data)) => access(addr, MmioData::Read(data)),
            Ok(VcpuExit::MmioWrite(addr, data)) => access(addr, MmioData::Write(data)),
            Ok(other) => return Err(McError::Completion(format!("{other:?}"))),
            Err(e) => return Err(kvm("KVM_RUN")(e)),
        }
    }
    vcpu.set_kvm_immediate_exit(0);
    if !finished {
        return Err(McError::Completion(format!(
            "still exiting after {COMPLETION_ROUNDS} rounds"
        )));
    }
    let state = bank_state(vcpu)?;
    if state.mcg_status & MCG_STATUS_MCIP != 0 {
        return Ok(Delivery::InHandler);
    }
    if choose_bank(vendor.bank(), state.mcg_ctl, &state.ctls).is_none() {
        return Ok(Delivery::Masked);
    }
    vcpu.set_regs(&before).map_err(kvm("KVM_SET_REGS"))?;
    queue(vcpu, vendor, &state, |bank| vendor.load_error(gpa, bank))
}

/// Queues the machine check `error(bank)` on `vcpu` in the bank
/// [`choose_bank`] picks from `state` (read before: MCIP clear).
pub fn queue(
    vcpu: &VcpuFd,
    vendor: Vendor,
    state: &BankState,
    error: impl FnOnce(u8) -> kvm_x86_mce,
) -> Result<Delivery, McError> {
    let Some(bank) = choose_bank(vendor.bank(), state.mcg_ctl, &state.ctls) else {
        return Ok(Delivery::Masked);
    };
    // A bank enabled for memory errors but not all ones (bank 4's GART bit)
    // is opened for KVM while the error goes in, then given its value back.
    let ctl = state
        .ctls
        .get(usize::from(bank))
        .copied()
        .unwrap_or(u64::MAX);
    let ctl_msr = MSR_IA32_MC0_CTL + 4 * u32::from(bank);
    if ctl != u64::MAX {
        write_msr(vcpu, ctl_msr, u64::MAX)?;
    }
    set_mce(vcpu, &error(bank))?;
    if ctl != u64::MAX {
        write_msr(vcpu, ctl_msr, ctl)?;
    }
    // KVM takes an error it then drops without a word (a bank the guest
    // disabled): the load must not be restarted into the same exit forever.
    if read_msrs(vcpu, &[MSR_IA32_MCG_STATUS])?[0] & MCG_STATUS_MCIP == 0 {
        return Err(McError::Completion(format!(
            "KVM did not take the machine check for bank {bank} (MCG_STATUS {:#x})",
            state.mcg_status
        )));
    }
    Ok(Delivery::Raised(bank))
}

/// A vCPU's machine-check state: MCG_STATUS, MCG_CTL and each bank's MCi_CTL.
#[derive(Debug, Clone)]
pub struct BankState {
    pub mcg_status: u64,
    pub mcg_ctl: Option<u64>,
    pub ctls: Vec<u64>,
}

/// Reads `vcpu`'s [`BankState`] (on its own thread).
pub fn bank_state(vcpu: &VcpuFd) -> Result<BankState, McError> {
    let mut index = vec![MSR_IA32_MCG_STATUS, MSR_IA32_MCG_CTL];
    index.extend((0..BANK_COUNT).map(|b| MSR_IA32_MC0_CTL + 4 * b));
    let msrs = read_msrs(vcpu, &index)?;
    Ok(BankState {
        mcg_status: msrs[0],
        mcg_ctl: Some(msrs[1]),
        ctls: msrs[2..].to_vec(),
    })
}

/// `KVM_X86_SET_MCE`: queues `error` on `vcpu` (on its own thread).
pub(super) fn set_mce(vcpu: &VcpuFd, error: &kvm_x86_mce) -> Result<(), McError> {
    // SAFETY: the ioctl reads one `kvm_x86_mce` from `error`, alive for the
    // call; the fd is the vCPU's, used from its own thread.
    let r = unsafe { ioctl_with_ref(vcpu, KVM_X86_SET_MCE(), error) };
    if r < 0 {
        return Err(McError::Kvm {
            what: "KVM_X86_SET_MCE",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Writes one MSR of `vcpu` as the host (KVM takes a bank's MCi_CTL then).
fn write_msr(vcpu: &VcpuFd, index: u32, data: u64) -> Result<(), McError> {
    let msrs = Msrs::from_entries(&[kvm_msr_entry {
        index,
        data,
        ..Default::default()
    }])
    .map_err(|e| McError::Completion(format!("MSR list: {e:?}")))?;
    match vcpu.set_msrs(&msrs) {
        Ok(1) => Ok(()),
        Ok(_) => Err(McError::Completion(format!(
            "KVM did not take MSR {index:#x} = {data:#x}"
        ))),
        Err(e) => Err(McError::Kvm {
            what: "KVM_SET_MSRS",
            source: std::io::Error::from_raw_os_error(e.errno()),
        }),
    }
}

/// The data of an MMIO exit made while a load completes.
#[derive(Debug)]
pub enum MmioData<'a> {
    /// Fill it.
    Read(&'a mut [u8]),
    /// Store it.
    Write(&'a [u8]),
}

/// The values of the MSRs `index`, in order.
fn read_msrs(vcpu: &VcpuFd, index: &[u32]) -> Result<Vec<u64>, McError> {
    let entries: Vec<kvm_msr_entry> = index
        .iter()
        .map(|&i| kvm_msr_entry {
            index: i,
            ..Default::default()
        })
        .collect();
    let mut msrs = Msrs::from_entries(&entries)
        .map_err(|e| McError::Completion(format!("MSR list: {e:?}")))?;
    match vcpu.get_msrs(&mut msrs) {
        Ok(n) if n == index.len() => Ok(msrs.as_slice().iter().map(|e| e.data).collect()),
        Ok(n) => Err(McError::Completion(format!(
            "KVM read {n} of the {} machine-check MSRs",
            index.len()
        ))),
        Err(e) => Err(McError::Kvm {
            what: "KVM_GET_MSRS",
            source: std::io::Error::from_raw_os_error(e.errno()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::kvm_cpuid_entry2;

    fn cpuid(vendor: &[u8; 12]) -> CpuId {
        let e = |function, ebx, edx, ecx| kvm_cpuid_entry2 {
            function,
            ebx,
            ecx,
            edx,
            ..Default::default()
        };
        let w =
            |i: usize| u32::from_le_bytes([vendor[i], vendor[i + 1], vendor[i + 2], vendor[i + 3]]);
        CpuId::from_entries(&[
            e(0, w(0), w(4), w(8)),
            e(1, 0, 0, 0),
            e(0x8000_0007, 0, 0, 0),
        ])
        .unwrap()
    }

    #[test]
    fn the_vendor_decides_the_bank_and_the_error_code() {
        assert_eq!(Vendor::of(&cpuid(b"AuthenticAMD")), Vendor::Amd);
        assert_eq!(Vendor::of(&cpuid(b"HygonGenuine")), Vendor::Amd);
        assert_eq!(Vendor::of(&cpuid(b"GenuineIntel")), Vendor::Intel);
        let i = Vendor::Intel.load_error(0x1_2345_6789, Vendor::Intel.bank());
        assert_eq!(i.bank, 9);
        assert_eq!(i.addr, 0x1_2345_6789);
        // VAL UC EN MISCV ADDRV S AR, MCACOD data load.
        assert_eq!(i.status, 0xBD80_0000_0000_0134);
        assert_eq!(i.misc, 0x8c);
        assert_eq!(i.mcg_status, 0b111);
        let a = Vendor::Amd.load_error(0x1_2345_6789, Vendor::Amd.bank());
        assert_eq!(a.bank, 4);
        assert_eq!(a.addr, 0x1_2345_6000);
        assert_eq!((a.status >> 16) & 0x1f, 8, "extended error code 8: DRAM");
        assert_eq!(a.status >> 58, 0b10_1101, "VAL, UC, EN, ADDRV; no PCC");
        assert!(u64::from(a.bank) < BANKS && u64::from(i.bank) < BANKS);
    }

    #[test]
    fn the_error_goes_in_a_bank_the_guest_left_enabled() {
        let all = [u64::MAX; 10];
        assert_eq!(choose_bank(4, Some(u64::MAX), &all), Some(4));
        assert_eq!(choose_bank(9, None, &all), Some(9));
        // Linux on AMD families 0x10-0x15 clears bit 10 of bank 4's MCi_CTL
        // (GART table walk errors only): DRAM errors still go to bank 4,
        // the one Linux takes as memory; any other bit off disables it.
        let mut amd = all;
        amd[4] = !(1 << 10);
        assert_eq!(choose_bank(4, Some(u64::MAX), &amd), Some(4));
        amd[4] = !(1 << 9);
        assert_eq!(choose_bank(4, Some(u64::MAX), &amd), Some(9));
        let mut intel = all;
        intel[9] = !(1 << 10);
        assert_eq!(
            choose_bank(9, None, &intel),
            Some(8),
            "bit 10 is bank 4's only"
        );
        let mut few = [0u64; 10];
        few[2] = u64::MAX;
        assert_eq!(choose_bank(4, None, &few), Some(2));
        assert_eq!(choose_bank(4, None, &[0; 10]), None, "every bank off");
        assert_eq!(choose_bank(4, Some(0), &all), None, "MCG_CTL off");
        assert_eq!(choose_bank(12, None, &all), Some(9), "past the banks");
    }

    #[test]
    fn amd_guests_get_succor_and_everyone_mce_and_mca() {
        let mut c = cpuid(b"AuthenticAMD");
        patch_cpuid(&mut c, Vendor::Amd);
        let leaf = |c: &CpuId, f| *c.as_slice().iter().find(|e| e.function == f).unwrap();
        assert_eq!(leaf(&c, 1).edx & 0x4080, 0x4080);
        assert_eq!(leaf(&c, 0x8000_0007).ebx & 3, 3);
        let mut c = cpuid(b"GenuineIntel");
        patch_cpuid(&mut c, Vendor::Intel);
        assert_eq!(leaf(&c, 0x8000_0007).ebx, 0);
        assert_eq!(leaf(&c, 1).edx & 0x4080, 0x4080);
    }
}
