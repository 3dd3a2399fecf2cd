//! The control socket's `media` command: a DIMM's error list changed or read
//! while the guest runs. An injected range is saved with the DIMM's media
//! state (as `badblocks=` is, in the backing file) before the reply, and the
//! guest is told as a server's firmware tells it of an uncorrectable error
//! found by a patrol scrub: notification 0x81 on the NVDIMM root device,
//! through the Generic Event Device (`devices::platform_events`). Linux then
//! runs an address range scrub, whose results (pmemvm's list) it adds to the
//! namespace's badblocks. A clear takes the range off the list without a
//! notification (firmware sends none; the guest's own clear-error call, made
//! when it rewrites the range, takes it off its badblocks).

use std::sync::Arc;

use devices::nvdimm_health::smart;
use devices::nvdimm_media::DimmMedia;
use devices::platform_events::{dimm_health, PlatformEvents, MEDIA_ERRORS};
use serde_json::{json, Value};

use super::cxl_media::CxlMedia;
use super::protocol::{HealthAction, MediaAction, MediaRefusal, MediaTarget};
use crate::config::badblocks::parse_badblocks;
use crate::config::ConfigError;

/// A media state update's outcome as a reply: a failed save is pmemvm's
/// failure, a refused change the request's; either way nothing changed.
fn refused<R>(
    index: u32,
    outcome: Result<Result<R, devices::nvdimm_media::MediaError>, std::io::Error>,
) -> Result<R, MediaRefusal> {
    outcome
        .map_err(|e| {
            (
                format!("saving DIMM {index}'s media state failed: {e}; nothing changed"),
                false,
            )
        })?
        .map_err(|e| (format!("DIMM {index}: {e}; nothing changed"), true))
}

/// What `media` acts on: the DIMMs' media in `--nvdimm` order, and the
/// event line to the guest.
#[derive(Debug, Default)]
pub struct MediaControl {
    /// Each DIMM's media state.
    pub dimms: Vec<Arc<DimmMedia>>,
    /// The Generic Event Device's register and line (with a DIMM).
    pub events: Option<Arc<PlatformEvents>>,
    /// DIMMs hot-added while the guest runs follow the boot DIMMs.
    pub hotplug: Option<Arc<crate::nvdimm::hotplug::NvdimmHotplug>>,
    /// The CXL memory devices (`"cxl": N`).
    pub cxl: CxlMedia,
}

impl MediaControl {
    /// Every DIMM's media, boot DIMMs first, then the hot-added ones.
    fn all(&self) -> Vec<Arc<DimmMedia>> {
        let mut all = self.dimms.clone();
        if let Some(h) = &self.hotplug {
            all.extend((0..).map_while(|i| h.media(i)));
        }
        all
    }

    fn dimm(&self, dimm: u32) -> Result<Arc<DimmMedia>, MediaRefusal> {
        let all = self.all();
        let n = all.len();
        usize::try_from(dimm)
            .ok()
            .and_then(|i| all.get(i).cloned())
            .ok_or_else(|| {
                let have = match n {
                    0 => "this VM has no NVDIMM".to_owned(),
                    1 => "this VM has one NVDIMM, DIMM 0".to_owned(),
                    n => format!("this VM has {n} NVDIMMs, 0 to {}", n - 1),
                };
                (format!("DIMM {dimm} does not exist: {have}"), true)
            })
    }

    fn list(d: &DimmMedia, index: usize) -> Value {
        let ranges: Vec<Value> = d
            .state()
            .bad_ranges
            .iter()
            .map(|r| json!({"offset": r.offset, "length": r.length}))
            .collect();
        json!({"dimm": index, "region_bytes": d.spa_size, "bad_ranges": ranges})
    }

    /// The DIMM's health as its SMART payload reports it.
    fn health_now(d: &DimmMedia, index: u32) -> Value {
        let out = smart(&d.state());
        let health = match out.get(12).copied().unwrap_or(0) {
            h if h & 4 != 0 => "fatal",
            h if h & 2 != 0 => "critical",
            h if h & 1 != 0 => "non-critical",
            _ => "ok",
        };
        let t = u16::from_le_bytes([out[16], out[17]]);
        let celsius = f64::from(t & 0x7fff) / 16.0 * if t & 0x8000 != 0 { -1.0 } else { 1.0 };
        let alarms = out[15];
        let named: Vec<&str> = [(1u8, "spares"), (2, "mtemp"), (4, "ctemp")]
            .iter()
            .filter(|(b, _)| alarms & b != 0)
            .map(|(_, n)| *n)
            .collect();
        json!({"dimm": index, "health": health, "media_temperature": celsius,
               "spares": out[13], "alarms_tripped": named,
               "shutdown_count": u32::from_le_bytes([out[20], out[21], out[22], out[23]])})
    }

