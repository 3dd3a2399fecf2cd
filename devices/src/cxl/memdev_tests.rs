//! The memdev commands as Linux sends them, byte layouts checked against
//! CXL 2.0 8.2.9 and Linux's `cxlmem.h` structures.

use std::sync::{Arc, Mutex};

use super::*;

/// Label storage in memory; panics on an access outside the area (the
/// command set promised to check).
#[derive(Debug, Clone)]
struct MemLabels(Arc<Mutex<Vec<u8>>>);

impl LabelStorage for MemLabels {
    fn label_size(&self) -> u32 {
        u32::try_from(self.0.lock().unwrap().len()).unwrap()
    }
    fn read_label(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let off = usize::try_from(off).unwrap();
        buf.copy_from_slice(&self.0.lock().unwrap()[off..off + buf.len()]);
        Ok(())
    }
    fn write_label(&self, off: u64, data: &[u8]) -> io::Result<()> {
        let off = usize::try_from(off).unwrap();
        self.0.lock().unwrap()[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn sync_labels(&self) -> io::Result<()> {
        Ok(())
    }
    fn readonly(&self) -> bool {
        false
    }
}

/// One media write: where, what.
type Written = (u64, Vec<u8>);

/// The media writes Clear Poison made.
#[derive(Debug, Clone, Default)]
struct Media(Arc<Mutex<Vec<Written>>>);

impl MediaWrite for Media {
    fn write_media(&self, dpa: u64, data: &[u8]) -> io::Result<()> {
        self.0.lock().unwrap().push((dpa, data.to_vec()));
        Ok(())
    }
}

const GIB: u64 = 1 << 30;
const LSA: usize = 128 << 10;
const LSA32: u32 = 128 << 10;

fn device() -> (Memdev, MemLabels, Media) {
    let labels = MemLabels(Arc::new(Mutex::new(vec![0u8; LSA])));
    let media = Media::default();
    let dev = Memdev::new(GIB, Box::new(labels.clone()), Box::new(media.clone())).unwrap();
    (dev, labels, media)
}

fn run(dev: &mut Memdev, opcode: u16, input: &[u8]) -> Result<Vec<u8>, ReturnCode> {
    let mut out = vec![0u8; crate::cxl::mailbox::PAYLOAD_SIZE];
    dev.execute(opcode, input, &mut out)
        .map(|n| out[..n].to_vec())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    le_u64(&b[at..])
}

#[test]
fn a_capacity_that_is_not_256m_units_is_refused() {
    let labels = MemLabels(Arc::new(Mutex::new(vec![0u8; 16])));
    let e = Memdev::new(GIB + 4096, Box::new(labels), Box::new(Media::default())).unwrap_err();
    assert_eq!(e, MemdevError::Capacity(GIB + 4096));
    assert!(e.to_string().contains("multiple of 256 MiB"), "{e}");
}

#[test]
fn identify_is_0x43_bytes_of_a_persistent_only_device() {
    let (mut dev, ..) = device();
    let id = run(&mut dev, IDENTIFY, &[]).unwrap();
    assert_eq!(id.len(), 0x43);
    assert!(id.starts_with(b"pmemvm "));
    assert_eq!(u64_at(&id, 0x10), 4, "total: 4 × 256 MiB");
    assert_eq!(u64_at(&id, 0x18), 0, "no volatile-only capacity");
    assert_eq!(u64_at(&id, 0x20), 4, "all persistent");
    assert_eq!(
        u64_at(&id, 0x28),
        0,
        "partition alignment 0: no Get Partition Info needed"
    );
    for log in 0..4 {
        let at = 0x30 + 2 * log;
        assert_eq!(
            u16::from_le_bytes([id[at], id[at + 1]]),
            64,
            "event log {log}'s size"
        );
    }
    assert_eq!(le_u32(&id[0x38..]), 128 << 10, "lsa_size");
    assert_eq!(
        le_u32(&id[0x3c..]) & 0xff_ffff,
        256,
        "poison list max records"
    );
    assert_eq!(
        u16::from_le_bytes([id[0x3f], id[0x40]]),
        256,
        "inject limit"
    );
    assert_eq!(
        run(&mut dev, IDENTIFY, &[0]),
        Err(ReturnCode::InvalidPayloadLength)
    );
}

#[test]
fn the_cel_lists_every_supported_opcode_and_get_log_reads_it_in_parts() {
    let (mut dev, ..) = device();
    let logs = run(&mut dev, GET_SUPPORTED_LOGS, &[]).unwrap();
    assert_eq!(logs.len(), 28);
    assert_eq!(u16::from_le_bytes([logs[0], logs[1]]), 1);
    assert_eq!(&logs[8..24], &CEL_UUID);
    let size = le_u32(&logs[24..]);
    assert_eq!(size, 19 * 4);
    let ask = |offset: u32, length: u32| {
        let mut input = CEL_UUID.to_vec();
        input.extend(offset.to_le_bytes());
        input.extend(length.to_le_bytes());
        input
    };
    let whole = run(&mut dev, GET_LOG, &ask(0, size)).unwrap();
    let opcodes: Vec<u16> = whole
        .chunks(4)
        .map(|e| u16::from_le_bytes([e[0], e[1]]))
        .collect();
    for op in opcodes.iter().copied() {
        assert_ne!(
            run(&mut dev, op, &[0xff; 3]),
            Err(ReturnCode::Unsupported),
            "{op:#x}"
        );
    }
    assert!(opcodes.contains(&IDENTIFY) && opcodes.contains(&SET_LSA));
    assert!(opcodes.contains(&GET_ALERT_CONFIG) && opcodes.contains(&SET_ALERT_CONFIG));
    for op in [0x0100, 0x0101, 0x0102, 0x0103] {
        assert!(opcodes.contains(&op), "event opcode {op:#x} in the CEL");
    }
    let tail = run(&mut dev, GET_LOG, &ask(8, size - 8)).unwrap();
    assert_eq!(tail, whole[8..]);
    assert_eq!(
        run(&mut dev, GET_LOG, &ask(4, size)),
        Err(ReturnCode::InvalidInput)
    );
    assert_eq!(
        run(&mut dev, GET_LOG, &ask(u32::MAX, 4)),
        Err(ReturnCode::InvalidInput)
    );
    let mut other = ask(0, 4);
    other[0] ^= 1;
    assert_eq!(
        run(&mut dev, GET_LOG, &other),
        Err(ReturnCode::InvalidInput)
    );
    assert_eq!(
        run(&mut dev, GET_LOG, &ask(0, 1 << 20)),
        Err(ReturnCode::InvalidPayloadLength)
    );
}

#[test]
fn unknown_opcodes_are_unsupported() {
    let (mut dev, ..) = device();
    for op in [0x0000, 0x0104, 0x4101, 0x4400, 0xcd00, 0xffff] {
        assert_eq!(
            run(&mut dev, op, &[]),
            Err(ReturnCode::Unsupported),
            "{op:#x}"
        );
    }
}

#[test]
fn partition_fw_and_health_have_their_sizes_and_values() {
    let (mut dev, ..) = device();
    let p = run(&mut dev, GET_PARTITION_INFO, &[]).unwrap();
    assert_eq!((p.len(), u64_at(&p, 0), u64_at(&p, 8)), (0x20, 0, 4));
    let fw = run(&mut dev, GET_FW_INFO, &[]).unwrap();
    assert_eq!((fw.len(), fw[0], fw[1]), (0x50, 1, 1));
    assert!(fw[0x10..].starts_with(b"pmemvm "));
    let mut dev = dev.with_dirty_shutdowns(3);
    let h = run(&mut dev, GET_HEALTH_INFO, &[]).unwrap();
    assert_eq!(h.len(), 0x12);
    assert_eq!(&h[..4], &[0; 4], "healthy, media normal");
    assert_eq!(le_u32(&h[6..]), 3, "dirty shutdowns");
}

#[test]
fn the_timestamp_goes_on_from_what_the_host_set() {
    let (mut dev, ..) = device();
    assert_eq!(u64_at(&run(&mut dev, GET_TIMESTAMP, &[]).unwrap(), 0), 0);
    let t = 1_700_000_000_000_000_000u64;
    assert_eq!(run(&mut dev, SET_TIMESTAMP, &t.to_le_bytes()).unwrap(), b"");
    let now = u64_at(&run(&mut dev, GET_TIMESTAMP, &[]).unwrap(), 0);
    assert!(now >= t && now - t < 10_000_000_000, "{now}");
    assert_eq!(
        run(&mut dev, SET_TIMESTAMP, &[1]),
        Err(ReturnCode::InvalidPayloadLength)
    );
}

#[test]
fn labels_are_read_and_written_in_the_area_and_nowhere_else() {
    let (mut dev, labels, _) = device();
    let mut set = vec![0u8; 8];
    set[..4].copy_from_slice(&256u32.to_le_bytes());
    set.extend(b"namespace index");
    assert_eq!(run(&mut dev, SET_LSA, &set).unwrap(), b"");
    assert_eq!(&labels.0.lock().unwrap()[256..271], b"namespace index");
    let get = |off: u32, len: u32| [off.to_le_bytes(), len.to_le_bytes()].concat();
    assert_eq!(
        run(&mut dev, GET_LSA, &get(256, 15)).unwrap(),
        b"namespace index"
    );
    // The last byte, and one past it.
    assert_eq!(run(&mut dev, GET_LSA, &get(LSA32 - 1, 1)).unwrap().len(), 1);
    assert_eq!(
        run(&mut dev, GET_LSA, &get(LSA32, 1)),
        Err(ReturnCode::InvalidInput)
    );
    assert_eq!(
        run(&mut dev, GET_LSA, &get(u32::MAX, u32::MAX)),
        Err(ReturnCode::InvalidPayloadLength)
    );
    assert_eq!(
        run(&mut dev, GET_LSA, &get(u32::MAX, 8)),
        Err(ReturnCode::InvalidInput)
    );
    let mut past = (LSA32 - 4).to_le_bytes().to_vec();
    past.extend([0u8; 4]);
    past.extend([1u8; 5]);
    assert_eq!(run(&mut dev, SET_LSA, &past), Err(ReturnCode::InvalidInput));
    assert_eq!(
        run(&mut dev, SET_LSA, &[0; 7]),
        Err(ReturnCode::InvalidPayloadLength)
    );
    assert_eq!(
        run(&mut dev, GET_LSA, &[0; 9]),
        Err(ReturnCode::InvalidPayloadLength)
    );
    assert!(labels.0.lock().unwrap()[LSA - 4..].iter().all(|&b| b == 0));
}

#[test]
fn poison_is_injected_listed_in_runs_and_cleared_with_its_data_written() {
    let (mut dev, _, media) = device();
    for dpa in [0x1000u64, 0x1040, 0x1080, 0x4000] {
        assert_eq!(
            run(&mut dev, INJECT_POISON, &dpa.to_le_bytes()).unwrap(),
            b""
        );
    }
    dev.poison_from_host(0x10c0).unwrap();
    let list = |dev: &mut Memdev, dpa: u64, units: u64| {
        run(
            dev,
            GET_POISON_LIST,
            &[dpa.to_le_bytes(), units.to_le_bytes()].concat(),
        )
    };
    let l = list(&mut dev, 0, GIB / 64).unwrap();
    assert_eq!(l[0], 0, "no more records");
    assert_eq!(u16::from_le_bytes([l[0x0a], l[0x0b]]), 3);
    let record = |i: usize| (u64_at(&l, 0x20 + 16 * i), le_u32(&l[0x28 + 16 * i..]));
    assert_eq!(
        record(0),
        (0x1000 | 3, 3),
        "three injected units in one run"
    );
    assert_eq!(
        record(1),
        (0x10c0 | 1, 1),
        "the host's unit: another source, another run"
    );
    assert_eq!(record(2), (0x4000 | 3, 1));
    // A window of the range.
    let l = list(&mut dev, 0x4000, 1).unwrap();
    assert_eq!(u16::from_le_bytes([l[0x0a], l[0x0b]]), 1);
    let mut clear = 0x1040u64.to_le_bytes().to_vec();
    clear.extend([0xab; 64]);
    assert_eq!(run(&mut dev, CLEAR_POISON, &clear).unwrap(), b"");
    assert_eq!(media.0.lock().unwrap()[0], (0x1040, vec![0xab; 64]));
    let left: Vec<u64> = dev.poisoned().map(|(d, _)| d).collect();
    assert_eq!(left, [0x1000, 0x1080, 0x10c0, 0x4000]);
    // Bad addresses change nothing.
    for dpa in [0x1001u64, GIB, u64::MAX - 63] {
        assert_eq!(
            run(&mut dev, INJECT_POISON, &dpa.to_le_bytes()),
            Err(ReturnCode::InvalidPhysicalAddress)
        );
        let mut c = dpa.to_le_bytes().to_vec();
        c.extend([0; 64]);
        assert_eq!(
            run(&mut dev, CLEAR_POISON, &c),
            Err(ReturnCode::InvalidPhysicalAddress)
        );
    }
    assert_eq!(
        list(&mut dev, GIB - 64, 2),
        Err(ReturnCode::InvalidPhysicalAddress)
    );
    assert_eq!(
        list(&mut dev, 0, 0),
        Err(ReturnCode::InvalidPhysicalAddress)
    );
    assert_eq!(
        list(&mut dev, 0, u64::MAX),
        Err(ReturnCode::InvalidPhysicalAddress)
    );
    assert_eq!(media.0.lock().unwrap().len(), 1);
    assert_eq!(dev.poisoned().count(), 4);
}

#[test]
fn a_long_poison_list_comes_in_payloads_with_more_and_injection_stops_at_the_limit() {
    let (mut dev, ..) = device();
    // Every other unit: 256 runs of one unit, more than a 2 KiB payload holds (126).
    for i in 0..u64::from(POISON_LIMIT) {
        run(&mut dev, INJECT_POISON, &(i * 128).to_le_bytes()).unwrap();
    }
    assert_eq!(
        run(&mut dev, INJECT_POISON, &(1u64 << 20).to_le_bytes()),
        Err(ReturnCode::InjectPoisonLimitReached)
    );
    // Injecting a unit already poisoned is no new record.
    assert_eq!(
        run(&mut dev, INJECT_POISON, &0u64.to_le_bytes()).unwrap(),
        b""
    );
    let ask = [0u64.to_le_bytes(), (GIB / 64).to_le_bytes()].concat();
    let mut seen = Vec::new();
    for round in 0..3 {
        let l = run(&mut dev, GET_POISON_LIST, &ask).unwrap();
        let n = usize::from(u16::from_le_bytes([l[0x0a], l[0x0b]]));
        seen.extend((0..n).map(|i| u64_at(&l, 0x20 + 16 * i) & !63));
        assert_eq!(l[0] & 1 == 1, round < 2, "round {round}: more");
    }
    assert_eq!(seen, (0..256u64).map(|i| i * 128).collect::<Vec<_>>());
}

#[test]
fn alert_configuration_is_read_and_set_through_the_mailbox_commands() {
    let (mut dev, ..) = device();
    let fresh = run(&mut dev, GET_ALERT_CONFIG, &[]).unwrap();
    assert_eq!(fresh.len(), 0x10);
    assert_eq!(fresh[1], crate::cxl::alerts::PROGRAMMABLE);
    // Life used warning at 75 %, enabled (what `cxl set-alert-config -L 75 --life-used-alert=on` sends).
    let mut set = [0u8; 0x0c];
    set[0] = 1;
    set[1] = 1;
    set[2] = 75;
    assert_eq!(run(&mut dev, SET_ALERT_CONFIG, &set), Ok(vec![]));
    let now = run(&mut dev, GET_ALERT_CONFIG, &[]).unwrap();
    assert_eq!((now[0], now[3]), (1, 75));
    assert_eq!(
        run(&mut dev, SET_ALERT_CONFIG, &set[..8]),
        Err(ReturnCode::InvalidPayloadLength)
    );
    assert_eq!(
        run(&mut dev, GET_ALERT_CONFIG, &[0]),
        Err(ReturnCode::InvalidPayloadLength)
    );
}

#[test]
fn a_host_media_error_poisons_the_unit_and_logs_a_failure_record_linux_reads_and_clears() {
    let (mut dev, ..) = device();
    run(&mut dev, SET_TIMESTAMP, &5_000u64.to_le_bytes()).unwrap();
    dev.record_media_error(0x4000).unwrap();
    assert_eq!(
        dev.poisoned().collect::<Vec<_>>(),
        [(0x4000, PoisonSource::External)]
    );
    assert_eq!(dev.events().counts(), [0, 0, 1, 0]);
    assert_eq!(dev.event_status(), 0b0100, "failure log non-empty");
    // Linux's cxl_mem_get_records_log: Get, then Clear of the handles read.
    let got = run(&mut dev, GET_EVENT_RECORDS, &[2]).unwrap();
    assert_eq!(got.len(), 0x20 + 128);
    assert_eq!(u16::from_le_bytes([got[20], got[21]]), 1, "record count");
    let r = &got[0x20..];
    assert_eq!(&r[..16], &crate::cxl::events::GENERAL_MEDIA_UUID);
    assert_eq!(r[0x11] & 3, 2, "severity failure");
    assert_eq!(u64_at(r, 0x30), 0x4000, "DPA, persistent");
    assert_eq!(
        (r[0x38], r[0x39], r[0x3a]),
        (1, 0, 5),
        "uncorrectable ECC, media scrub"
    );
    assert!(u64_at(r, 0x18) >= 5_000, "stamped with the device's time");
    let mut clear = vec![2, 0, 1, 0, 0, 0];
    clear.extend_from_slice(&r[0x14..0x16]);
    assert_eq!(run(&mut dev, CLEAR_EVENT_RECORDS, &clear), Ok(vec![]));
    assert_eq!(dev.event_status(), 0);
    let again = run(&mut dev, GET_EVENT_RECORDS, &[2]).unwrap();
    assert_eq!((again.len(), again[20]), (0x20, 0), "no more records");
    // A DPA the device refuses: no poison, no record.
    assert_eq!(
        dev.record_media_error(GIB),
        Err(ReturnCode::InvalidPhysicalAddress)
    );
    assert_eq!(
        dev.record_media_error(0x4001),
        Err(ReturnCode::InvalidPhysicalAddress)
    );
    assert_eq!(dev.events().counts(), [0; 4]);
}

#[test]
fn event_commands_check_their_payload_lengths_through_execute() {
    let (mut dev, ..) = device();
    assert_eq!(
        run(&mut dev, GET_EVENT_RECORDS, &[]),
        Err(ReturnCode::InvalidPayloadLength)
    );
    assert_eq!(
        run(&mut dev, GET_EVENT_RECORDS, &[4]),
        Err(ReturnCode::InvalidInput)
    );
    assert_eq!(
        run(&mut dev, GET_EVENT_POLICY, &[0]),
        Err(ReturnCode::InvalidPayloadLength)
    );
    assert_eq!(
        run(&mut dev, SET_EVENT_POLICY, &[1; 5]),
        Err(ReturnCode::InvalidPayloadLength)
    );
    // What cxl_event_config sends: Get, Set {1,1,1,1}, Get.
    assert_eq!(run(&mut dev, GET_EVENT_POLICY, &[]), Ok(vec![0; 4]));
    assert_eq!(run(&mut dev, SET_EVENT_POLICY, &[1; 4]), Ok(vec![]));
    assert_eq!(run(&mut dev, GET_EVENT_POLICY, &[]), Ok(vec![1; 4]));
    assert_eq!(
        run(&mut dev, CLEAR_EVENT_RECORDS, &[0, 0, 1, 0, 0, 0]),
        Err(ReturnCode::InvalidPayloadLength)
    );
}
