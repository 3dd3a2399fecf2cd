//! The identity block of an NVDIMM backing file: the DIMM's serial number
//! lives with its file, not with the position of its `--nvdimm` option.
//!
//! Linux derives a region's interleave-set cookie from the serial numbers in
//! the NFIT control regions and writes that cookie into every namespace
//! label; a label whose cookie does not match is ignored. If the serial
//! followed the order of the `--nvdimm` options, swapping or removing a DIMM
//! would make labelled namespaces disappear. So each file-backed DIMM keeps
//! its serial in the last 4 KiB of its backing file, after the label area
//! (outside everything the guest can reach):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 16 | magic `PMEMVM-NVDIMM-ID` |
//! | 16 | 4 | version (1) |
//! | 20 | 4 | serial number (random, never in pmemvm's order-based range) |
//! | 24 | 8 | region size (the `--nvdimm` SIZE) |
//! | 32 | 8 | label area size |
//! | 40 | 16 | random id (for humans and future use) |
//! | 56 | 8 | FNV-1a 64 checksum of bytes 0..56 |
//! | 64 | 1984 | zero |
//! | 2048 | 2048 | the DIMM's media state: bad ranges, health, unsafe shutdown count ([`crate::nvdimm::media`]) |
//!
//! A block of zeros is "not yet written" (a new file, or one the user grew
//! with `truncate -s`); pmemvm writes an identity there the first time it
//! opens the file writable. Temporary DIMMs (no `file=`) and read-only DIMMs
//! whose block was never written use the order-based serial
//! [`order_serial`] — nothing persists for them anyway.
//!
//! The module also reads the geometry an identity block records (which
//! `crate::memory::backing` names when an existing file has the wrong length) and a
//! file's serial without opening it for the VM ([`peek_serial`], for
//! `pmemvm acpi`).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use crate::config::{size_text, NvdimmSpec};
use crate::layout;

/// Magic at offset 0 of the block.
pub const MAGIC: [u8; 16] = *b"PMEMVM-NVDIMM-ID";
/// Block format version.
pub const VERSION: u32 = 1;
/// Bytes of the block covered by the checksum.
const CHECKED_LEN: usize = 56;
/// Serial numbers of the form 0x504d_00xx..0x504d_ffff ("PM" + index) are
/// the order-based ones of temporary DIMMs; random serials avoid them.
const ORDER_SERIAL_BASE: u32 = 0x504d_0000;

/// Size of the block (one page).
#[allow(clippy::cast_possible_truncation)] // 4096 fits
pub const BLOCK_SIZE: usize = layout::NVDIMM_IDENTITY_SIZE as usize;

/// What a backing file records about its DIMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// NFIT control-region serial number.
    pub serial: u32,
    /// Region size the file was made for.
    pub region_size: u64,
    /// Label area size the file was made for.
    pub label_size: u64,
    /// Random id.
    pub id: [u8; 16],
}

/// The contents of an identity block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// All zero: never written.
    Empty,
    /// A valid identity.
    Valid(Identity),
    /// Anything else: not written by pmemvm (or damaged).
    Foreign,
}

