//! What `pmemvm boot` was asked ([`BootRequest`], its clap options) and the
//! [`BootSpec`] made of it.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::BootSpec;
use crate::guest::args::{parse_seconds, ConsoleArgs, GdbArgs, KernelArgs, MachineArgs};
use crate::guest::engine::RunControl;
use crate::guest::run::RunError;
use vmm::config::ConsoleMode;

/// `pmemvm boot`'s request: its command-line options (clap), spelled once
/// here and flattened by the CLI; [`BootRequest::spec`] checks it into the
/// [`BootSpec`] that [`super::boot`] runs.
#[derive(Debug, Clone, Args)]
pub struct BootRequest {
    /// What it boots.
    #[command(flatten)]
    pub boot: KernelArgs,
    /// The machine.
    #[command(flatten)]
    pub machine: MachineArgs,
    /// The console.
    #[command(flatten)]
    pub console: ConsoleArgs,
    /// Write the guest's data channel (COM2) to this file.
    #[arg(long, value_name = "PATH")]
    pub channel: Option<PathBuf>,
    /// End the guest after this many seconds (exit status 124, with where each vCPU was).
    /// Default: no limit.
    #[arg(long, value_parser = parse_seconds, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Where the guest runs: pmemvm on this host's KVM, or nested (pmemvm
    /// inside a QEMU TCG L1 with emulated SVM, for hosts without hardware
    /// virtualization).
    #[arg(long, value_enum, default_value = "pmemvm")]
    pub engine: BootEngine,
    /// The debugger.
    #[command(flatten)]
    pub gdb: GdbArgs,
    /// The control socket and the panic dump.
    #[command(flatten)]
    pub control: RunControl,
}

/// `boot --engine`: where `pmemvm boot` runs the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BootEngine {
    /// pmemvm on this host's KVM.
    Pmemvm,
    /// pmemvm inside a QEMU TCG L1 with emulated SVM, the guest's console on
    /// this terminal through both levels (slow, functional only).
    Nested,
}

impl BootRequest {
    /// The boot as [`super::boot`] runs it: `--gdb`'s reach checked, the
    /// machine and boot files built once, the console chosen (the terminal
    /// unless only `--console-log` is given).
    pub fn spec(&self) -> Result<BootSpec, RunError> {
        Ok(BootSpec {
            files: self.boot.files(),
            machine: self.machine.spec(),
            console: ConsoleMode::from_choice(
                self.console.console || self.console.console_log.is_none(),
                self.console.console_log.clone(),
            ),
            channel: self.channel.clone(),
            timeout: self.timeout.map(Duration::from_secs),
            nested: self.engine == BootEngine::Nested,
            gdb: self.gdb.checked()?,
            control: self.control.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::exit_status::Classified;

    /// `pmemvm boot` as a user types it (`args` after `boot`).
    fn parse(args: &[&str]) -> BootSpec {
        #[derive(clap::Parser)]
        struct Boot {
            #[command(flatten)]
            request: BootRequest,
        }
        let words = std::iter::once("boot").chain(args.iter().copied());
        <Boot as clap::Parser>::try_parse_from(words)
            .expect("parses")
            .request
            .spec()
            .expect("a spec")
    }

    #[test]
    fn the_console_is_the_terminal_unless_only_a_log_is_asked_for() {
        assert_eq!(parse(&[]).console, ConsoleMode::Stdio);
        assert_eq!(
            parse(&["--console-log", "/tmp/c"]).console,
            ConsoleMode::File("/tmp/c".into())
        );
        assert_eq!(
            parse(&["--console", "--console-log", "/tmp/c"]).console,
            ConsoleMode::StdioAndFile("/tmp/c".into())
        );
    }

    #[test]
    fn the_options_reach_the_spec_once() {
        let s = parse(&[
            "--engine",
            "nested",
            "--cpus",
            "2",
            "--memory",
            "1G",
            "--timeout",
            "5",
            "--gdb",
            ":1234",
            "--gdb-wait",
            "--append",
            "quiet",
        ]);
        assert!(s.nested);
        assert_eq!((s.machine.cpus, s.machine.memory), (2, 1 << 30));
        assert_eq!(s.timeout, Some(Duration::from_secs(5)));
        assert!(s.gdb.as_ref().is_some_and(|(_, wait)| *wait));
        assert_eq!(s.files.append, ["quiet"]);
        assert!(!parse(&[]).nested, "the default engine is this host's KVM");
    }

    #[test]
    fn gdb_beyond_loopback_is_refused_in_the_spec() {
        #[derive(clap::Parser)]
        struct Boot {
            #[command(flatten)]
            request: BootRequest,
        }
        let r = <Boot as clap::Parser>::try_parse_from(["boot", "--gdb", "0.0.0.0:1"])
            .expect("parses")
            .request;
        let e = r.spec().expect_err("beyond loopback");
        assert!(
            e.is_usage() && e.to_string().contains("--gdb-any-address"),
            "{e}"
        );
    }
}
