//! Hole pages keep x86's semantics (`mce=on`), on this host's KVM with tiny
//! guests: every page a bad range touches leaves KVM's memory slots and each
//! access to it is emulated, and what hardware does there still holds.
//!
//! - `poisonrmw`: `add` to a poisoned quad is a machine check at the `add`,
//!   and its store never reaches the file (the load is finished only so KVM
//!   can take the #MC; its write-back is dropped).
//! - `poisonfetch`: a call into a poisoned line is a machine check at the
//!   target, MCG_STATUS MCIP|EIPV without RIPV — not the end of the VM.
//!
//! Both prove the host kind the test runs on (PVM here, an Intel CPU; the
//! hardware-KVM tier runs them inside the nested L1, an AMD CPU).

use std::time::Duration;

use pmemvm_tests::pmemvm::{run, Output, TempDir};
use pmemvm_tests::require;
use pmemvm_tests::tiny::{guest, kvm_available};

const DEADLINE: Duration = Duration::from_secs(60);
const MIB: usize = 1 << 20;

/// Boots tiny guest `name` with a 16 MiB `mce=on` DIMM whose file is
/// `file` and whose block at 1 MiB is bad.
fn boot(name: &str, file: &std::path::Path, cpus: &str) -> Output {
    let k = guest(name).expect("the tiny guest");
    let spec = format!(
        "16M,file={},label-size=0,badblocks=1048576+512,mce=on",
        file.display()
    );
    run(
        &[
            "boot",
            "-v",
            "--kernel",
            &k.to_string_lossy(),
            "--cpus",
            cpus,
            "--nvdimm",
            &spec,
        ],
        DEADLINE,
    )
}

#[test]
fn the_store_of_a_read_modify_write_to_poison_never_reaches_the_file() {
    require!(kvm_available());
    require!(guest("poisonrmw"));
    let d = TempDir::new("mce-rmw");
    let file = d.join("pm0.img");
    let mut data = vec![0u8; 16 * MIB + 4096];
    data[MIB + 8..MIB + 16].copy_from_slice(b"BADBYTES");
    std::fs::write(&file, &data).expect("DIMM file");
    let out = boot("poisonrmw", &file, "1");
    assert_eq!(
        out.status,
        Some(0x4d),
        "0x7c: machine check at another RIP, 0x7d: the add completed\n{}",
        out.dump()
    );
    let after = std::fs::read(&file).expect("DIMM file");
    assert_eq!(
        &after[MIB + 8..MIB + 16],
        b"BADBYTES",
        "the add's store reached the file\n{}",
        out.dump()
    );
}

#[test]
fn a_fetch_from_poison_is_a_machine_check_at_the_fetched_instruction() {
    require!(kvm_available());
    require!(guest("poisonfetch"));
    let d = TempDir::new("mce-fetch");
    let file = d.join("pm0.img");
    let mut data = vec![0u8; 16 * MIB + 4096];
    data[MIB..MIB + 512].fill(0xc3); // `ret`: a fetch of the file's bytes returns
    std::fs::write(&file, &data).expect("DIMM file");
    let out = boot("poisonfetch", &file, "1");
    assert_eq!(
        out.status,
        Some(0x4d),
        "0x7b: MCG_STATUS not MCIP|EIPV, 0x7c: another RIP, 0x7d: the call returned\n{}",
        out.dump()
    );
    assert!(
        out.stderr
            .contains("machine check for the instruction fetch at guest address"),
        "{}",
        out.dump()
    );
}

/// Two vCPUs (proves it with both running at once on separate host CPUs
/// here) each add 1 to a quad in a hole page's good bytes 3,000 times with
/// `lock cmpxchg`: no add is lost.
#[test]
fn locked_instructions_on_a_hole_pages_good_bytes_stay_atomic() {
    require!(kvm_available());
    require!(guest("holelock"));
    let d = TempDir::new("mce-lock");
    let file = d.join("pm0.img");
    std::fs::write(&file, vec![0u8; 16 * MIB + 4096]).expect("DIMM file");
    let out = boot("holelock", &file, "2");
    assert_eq!(
        out.status,
        Some(0x4d),
        "0x7e: an add was lost, 0x7c: vCPU 1 did not start\n{}",
        out.dump()
    );
    assert!(
        out.stdout.contains("count=0000000000001770"),
        "{}",
        out.dump()
    );
}