/// The serial number of the temporary DIMM at `index` (0-based).
pub fn order_serial(index: u32) -> u32 {
    ORDER_SERIAL_BASE | (index & 0xffff)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Identity {
    /// A new identity with a random serial for a DIMM of this geometry.
    pub fn new_random(region_size: u64, label_size: u64) -> io::Result<Self> {
        let mut urandom = File::open("/dev/urandom")?;
        loop {
            let mut buf = [0u8; 20];
            urandom.read_exact(&mut buf)?;
            let serial = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
            if serial == 0 || serial == u32::MAX || serial & 0xffff_0000 == ORDER_SERIAL_BASE {
                continue;
            }
            let mut id = [0u8; 16];
            id.copy_from_slice(&buf[4..]);
            return Ok(Self {
                serial,
                region_size,
                label_size,
                id,
            });
        }
    }

    /// The block bytes.
    pub fn encode(&self) -> [u8; BLOCK_SIZE] {
        let mut b = [0u8; BLOCK_SIZE];
        b[0..16].copy_from_slice(&MAGIC);
        b[16..20].copy_from_slice(&VERSION.to_le_bytes());
        b[20..24].copy_from_slice(&self.serial.to_le_bytes());
        b[24..32].copy_from_slice(&self.region_size.to_le_bytes());
        b[32..40].copy_from_slice(&self.label_size.to_le_bytes());
        b[40..56].copy_from_slice(&self.id);
        let sum = fnv1a(&b[..CHECKED_LEN]);
        b[56..64].copy_from_slice(&sum.to_le_bytes());
        b
    }
}

/// Reads a block (never panics, whatever the bytes).
pub fn parse(b: &[u8; BLOCK_SIZE]) -> Block {
    if b.iter().all(|x| *x == 0) {
        return Block::Empty;
    }
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    if b[0..16] != MAGIC
        || u32_at(16) != VERSION
        || u64_at(56) != fnv1a(&b[..CHECKED_LEN])
        || b[64..devices::nvdimm_media::MEDIA_BLOCK_OFFSET]
            .iter()
            .any(|x| *x != 0)
    {
        return Block::Foreign;
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&b[40..56]);
    Block::Valid(Identity {
        serial: u32_at(20),
        region_size: u64_at(24),
        label_size: u64_at(32),
        id,
    })
}

/// Reads the block at `offset` of `file`.
pub fn read_at(file: &File, offset: u64) -> io::Result<Block> {
    let mut b = [0u8; BLOCK_SIZE];
    file.read_exact_at(&mut b, offset)?;
    Ok(parse(&b))
}

/// Writes `identity` at `offset` of `file` and syncs it to stable storage.
pub fn write_at(file: &File, offset: u64, identity: &Identity) -> io::Result<()> {
    file.write_all_at(&identity.encode(), offset)?;
    file.sync_data()
}

/// "1G,label-size=128K": the `--nvdimm` geometry an identity records.
pub(crate) fn geometry_text(id: &Identity) -> String {
    let label = if id.label_size == 0 {
        "0".to_string()
    } else {
        size_text(id.label_size)
    };
    format!("{},label-size={label}", size_text(id.region_size))
}

/// The serial recorded in the backing file `spec` names, if it exists with
/// this geometry and a valid identity block (read only: `pmemvm acpi`).
pub fn peek_serial(spec: &NvdimmSpec) -> Option<u32> {
    let path = spec.file.as_ref()?;
    let f = File::open(path).ok()?;
    if f.metadata().ok()?.len() != crate::memory::hugepages::backing_len(spec, path).ok()? {
        return None;
    }
    match read_at(&f, spec.identity_offset()).ok()? {
        Block::Valid(id) if id.region_size == spec.size && id.label_size == spec.label_size => {
            Some(id.serial)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_status::Classified;
    use crate::memory::backing::{open_all, FileCause, NvdimmBacking};

    #[test]
    fn encode_parse_round_trip_and_golden_header() {
        let id = Identity {
            serial: 0x1234_5678,
            region_size: 1 << 30,
            label_size: 128 << 10,
            id: [0xab; 16],
        };
        let b = id.encode();
        // magic, version 1, serial, region 1 GiB, labels 128 KiB
        assert_eq!(&b[0..16], b"PMEMVM-NVDIMM-ID");
        assert_eq!(b[16..20], [1, 0, 0, 0]);
        assert_eq!(b[20..24], [0x78, 0x56, 0x34, 0x12]);
        assert_eq!(b[24..32], [0, 0, 0, 0x40, 0, 0, 0, 0]);
        assert_eq!(b[32..40], [0, 0, 2, 0, 0, 0, 0, 0]);
        assert_eq!(parse(&b), Block::Valid(id));
        assert_eq!(parse(&[0; BLOCK_SIZE]), Block::Empty);
        // Any damaged byte makes the block foreign, never a wrong identity.
        for at in [0, 16, 20, 30, 47, 56, 63, 64, 2047] {
            let mut d = b;
            d[at] ^= 1;
            assert_eq!(parse(&d), Block::Foreign, "byte {at}");
        }
        // The second half is the media state's, checked by crate::nvdimm::media.
        let mut d = b;
        d[2048] = 1;
        assert_eq!(parse(&d), Block::Valid(id));
    }

    #[test]
    fn random_serials_avoid_the_order_range() {
        for _ in 0..200 {
            let id = Identity::new_random(16 << 20, 0).unwrap();
            assert_ne!(id.serial & 0xffff_0000, 0x504d_0000);
            assert!(id.serial != 0 && id.serial != u32::MAX);
        }
        let a = Identity::new_random(16 << 20, 0).unwrap();
        let b = Identity::new_random(16 << 20, 0).unwrap();
        assert_ne!((a.serial, a.id), (b.serial, b.id));
        assert_eq!(order_serial(0), 0x504d_0000);
        assert_eq!(order_serial(255), 0x504d_00ff);
    }

    #[test]
    fn survives_in_a_file() {
        let dir = std::env::temp_dir();
        let f = tempfile_in(&dir);
        f.set_len(3 * 4096).unwrap();
        assert_eq!(read_at(&f, 8192).unwrap(), Block::Empty);
        let id = Identity::new_random(1 << 30, 0).unwrap();
        write_at(&f, 8192, &id).unwrap();
        assert_eq!(read_at(&f, 8192).unwrap(), Block::Valid(id));
        assert!(read_at(&f, 8193).is_err(), "short read is an error");
    }

    fn tmpdir(name: &str) -> std::path::PathBuf {
        crate::fresh_test_dir(&format!("identity-{name}"))
    }

    fn spec(s: &str) -> NvdimmSpec {
        s.parse().unwrap()
    }

    #[test]
    fn identity_stays_with_the_file() {
        let d = tmpdir("identity");
        let (pa, pb) = (d.join("a.img"), d.join("b.img"));
        let sa = spec(&format!("16M,file={}", pa.display()));
        let sb = spec(&format!("16M,file={}", pb.display()));
        let open = |specs: &[NvdimmSpec]| -> Vec<Option<u32>> {
            let mut v = open_all(specs).unwrap();
            v.iter_mut().for_each(NvdimmBacking::keep);
            v.iter().map(|b| b.serial).collect()
        };
        let first = open(&[sa.clone(), sb.clone()]);
        assert!(first.iter().all(Option::is_some), "{first:?}");
        assert_ne!(first[0], first[1]);
        // Swapped order, or one of them alone: each file keeps its serial.
        assert_eq!(open(&[sb.clone(), sa.clone()]), vec![first[1], first[0]]);
        assert_eq!(open(std::slice::from_ref(&sb)), vec![first[1]]);
        // The serial is in the file's last page, after the label area.
        let bytes = std::fs::read(&pa).unwrap();
        let block: [u8; 4096] = bytes[bytes.len() - 4096..].try_into().unwrap();
        match parse(&block) {
            Block::Valid(id) => {
                assert_eq!(Some(id.serial), first[0]);
                assert_eq!((id.region_size, id.label_size), (16 << 20, 128 << 10));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(peek_serial(&sa), first[0]);
        // A copy carries the same serial: refused together with its original.
        let pc = d.join("c.img");
        std::fs::copy(&pa, &pc).unwrap();
        let sc = spec(&format!("16M,file={}", pc.display()));
        let e = open_all(&[sa.clone(), sc]).unwrap_err();
        assert!(
            matches!(e.cause(), Some(FileCause::DuplicateIdentity { .. })),
            "{e}"
        );
        // Temporary DIMMs have no recorded serial.
        assert_eq!(NvdimmBacking::open(&spec("16M")).unwrap().serial, None);
        // Read-only with a block never written: order-based, file untouched.
        let pr = d.join("r.img");
        std::fs::File::create(&pr)
            .unwrap()
            .set_len(sa.file_len())
            .unwrap();
        let r = NvdimmBacking::open(&spec(&format!("16M,file={},readonly", pr.display())));
        assert_eq!(r.unwrap().serial, None);
        assert!(std::fs::read(&pr).unwrap().iter().all(|b| *b == 0));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn old_layout_and_other_geometries_are_refused_untouched() {
        let d = tmpdir("old");
        let p = d.join("old.img");
        // pmemvm 0.1: --nvdimm 64M made a 64 MiB file with labels in its last 128 KiB.
        std::fs::File::create(&p)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        std::fs::write(&p, vec![5u8; 64 << 20]).unwrap();
        let e = NvdimmBacking::open(&spec(&format!("64M,file={}", p.display()))).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e.cause(), Some(FileCause::OldLayout { .. })),
            "{msg}"
        );
        let want = (64u64 << 20) + (128 << 10) + 4096;
        assert!(
            msg.contains(&format!("truncate -s {want} {}", p.display())),
            "{msg}"
        );
        assert!(e.is_usage());
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            64 << 20,
            "not resized"
        );
        // 0.1's 258M (region 256M) asked for as the new 256M.
        let p2 = d.join("old258.img");
        std::fs::File::create(&p2)
            .unwrap()
            .set_len(258 << 20)
            .unwrap();
        let e = NvdimmBacking::open(&spec(&format!("256M,file={}", p2.display()))).unwrap_err();
        assert!(
            matches!(e.cause(), Some(FileCause::OldLayout { .. })),
            "{e}"
        );
        // The documented way on: truncate, then the data is the region.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(want)
            .unwrap();
        let mut b = NvdimmBacking::open(&spec(&format!("64M,file={}", p.display()))).unwrap();
        b.keep();
        let m = b.map().unwrap();
        assert!(b.serial.is_some());
        // SAFETY: the mapping is `m.size()` bytes, readable, alive for this borrow.
        let region = unsafe { std::slice::from_raw_parts(m.as_ptr(), m.size()) };
        assert!(
            region.iter().all(|x| *x == 5),
            "old data kept at its offsets"
        );
        drop((m, b));
        // The same file asked for with other labels: the identity names its geometry.
        let e = NvdimmBacking::open(&spec(&format!("64M,file={},label-size=0", p.display())))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("was made for --nvdimm 64M,label-size=128K"),
            "{e}"
        );
        // A right-sized file whose last page is not ours.
        let f = d.join("foreign.img");
        let sf = spec(&format!("16M,file={}", f.display()));
        std::fs::write(&f, vec![1u8; usize::try_from(sf.file_len()).unwrap()]).unwrap();
        let e = NvdimmBacking::open(&sf).unwrap_err();
        assert!(
            matches!(e.cause(), Some(FileCause::ForeignIdentity { .. })),
            "{e}"
        );
        assert!(std::fs::read(&f).unwrap().iter().all(|x| *x == 1));
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn tempfile_in(dir: &std::path::Path) -> File {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
            .unwrap()
    }
}
