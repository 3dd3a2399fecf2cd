//! Writes into a file that has no write(2) — a hugetlbfs file or a `MFD_HUGETLB` memfd —
//! through shared mappings of the 2 MiB pages the bytes fall in, each synced with `msync`
//! before it is unmapped (a no-op for hugetlbfs, whose pages are memory; kept so the write
//! is complete for any other file given). Used for the NVDIMM label area and pmemvm's
//! identity page of DIMMs on hugetlbfs: QEMU keeps its label area in the mapped tail of the
//! same file in the same way.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The page size of the mappings: hugetlbfs's 2 MiB.
pub const MAPPED_PAGE: u64 = 2 << 20;

/// Writes `bytes` at `offset` of `file` (open for writing) through one shared mapping per
/// 2 MiB page they touch. The range must lie inside the file (a store past its end would be
/// a SIGBUS): otherwise `InvalidInput`, nothing written.
pub fn write_through_mapping(file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
    let page_len = usize::try_from(MAPPED_PAGE).map_err(io::Error::other)?;
    let end = u64::try_from(bytes.len())
        .ok()
        .and_then(|n| offset.checked_add(n))
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let file_len = file.metadata()?.len();
    if end > file_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "write of {} bytes at {offset} past the end of a {file_len}-byte file",
                bytes.len()
            ),
        ));
    }
    let mut done = 0usize;
    while done < bytes.len() {
        let at = u64::try_from(done)
            .ok()
            .and_then(|d| offset.checked_add(d))
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let page = at - at % MAPPED_PAGE;
        let within = usize::try_from(at - page).map_err(io::Error::other)?;
        let n = (page_len - within).min(bytes.len() - done);
        let off = libc::off_t::try_from(page).map_err(io::Error::other)?;
        // SAFETY: a new shared mapping of one 2 MiB page of `file` at an address the kernel
        // chooses; nothing else uses it, and it is unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `within + n <= page_len`, so the copy stays inside the live mapping, and
        // `bytes[done..done + n]` is in bounds and does not overlap it; msync and munmap act
        // on exactly the mapping made above.
        let synced = unsafe {
            std::ptr::copy_nonoverlapping(bytes[done..].as_ptr(), p.cast::<u8>().add(within), n);
            let rc = libc::msync(p, page_len, libc::MS_SYNC);
            let err = (rc != 0).then(io::Error::last_os_error);
            libc::munmap(p, page_len);
            err
        };
        if let Some(e) = synced {
            return Err(e);
        }
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn bytes_across_a_page_boundary_land_where_pwrite_would_put_them() {
        // Any file works through a mapping; a regular one shows the bytes are where asked.
        let f = crate::scratch_file(2 * MAPPED_PAGE);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let at = MAPPED_PAGE - 4000;
        write_through_mapping(&f, at, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, at).unwrap();
        assert_eq!(back, data);
        let mut before = [1u8; 16];
        f.read_exact_at(&mut before, at - 16).unwrap();
        assert_eq!(before, [0u8; 16], "nothing written before the offset");
        // Past the file's end (where the mapping would fault): an error, nothing written.
        let e = write_through_mapping(&f, 2 * MAPPED_PAGE - 1, b"xy").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
