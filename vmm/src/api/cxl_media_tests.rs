use std::io;

use devices::cxl::memdev::{MediaWrite, Memdev};
use devices::nvdimm_labels::LabelStorage;

use super::*;

#[derive(Debug)]
struct NoLabels;

impl LabelStorage for NoLabels {
    fn label_size(&self) -> u32 {
        0
    }
    fn read_label(&self, _: u64, buf: &mut [u8]) -> io::Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn write_label(&self, _: u64, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn sync_labels(&self) -> io::Result<()> {
        Ok(())
    }
    fn readonly(&self) -> bool {
        false
    }
}

#[derive(Debug)]
struct NoMedia;

impl MediaWrite for NoMedia {
    fn write_media(&self, _: u64, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
}

/// The MSIs sent.
#[derive(Default)]
struct Recorder(Mutex<Vec<MsiMessage>>);

impl MsiSender for Recorder {
    fn send(&self, m: MsiMessage) -> Result<(), String> {
        self.0.lock().unwrap().push(m);
        Ok(())
    }
}

const GIB: u64 = 1 << 30;

fn media(devices: usize) -> (CxlMedia, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let devices = (0..devices)
        .map(|i| {
            let memdev = Memdev::new(GIB, Box::new(NoLabels), Box::new(NoMedia)).unwrap();
            Arc::new(Mutex::new(Type3Device::new(i as u64 + 1, memdev)))
        })
        .collect();
    let msi: Arc<dyn MsiSender> = recorder.clone();
    (
        CxlMedia {
            devices,
            msi: Some(msi),
        },
        recorder,
    )
}

/// What Linux 6.12's cxl_pci does at probe for events: MSI on in the
/// configuration space, then Set Event Interrupt Policy with MSI for every
/// log (message 0).
fn enable_event_interrupts(d: &SharedType3) {
    let mut d = lock(d);
    // Bus mastering on (pci_set_master), then MSI.
    d.config_write(0x04, &[0x06, 0x04]);
    let msi = d.msi_capability_offset();
    d.config_write(msi + 4, &0xfee0_0000u32.to_le_bytes());
    d.config_write(msi + 8, &0u32.to_le_bytes());
    d.config_write(msi + 12, &0x4041u16.to_le_bytes());
    d.config_write(msi + 2, &1u16.to_le_bytes());
    let policy = [1u8, 1, 1, 1];
    let mut out = [0u8; 64];
    let memdev = d.memdev_mut();
    devices::cxl::CommandSet::execute(memdev, 0x0103, &policy, &mut out).unwrap();
}

#[test]
fn inject_poisons_each_unit_records_one_event_and_lists_runs() {
    let (m, sent) = media(1);
    let out = m
        .run(MediaAction::Inject, 0, Some("4K+512:1M+512"))
        .unwrap();
    assert_eq!(out["cxl"], 0);
    assert_eq!(
        out["poison"],
        json!([{"dpa": 4096, "length": 512, "source": "external"},
               {"dpa": 1 << 20, "length": 512, "source": "external"}])
    );
    // No interrupt asked for: the records wait.
    assert_eq!(out["notified"], false);
    assert!(sent.0.lock().unwrap().is_empty());
    let d = lock(&m.devices[0]);
    assert_eq!(d.memdev().poisoned().count(), 16, "8 units per 512 bytes");
    assert_eq!(
        d.memdev()
            .event_count(devices::cxl::events::EventLog::Failure),
        2
    );
}

#[test]
fn with_the_guests_event_interrupt_on_an_inject_sends_its_msi() {
    let (m, sent) = media(2);
    enable_event_interrupts(&m.devices[1]);
    let out = m.run(MediaAction::Inject, 1, Some("0+512")).unwrap();
    assert_eq!(out["notified"], true);
    let sent = sent.0.lock().unwrap();
    assert_eq!(
        *sent,
        [MsiMessage {
            address: 0xfee0_0000,
            data: 0x4041
        }]
    );
}

#[test]
fn clear_takes_units_off_and_list_shows_every_device() {
    let (m, _) = media(2);
    m.run(MediaAction::Inject, 0, Some("0+1K")).unwrap();
    let out = m.run(MediaAction::Clear, 0, Some("512+512")).unwrap();
    assert_eq!(out["cleared_bytes"], 512);
    assert_eq!(
        out["poison"],
        json!([{"dpa": 0, "length": 512, "source": "external"}])
    );
    let all = m.list_all();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1]["poison"], json!([]));
}

#[test]
fn bad_devices_ranges_and_the_limit_are_refused_changing_nothing() {
    let (m, _) = media(1);
    let (e, usage) = m.run(MediaAction::Inject, 3, Some("0+512")).unwrap_err();
    assert!(usage);
    assert_eq!(
        e,
        "CXL device 3 does not exist: this VM has one CXL memory device, 0"
    );
    let (e, usage) = m.run(MediaAction::Inject, 0, Some("1G+512")).unwrap_err();
    assert!(
        usage && e.starts_with("media range '1G+512' is not valid for CXL device 0"),
        "{e}"
    );
    // 256 units at most: 16 KiB; 20 KiB is refused whole.
    let (e, usage) = m.run(MediaAction::Inject, 0, Some("0+20K")).unwrap_err();
    assert!(
        usage && e.contains("at most 256 poisoned 64-byte units"),
        "{e}"
    );
    let d = lock(&m.devices[0]);
    assert_eq!(d.memdev().poisoned().count(), 0, "nothing changed");
    assert_eq!(
        d.memdev()
            .event_count(devices::cxl::events::EventLog::Failure),
        0
    );
}
