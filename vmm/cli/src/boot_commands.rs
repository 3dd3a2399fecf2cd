//! `pmemvm boot`: the lab's [`lab::guest::boot::BootRequest`], checked and
//! booted (this host's KVM or nested) by the lab.

use crate::commands::CommandError;
use lab::guest::boot::BootRequest;

/// `pmemvm boot`: returns the exit status.
pub fn boot(args: &BootRequest) -> Result<u8, CommandError> {
    Ok(lab::guest::boot::boot(&args.spec()?)?)
}
