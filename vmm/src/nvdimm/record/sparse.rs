//! Copies of DIMM files that keep their holes: a 1 GiB DIMM the guest
//! wrote 10 MiB of costs 10 MiB per copy, not 1 GiB.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

const CHUNK: usize = 1 << 20;

/// Makes `dst` (empty, writable) a copy of the first `len` bytes of `src`,
/// writing only the data `src` has (`SEEK_DATA`/`SEEK_HOLE`); holes stay
/// holes. A file system without hole reporting copies everything.
pub fn copy(src: &File, dst: &File, len: u64) -> io::Result<()> {
    dst.set_len(len)?;
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0u64;
    while at < len {
        let Some(start) = seek(src, at, libc::SEEK_DATA)? else {
            break;
        };
        if start >= len {
            break;
        }
        let end = seek(src, start, libc::SEEK_HOLE)?.unwrap_or(len).min(len);
        let mut pos = start;
        while pos < end {
            let n = usize::try_from(end - pos).unwrap_or(CHUNK).min(CHUNK);
            src.read_exact_at(&mut buf[..n], pos)?;
            // All-zero blocks inside data (preallocated files) stay holes too.
            if buf[..n].iter().any(|&b| b != 0) {
                dst.write_all_at(&buf[..n], pos)?;
            }
            pos += n as u64;
        }
        at = end;
    }
    Ok(())
}

/// `lseek(fd, at, whence)`; `None` when there is no more data (ENXIO).
fn seek(f: &File, at: u64, whence: i32) -> io::Result<Option<u64>> {
    let off = libc::off_t::try_from(at).map_err(|_| io::Error::other("offset too large"))?;
    // SAFETY: lseek only moves the file offset of a descriptor the `File`
    // owns for the duration of the call; it touches no memory of ours.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            // No hole reporting: one extent of data from `at` to the end.
            Some(libc::EINVAL) if whence == libc::SEEK_DATA => Ok(Some(at)),
            _ => Err(e),
        };
    }
    Ok(u64::try_from(r).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn data_is_copied_and_holes_stay_holes() {
        let d = std::env::temp_dir().join(format!("pmemvm-sparse-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let src = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(d.join("src"))
            .unwrap();
        let len = 64u64 << 20;
        src.set_len(len).unwrap();
        src.write_all_at(b"first", 4096).unwrap();
        src.write_all_at(b"last", len - 4).unwrap();
        let dst = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(d.join("dst"))
            .unwrap();
        copy(&src, &dst, len).unwrap();
        assert_eq!(dst.metadata().unwrap().len(), len);
        assert_eq!(
            std::fs::read(d.join("src")).unwrap(),
            std::fs::read(d.join("dst")).unwrap()
        );
        // 512-byte blocks: far below the 64 MiB a full copy would take.
        assert!(dst.metadata().unwrap().blocks() * 512 < 8 << 20);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
