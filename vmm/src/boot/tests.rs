use super::*;
use crate::exit_status::Classified;

#[test]
fn a_kernel_the_host_cannot_read_is_not_the_users_mistake() {
    let read = |errno| BootError::Read {
        what: "kernel",
        path: "/k".into(),
        source: std::io::Error::from_raw_os_error(errno),
    };
    assert!(!read(libc::EMFILE).is_usage());
    assert!(!read(libc::EIO).is_usage());
    assert!(read(libc::ENOENT).is_usage());
    assert!(read(libc::EACCES).is_usage());
}

#[test]
fn detects_formats() {
    let d = std::env::temp_dir().join(format!("pmemvm-boot-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let elf = d.join("elf");
    std::fs::write(&elf, b"\x7fELF\x02\x01\x01").unwrap();
    assert_eq!(detect_format(&elf).unwrap(), KernelFormat::Elf);
    let mut bz = vec![0u8; 0x300];
    bz[0x202..0x206].copy_from_slice(b"HdrS");
    let bzp = d.join("bz");
    std::fs::write(&bzp, &bz).unwrap();
    assert_eq!(detect_format(&bzp).unwrap(), KernelFormat::BzImage);
    let junk = d.join("junk");
    std::fs::write(&junk, b"#!/bin/sh\n").unwrap();
    assert!(matches!(
        detect_format(&junk),
        Err(BootError::UnknownFormat(_))
    ));
    assert!(matches!(detect_format(&d), Err(BootError::IsDirectory(..))));
    assert!(matches!(
        detect_format(&d.join("missing")),
        Err(BootError::Read { .. })
    ));
    std::fs::remove_dir_all(&d).unwrap();
}

fn inputs<'a>(kernel: &'a Path, e820: &'a [E820Entry], low_ram_end: u64) -> BootInputs<'a> {
    BootInputs {
        kernel,
        initrd: None,
        initrd_append: &[],
        cmdline: "console=ttyS0",
        e820,
        low_ram_end,
    }
}

fn scratch(name: &str, bytes: &[u8]) -> PathBuf {
    let p = std::env::temp_dir().join(format!("pmemvm-boot-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn bzimage_without_64_bit_entry_is_refused_as_usage() {
    let mut bz = vec![0u8; 0x1000];
    bz[0x202..0x206].copy_from_slice(b"HdrS");
    bz[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
    bz[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
    let p = scratch("bz32", &bz);
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 4 << 20)]).unwrap();
    let e = load(&mem, &inputs(&p, &[], 4 << 20)).unwrap_err();
    assert!(
        matches!(
            e,
            BootError::NotKernel64 {
                version: 0x020f,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.is_usage());
    assert!(e.to_string().contains("64-bit"), "{e}");
    // Cut inside the setup header: named as truncated, not as a memory problem.
    let p2 = scratch("bzcut", &bz[..0x220]);
    let e = load(&mem, &inputs(&p2, &[], 4 << 20)).unwrap_err();
    assert!(matches!(e, BootError::Truncated { .. }), "{e}");
    std::fs::remove_file(p).unwrap();
    std::fs::remove_file(p2).unwrap();
}

#[test]
fn elf_errors_name_their_real_cause() {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 4 << 20)]).unwrap();
    // A segment past the end of the file: truncated, with enough memory.
    let p = scratch(
        "elfcut",
        &elf::tests::elf(0x10_0000, 0x10_0000, 0x10_0000, 0x100, 0x1080),
    );
    let e = load(&mem, &inputs(&p, &[], 4 << 20)).unwrap_err();
    assert!(matches!(e, BootError::Truncated { .. }), "{e}");
    assert!(e.to_string().contains("segment 0"), "{e}");
    // A segment above RAM: too small, with the segment's real end.
    let p2 = scratch(
        "elfhigh",
        &elf::tests::elf(0x200_0000, 0x200_0000, 0x200_0000, 16, 0x1010),
    );
    let e = load(&mem, &inputs(&p2, &[], 4 << 20)).unwrap_err();
    assert!(
        matches!(
            e,
            BootError::KernelTooBig {
                needed: 0x200_0010,
                ..
            }
        ),
        "{e}"
    );
    std::fs::remove_file(p).unwrap();
    std::fs::remove_file(p2).unwrap();
}
