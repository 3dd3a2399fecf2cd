//! A DIMM's health changed from outside while the guest runs (the control
//! socket's `health set`): what a server's DIMM firmware would report after
//! it heated up, used up spares or failed. The values are those the Intel
//! DSM's SMART payload carries (`nvdimm_health`), saved with the media state
//! like an `ndctl inject-smart`; pmemvm then notifies the DIMM's ACPI device
//! (0x81), so Linux wakes `ndctl monitor`, which reads the SMART data again.
//!
//! The text form is `KEY=VALUE[,KEY=VALUE...]`:
//!
//! | key | values | SMART effect |
//! |---|---|---|
//! | `health` | `ok`, `non-critical`, `critical`, `fatal` | the health status (ok: as the alarms make it) |
//! | `temperature` | −100 to 200 (°C) | the media temperature |
//! | `spares` | 0 to 100 (%) | spare blocks remaining |
//! | `alarm` | `none`, or `spares`, `mtemp`, `ctemp` joined by `+` | which alarms are enabled (thresholds as set, default 10 %, 85 °C) |

use crate::nvdimm_health::{ALARM_CTEMP, ALARM_MTEMP, ALARM_SPARES};
use crate::nvdimm_media::{
    MediaState, DEFAULT_CTEMP_THRESHOLD, DEFAULT_MTEMP_THRESHOLD, DEFAULT_SPARES_THRESHOLD,
    FLAG_FATAL, FLAG_HEALTH_SET, FLAG_MTEMP_INJECTED, FLAG_SPARES_INJECTED, FLAG_THRESHOLDS_SET,
};

/// The health statuses a DIMM reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    /// Healthy (or non-critical when an enabled alarm trips).
    Ok,
    /// Non-critical: the DIMM works, something needs attention.
    NonCritical,
    /// Critical: the DIMM works, failure is near.
    Critical,
    /// Fatal: the DIMM failed.
    Fatal,
}

/// One `health set` request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HealthChange {
    /// The health status.
    pub state: Option<HealthState>,
    /// The media temperature, °C.
    pub temperature: Option<i16>,
    /// Spares remaining, %.
    pub spares: Option<u8>,
    /// Alarm control bits (`ALARM_*`).
    pub alarms: Option<u16>,
}

/// What `health set` accepts, for messages.
pub const ACCEPTED: &str = "health=ok|non-critical|critical|fatal, temperature=C (-100 to 200), \
     spares=% (0 to 100), alarm=none or spares+mtemp+ctemp";

