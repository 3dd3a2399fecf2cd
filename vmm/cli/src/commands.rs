//! The subcommands' work, callable from the binary and from tests.

use std::path::PathBuf;

use crate::args::AcpiArgs;
use crate::cli::Command;
pub use crate::error::CommandError;
use lab::guest::preflight::{self, Needs};
use lab::guest::run::{self, RunError, RunRequest, RunSpec};
use vmm::acpi_setup;
use vmm::exit_status;
use vmm::memory;
use vmm::vstate::vm::VmError;

/// `pmemvm acpi`: writes `<NAME>.aml` for every table and `RSDP.aml`.
pub fn acpi(args: &AcpiArgs) -> Result<(), CommandError> {
    let machine = args.machine.spec();
    let placed =
        memory::machine_layout(&machine, memory::host_phys_addr_bits()).map_err(VmError::from)?;
    let tables = acpi_setup::machine_tables(&machine, &placed).map_err(VmError::from)?;
    let out_err = |path: PathBuf| move |source| CommandError::Output { path, source };
    if args.out.exists() && !args.out.is_dir() {
        return Err(out_err(args.out.clone())(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "--out must be a directory and this is a file",
        )));
    }
    std::fs::create_dir_all(&args.out).map_err(out_err(args.out.clone()))?;
    let mut files = vec![("RSDP".to_string(), &tables.rsdp)];
    files.extend(tables.tables.iter().map(|t| (t.name.clone(), &t.bytes)));
    for (name, bytes) in files {
        let path = args.out.join(format!("{name}.aml"));
        std::fs::write(&path, bytes).map_err(out_err(path.clone()))?;
    }
    Ok(())
}

/// Creates the `--json` output once there is something to write.
fn open_output(path: &std::path::Path) -> Result<std::fs::File, CommandError> {
    std::fs::File::create(path).map_err(|source| CommandError::Output {
        path: path.into(),
        source,
    })
}

/// The job spec of `pmemvm run` (see [`lab::guest::run::RunRequest::spec`]); builds
/// the Debian root file system of `--rootfs debian` if needed.
pub(crate) fn run_spec(args: &RunRequest) -> Result<RunSpec, CommandError> {
    Ok(args.spec(true)?)
}

/// `pmemvm run`: returns the job's status.
pub fn run(args: &RunRequest) -> Result<u8, CommandError> {
    let spec = run_spec(args)?;
    let result = run::run_checked_job(&spec)?;
    if let Some(path) = &args.json {
        let mut f = open_output(path)?;
        serde_json::to_writer_pretty(&mut f, &result)
            .map_err(std::io::Error::from)
            .map_err(|source| CommandError::Output {
                path: path.clone(),
                source,
            })?;
    }
    if let Some(c) = &result.command {
        use std::io::Write;
        let _ = std::io::stdout().write_all(c.stdout.as_bytes());
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().write_all(c.stderr.as_bytes());
        if c.partial && !c.stdout.is_empty() {
            eprintln!("pmemvm: the command's output above is what the console showed before the run ended");
        }
        if !c.got_files.is_empty() {
            if let Some(out) = &args.out {
                eprintln!(
                    "pmemvm: {} file(s) from --get in {}",
                    c.got_files.len(),
                    out.display()
                );
            }
        }
        for s in &c.skipped {
            eprintln!("pmemvm: --get skipped {s}");
        }
    }
    print_summary(&result);
    if let Some(e) = &result.error {
        if !args.console.console && !result.console_tail.is_empty() {
            eprintln!(
                "pmemvm: last lines of the guest console:\n{}",
                result.console_tail
            );
        }
        eprintln!(
            "pmemvm: {e}{}",
            if args.json.is_some() {
                " (partial results written)"
            } else {
                ""
            }
        );
    }
    Ok(result.status)
}

