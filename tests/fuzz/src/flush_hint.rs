// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: the NVDIMM flush-hint MMIO device at arbitrary offsets.
//!
//! One input picks 1 to 4 DIMMs (first byte), then accesses of 10 bytes:
//! an offset (8 bytes, little-endian; when bit 3 of the control byte is
//! clear it is folded into the device's range plus a page, so in-range
//! pages are hit often), a control byte (bits 0-1: length 1/2/4/8, bit 2:
//! write) and one data byte.
//!
//! Checked against a model: a write syncs exactly the DIMM whose page it
//! falls in, and nothing outside the device's pages; reads return zeros;
//! a successful sync never ends the VM.

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use devices::bus::BusDevice;
use devices::exit::ExitNotifier;
use devices::nvdimm::{FlushHintDevice, FlushStats, FlushTarget};

/// Size of one flush-hint page (as in pmemvm's layout).
const PAGE: u64 = 4096;

/// An unnamed in-memory file: fdatasync on it always succeeds, fast.
fn memfd() -> File {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns
    // a new fd or -1.
    let fd = unsafe { libc::memfd_create(c"pmemvm-fuzz-flush".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is owned by nothing else.
    unsafe { File::from_raw_fd(fd) }
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let Some((&first, ops)) = data.split_first() else {
        return;
    };
    let dimms = usize::from(first % 4) + 1;
    let file = Arc::new(memfd());
    let stats: Vec<Arc<FlushStats>> = (0..dimms).map(|_| Arc::default()).collect();
    let targets = stats
        .iter()
        .enumerate()
        .map(|(i, s)| FlushTarget {
            file: file.clone(),
            path: format!("dimm{i}"),
            stats: s.clone(),
            observer: None,
        })
        .collect();
    let exit = Arc::new(ExitNotifier::new().expect("eventfd"));
    let mut dev = FlushHintDevice::new(targets, PAGE, exit.clone());
    assert_eq!(dev.len(), PAGE * dimms as u64);
    let mut model = vec![0u64; dimms];
    for op in ops.chunks(10) {
        let mut raw = [0u8; 8];
        let n = op.len().min(8);
        raw[..n].copy_from_slice(&op[..n]);
        let ctl = op.get(8).copied().unwrap_or(0);
        let value = op.get(9).copied().unwrap_or(0);
        let mut offset = u64::from_le_bytes(raw);
        if ctl & 8 == 0 {
            offset %= dev.len() + PAGE;
        }
        let len = 1usize << (ctl & 3);
        let mut buf = [value; 8];
        if ctl & 4 != 0 {
            dev.write(offset, &buf[..len]);
            if let Some(m) = usize::try_from(offset / PAGE)
                .ok()
                .and_then(|i| model.get_mut(i))
            {
                *m += 1;
            }
        } else {
            dev.read(offset, &mut buf[..len]);
            assert!(
                buf[..len].iter().all(|b| *b == 0),
                "flush-hint read not zero"
            );
        }
    }
    for (i, (s, m)) in stats.iter().zip(&model).enumerate() {
        assert_eq!(
            s.flushes.load(Ordering::Relaxed),
            *m,
            "DIMM {i} flush count"
        );
        assert_eq!(s.failures.load(Ordering::Relaxed), 0);
    }
    assert_eq!(exit.get(), None, "a successful flush ended the VM");
}