    /// Runs `health set|get` on DIMM `index`.
    pub fn health(&self, index: u32, action: HealthAction) -> Result<Value, MediaRefusal> {
        let d = self.dimm(index)?;
        let HealthAction::Set(change) = action else {
            return Ok(Self::health_now(&d, index));
        };
        refused(
            index,
            d.update(|s| {
                change.apply(s);
                Ok(())
            }),
        )?;
        let bit = usize::try_from(index).ok().and_then(dimm_health);
        let notified = match (&self.events, bit) {
            (Some(ev), Some(bit)) => ev.raise(bit).map_err(|e| e.to_string()),
            (None, _) => Err("this VM has no event device".to_owned()),
            (_, None) => Err(format!(
                "DIMM {index} has no event bit (the first 30 DIMMs do)"
            )),
        };
        let mut out = Self::health_now(&d, index);
        out["notified"] = match notified {
            Ok(()) => json!(true),
            Err(why) => {
                log::warn!("health set: the guest was not notified: {why}");
                json!(false)
            }
        };
        Ok(out)
    }

    /// Runs `media ACTION [dimm|cxl] [range]`.
    pub fn run(
        &self,
        action: MediaAction,
        target: Option<MediaTarget>,
        range: Option<&str>,
    ) -> Result<Value, MediaRefusal> {
        let dimm = match target {
            Some(MediaTarget::Cxl(index)) => return self.cxl.run(action, index, range),
            Some(MediaTarget::Dimm(index)) => Some(index),
            None => None,
        };
        if action == MediaAction::List {
            return Ok(match dimm {
                Some(i) => {
                    let d = self.dimm(i)?;
                    json!({"dimms": [Self::list(&d, usize::try_from(i).unwrap_or(0))]})
                }
                None => {
                    let all: Vec<Value> = self
                        .all()
                        .iter()
                        .enumerate()
                        .map(|(i, d)| Self::list(d, i))
                        .collect();
                    json!({"dimms": all, "cxl_devices": self.cxl.list_all()})
                }
            });
        }
        let index = dimm.ok_or_else(|| ("media needs a DIMM".to_owned(), true))?;
        let d = self.dimm(index)?;
        let text = range.ok_or_else(|| ("media needs a range".to_owned(), true))?;
        let region = d.spa_size;
        let ranges = parse_badblocks(text, region).map_err(|e| match e {
            ConfigError::BadBlocks { why, .. } => (
                format!(
                    "media range '{text}' is not valid for DIMM {index}: {why}; use \
                     OFFSET+LEN[:OFFSET+LEN...] in bytes from the start of its {region}-byte \
                     region, multiples of 512 with an optional K, M or G suffix (e.g. 1M+4K)"
                ),
                true,
            ),
            other => (other.to_string(), true),
        })?;
        let changed = refused(
            index,
            d.update(|s| {
                let mut bytes = 0;
                for (o, l) in &ranges {
                    match action {
                        MediaAction::Inject => s.add_bad(*o, *l, region)?,
                        _ => bytes += s.clear_bad(*o, *l, region)?,
                    }
                }
                Ok(bytes)
            }),
        )?;
        let mut out = Self::list(&d, usize::try_from(index).unwrap_or(0));
        if action == MediaAction::Inject {
            // The list is saved; a failed notification is said, not undone.
            let notified = match &self.events {
                Some(ev) => ev.raise(MEDIA_ERRORS).map_err(|e| e.to_string()),
                None => Err("this VM has no event device".to_owned()),
            };
            out["notified"] = match notified {
                Ok(()) => json!(true),
                Err(why) => {
                    log::warn!("media inject: the guest was not notified: {why}");
                    json!(false)
                }
            };
        } else {
            out["cleared_bytes"] = json!(changed);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use devices::nvdimm_media::MediaState;
    use vmm_sys_util::eventfd::EventFd;

    const GIB: u64 = 1 << 30;

    fn control() -> MediaControl {
        MediaControl {
            hotplug: None,
            cxl: CxlMedia::default(),
            dimms: vec![
                Arc::new(DimmMedia::new(1, GIB, GIB, MediaState::default(), None)),
                Arc::new(DimmMedia::new(2, 2 * GIB, GIB, MediaState::default(), None)),
            ],
            events: Some(Arc::new(PlatformEvents::new(
                EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            ))),
        }
    }

    #[test]
    fn inject_records_notifies_and_clear_takes_it_off() {
        let c = control();
        let r = c
            .run(
                MediaAction::Inject,
                Some(MediaTarget::Dimm(1)),
                Some("1M+4K:8M+512"),
            )
            .unwrap();
        assert_eq!(r["notified"], json!(true));
        assert_eq!(
            r["bad_ranges"],
            json!([{"offset": 1 << 20, "length": 4096}, {"offset": 8 << 20, "length": 512}])
        );
        let ev = c.events.as_ref().unwrap();
        assert_eq!(ev.take(), MEDIA_ERRORS, "the guest's _EVT finds the event");
        let r = c
            .run(
                MediaAction::Clear,
                Some(MediaTarget::Dimm(1)),
                Some("1M+4K"),
            )
            .unwrap();
        assert_eq!(r["cleared_bytes"], json!(4096));
        assert_eq!(ev.take(), 0, "a clear sends no notification");
        let all = c.run(MediaAction::List, None, None).unwrap();
        assert_eq!(all["dimms"][0]["bad_ranges"], json!([]));
        assert_eq!(
            all["dimms"][1]["bad_ranges"],
            json!([{"offset": 8 << 20, "length": 512}])
        );
    }

    #[test]
    fn health_set_changes_the_smart_values_and_notifies_the_dimm() {
        use devices::nvdimm_health_set::HealthChange;
        let c = control();
        let change = HealthChange::parse("health=fatal,temperature=90").unwrap();
        let r = c.health(1, HealthAction::Set(change)).unwrap();
        assert_eq!(r["health"], "fatal");
        assert_eq!(r["media_temperature"], 90.0);
        assert_eq!(r["notified"], true);
        let ev = c.events.as_ref().unwrap();
        assert_eq!(ev.take(), dimm_health(1).unwrap(), "DIMM 1's bit");
        let now = c.health(0, HealthAction::Get).unwrap();
        assert_eq!(now["health"], "ok", "DIMM 0 untouched: {now}");
        assert_eq!(now["spares"], 100);
        let (e, usage) = c.health(5, HealthAction::Get).unwrap_err();
        assert!(usage && e.starts_with("DIMM 5 does not exist"), "{e}");
    }

    #[test]
    fn bad_requests_name_the_value_and_change_nothing() {
        let c = control();
        let (e, usage) = c
            .run(
                MediaAction::Inject,
                Some(MediaTarget::Dimm(2)),
                Some("0+512"),
            )
            .unwrap_err();
        assert!(usage);
        assert_eq!(e, "DIMM 2 does not exist: this VM has 2 NVDIMMs, 0 to 1");
        let (e, _) = c
            .run(
                MediaAction::Inject,
                Some(MediaTarget::Dimm(0)),
                Some("1023M+2M"),
            )
            .unwrap_err();
        assert!(
            e.starts_with("media range '1023M+2M' is not valid for DIMM 0: '1023M+2M' ends beyond"),
            "{e}"
        );
        let (e, _) = c
            .run(MediaAction::Clear, Some(MediaTarget::Dimm(0)), Some("7+1"))
            .unwrap_err();
        assert!(e.contains("not a multiple of 512"), "{e}");
        assert!(c
            .run(MediaAction::Inject, Some(MediaTarget::Dimm(0)), Some("x"))
            .is_err());
        assert!(c.dimms.iter().all(|d| d.state().bad_ranges.is_empty()));
        assert_eq!(c.events.as_ref().unwrap().take(), 0, "no notification");
        let none = MediaControl::default();
        let (e, _) = none
            .run(MediaAction::List, Some(MediaTarget::Dimm(0)), None)
            .unwrap_err();
        assert_eq!(e, "DIMM 0 does not exist: this VM has no NVDIMM");
    }
}
