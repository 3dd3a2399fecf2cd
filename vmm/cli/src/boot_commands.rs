//! `pmemvm boot`: the arguments as a [`lab::guest::boot::BootRequest`]; the boot
//! itself (this host's KVM or nested) is the lab's.

use crate::args::{BootArgs, BootEngineArg};
use crate::commands::CommandError;
use vmm::config::ConsoleMode;

impl From<&BootArgs> for lab::guest::boot::BootRequest {
    fn from(a: &BootArgs) -> Self {
        Self {
            files: a.boot.files(),
            machine: a.machine.spec(),
            console: ConsoleMode::from_choice(
                a.console.console || a.console.console_log.is_none(),
                a.console.console_log.clone(),
            ),
            channel: a.channel.clone(),
            timeout: a.timeout.map(std::time::Duration::from_secs),
            nested: a.engine == BootEngineArg::Nested,
            gdb: a.gdb.clone().map(|g| (g, a.gdb_wait)),
            control: a.control.clone(),
        }
    }
}

/// `pmemvm boot`: returns the exit status.
pub fn boot(args: &BootArgs) -> Result<u8, CommandError> {
    lab::guest::args::check_gdb(args.gdb.as_ref(), args.gdb_any_address)?;
    Ok(lab::guest::boot::boot(&args.into())?)
}
