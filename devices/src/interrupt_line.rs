//! What the lost-interrupt watch of the VMM asks of a device with an
//! interrupt line: how long its raised interrupt has gone unanswered by the
//! guest, and a way to signal the line again.

use std::time::Duration;

/// A device whose interrupt the guest must answer (read or acknowledge).
pub trait InterruptLine {
    /// How long an interrupt the guest still has to answer has waited;
    /// `None` when there is none.
    fn unanswered(&self) -> Option<Duration>;
    /// Signals the line again; the time it was first raised is kept.
    fn raise_again(&self) -> std::io::Result<()>;
}

impl<T: InterruptLine + ?Sized> InterruptLine for std::sync::Arc<T> {
    fn unanswered(&self) -> Option<Duration> {
        (**self).unanswered()
    }

    fn raise_again(&self) -> std::io::Result<()> {
        (**self).raise_again()
    }
}