impl HealthChange {
    /// Parses `KEY=VALUE[,KEY=VALUE...]`; the error names the item and what
    /// is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut c = Self::default();
        if text.trim().is_empty() {
            return Err(format!("health set needs at least one of {ACCEPTED}"));
        }
        for item in text.split(',') {
            let item = item.trim();
            let bad = || {
                format!(
                    "health setting '{}' is not valid; use {ACCEPTED}",
                    item.chars().take(64).collect::<String>()
                )
            };
            let (key, value) = item.split_once('=').ok_or_else(bad)?;
            match key {
                "health" => {
                    c.state = Some(match value {
                        "ok" => HealthState::Ok,
                        "non-critical" => HealthState::NonCritical,
                        "critical" => HealthState::Critical,
                        "fatal" => HealthState::Fatal,
                        _ => return Err(bad()),
                    });
                }
                "temperature" => {
                    let t: i16 = value.parse().map_err(|_| bad())?;
                    if !(-100..=200).contains(&t) {
                        return Err(bad());
                    }
                    c.temperature = Some(t);
                }
                "spares" => {
                    let p: u8 = value.parse().map_err(|_| bad())?;
                    if p > 100 {
                        return Err(bad());
                    }
                    c.spares = Some(p);
                }
                "alarm" => {
                    let mut bits = 0;
                    if value != "none" {
                        for a in value.split('+') {
                            bits |= match a {
                                "spares" => ALARM_SPARES,
                                "mtemp" => ALARM_MTEMP,
                                "ctemp" => ALARM_CTEMP,
                                _ => return Err(bad()),
                            };
                        }
                    }
                    c.alarms = Some(bits);
                }
                _ => return Err(bad()),
            }
        }
        Ok(c)
    }

    /// Applies the change to a DIMM's media state.
    pub fn apply(&self, s: &mut MediaState) {
        if let Some(state) = self.state {
            s.set(FLAG_FATAL, state == HealthState::Fatal);
            let bits = match state {
                HealthState::NonCritical => 1,
                HealthState::Critical => 2,
                HealthState::Ok | HealthState::Fatal => 0,
            };
            s.set(FLAG_HEALTH_SET, bits != 0);
            s.health = bits;
        }
        if let Some(t) = self.temperature {
            s.set(FLAG_MTEMP_INJECTED, true);
            let sixteenths = t.unsigned_abs() * 16;
            s.media_temperature = if t < 0 {
                sixteenths | 0x8000
            } else {
                sixteenths
            };
        }
        if let Some(p) = self.spares {
            s.set(FLAG_SPARES_INJECTED, true);
            s.spares = p;
        }
        if let Some(bits) = self.alarms {
            if !s.has(FLAG_THRESHOLDS_SET) {
                s.spares_threshold = DEFAULT_SPARES_THRESHOLD;
                s.mtemp_threshold = DEFAULT_MTEMP_THRESHOLD;
                s.ctemp_threshold = DEFAULT_CTEMP_THRESHOLD;
                s.set(FLAG_THRESHOLDS_SET, true);
            }
            s.alarm_control = bits;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvdimm_health::smart;

    #[test]
    fn settings_parse_and_reach_the_smart_payload() {
        let c = HealthChange::parse("health=fatal,temperature=90").unwrap();
        assert_eq!(c.state, Some(HealthState::Fatal));
        assert_eq!(c.temperature, Some(90));
        let mut s = MediaState::default();
        c.apply(&mut s);
        let out = smart(&s);
        assert_eq!(out[12], 1 << 2, "health: fatal");
        assert_eq!(
            u16::from_le_bytes([out[16], out[17]]),
            90 * 16,
            "media temperature"
        );

        let mut s = MediaState::default();
        HealthChange::parse("health=critical, spares=5")
            .unwrap()
            .apply(&mut s);
        let out = smart(&s);
        assert_eq!(out[12], 1 << 1, "critical");
        assert_eq!(out[13], 5, "spares");
        HealthChange::parse("health=ok").unwrap().apply(&mut s);
        assert_eq!(smart(&s)[12], 0, "ok again");
        // An enabled spares alarm trips below the default 10 %: non-critical.
        HealthChange::parse("alarm=spares+mtemp")
            .unwrap()
            .apply(&mut s);
        let out = smart(&s);
        assert_eq!(out[12], 1 << 0, "non-critical from the alarm");
        assert_eq!(
            u16::from(out[15]) & ALARM_SPARES,
            ALARM_SPARES,
            "spares alarm flag"
        );
        let mut cold = MediaState::default();
        HealthChange::parse("temperature=-5")
            .unwrap()
            .apply(&mut cold);
        assert_eq!(cold.media_temperature, 0x8000 | 80);
    }

    #[test]
    fn bad_settings_name_the_item_and_what_is_accepted() {
        for (text, item) in [
            ("health=dead", "'health=dead'"),
            ("temperature=hot", "'temperature=hot'"),
            ("temperature=300", "'temperature=300'"),
            ("spares=101", "'spares=101'"),
            ("alarm=smoke", "'alarm=smoke'"),
            ("colour=red", "'colour=red'"),
            ("health", "'health'"),
        ] {
            let e = HealthChange::parse(text).unwrap_err();
            assert!(e.contains(item) && e.contains("use health=ok|"), "{e}");
        }
        assert!(HealthChange::parse("")
            .unwrap_err()
            .contains("at least one"));
    }
}
