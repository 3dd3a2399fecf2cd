//! What `pmemvm run` was asked, as the command hands it over
//! ([`RunRequest`]), and the checked [`RunSpec`] made of it: the job's
//! inputs read, its outputs and prerequisites checked, the command run's
//! transfers validated — creating nothing but the Debian root file system of
//! `--rootfs debian` (built or found in its cache), and not even that for
//! preflight.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{check_inputs, Engine, RunControl, RunError, RunSpec, Workload};
use crate::guest::args::{parse_seconds, ConsoleArgs, GdbArgs, KernelArgs, MachineArgs};
use crate::guest::engine::EngineError;
use crate::guest::transfer::{CommandJob, GetSpec, PutSpec, TransferError};

/// `pmemvm run`'s request: its command-line options (clap), spelled once here
/// and flattened by the CLI; [`RunRequest::spec`] checks it into a [`RunSpec`].
#[derive(Debug, Clone, clap::Args)]
pub struct RunRequest {
    /// The fio job file to run in the guest (or give a command after `--`).
    #[arg(long, value_name = "JOBFILE")]
    pub fio: Option<PathBuf>,
    /// A host file or directory tree to put into the guest before the
    /// command, at GUEST (default: /job/NAME; the command runs in /job);
    /// served from a read-only virtio disk, off the NVDIMM bus. Repeatable.
    #[arg(long = "put", value_name = "HOST[:GUEST]", value_parser = parse_put)]
    pub puts: Vec<PutSpec>,
    /// A guest file or directory (relative to /job, or absolute) to copy
    /// back into --out DIR after the command, SHA-256 checked. Repeatable.
    #[arg(long = "get", value_name = "GUEST", value_parser = parse_get)]
    pub gets: Vec<GetSpec>,
    /// Where --get files come back (created; existing entries of the same
    /// name are never overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Size of the transfer area for --put and for --get (a multiple of 16M).
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = parse_transfer_size)]
    pub transfer_size: u64,
    /// Run the command in this root file system instead of the guest image's
    /// busybox: `debian` (built from Debian bookworm packages on first use,
    /// cached by the package list) or an ext4 image (a multiple of 16M).
    #[arg(long, value_name = "debian|IMAGE")]
    pub rootfs: Option<String>,
    /// Packages of `--rootfs debian`, comma-separated (default python3,stress-ng,fio,xfsprogs,ndctl).
    #[arg(long, value_name = "LIST")]
    pub packages: Option<String>,
    /// The command to run in the guest instead of fio: `-- CMD [ARGS...]`;
    /// its exit status becomes pmemvm's.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
    /// Shell commands run in the guest before fio (cwd /job; `@FILE` reads them from FILE).
    #[arg(long, value_name = "CMDS")]
    pub setup: Option<String>,
    /// Extra fio arguments (one line).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub fio_args: Option<String>,
    /// Write fio's JSON and the run's metadata to this file.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Which VMM runs the guest (auto: pmemvm where this host's KVM can run
    /// Linux, QEMU otherwise; nested: pmemvm inside a QEMU TCG L1, slow).
    #[arg(long, value_enum, default_value = "auto")]
    pub engine: Engine,
    /// The console (hidden by default; its last lines are shown on failure).
    #[command(flatten)]
    pub console: ConsoleArgs,
    /// Give up (and keep partial results) after this many seconds.
    #[arg(long, default_value = "600", value_parser = parse_seconds, value_name = "SECS")]
    pub timeout: u64,
    /// What it boots.
    #[command(flatten)]
    pub boot: KernelArgs,
    /// The machine.
    #[command(flatten)]
    pub machine: MachineArgs,
    /// The debugger.
    #[command(flatten)]
    pub gdb: GdbArgs,
    /// The control socket and the panic dump, as for `boot` (engine pmemvm).
    #[command(flatten)]
    pub control: RunControl,
}

fn parse_put(s: &str) -> Result<PutSpec, String> {
    s.parse().map_err(|e: TransferError| e.to_string())
}

fn parse_get(s: &str) -> Result<GetSpec, String> {
    s.parse().map_err(|e: TransferError| e.to_string())
}

