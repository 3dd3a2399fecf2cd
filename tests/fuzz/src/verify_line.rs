// SPDX-License-Identifier: Apache-2.0
//! Fuzz body: `lab::study::report::VerifyObservation::parse`, the reader of fio's verify error as the
//! guest sent it (fio's stderr from the guest, folded into a failed run's reason).
//!
//! Checked: nothing panics; an observation is returned only for fio's verify error (err=84),
//! keeps the side and boot it was given, quotes a line of the input, has a stale header only
//! when both numbers were read and the one the block held is the lower, and its one-line
//! description names the side and boot.

use lab::study::report::VerifyObservation;

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Some(o) = VerifyObservation::parse("off", 3, &text) else {
        assert!(!text.contains("fio error 84 in job "), "{text:?} not read");
        return;
    };
    assert!(
        text.contains("fio error 84 in job "),
        "{text:?} read as {o:?}"
    );
    assert_eq!((o.side.as_str(), o.boot), ("off", 3));
    assert!(text.contains(o.error.as_str()), "{text:?}: {o:?}");
    if o.stale_header() {
        assert!(
            matches!((o.found, o.wanted), (Some(a), Some(b)) if a < b),
            "{o:?}"
        );
    }
    assert!(o.describe().starts_with("off boot 3: "), "{o:?}");
}
