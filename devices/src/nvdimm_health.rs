//! Health of one NVDIMM through the Intel NVDIMM DSM family (the "Intel
//! Optane PMem DSM Interface", revision 2.0; function numbers as Linux 6.1's
//! `drivers/acpi/nfit/nfit.h` and ndctl's `ndctl/lib/intel.h` use them):
//!
//! | function | name | input | output (after the u32 status) |
//! |---|---|---|---|
//! | 1 | Get SMART and Health Info | — | 128 bytes: valid flags, health, spares, life used, alarm flags, media/controller temperature, unsafe shutdown count, last shutdown state, ... |
//! | 2 | Get SMART Threshold | — | alarm control (u16), spares (u8), media/controller temperature (u16 each), reserved |
//! | 17 | Set SMART Threshold | alarm control, spares, media/controller temperature | — |
//! | 18 | Inject SMART error | flags (u64), media temperature enable + value, spares enable + value, fatal enable, unsafe shutdown enable | — |
//!
//! Temperatures are in 1/16 °C with bit 15 as the sign. The values are
//! those of a healthy DIMM (100 % spares, 0 % life used, 25 °C media,
//! 30 °C controller) unless injected; an alarm trips when its control bit
//! is set and the value crosses its threshold, which also makes the health
//! "non-critical". The unsafe shutdown count and the last shutdown state
//! come from the media state, which pmemvm updates at every start
//! (`vmm/src/media.rs`). Injecting an unsafe shutdown counts one at once
//! and reports the last shutdown dirty, as Linux's `nfit_test` does.

use crate::nvdimm_media::{
    DimmMedia, MediaError, MediaState, DEFAULT_CTEMP_THRESHOLD, DEFAULT_MTEMP_THRESHOLD,
    DEFAULT_SPARES_THRESHOLD, FLAG_FATAL, FLAG_HEALTH_SET, FLAG_LAST_SHUTDOWN_DIRTY,
    FLAG_MTEMP_INJECTED, FLAG_SPARES_INJECTED, FLAG_THRESHOLDS_SET,
};

/// Get SMART and health info.
pub const FUNC_SMART: u32 = 1;
/// Get SMART threshold.
pub const FUNC_SMART_THRESHOLD: u32 = 2;
/// Set SMART threshold.
pub const FUNC_SET_THRESHOLD: u32 = 17;
/// Inject SMART error.
pub const FUNC_SMART_INJECT: u32 = 18;

/// The health functions in a function 0 bitmap.
pub const HEALTH_FUNCTIONS: u32 =
    1 << FUNC_SMART | 1 << FUNC_SMART_THRESHOLD | 1 << FUNC_SET_THRESHOLD | 1 << FUNC_SMART_INJECT;

/// The status of a call that succeeded.
pub const STATUS_SUCCESS: u32 = 0;
const STATUS_INVALID_INPUT: u32 = 3;
const STATUS_HW_ERROR: u32 = 4;

// Valid-field flags of function 1.
const VALID_HEALTH: u32 = 1 << 0;
const VALID_SPARES: u32 = 1 << 1;
const VALID_USED: u32 = 1 << 2;
const VALID_MTEMP: u32 = 1 << 3;
const VALID_CTEMP: u32 = 1 << 4;
const VALID_SHUTDOWN_COUNT: u32 = 1 << 5;
const VALID_ALARM: u32 = 1 << 9;
const VALID_SHUTDOWN_STATE: u32 = 1 << 10;

/// Alarm bits (alarm flags of function 1 and alarm control of 2/17).
pub const ALARM_SPARES: u16 = 1 << 0;
/// Media temperature alarm.
pub const ALARM_MTEMP: u16 = 1 << 1;
/// Controller temperature alarm.
pub const ALARM_CTEMP: u16 = 1 << 2;

const HEALTH_NON_CRITICAL: u8 = 1 << 0;
const HEALTH_CRITICAL: u8 = 1 << 1;
const HEALTH_FATAL: u8 = 1 << 2;