fn parse_transfer_size(s: &str) -> Result<u64, String> {
    let align = vmm::layout::NVDIMM_REGION_ALIGN;
    match vmm::config::parse_size(s) {
        Ok(n) if n > 0 && n % align == 0 => Ok(n),
        Ok(_) => Err(format!(
            "--transfer-size '{s}' is not valid: use a multiple of 16M above 0, e.g. 512M"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A file the job needs, read (a directory is refused by name).
fn read_input(path: &Path, what: &'static str) -> Result<String, EngineError> {
    if path.is_dir() {
        return Err(EngineError::Input {
            what,
            path: path.into(),
            source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "it is a directory"),
        });
    }
    std::fs::read_to_string(path).map_err(|source| EngineError::Input {
        what,
        path: path.into(),
        source,
    })
}

/// Checks an output place before the run, without creating or truncating
/// anything (an invocation that fails later leaves no file).
pub fn check_output(path: &Path) -> Result<(), RunError> {
    let err = |kind, why: &str| RunError::Output {
        path: path.into(),
        source: std::io::Error::new(kind, why.to_string()),
    };
    if path.is_dir() {
        return Err(err(std::io::ErrorKind::IsADirectory, "it is a directory"));
    }
    if path.exists() {
        // Opening without truncation checks permission and changes nothing.
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|source| RunError::Output {
                path: path.into(),
                source,
            })?;
    } else if path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .is_some_and(|p| !p.is_dir())
    {
        return Err(err(
            std::io::ErrorKind::NotFound,
            "its directory does not exist",
        ));
    }
    Ok(())
}

impl RunRequest {
    /// The command run's transfers without its root file system.
    fn command_job(&self, rootfs: Option<PathBuf>) -> CommandJob {
        CommandJob {
            rootfs,
            argv: self.command.clone(),
            puts: self.puts.clone(),
            gets: self.gets.clone(),
            out: self.out.clone(),
            area: self.transfer_size,
        }
    }

    /// The command run (`-- CMD`) with its root file system, or none for a
    /// fio job; `build_rootfs` false only checks `--rootfs debian`.
    fn command(&self, build_rootfs: bool) -> Result<Option<CommandJob>, RunError> {
        match (&self.fio, self.command.is_empty()) {
            (Some(_), false) => return Err(TransferError::FioAndCommand.into()),
            (None, true) => return Err(TransferError::NoCommand.into()),
            (Some(_), true) if !self.puts.is_empty() || !self.gets.is_empty() => {
                return Err(TransferError::TransferWithFio.into())
            }
            (Some(_), true) => return Ok(None),
            (None, false) => {}
        }
        let rootfs = match &self.rootfs {
            Some(r) => {
                // Checked before the build, which may take minutes.
                if let Some(p) = &self.packages {
                    crate::guest::rootfs::check_packages(p).map_err(TransferError::from)?;
                }
                // The transfers too, so bad input is refused before a build.
                self.command_job(None).validate()?;
                if build_rootfs || r != "debian" {
                    Some(
                        crate::guest::rootfs::resolve(r, self.packages.as_deref())
                            .map_err(TransferError::from)?,
                    )
                } else {
                    crate::guest::rootfs::check_choice(r, self.packages.as_deref())
                        .map_err(TransferError::from)?;
                    None
                }
            }
            None if self.packages.is_some() => {
                return Err(TransferError::from(
                    crate::guest::rootfs::RootfsError::PackagesWithoutDebian,
                )
                .into())
            }
            None => None,
        };
        let job = self.command_job(rootfs);
        job.validate()?;
        Ok(Some(job))
    }

    /// The checked spec; with `build_rootfs` false (preflight), `--rootfs
    /// debian` is only checked and left out.
    pub fn spec(&self, build_rootfs: bool) -> Result<RunSpec, RunError> {
        let gdb = self.gdb.checked()?;
        let command = self.command(build_rootfs)?;
        let fio_job = match &self.fio {
            Some(f) => Some(read_input(f, "fio job file")?),
            None => None,
        };
        let setup = match &self.setup {
            Some(s) => match s.strip_prefix('@') {
                Some(file) => Some(read_input(Path::new(file), "setup file")?),
                None => Some(s.clone()),
            },
            None => None,
        };
        for path in [&self.json, &self.console.console_log]
            .into_iter()
            .flatten()
        {
            check_output(path)?;
        }
        let machine = self.machine.spec();
        let m = &machine;
        vmm::memory::memory_placement::check_host_placement(
            m.cpus,
            &m.memory_spec(),
            &m.placement,
            &m.nvdimms,
        )
        .map_err(vmm::vstate::vm::VmError::from)?;
        if m.ram_pages != vmm::memory::hugepages::RamPages::Hugetlb {
            // hugetlb RAM is not in MemAvailable; Vm::build counts free huge pages.
            crate::guest::preflight::memory(
                self.engine.memory_on_host(m.memory),
                crate::guest::preflight::mem_available(),
            )?;
        }
        let spec = RunSpec {
            gdb: gdb.as_ref().map(|(a, _)| a.clone()),
            gdb_wait: gdb.is_some_and(|(_, wait)| wait),
            control: self.control.clone(),
            engine: self.engine,
            boot: self.boot.files(),
            machine,
            workload: match (command, fio_job) {
                (Some(job), _) => Workload::Command { job, setup },
                (None, fio_job) => Workload::Fio(crate::guest::guest_job::GuestJob {
                    fio_job: fio_job.unwrap_or_default(),
                    setup,
                    args: self.fio_args.clone(),
                    ..crate::guest::guest_job::GuestJob::default()
                }),
            },
            stream_console: self.console.console,
            console_log: self.console.console_log.clone(),
            timeout: Duration::from_secs(self.timeout),
        };
        check_inputs(&spec.boot)?;
        Ok(spec)
    }

    /// What this run needs on this host that an install can provide (QEMU,
    /// the guest image), and an error for anything it cannot: everything
    /// [`Self::spec`] checks (creating nothing), the engine and what it
    /// refuses — before any install or build.
    pub fn preflight(&self, needs: &mut crate::guest::preflight::Needs) -> Result<(), RunError> {
        let spec = self.spec(false)?;
        if spec.boot.boots_linux() {
            crate::guest::preflight::engine_on_this_host(self.engine, true, needs)?;
        }
        super::engine_for(&spec)?;
        needs.image = self.boot.files.kernel.is_none();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::exit_status::Classified;

    /// `pmemvm run` as a user types it (`args` after `run`), parsed by the
    /// options' own clap definitions.
    fn parse(args: &[&str]) -> Result<RunRequest, clap::Error> {
        #[derive(clap::Parser)]
        struct Run {
            #[command(flatten)]
            request: RunRequest,
        }
        let words = std::iter::once("run").chain(args.iter().copied());
        <Run as clap::Parser>::try_parse_from(words).map(|r| r.request)
    }

    fn request() -> RunRequest {
        parse(&["--engine", "pmemvm", "--memory", "64M"]).expect("parses")
    }

    #[test]
    fn the_options_parse_into_the_request_with_their_defaults() {
        let r = request();
        assert_eq!(r.engine, Engine::Pmemvm);
        assert_eq!(r.timeout, 600);
        assert_eq!(r.transfer_size, 512 << 20);
        assert_eq!(r.machine.spec().memory, 64 << 20);
        let r = parse(&["--put", "/etc/hostname:/job/h", "--", "cat", "h"]).expect("parses");
        assert_eq!(r.puts.len(), 1);
        assert_eq!(r.command, ["cat", "h"]);
        assert_eq!(r.engine, Engine::Auto);
        let e = parse(&["--transfer-size", "1M"]).expect_err("not a multiple of 16M");
        assert!(
            e.to_string().contains("--transfer-size '1M' is not valid"),
            "{e}"
        );
        let e = parse(&["--timeout", "0"]).expect_err("0 s");
        assert!(e.to_string().contains("above 0"), "{e}");
    }

    #[test]
    fn gdb_beyond_loopback_is_refused_before_anything_else() {
        let r = RunRequest {
            command: vec!["true".into()],
            ..parse(&["--gdb", "0.0.0.0:1234"]).expect("parses")
        };
        let e = r.spec(false).expect_err("beyond loopback");
        assert!(e.is_usage(), "{e}");
        assert!(e.to_string().contains("--gdb-any-address"), "{e}");
    }

    #[test]
    fn a_fio_job_or_a_command_and_nothing_else() {
        let e = request().spec(false).unwrap_err();
        assert!(e.is_usage());
        let r = RunRequest {
            fio: Some("/no/such/job.fio".into()),
            command: vec!["true".into()],
            ..request()
        };
        assert!(r.spec(false).unwrap_err().is_usage());
        let r = RunRequest {
            fio: Some("/no/such/job.fio".into()),
            ..request()
        };
        let e = r.spec(false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read fio job file /no/such/job.fio"),
            "{e}"
        );
        let r = RunRequest {
            command: vec!["true".into()],
            packages: Some("fio".into()),
            ..request()
        };
        assert!(r.spec(false).unwrap_err().is_usage());
    }

    #[test]
    fn a_command_run_reads_its_setup_and_checks_its_outputs_creating_nothing() {
        let dir = std::env::temp_dir().join(format!("pmemvm-request-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let setup = dir.join("setup.sh");
        std::fs::write(&setup, "ndctl list\n").unwrap();
        let json = dir.join("out.json");
        let r = RunRequest {
            command: vec!["true".into()],
            setup: Some(format!("@{}", setup.display())),
            json: Some(json.clone()),
            ..request()
        };
        let spec = r.spec(false).unwrap();
        let Workload::Command { job, setup } = spec.workload else {
            panic!("a command run's workload is its command");
        };
        assert_eq!(setup.as_deref(), Some("ndctl list\n"));
        assert_eq!(job.argv, vec!["true".to_string()]);
        assert!(!json.exists(), "the --json file is only checked");
        let r = RunRequest {
            json: Some(dir.join("no-dir").join("out.json")),
            ..r
        };
        let e = r.spec(false).unwrap_err();
        assert!(
            e.to_string().contains("its directory does not exist"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