fn print_summary(result: &run::RunResult) {
    let label = if result.functional_only {
        " — functional only, not performance"
    } else {
        ""
    };
    // With a command, stdout is the command's alone (like `docker run`).
    let line = format!(
        "engine {} ({}){label}; status {}; {:.1} s",
        result.engine.name(),
        result.accelerator,
        result.status,
        result.wall_seconds
    );
    if result.command.is_some() {
        eprintln!("pmemvm: {line}");
    } else {
        println!("{line}");
    }
    let Some(fio) = result.fio_output() else {
        return;
    };
    for s in fio.summaries() {
        println!(
            "group {}: {} job(s), IOPS {:.0}, BW {:.1} MiB/s, slat avg {:.0} ns, clat p99 {} ns, usr {:.1}% sys {:.1}%, ctx {}, errors {}",
            s.groupid,
            s.jobnames.len(),
            s.iops,
            s.bw_bytes as f64 / f64::from(1u32 << 20),
            s.slat.mean_ns,
            s.clat.p99_ns.map_or("-".to_string(), |v| v.to_string()),
            s.usr_cpu,
            s.sys_cpu,
            s.ctx,
            s.errors.len()
        );
    }
}

/// `pmemvm preflight COMMAND...`: what `command` needs on this host that an
/// install can provide; an error for anything it cannot (see [`lab::guest::preflight`]).
pub fn preflight(command: &Command) -> Result<Needs, CommandError> {
    let mut needs = Needs::default();
    match command {
        Command::Boot(a) => lab::guest::boot::preflight(&a.spec()?, &mut needs)?,
        Command::Run(a) => a.preflight(&mut needs)?,
        Command::CrashCheck(a) => {
            a.run.preflight(&mut needs)?;
        }
        Command::Suite(crate::suite_args::SuiteCommand::Ndctl(a)) => {
            crate::suite_commands::preflight(a)?;
            if !a.plan {
                // Each boot runs a command in a Debian root file system, on the engine.
                for &e in &a.engine {
                    preflight::engine_on_this_host(e, true, &mut needs).map_err(RunError::from)?;
                }
                needs.image = true;
            }
        }
        Command::Bench(a) if a.plan => {
            lab::study::bench::plan(&crate::bench_commands::bench_request(a)?)?;
        }
        Command::Bench(a) if a.slurm => {
            // The tasks check their own node; the image they boot is built here, on the
            // shared file system the nodes read it from.
            let req = crate::bench_commands::bench_request(a)?;
            let (_, plan) = lab::study::bench::plan(&req)?;
            needs.image = lab::study::bench::uses_image(&req, &plan);
        }
        Command::Bench(a) => {
            lab::study::bench::prepare(
                &crate::bench_commands::bench_request(a)?,
                true,
                &mut needs,
            )?;
        }
        Command::Acpi(_)
        | Command::Ctl(_)
        | Command::CrashImages(_)
        | Command::Preflight(_)
        | Command::Kconfig(_)
        | Command::Nvdimm(_)
        | Command::RunJob(_)
        | Command::Report(_) => {}
    }
    Ok(needs)
}

/// `pmemvm kconfig`: the fragment, or a check (status 2 when options are missing).
pub fn kconfig(args: &crate::cli::KconfigArgs) -> Result<u8, CommandError> {
    if let Some(kernel) = &args.extract {
        print!("{}", lab::guest::kconfig::read_text(kernel)?);
        return Ok(0);
    }
    let Some(path) = &args.check else {
        print!("{}", lab::guest::kconfig::fragment());
        return Ok(0);
    };
    let config = lab::guest::kconfig::read(path)?;
    let result = lab::guest::kconfig::check(&config);
    let mut text = lab::guest::kconfig::render_check(path, &config, &result);
    text.push_str(&lab::guest::kconfig::debugging::render(&config));
    if result.missing.is_empty() {
        print!("{text}");
        Ok(0)
    } else {
        eprint!("{text}");
        Ok(exit_status::USAGE)
    }
}

/// `pmemvm nvdimm badblocks FILE`: the media state recorded in a backing file.
pub fn nvdimm_badblocks(file: &std::path::Path) -> Result<String, CommandError> {
    let (id, state) = vmm::nvdimm::media::read_file(file)?;
    Ok(vmm::nvdimm::media::report(file, &id, &state))
}