// Injection flags of function 18.
const INJECT_MTEMP: u64 = 1 << 0;
const INJECT_SPARES: u64 = 1 << 1;
const INJECT_FATAL: u64 = 1 << 2;
const INJECT_SHUTDOWN: u64 = 1 << 3;

/// Media temperature of a healthy DIMM: 25 °C.
const MEDIA_TEMPERATURE: u16 = 25 * 16;
/// Controller temperature: 30 °C.
const CTRL_TEMPERATURE: u16 = 30 * 16;

/// A temperature in 1/16 °C, bit 15 the sign, as a signed value.
fn celsius16(t: u16) -> i32 {
    let v = i32::from(t & 0x7fff);
    if t & 0x8000 != 0 {
        -v
    } else {
        v
    }
}

/// The thresholds in force: (alarm control, spares, media, controller).
fn thresholds(s: &MediaState) -> (u16, u8, u16, u16) {
    if s.has(FLAG_THRESHOLDS_SET) {
        (
            s.alarm_control,
            s.spares_threshold,
            s.mtemp_threshold,
            s.ctemp_threshold,
        )
    } else {
        (
            0,
            DEFAULT_SPARES_THRESHOLD,
            DEFAULT_MTEMP_THRESHOLD,
            DEFAULT_CTEMP_THRESHOLD,
        )
    }
}

/// Function 1's 132-byte output for `s`.
pub fn smart(s: &MediaState) -> Vec<u8> {
    let spares = if s.has(FLAG_SPARES_INJECTED) {
        s.spares
    } else {
        100
    };
    let mtemp = if s.has(FLAG_MTEMP_INJECTED) {
        s.media_temperature
    } else {
        MEDIA_TEMPERATURE
    };
    let (control, t_spares, t_mtemp, t_ctemp) = thresholds(s);
    let mut alarms = 0u16;
    if control & ALARM_SPARES != 0 && spares < t_spares {
        alarms |= ALARM_SPARES;
    }
    if control & ALARM_MTEMP != 0 && celsius16(mtemp) > celsius16(t_mtemp) {
        alarms |= ALARM_MTEMP;
    }
    if control & ALARM_CTEMP != 0 && celsius16(CTRL_TEMPERATURE) > celsius16(t_ctemp) {
        alarms |= ALARM_CTEMP;
    }
    let set = if s.has(FLAG_HEALTH_SET) {
        s.health & (HEALTH_NON_CRITICAL | HEALTH_CRITICAL)
    } else {
        0
    };
    let health = if s.has(FLAG_FATAL) {
        HEALTH_FATAL
    } else if set != 0 {
        set
    } else if alarms != 0 {
        HEALTH_NON_CRITICAL
    } else {
        0
    };
    let mut out = vec![0u8; 4 + 128];
    let flags = VALID_HEALTH
        | VALID_SPARES
        | VALID_USED
        | VALID_MTEMP
        | VALID_CTEMP
        | VALID_SHUTDOWN_COUNT
        | VALID_ALARM
        | VALID_SHUTDOWN_STATE;
    out[4..8].copy_from_slice(&flags.to_le_bytes());
    out[12] = health;
    out[13] = spares;
    out[14] = 0; // life used, %
    out[15] = u8::try_from(alarms).unwrap_or(0);
    out[16..18].copy_from_slice(&mtemp.to_le_bytes());
    out[18..20].copy_from_slice(&CTRL_TEMPERATURE.to_le_bytes());
    out[20..24].copy_from_slice(&s.shutdown_count.to_le_bytes());
    out[35] = u8::from(s.has(FLAG_LAST_SHUTDOWN_DIRTY));
    out
}

/// Whether the DIMM has something to report (an enabled alarm tripped, a
/// health status other than healthy, a dirty last shutdown): what makes a
/// DIMM raise its health event (0x81).
pub fn notable(s: &MediaState) -> bool {
    let out = smart(s);
    out[12] != 0 || out[15] != 0 || out[35] != 0
}

