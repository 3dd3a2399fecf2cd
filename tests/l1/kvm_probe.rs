//! `pmemvm-kvm-probe`: proves that `/dev/kvm` runs guest code.
//!
//! Opens `/dev/kvm`, checks `KVM_GET_API_VERSION`, creates a VM with one
//! vCPU and 4 KiB of memory holding a real-mode program that writes 0x42 to
//! port 0x10 and halts, runs it and checks both exits. Prints one line
//! `kvm-probe: api=N out=0xNN hlt=ok` and exits 0 on success; on failure
//! prints what went wrong and exits 1. The nested harness runs it inside L1.

use std::process::ExitCode;

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{Kvm, VcpuExit};

/// Guest physical address of the program.
const CODE_ADDR: u64 = 0x1000;
/// Size of the guest memory slot.
const MEM_SIZE: usize = 0x1000;
/// Port the program writes to.
const PROBE_PORT: u16 = 0x10;
/// Real-mode program: `mov al, 0x42; out 0x10, al; hlt`.
const PROGRAM: [u8; 5] = [0xb0, 0x42, 0xe6, 0x10, 0xf4];

/// Everything that can go wrong while probing.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("cannot open /dev/kvm: {0}")]
    Open(kvm_ioctls::Error),
    #[error("KVM API version is {0}, expected 12")]
    ApiVersion(i32),
    #[error("KVM ioctl {what} failed: {source}")]
    Ioctl {
        what: &'static str,
        source: kvm_ioctls::Error,
    },
    #[error("cannot allocate guest memory")]
    Mmap,
    #[error("unexpected vCPU exit: {0}")]
    Exit(String),
}

fn ioctl<T>(what: &'static str, r: Result<T, kvm_ioctls::Error>) -> Result<T, ProbeError> {
    r.map_err(|source| ProbeError::Ioctl { what, source })
}

fn probe() -> Result<String, ProbeError> {
    let kvm = Kvm::new().map_err(ProbeError::Open)?;
    let api = kvm.get_api_version();
    if api != 12 {
        return Err(ProbeError::ApiVersion(api));
    }
    let vm = ioctl("KVM_CREATE_VM", kvm.create_vm())?;

    // SAFETY: anonymous private mapping of MEM_SIZE bytes at a kernel-chosen
    // address; the result is checked against MAP_FAILED before use. It is
    // never unmapped: the process exits right after the probe.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            MEM_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if mem == libc::MAP_FAILED {
        return Err(ProbeError::Mmap);
    }
    // SAFETY: `mem` points to MEM_SIZE writable bytes and PROGRAM is shorter.
    unsafe { std::ptr::copy_nonoverlapping(PROGRAM.as_ptr(), mem.cast::<u8>(), PROGRAM.len()) };
    let region = kvm_userspace_memory_region {
        slot: 0,
        guest_phys_addr: CODE_ADDR,
        memory_size: MEM_SIZE as u64,
        userspace_addr: mem as u64,
        flags: 0,
    };
    // SAFETY: the region describes the mapping above, which stays valid for
    // the life of the VM (the process exits first).
    ioctl("KVM_SET_USER_MEMORY_REGION", unsafe {
        vm.set_user_memory_region(region)
    })?;

    let mut vcpu = ioctl("KVM_CREATE_VCPU", vm.create_vcpu(0))?;
    let mut sregs = ioctl("KVM_GET_SREGS", vcpu.get_sregs())?;
    sregs.cs.base = 0;
    sregs.cs.selector = 0;
    ioctl("KVM_SET_SREGS", vcpu.set_sregs(&sregs))?;
    let mut regs = ioctl("KVM_GET_REGS", vcpu.get_regs())?;
    regs.rip = CODE_ADDR;
    regs.rflags = 2;
    ioctl("KVM_SET_REGS", vcpu.set_regs(&regs))?;

    let mut out = None;
    for _ in 0..16 {
        match ioctl("KVM_RUN", vcpu.run())? {
            VcpuExit::IoOut(PROBE_PORT, data) if data.len() == 1 => out = Some(data[0]),
            VcpuExit::Hlt => {
                return match out {
                    Some(0x42) => Ok(format!("kvm-probe: api={api} out=0x42 hlt=ok")),
                    other => Err(ProbeError::Exit(format!("halted after out {other:?}"))),
                };
            }
            other => return Err(ProbeError::Exit(format!("{other:?}"))),
        }
    }
    Err(ProbeError::Exit("no halt after 16 exits".to_string()))
}

fn main() -> ExitCode {
    match probe() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kvm-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
