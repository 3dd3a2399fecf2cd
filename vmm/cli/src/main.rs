//! The `pmemvm` command: argument parsing and exit statuses only; the work is
//! in the `lab` library (experiments, runs, reports) on top of the `vmm`
//! core (the VMM itself).

mod args;
mod bench_commands;
mod boot_commands;
mod cli;
#[cfg(test)]
mod cli_doc;
mod commands;
mod crash_args;
mod crash_commands;
mod ctl;
mod error;
mod fleet_commands;
mod process_start;
mod suite_args;
mod suite_commands;

use std::process::ExitCode;

use crate::args::{AcpiArgs, BenchArgs, ReportArgs};
use crate::cli::{Cli, Command, KconfigArgs, NvdimmCommand, PreflightArgs};
use clap::Parser;
use lab::guest::boot::BootRequest;
use lab::guest::run::RunRequest;
use vmm::exit_status::{self, Classified};

/// A failure with the exit status it maps to.
struct Failure {
    status: u8,
    error: Box<dyn std::error::Error>,
}

impl<E: Into<crate::commands::CommandError>> From<E> for Failure {
    fn from(e: E) -> Self {
        let e: crate::commands::CommandError = e.into();
        Failure {
            status: e.kind().exit_status(),
            error: Box::new(e),
        }
    }
}

fn boot(args: &BootRequest) -> Result<u8, Failure> {
    Ok(crate::boot_commands::boot(args)?)
}

fn run(args: &RunRequest) -> Result<u8, Failure> {
    Ok(crate::commands::run(args)?)
}

fn bench(args: &BenchArgs) -> Result<u8, Failure> {
    Ok(crate::bench_commands::bench(args)?)
}

fn report_cmd(args: &ReportArgs) -> Result<u8, Failure> {
    Ok(crate::fleet_commands::report(args)?)
}

fn preflight(args: &PreflightArgs) -> Result<u8, Failure> {
    let inner = Cli::try_parse_from(
        std::iter::once("pmemvm".to_string()).chain(args.command.iter().cloned()),
    )
    .unwrap_or_else(|e| e.exit());
    for line in crate::commands::preflight(&inner.command)?.lines() {
        println!("{line}");
    }
    Ok(0)
}

fn ctl(args: &crate::cli::CtlArgs) -> Result<u8, Failure> {
    match crate::ctl::ctl(args) {
        Ok(answer) => {
            println!("{answer}");
            Ok(0)
        }
        Err(e) => Err(Failure {
            status: e.kind().exit_status(),
            error: Box::new(e),
        }),
    }
}

fn crash_images(args: &crate::crash_args::CrashImagesArgs) -> Result<u8, Failure> {
    match crate::crash_commands::crash_images(args) {
        Ok(text) => {
            println!("{text}");
            Ok(0)
        }
        Err(e) => Err(Failure {
            status: e.kind().exit_status(),
            error: Box::new(e),
        }),
    }
}

fn crash_check(args: &crate::crash_args::CrashCheckArgs) -> Result<u8, Failure> {
    Ok(crate::crash_commands::crash_check(args)?)
}

fn kconfig(args: &KconfigArgs) -> Result<u8, Failure> {
    Ok(crate::commands::kconfig(args)?)
}

fn acpi(args: &AcpiArgs) -> Result<u8, Failure> {
    crate::commands::acpi(args)?;
    Ok(0)
}

fn nvdimm_badblocks(file: &std::path::Path) -> Result<u8, Failure> {
    print!("{}", crate::commands::nvdimm_badblocks(file)?);
    Ok(0)
}

fn suite_ndctl(args: &crate::suite_args::NdctlArgs) -> Result<u8, Failure> {
    Ok(crate::suite_commands::ndctl(args)?)
}

fn main() -> ExitCode {
    vmm::stats::mark_process_start();
    process_start::calm_sigquit();
    let mut cli = Cli::parse();
    if let Command::Boot(a) = &mut cli.command {
        if let Err(e) = a.machine.load_machine_file() {
            eprintln!("pmemvm: {e}");
            return ExitCode::from(vmm::exit_status::USAGE);
        }
    }
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    process_start::init_logging(level);
    let result = match &cli.command {
        Command::Boot(a) => boot(a),
        Command::Run(a) => run(a),
        Command::Bench(a) => bench(a),
        Command::Report(a) => report_cmd(a),
        Command::Acpi(a) => acpi(a),
        Command::Preflight(a) => preflight(a),
        Command::Kconfig(a) => kconfig(a),
        Command::Ctl(a) => ctl(a),
        Command::CrashImages(a) => crash_images(a),
        Command::CrashCheck(a) => crash_check(a),
        Command::Nvdimm(NvdimmCommand::Badblocks { file }) => nvdimm_badblocks(file),
        Command::Suite(crate::suite_args::SuiteCommand::Ndctl(a)) => suite_ndctl(a),
        Command::RunJob(a) => Ok(lab::guest::child::serve(&a.spec, &a.outcome)),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(f) => {
            exit_status::print_error(f.error.as_ref());
            ExitCode::from(f.status)
        }
    }
}