/// Function 2's output for `s`.
pub fn threshold(s: &MediaState) -> Vec<u8> {
    let (control, spares, mtemp, ctemp) = thresholds(s);
    let mut out = STATUS_SUCCESS.to_le_bytes().to_vec();
    out.extend_from_slice(&control.to_le_bytes());
    out.push(spares);
    out.extend_from_slice(&mtemp.to_le_bytes());
    out.extend_from_slice(&ctemp.to_le_bytes());
    out.push(0);
    out
}

fn status(s: u32) -> Vec<u8> {
    s.to_le_bytes().to_vec()
}

/// Applies `f` to the DIMM's state and answers with the status.
fn change(dimm: &DimmMedia, f: impl FnOnce(&mut MediaState)) -> Vec<u8> {
    match dimm.update(|s| {
        f(s);
        Ok::<(), MediaError>(())
    }) {
        Ok(_) => status(STATUS_SUCCESS),
        Err(e) => {
            log::warn!(
                "saving the health state of NVDIMM {:#x} failed: {e}",
                dimm.handle
            );
            status(STATUS_HW_ERROR)
        }
    }
}

/// Function 17: alarm control (u16), spares (u8), media and controller
/// temperature (u16 each).
pub fn set_threshold(dimm: &DimmMedia, input: &[u8]) -> Vec<u8> {
    if input.len() != 7 || input[2] > 100 {
        return status(STATUS_INVALID_INPUT);
    }
    let control = u16::from_le_bytes([input[0], input[1]]);
    if control & !(ALARM_SPARES | ALARM_MTEMP | ALARM_CTEMP) != 0 {
        return status(STATUS_INVALID_INPUT);
    }
    change(dimm, |s| {
        s.set(FLAG_THRESHOLDS_SET, true);
        s.alarm_control = control;
        s.spares_threshold = input[2];
        s.mtemp_threshold = u16::from_le_bytes([input[3], input[4]]);
        s.ctemp_threshold = u16::from_le_bytes([input[5], input[6]]);
    })
}

