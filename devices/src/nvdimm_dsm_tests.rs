//! Unit tests of [`crate::nvdimm_dsm`]: the label functions, every error
//! path, the health and root dispatch, and random pages.

use super::*;
use crate::nvdimm_media::DimmMedia;
use std::io;
use std::sync::Mutex;

/// In-memory labels for tests; `fail` makes every access an I/O error,
/// `fail_sync` only the sync after a write. `durable` is what a crash
/// would leave: the bytes of the last successful sync.
struct MemLabels {
    data: Mutex<Vec<u8>>,
    durable: Mutex<Vec<u8>>,
    readonly: bool,
    fail: bool,
    fail_sync: bool,
}

impl MemLabels {
    fn new(size: usize, readonly: bool) -> Self {
        Self {
            data: Mutex::new(vec![0; size]),
            durable: Mutex::new(vec![0; size]),
            readonly,
            fail: false,
            fail_sync: false,
        }
    }
}

impl LabelStorage for MemLabels {
    fn label_size(&self) -> u32 {
        u32::try_from(self.data.lock().unwrap().len()).unwrap()
    }
    fn read_label(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.fail {
            return Err(io::ErrorKind::Other.into());
        }
        let off = usize::try_from(off).unwrap();
        buf.copy_from_slice(&self.data.lock().unwrap()[off..off + buf.len()]);
        Ok(())
    }
    fn write_label(&self, off: u64, data: &[u8]) -> io::Result<()> {
        if self.fail {
            return Err(io::ErrorKind::Other.into());
        }
        let off = usize::try_from(off).unwrap();
        self.data.lock().unwrap()[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn sync_labels(&self) -> io::Result<()> {
        if self.fail_sync {
            return Err(io::ErrorKind::Other.into());
        }
        let data = self.data.lock().unwrap().clone();
        *self.durable.lock().unwrap() = data;
        Ok(())
    }
    fn readonly(&self) -> bool {
        self.readonly
    }
}

const LABEL_SIZE: usize = 128 << 10;

fn handler() -> DsmHandler<MemLabels> {
    let mut h = DsmHandler::new();
    h.add_dimm(1, MemLabels::new(LABEL_SIZE, false));
    h.add_dimm(2, MemLabels::new(LABEL_SIZE, true));
    h.add_dimm(3, MemLabels::new(0, false));
    let mut broken = MemLabels::new(LABEL_SIZE, false);
    broken.fail = true;
    h.add_dimm(4, broken);
    let mut unsyncable = MemLabels::new(LABEL_SIZE, false);
    unsyncable.fail_sync = true;
    h.add_dimm(5, unsyncable);
    h
}

fn request(handle: u32, revision: u32, function: u32, input: &[u8]) -> Box<[u8; DSM_PAGE_SIZE]> {
    let mut page = Box::new([0xaau8; DSM_PAGE_SIZE]);
    page[0..4].copy_from_slice(&handle.to_le_bytes());
    page[4..8].copy_from_slice(&revision.to_le_bytes());
    page[8..12].copy_from_slice(&function.to_le_bytes());
    page[12..16].copy_from_slice(&u32::try_from(input.len()).unwrap().to_le_bytes());
    page[16..16 + input.len()].copy_from_slice(input);
    page
}

/// Runs one call; returns the output bytes.
fn call(h: &DsmHandler<MemLabels>, page: &mut [u8; DSM_PAGE_SIZE]) -> Vec<u8> {
    h.handle(page);
    let len = usize::try_from(get_u32(page, 0)).unwrap();
    assert!(len <= DSM_OUT_DATA_MAX);
    assert!(
        page[4 + len..].iter().all(|b| *b == 0),
        "rest of the page not zeroed"
    );
    page[4..4 + len].to_vec()
}

fn status(out: &[u8]) -> u32 {
    u32::from_le_bytes([out[0], out[1], out[2], out[3]])
}

fn rw_input(offset: u32, length: u32, data: &[u8]) -> Vec<u8> {
    let mut v = offset.to_le_bytes().to_vec();
    v.extend_from_slice(&length.to_le_bytes());
    v.extend_from_slice(data);
    v
}

#[test]
fn query_bitmaps() {
    let h = handler();
    assert_eq!(call(&h, &mut request(1, 1, 0, &[])), vec![0x71]);
    assert_eq!(call(&h, &mut request(2, 1, 0, &[])), vec![0x31]);
    assert_eq!(call(&h, &mut request(3, 1, 0, &[])), vec![0x01]);
    // Unknown handle and unknown revision: nothing supported.
    assert_eq!(call(&h, &mut request(9, 1, 0, &[])), vec![0x00]);
    assert_eq!(call(&h, &mut request(1, 3, 0, &[])), vec![0x00]);
    assert_eq!(h.stats().calls.load(Ordering::Relaxed), 5);
    assert_eq!(h.stats().errors.load(Ordering::Relaxed), 2);
    // Per DIMM: handle 1 got two calls, 2 and 3 one each, 9 is unknown.
    assert_eq!([1, 2, 3, 9].map(|handle| h.calls_for(handle)), [2, 1, 1, 0]);
}

#[test]
fn label_size() {
    let h = handler();
    let out = call(&h, &mut request(1, 1, 4, &[]));
    assert_eq!(out.len(), 12);
    assert_eq!(status(&out), 0);
    assert_eq!(status(&out[4..]), 128 << 10);
    assert_eq!(status(&out[8..]), 4072);
    // Label-less DIMM: not supported.
    assert_eq!(call(&h, &mut request(3, 1, 4, &[])), 1u32.to_le_bytes());
}

#[test]
fn round_trip() {
    let h = handler();
    let data: Vec<u8> = (0..4072u32).map(|i| (i * 7).to_le_bytes()[0]).collect();
    let off = u32::try_from(LABEL_SIZE).unwrap() - 4072;
    let out = call(&h, &mut request(1, 1, 6, &rw_input(off, 4072, &data)));
    assert_eq!(out, 0u32.to_le_bytes());
    let out = call(&h, &mut request(1, 1, 5, &rw_input(off, 4072, &[])));
    assert_eq!(out.len(), 4 + 4072);
    assert_eq!(status(&out), 0);
    assert_eq!(&out[4..], &data[..]);
    // Other bytes untouched.
    let out = call(&h, &mut request(1, 1, 5, &rw_input(0, 16, &[])));
    assert_eq!(&out[4..], &[0u8; 16]);
    assert_eq!(h.stats().label_bytes_written.load(Ordering::Relaxed), 4072);
    assert_eq!(
        h.stats().label_bytes_read.load(Ordering::Relaxed),
        4072 + 16
    );
    assert_eq!(h.stats().errors.load(Ordering::Relaxed), 0);
}

#[test]
fn zero_length_transfers() {
    let h = handler();
    let out = call(&h, &mut request(1, 1, 5, &rw_input(0, 0, &[])));
    assert_eq!(out, 0u32.to_le_bytes());
    let out = call(&h, &mut request(1, 1, 6, &rw_input(128 << 10, 0, &[])));
    assert_eq!(out, 0u32.to_le_bytes());
}

#[test]
fn unknown_handle_revision_function() {
    let h = handler();
    assert_eq!(status(&call(&h, &mut request(0, 1, 4, &[]))), 2);
    assert_eq!(
        status(&call(
            &h,
            &mut request(u32::MAX, 1, 5, &rw_input(0, 8, &[]))
        )),
        2
    );
    assert_eq!(status(&call(&h, &mut request(1, 0, 4, &[]))), 1);
    assert_eq!(status(&call(&h, &mut request(1, u32::MAX, 5, &[]))), 1);
    for f in [1, 2, 3, 7, 8, 31, 32, 255, u32::MAX] {
        assert_eq!(
            status(&call(&h, &mut request(1, 1, f, &[]))),
            1,
            "function {f}"
        );
    }
    // Write on a read-only DIMM (function not in its bitmap).
    let out = call(&h, &mut request(2, 1, 6, &rw_input(0, 4, &[1, 2, 3, 4])));
    assert_eq!(status(&out), 1);
}

#[test]
fn bad_lengths_and_ranges() {
    let h = handler();
    let size = u32::try_from(LABEL_SIZE).unwrap();
    let bad: Vec<(u32, Vec<u8>)> = vec![
        (5, vec![]),                                // no offset/length
        (5, vec![0; 7]),                            // short header
        (5, rw_input(0, 8, &[0])),                  // trailing bytes
        (5, rw_input(0, 4073, &[])),                // above max transfer
        (5, rw_input(size - 8, 16, &[])),           // beyond the label area
        (5, rw_input(size, 1, &[])),                // starts at the end
        (5, rw_input(u32::MAX, 2, &[])),            // would overflow in u32
        (5, rw_input(u32::MAX - 3, u32::MAX, &[])), // both huge
        (6, vec![1, 2, 3]),                         // short header
        (6, rw_input(0, 8, &[1, 2, 3])),            // data shorter than length
        (6, rw_input(0, 2, &[1, 2, 3])),            // data longer than length
        (6, rw_input(size - 2, 4, &[1, 2, 3, 4])),  // beyond the label area
        (6, rw_input(u32::MAX, 1, &[9])),           // overflow
        (6, rw_input(0, 4073, &[0; 4072])),         // length above max transfer
    ];
    for (f, input) in bad {
        let out = call(&h, &mut request(1, 1, f, &input));
        assert_eq!(
            out,
            3u32.to_le_bytes(),
            "function {f}, input {:?}",
            &input[..input.len().min(8)]
        );
    }
    // Nothing was written by the rejected calls.
    let out = call(&h, &mut request(1, 1, 5, &rw_input(0, 8, &[])));
    assert_eq!(&out[4..], &[0u8; 8]);
    let out = call(&h, &mut request(1, 1, 5, &rw_input(size - 8, 8, &[])));
    assert_eq!(&out[4..], &[0u8; 8]);
}

#[test]
fn input_length_beyond_page() {
    let h = handler();
    for in_len in [4081u32, 4096, 0x8000_0000, u32::MAX] {
        let mut page = request(1, 1, 5, &rw_input(0, 8, &[]));
        page[12..16].copy_from_slice(&in_len.to_le_bytes());
        assert_eq!(call(&h, &mut page), 3u32.to_le_bytes(), "in_len {in_len}");
    }
    // Exactly a full page of input is accepted as input (then rejected as
    // a malformed write: length field says 0 but 4072 data bytes follow).
    let mut page = request(1, 1, 6, &rw_input(0, 0, &[]));
    page[12..16].copy_from_slice(&4080u32.to_le_bytes());
    assert_eq!(call(&h, &mut page), 3u32.to_le_bytes());
}

#[test]
fn success_means_synced() {
    let h = handler();
    let out = call(&h, &mut request(1, 1, 6, &rw_input(8, 3, b"abc")));
    assert_eq!(out, 0u32.to_le_bytes());
    let durable = h.dimms.read().unwrap()[&1].durable.lock().unwrap().clone();
    assert_eq!(&durable[8..11], b"abc", "success before the sync");
    assert_eq!(h.stats().label_syncs.load(Ordering::Relaxed), 1);
    // A write whose sync fails is an error for the guest, not a success.
    let out = call(&h, &mut request(5, 1, 6, &rw_input(0, 1, &[1])));
    assert_eq!(status(&out), 4);
    assert_eq!(h.stats().label_syncs.load(Ordering::Relaxed), 1);
    assert_eq!(h.stats().label_bytes_written.load(Ordering::Relaxed), 3);
}

#[test]
fn io_errors_become_hardware_error() {
    let h = handler();
    assert_eq!(
        status(&call(&h, &mut request(4, 1, 5, &rw_input(0, 8, &[])))),
        4
    );
    assert_eq!(
        status(&call(&h, &mut request(4, 1, 6, &rw_input(0, 1, &[1])))),
        4
    );
}

#[test]
#[allow(clippy::cast_possible_truncation)] // values reduced modulo small numbers
fn random_pages_never_panic() {
    let h = handler();
    // A small xorshift generator: deterministic, no dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let mut page = Box::new([0u8; DSM_PAGE_SIZE]);
        for chunk in page.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
        // Steer half the pages towards valid handles/functions/lengths.
        if x & 1 == 0 {
            page[0..4].copy_from_slice(&(((x >> 8) % 5) as u32).to_le_bytes());
            page[4..8].copy_from_slice(&1u32.to_le_bytes());
            page[8..12].copy_from_slice(&(((x >> 16) % 8) as u32).to_le_bytes());
            page[12..16].copy_from_slice(&(((x >> 24) % 4200) as u32).to_le_bytes());
        }
        h.handle(&mut page);
        let len = usize::try_from(get_u32(&page, 0)).unwrap();
        assert!((1..=DSM_OUT_DATA_MAX).contains(&len));
    }
}

fn with_media() -> DsmHandler<MemLabels> {
    use crate::nvdimm_media::MediaState;
    let mut h = handler();
    for (handle, base) in [(1u32, 1u64 << 32), (3, 2 << 32)] {
        h.add_media(Arc::new(DimmMedia::new(
            handle,
            base,
            1 << 30,
            MediaState::default(),
            None,
        )));
    }
    h
}

#[test]
fn health_and_root_dispatch() {
    // Without root and media: the root handle is no device, health unsupported.
    let h = handler();
    assert_eq!(call(&h, &mut request(ROOT_HANDLE, 1, 0, &[])), vec![0]);
    assert_eq!(
        status(&call(&h, &mut request(ROOT_HANDLE, 1, 1, &[0; 16]))),
        2
    );
    assert_eq!(status(&call(&h, &mut request(1, 1, 1, &[]))), 1);
    let mut h = with_media();
    // Bitmaps now carry 1, 2, 17, 18 (3 bytes); a label-less DIMM too.
    assert_eq!(call(&h, &mut request(1, 1, 0, &[])), vec![0x77, 0, 0x06]);
    assert_eq!(call(&h, &mut request(3, 1, 0, &[])), vec![0x07, 0, 0x06]);
    assert_eq!(call(&h, &mut request(2, 1, 0, &[])), vec![0x31], "no media");
    let out = call(&h, &mut request(3, 1, 1, &[]));
    assert_eq!((out.len(), status(&out)), (132, 0));
    assert_eq!(status(&call(&h, &mut request(3, 1, 18, &[0; 3]))), 3);
    h.enable_root();
    assert_eq!(
        call(&h, &mut request(ROOT_HANDLE, 1, 0, &[])),
        vec![0x9f, 0x03]
    );
    assert_eq!(call(&h, &mut request(ROOT_HANDLE, 2, 0, &[])), vec![0]);
    assert_eq!(status(&call(&h, &mut request(ROOT_HANDLE, 2, 1, &[]))), 1);
    for f in [5, 6, 10, 32, u32::MAX] {
        assert_eq!(
            status(&call(&h, &mut request(ROOT_HANDLE, 1, f, &[]))),
            1,
            "{f}"
        );
    }
    // Inject through the page, with the notify option, then scrub.
    let mut inj = ((1u64 << 32) + 4096).to_le_bytes().to_vec();
    inj.extend_from_slice(&512u64.to_le_bytes());
    inj.push(1);
    assert_eq!(call(&h, &mut request(ROOT_HANDLE, 1, 7, &inj)), vec![0; 4]);
    assert!(h.take_notification());
    assert!(!h.take_notification());
    let mut page = request(ROOT_HANDLE, 1, 3, &[]);
    let out = call(&h, &mut page);
    assert_eq!(status(&out), 2 << 16, "no scrub yet");
    // An input length beyond the page is root status 2.
    let mut page = request(ROOT_HANDLE, 1, 1, &[]);
    page[12..16].copy_from_slice(&5000u32.to_le_bytes());
    assert_eq!(call(&h, &mut page), vec![2, 0, 0, 0]);
}

#[test]
fn a_guest_call_that_trips_an_alarm_or_injects_raises_the_dimms_health_event() {
    use crate::platform_events::{dimm_health, PlatformEvents};
    use vmm_sys_util::eventfd::EventFd;
    let irq = EventFd::new(libc::EFD_NONBLOCK).unwrap();
    let events = Arc::new(PlatformEvents::new(irq.try_clone().unwrap()));
    let mut h = with_media();
    // DIMM handle 3 is the guest's second DIMM (index 1).
    h.notify_health_on(events.clone(), [(1, 0), (3, 1)].into_iter().collect());
    let thresholds = |control: u16, spares: u8, mtemp_c: u16| {
        let mut v = control.to_le_bytes().to_vec();
        v.push(spares);
        v.extend_from_slice(&(mtemp_c * 16).to_le_bytes());
        v.extend_from_slice(&(85u16 * 16).to_le_bytes());
        v
    };
    // Media temperature alarm enabled with its threshold above the media's 25 °C: quiet.
    let out = call(&h, &mut request(3, 2, 17, &thresholds(2, 10, 60)));
    assert_eq!(status(&out), 0);
    assert!(irq.read().is_err(), "nothing to report, no event");
    assert_eq!(events.take(), 0);
    // Threshold below the media temperature: the alarm trips, DIMM index 1 is notified.
    assert_eq!(
        status(&call(&h, &mut request(3, 2, 17, &thresholds(2, 10, 12)))),
        0
    );
    assert_eq!(irq.read().unwrap(), 1);
    assert_eq!(events.take(), dimm_health(1).unwrap());
    // An unsafe-shutdown injection on DIMM handle 1 (index 0).
    let mut inj = 8u64.to_le_bytes().to_vec();
    inj.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(status(&call(&h, &mut request(1, 2, 18, &inj))), 0);
    assert_eq!(events.take(), dimm_health(0).unwrap());
    // A refused call raises nothing.
    let _ = irq.read();
    assert_eq!(status(&call(&h, &mut request(1, 2, 18, &[0; 3]))), 3);
    assert!(irq.read().is_err());
    assert_eq!(events.take(), 0);
}
