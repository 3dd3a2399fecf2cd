//! The last step of a run: what the guest left (its result channel and its
//! console) and how the boot ended become the run's figures, files, command
//! outcome, status and error — without a VM, so each rule is unit-tested.

use std::collections::BTreeMap;
use vmm::exit_status::Classified;

use vmm::exit_status;

use crate::guest::guest_job::{self, GuestReport, FIO_JSON_FRAME};
use crate::guest::nested::share::tail;
use crate::guest::transfer::{CommandJob, CommandOutcome, PreparedTransfer};

/// What a run's result takes from the guest.
#[derive(Debug, Default)]
pub(super) struct Collected {
    /// fio's JSON (the `fio.json` frame).
    pub fio: Option<serde_json::Value>,
    /// Every other frame, as text.
    pub guest_files: BTreeMap<String, String>,
    /// A command run's outcome (its output and `--get` files).
    pub command: Option<CommandOutcome>,
    /// The run's exit status.
    pub status: u8,
    /// Why the run failed, if it did (the engine's reason first).
    pub error: Option<String>,
}

/// Reads the guest's `channel` (and for a command run its `console` and
/// transfers) given the engine's `error` and the VM's own `vm_status`: the
/// status is the guest's job status, else the VM's when something failed,
/// else a runtime error ("the guest ended without reporting a job status");
/// a transfer refused as the user's fault is status 2; a job's own non-zero
/// status is its result, with fio's or setup's last lines as the error.
pub(super) fn collect(
    error: Option<String>,
    channel: &[u8],
    console: &str,
    vm_status: Option<u8>,
    transfer: Option<(&CommandJob, &PreparedTransfer)>,
) -> Collected {
    let mut out = Collected {
        error,
        ..Collected::default()
    };
    let report = match guest_job::parse_channel(channel) {
        Ok(r) => r,
        Err(e) => {
            out.error
                .get_or_insert(format!("the guest's result channel is damaged: {e}"));
            GuestReport::default()
        }
    };
    for (name, bytes) in &report.files {
        if name == FIO_JSON_FRAME {
            match serde_json::from_slice::<serde_json::Value>(strip_to_json(bytes)) {
                Ok(v) => out.fio = Some(v),
                Err(e) => {
                    out.error
                        .get_or_insert(format!("fio's JSON output could not be parsed: {e}"));
                }
            }
        } else {
            out.guest_files
                .insert(name.clone(), String::from_utf8_lossy(bytes).into_owned());
        }
    }
    let mut transfer_status = None;
    if let Some((c, t)) = transfer {
        let mut outcome = CommandOutcome::default();
        if let Err(e) = crate::guest::transfer::collect(c, t, &report, console, &mut outcome) {
            if e.is_usage() {
                transfer_status = Some(exit_status::USAGE);
            }
            out.error.get_or_insert(e.to_string());
        }
        out.command = Some(outcome);
    }
    out.status = match (report.status, vm_status) {
        (Some(s), _) => s,
        (None, Some(s)) if out.error.is_some() => s.max(exit_status::RUNTIME_ERROR),
        (None, _) => {
            out.error
                .get_or_insert("the guest ended without reporting a job status".into());
            exit_status::RUNTIME_ERROR
        }
    };
    if let Some(s) = transfer_status {
        out.status = s;
    }
    if let Some(missing) = out.guest_files.get(guest_job::MISSING_DEVICES_FRAME) {
        out.error = Some(guest_job::missing_devices_message(missing));
    }
    // A command's own non-zero status is its result, passed through, not a failure of pmemvm.
    if out.status != 0 && out.error.is_none() && transfer.is_none() {
        let detail = out
            .guest_files
            .get("fio.stderr")
            .or_else(|| out.guest_files.get("setup.log"))
            .map(|t| tail(t, 10))
            .unwrap_or_default();
        out.error = Some(format!(
            "the job failed in the guest with status {}: {detail}",
            out.status
        ));
    }
    out
}

/// Skips leading noise (fio warnings) before the JSON object.
fn strip_to_json(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == b'{') {
        Some(i) => &bytes[i..],
        None => bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A channel as the guest's init writes it (docs/guest-image.md).
    fn channel(frames: &[(&str, &[u8])], status: Option<u8>) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data) in frames {
            out.extend(format!("PMEMVM-BEGIN {name} {}\n", data.len()).as_bytes());
            out.extend(*data);
            out.extend(format!("\nPMEMVM-END {name}\n").as_bytes());
        }
        if let Some(s) = status {
            out.extend(format!("PMEMVM-STATUS {s}\n").as_bytes());
        }
        out
    }

    #[test]
    fn fios_json_and_the_guests_status_make_the_result() {
        let ch = channel(
            &[
                ("fio.json", b"fio: note\n{\"jobs\":[]}"),
                ("guest-info", b"kernel_release=6.1"),
            ],
            Some(0),
        );
        let c = collect(None, &ch, "", Some(0), None);
        assert_eq!(c.fio, Some(serde_json::json!({"jobs": []})));
        assert_eq!(c.guest_files["guest-info"], "kernel_release=6.1");
        assert_eq!((c.status, c.error), (0, None));
    }

    #[test]
    fn a_failed_job_keeps_its_status_and_says_fios_last_lines() {
        let ch = channel(&[("fio.stderr", b"fio: pid=1, err=5/file:io_u.c")], Some(1));
        let c = collect(None, &ch, "", Some(0), None);
        assert_eq!(c.status, 1);
        let e = c.error.expect("an error");
        assert!(
            e.starts_with("the job failed in the guest with status 1: ") && e.contains("err=5"),
            "{e}"
        );
    }

    #[test]
    fn no_status_is_a_runtime_error_and_the_engines_reason_comes_first() {
        let c = collect(None, b"", "", Some(0), None);
        assert_eq!(c.status, exit_status::RUNTIME_ERROR);
        assert_eq!(
            c.error.as_deref(),
            Some("the guest ended without reporting a job status")
        );
        // The VM's own status (e.g. timed out) when the engine said why.
        let c = collect(
            Some("the guest did not finish".into()),
            b"",
            "",
            Some(exit_status::TIMED_OUT),
            None,
        );
        assert_eq!(c.status, exit_status::TIMED_OUT);
        assert_eq!(c.error.as_deref(), Some("the guest did not finish"));
    }

    #[test]
    fn bad_json_and_a_damaged_channel_are_named() {
        let ch = channel(&[("fio.json", b"{not json")], Some(0));
        let c = collect(None, &ch, "", Some(0), None);
        assert!(c.fio.is_none());
        assert!(c
            .error
            .expect("error")
            .starts_with("fio's JSON output could not be parsed"));
        let c = collect(None, b"PMEMVM-BEGIN fio.json 99\n{", "", Some(0), None);
        assert!(
            c.error
                .as_deref()
                .is_some_and(|e| e.starts_with("the guest's result channel is damaged")),
            "{:?}",
            c.error
        );
    }

    #[test]
    fn a_missing_device_replaces_the_error_with_the_sentence_naming_it() {
        let ch = channel(&[("missing-devices", b"/dev/pmem0")], Some(2));
        let c = collect(None, &ch, "", Some(0), None);
        assert_eq!(
            c.error,
            Some(guest_job::missing_devices_message("/dev/pmem0"))
        );
    }

    #[test]
    fn json_is_found_after_fio_noise() {
        assert_eq!(strip_to_json(b"fio: warning\n{\"a\":1}"), b"{\"a\":1}");
        assert_eq!(strip_to_json(b"no json"), b"no json");
    }
}
