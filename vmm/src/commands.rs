//! The subcommands' work, callable from the binary and from tests.

use std::path::PathBuf;

use crate::acpi_setup::{self, PlacedNvdimm};
use crate::cli::{AcpiArgs, BootArgs};
use crate::exit_status;
use crate::guest_job::{find_image_dir, ImageDir};
use crate::memory;
use crate::vm::{Vm, VmError};

/// Errors of a subcommand.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Building or running the VM.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// No kernel given and no default image.
    #[error("no --kernel given and the default guest image is not available: {0}")]
    NoImage(String),
    /// Writing output files.
    #[error("cannot write {path}: {source}")]
    Output {
        /// Path.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl CommandError {
    /// True when the user's input is at fault (exit status 2).
    pub fn is_usage(&self) -> bool {
        match self {
            Self::Vm(e) => e.is_usage(),
            Self::NoImage(_) | Self::Output { .. } => true,
        }
    }
}

/// The kernel and initrd to boot: the user's, or the project's guest image
/// (its PVH vmlinux and initramfs) when no `--kernel` is given.
pub fn resolve_kernel(
    kernel: Option<&PathBuf>,
    initrd: Option<&PathBuf>,
) -> Result<(PathBuf, Option<PathBuf>, Option<ImageDir>), CommandError> {
    if let Some(k) = kernel {
        return Ok((k.clone(), initrd.cloned(), None));
    }
    let image = find_image_dir().map_err(|e| CommandError::NoImage(e.to_string()))?;
    let initrd = initrd.cloned().unwrap_or_else(|| image.initramfs.clone());
    Ok((image.vmlinux.clone(), Some(initrd), Some(image)))
}

/// `pmemvm boot`: returns the exit status.
pub fn boot(args: &BootArgs) -> Result<u8, CommandError> {
    let (kernel, initrd, _) = resolve_kernel(args.kernel.as_ref(), args.initrd.as_ref())?;
    let config = args.to_config(kernel, initrd);
    let vm = Vm::build(&config)?;
    let _terminal = matches!(config.console, crate::config::ConsoleMode::Stdio)
        .then(crate::console::raw_terminal);
    let outcome = vm.run()?;
    drop(_terminal);
    let status = exit_status::for_request(&outcome.reason);
    log::info!("VM exits: {:?}", outcome.exits);
    for n in &outcome.nvdimms {
        log::info!("NVDIMM {}: {} flushes", n.file, n.flushes);
    }
    match &outcome.reason {
        devices::exit::ExitRequest::PowerOff | devices::exit::ExitRequest::GuestExit(_) => {
            log::info!("{}", exit_status::describe(&outcome.reason));
        }
        other => {
            eprintln!(
                "pmemvm: {} (exit status {status})",
                exit_status::describe(other)
            );
            if let Some(hint) = &outcome.host_hint {
                eprintln!("pmemvm: {hint}");
            }
        }
    }
    Ok(status)
}

/// `pmemvm acpi`: writes `<NAME>.aml` for every table and `RSDP.aml`.
pub fn acpi(args: &AcpiArgs) -> Result<(), CommandError> {
    let m = &args.machine;
    let ram = memory::ram_regions(m.memory).map_err(VmError::from)?;
    let sizes: Vec<u64> = m.nvdimm.iter().map(|n| n.spa_size()).collect();
    let bases = memory::nvdimm_bases(&ram, &sizes).map_err(VmError::from)?;
    let placed: Vec<PlacedNvdimm> = m
        .nvdimm
        .iter()
        .zip(bases)
        .map(|(spec, base)| PlacedNvdimm { spec, base })
        .collect();
    let tables = acpi_setup::build(&acpi_setup::describe(m.cpus, &placed))?;
    let out_err = |path: PathBuf| move |source| CommandError::Output { path, source };
    std::fs::create_dir_all(&args.out).map_err(out_err(args.out.clone()))?;
    let mut files = vec![("RSDP".to_string(), &tables.rsdp)];
    files.extend(tables.tables.iter().map(|t| (t.name.clone(), &t.bytes)));
    for (name, bytes) in files {
        let path = args.out.join(format!("{name}.aml"));
        std::fs::write(&path, bytes).map_err(out_err(path.clone()))?;
    }
    Ok(())
}
