use super::*;
use std::os::unix::fs::{FileExt, MetadataExt};

fn tmpdir(name: &str) -> PathBuf {
    crate::fresh_test_dir(&format!("backing-{name}"))
}

fn spec(s: &str) -> NvdimmSpec {
    s.parse().unwrap()
}

#[test]
fn creates_sparse_and_removes_on_failure() {
    let d = tmpdir("create");
    let p = d.join("a.img");
    let b = NvdimmBacking::open(&spec(&format!("64M,file={}", p.display()))).unwrap();
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!(md.len(), (64 << 20) + (128 << 10) + 4096);
    assert!(
        md.blocks() * 512 <= 64 << 10,
        "a new backing file is sparse but for its identity page ({} blocks)",
        md.blocks()
    );
    drop(b); // not kept: setup "failed"
    assert!(!p.exists());
    let mut b = NvdimmBacking::open(&spec(&format!("64M,file={}", p.display()))).unwrap();
    b.keep();
    drop(b);
    assert!(p.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn large_dimm_is_sparse_and_quick() {
    let d = tmpdir("large");
    let p = d.join("big.img");
    let t = std::time::Instant::now();
    let mut b = NvdimmBacking::open(&spec(&format!("128G,file={}", p.display()))).unwrap();
    b.keep();
    let m = b.map().unwrap();
    assert_eq!(m.size(), 128 << 30);
    drop((m, b));
    let mut b = NvdimmBacking::open(&spec(&format!("128G,file={}", p.display()))).unwrap();
    b.keep();
    drop(b);
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
    let md = std::fs::metadata(&p).unwrap();
    assert_eq!(md.len(), (128 << 30) + (128 << 10) + 4096);
    assert!(md.blocks() * 512 <= 64 << 10, "{} blocks", md.blocks());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn refuses_wrong_size_dir_and_readonly_without_flag() {
    let d = tmpdir("refuse");
    let p = d.join("b.img");
    std::fs::write(&p, vec![7u8; 4096]).unwrap();
    let e = NvdimmBacking::open(&spec(&format!("64M,file={}", p.display()))).unwrap_err();
    assert!(
        matches!(e.cause(), Some(FileCause::WrongSize { actual: 4096, .. })),
        "{e}"
    );
    assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; 4096], "untouched");
    let e = NvdimmBacking::open(&spec(&format!("64M,file={}", d.display()))).unwrap_err();
    assert!(matches!(e.cause(), Some(FileCause::IsDirectory(_))), "{e}");
    let e = NvdimmBacking::open(&spec("64M,file=/dev/null")).unwrap_err();
    assert!(matches!(e.cause(), Some(FileCause::NotRegular(_))), "{e}");
    let e =
        NvdimmBacking::open(&spec(&format!("64M,file={}/no/such/x.img", d.display()))).unwrap_err();
    assert!(
        matches!(e.cause(), Some(FileCause::MissingParent(_))),
        "{e}"
    );
    let e = NvdimmBacking::open(&spec(&format!("64M,file={}/x.img,readonly", d.display())))
        .unwrap_err();
    assert!(
        matches!(e.cause(), Some(FileCause::ReadOnlyMissing(_))),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn second_writer_is_refused_and_readers_share() {
    let d = tmpdir("lock");
    let p = d.join("c.img");
    let s = spec(&format!("16M,file={}", p.display()));
    let mut a = NvdimmBacking::open(&s).unwrap();
    a.keep();
    let e = NvdimmBacking::open(&s).unwrap_err();
    assert!(matches!(e.cause(), Some(FileCause::Locked(_))), "{e}");
    drop(a); // lock released with the fd
    let ro = spec(&format!("16M,file={},readonly", p.display()));
    let r1 = NvdimmBacking::open(&ro).unwrap();
    let r2 = NvdimmBacking::open(&ro).unwrap();
    assert!(matches!(
        NvdimmBacking::open(&s).map_err(|e| e.to_string()),
        Err(m) if m.contains("is in use by another pmemvm")
    ));
    assert!(r1.serial.is_some() && r1.serial == r2.serial);
    drop((r1, r2));
    let dup = [s.clone(), s];
    assert!(open_all(&dup).is_err_and(|e| matches!(e.cause(), Some(FileCause::Duplicate(_)))));
    // Not created yet, spelled two ways: still the same file, and nothing is created.
    let new = d.join("new.img");
    let dot = d.join(".").join("new.img");
    let dup = [
        spec(&format!("16M,file={}", new.display())),
        spec(&format!("16M,file={}", dot.display())),
    ];
    assert!(open_all(&dup).is_err_and(|e| matches!(e.cause(), Some(FileCause::Duplicate(_)))));
    assert!(!new.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn temporary_and_mapping() {
    let b = NvdimmBacking::open(&spec("16M,label-size=0")).unwrap();
    assert_eq!(b.map().unwrap().size(), 16 << 20);
    let b = NvdimmBacking::open(&spec("16M")).unwrap();
    assert_eq!(
        b.map().unwrap().size(),
        16 << 20,
        "the region is exactly SIZE; labels are after it"
    );
    assert_eq!(
        b.file.metadata().unwrap().len(),
        (16 << 20) + (128 << 10) + 4096
    );
}

#[test]
fn a_cxl_pmem_file_is_named_by_its_option_and_its_label_area_left_zero() {
    let d = tmpdir("cxl");
    let p = d.join("c.img");
    let s = spec(&format!("256M,file={},label-size=128K", p.display()));
    let mut b = NvdimmBacking::open_as(&s, FileKind::CxlPmem).unwrap();
    assert!(
        b.serial.is_some_and(|s| s != 0),
        "a serial from the identity page"
    );
    b.keep();
    let serial = b.serial;
    drop(b);
    let mut labels = vec![1u8; 128 << 10];
    std::fs::File::open(&p)
        .unwrap()
        .read_exact_at(&mut labels, 256 << 20)
        .unwrap();
    assert!(labels.iter().all(|&b| b == 0), "no NVDIMM index written");
    let again = NvdimmBacking::open_as(&s, FileKind::CxlPmem).unwrap();
    assert_eq!(again.serial, serial, "the same serial every boot");
    drop(again);
    let e = NvdimmBacking::open_as(
        &spec(&format!("512M,file={}", p.display())),
        FileKind::CxlPmem,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(&format!(
            "--cxl-pmem backing file {} was made for --cxl-pmem 256M",
            p.display()
        )),
        "{e}"
    );
    let e = NvdimmBacking::open_as(
        &spec(&format!("256M,file={}", d.display())),
        FileKind::CxlPmem,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("--cxl-pmem backing file ") && e.contains("is a directory"),
        "{e}"
    );
    assert!(!e.contains("NVDIMM") && !e.contains("--nvdimm"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