/// Function 18: flags (u64), media temperature enable (u8) and value (u16),
/// spares enable and value (u8 each), fatal enable, unsafe shutdown enable.
pub fn inject(dimm: &DimmMedia, input: &[u8]) -> Vec<u8> {
    if input.len() != 15 {
        return status(STATUS_INVALID_INPUT);
    }
    let mut f = [0u8; 8];
    f.copy_from_slice(&input[0..8]);
    let flags = u64::from_le_bytes(f);
    let known = INJECT_MTEMP | INJECT_SPARES | INJECT_FATAL | INJECT_SHUTDOWN;
    if flags & !known != 0 || (flags & INJECT_SPARES != 0 && input[12] > 100) {
        return status(STATUS_INVALID_INPUT);
    }
    change(dimm, |s| {
        if flags & INJECT_MTEMP != 0 {
            s.set(FLAG_MTEMP_INJECTED, input[8] != 0);
            s.media_temperature = u16::from_le_bytes([input[9], input[10]]);
        }
        if flags & INJECT_SPARES != 0 {
            s.set(FLAG_SPARES_INJECTED, input[11] != 0);
            s.spares = input[12];
        }
        if flags & INJECT_FATAL != 0 {
            s.set(FLAG_FATAL, input[13] != 0);
        }
        if flags & INJECT_SHUTDOWN != 0 {
            if input[14] != 0 {
                s.shutdown_count = s.shutdown_count.saturating_add(1);
            }
            s.set(FLAG_LAST_SHUTDOWN_DIRTY, input[14] != 0);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dimm() -> DimmMedia {
        DimmMedia::new(1, 1 << 32, 1 << 30, MediaState::default(), None)
    }

    fn inj(flags: u64, mtemp: Option<u16>, spares: Option<u8>, fatal: u8, shutdown: u8) -> Vec<u8> {
        let mut v = flags.to_le_bytes().to_vec();
        v.push(u8::from(mtemp.is_some()));
        v.extend_from_slice(&mtemp.unwrap_or(0).to_le_bytes());
        v.push(u8::from(spares.is_some()));
        v.push(spares.unwrap_or(0));
        v.push(fatal);
        v.push(shutdown);
        v
    }

    #[test]
    fn healthy_defaults() {
        let out = smart(&MediaState::default());
        assert_eq!(out.len(), 132);
        assert_eq!(out[0..4], [0; 4]);
        assert_eq!(u32::from_le_bytes(out[4..8].try_into().unwrap()), 0x63f);
        assert_eq!((out[12], out[13], out[14], out[15]), (0, 100, 0, 0));
        assert_eq!(u16::from_le_bytes([out[16], out[17]]), 400);
        assert_eq!(u16::from_le_bytes([out[18], out[19]]), 480);
        assert_eq!(out[20..24], [0; 4]);
        assert_eq!(out[35], 0);
        assert_eq!(
            threshold(&MediaState::default()),
            [0, 0, 0, 0, 0, 0, 10, 0x50, 0x05, 0x50, 0x05, 0]
        );
    }

    #[test]
    fn injections_and_alarms() {
        let d = dimm();
        // Media temperature 90 °C: no alarm until the alarm is enabled.
        assert_eq!(
            inject(&d, &inj(INJECT_MTEMP, Some(90 * 16), None, 0, 0)),
            [0; 4]
        );
        let out = smart(&d.state());
        assert_eq!(
            (u16::from_le_bytes([out[16], out[17]]), out[15], out[12]),
            (1440, 0, 0)
        );
        let mut t = vec![0b11, 0, 50];
        t.extend_from_slice(&(80u16 * 16).to_le_bytes());
        t.extend_from_slice(&(80u16 * 16).to_le_bytes());
        assert_eq!(set_threshold(&d, &t), [0; 4]);
        assert_eq!(threshold(&d.state())[4..7], [3, 0, 50]);
        let out = smart(&d.state());
        assert_eq!(
            (out[15], out[12], out[13]),
            (2, 1, 100),
            "temperature alarm, non-critical"
        );
        // Spares 20 % below the 50 % threshold, then fatal, then uninject.
        inject(&d, &inj(INJECT_SPARES, None, Some(20), 0, 0));
        inject(&d, &inj(INJECT_FATAL, None, None, 1, 0));
        let out = smart(&d.state());
        assert_eq!((out[15], out[12], out[13]), (3, 4, 20));
        inject(
            &d,
            &inj(
                INJECT_MTEMP | INJECT_SPARES | INJECT_FATAL,
                None,
                None,
                0,
                0,
            ),
        );
        let out = smart(&d.state());
        assert_eq!((out[15], out[12], out[13]), (0, 0, 100));
        // Unsafe shutdown: counted at once, state dirty.
        inject(&d, &inj(INJECT_SHUTDOWN, None, None, 0, 1));
        let out = smart(&d.state());
        assert_eq!((out[20], out[35]), (1, 1));
        // Negative temperatures never trip a high alarm.
        inject(&d, &inj(INJECT_MTEMP, Some(0x8000 | (90 * 16)), None, 0, 0));
        assert_eq!(smart(&d.state())[15], 0);
    }

    #[test]
    fn bad_inputs_change_nothing() {
        let d = dimm();
        for input in [
            vec![],
            vec![0; 14],
            vec![0; 16],
            inj(1 << 4, None, None, 0, 0),
            inj(INJECT_SPARES, None, Some(101), 0, 0),
        ] {
            assert_eq!(inject(&d, &input), [3, 0, 0, 0]);
        }
        for input in [
            vec![0; 6],
            vec![0, 0, 101, 0, 0, 0, 0],
            vec![8, 0, 0, 0, 0, 0, 0],
        ] {
            assert_eq!(set_threshold(&d, &input), [3, 0, 0, 0]);
        }
        assert_eq!(d.state(), MediaState::default());
    }
}
