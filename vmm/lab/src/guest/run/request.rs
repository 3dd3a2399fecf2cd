//! What `pmemvm run` was asked, as the command hands it over
//! ([`RunRequest`]), and the checked [`RunSpec`] made of it: the job's
//! inputs read, its outputs and prerequisites checked, the command run's
//! transfers validated — creating nothing but the Debian root file system of
//! `--rootfs debian` (built or found in its cache), and not even that for
//! preflight.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vmm::config::{BootFiles, MachineSpec};

use super::{check_inputs, Engine, RunControl, RunError, RunSpec, Workload};
use crate::guest::transfer::{CommandJob, GetSpec, PutSpec, TransferError};

/// `pmemvm run`'s request.
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// `--fio JOBFILE`.
    pub fio: Option<PathBuf>,
    /// `-- CMD [ARGS...]`.
    pub command: Vec<String>,
    /// `--put`s.
    pub puts: Vec<PutSpec>,
    /// `--get`s.
    pub gets: Vec<GetSpec>,
    /// `--out DIR` of the `--get`s.
    pub out: Option<PathBuf>,
    /// `--transfer-size`.
    pub transfer_size: u64,
    /// `--rootfs debian|IMAGE`.
    pub rootfs: Option<String>,
    /// `--packages`.
    pub packages: Option<String>,
    /// `--setup CMDS` (`@FILE` reads them from FILE).
    pub setup: Option<String>,
    /// `--fio-args`.
    pub fio_args: Option<String>,
    /// `--json OUT` (checked here, written by the command).
    pub json: Option<PathBuf>,
    /// Show the console on the terminal.
    pub console: bool,
    /// `--console-log`.
    pub console_log: Option<PathBuf>,
    /// `--timeout`.
    pub timeout: Duration,
    /// `--engine`.
    pub engine: Engine,
    /// What it boots.
    pub boot: BootFiles,
    /// The machine.
    pub machine: MachineSpec,
    /// `--gdb ADDR`.
    pub gdb: Option<vmm::debug::gdb::GdbAddr>,
    /// `--gdb-wait`.
    pub gdb_wait: bool,
    /// `--api`, `--dump-on-panic`.
    pub control: RunControl,
}

/// A file the job needs, read (a directory is refused by name).
fn read_input(path: &Path, what: &'static str) -> Result<String, RunError> {
    if path.is_dir() {
        return Err(RunError::Input {
            what,
            path: path.into(),
            source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "it is a directory"),
        });
    }
    std::fs::read_to_string(path).map_err(|source| RunError::Input {
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
        for path in [&self.json, &self.console_log].into_iter().flatten() {
            check_output(path)?;
        }
        let m = &self.machine;
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
            gdb: self.gdb.clone(),
            gdb_wait: self.gdb_wait,
            control: self.control.clone(),
            engine: self.engine,
            boot: self.boot.clone(),
            machine: self.machine.clone(),
            workload: match (command, fio_job) {
                (Some(job), _) => Workload::Command { job, setup },
                (None, fio_job) => Workload::Fio(crate::guest::guest_job::GuestJob {
                    fio_job: fio_job.unwrap_or_default(),
                    setup,
                    args: self.fio_args.clone(),
                    ..crate::guest::guest_job::GuestJob::default()
                }),
            },
            stream_console: self.console,
            console_log: self.console_log.clone(),
            timeout: self.timeout,
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
        needs.image = self.boot.kernel.is_none();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::exit_status::Classified;

    fn request() -> RunRequest {
        RunRequest {
            fio: None,
            command: Vec::new(),
            puts: Vec::new(),
            gets: Vec::new(),
            out: None,
            transfer_size: 512 << 20,
            rootfs: None,
            packages: None,
            setup: None,
            fio_args: None,
            json: None,
            console: false,
            console_log: None,
            timeout: Duration::from_secs(600),
            engine: Engine::Pmemvm,
            boot: BootFiles::default(),
            machine: MachineSpec {
                memory: 64 << 20,
                ..MachineSpec::default()
            },
            gdb: None,
            gdb_wait: false,
            control: RunControl::default(),
        }
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
