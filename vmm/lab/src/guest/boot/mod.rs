//! `pmemvm boot`: a guest on this terminal, on this host's KVM or nested
//! (pmemvm inside a QEMU TCG L1), with the debugger, the control socket and
//! the panic dump when asked for. The command parses a [`BootRequest`] (the
//! machine and its boot files as the user gave them), runs its [`BootSpec`]
//! and maps the [`RunError`] (the run's errors: the same inputs, engines and
//! endpoints) to its exit status.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vmm::config::{BootFiles, ConsoleMode, MachineSpec, VmConfig, DEFAULT_CMDLINE};
use vmm::vstate::vm::VmError;

use crate::guest::engine::{Engine, EngineError, RunControl, Unavailable};
use crate::guest::guest_job::{image_for, ImageDir, ImageNeed, ImageUnavailable};
use crate::guest::nested::NestedError;
use crate::guest::preflight;
use crate::guest::run::{self, RunError};
use vmm::host::HostKvm;

mod request;
pub use request::{BootEngine, BootRequest};

/// What `pmemvm boot` runs: its [`BootRequest`], checked.
#[derive(Debug, Clone)]
pub struct BootSpec {
    /// What it boots (no kernel: the guest image's).
    pub files: BootFiles,
    /// The machine.
    pub machine: MachineSpec,
    /// COM1: the terminal, a file (`--console-log`) or both.
    pub console: ConsoleMode,
    /// COM2 (the data channel) into this file.
    pub channel: Option<PathBuf>,
    /// End the guest after this long.
    pub timeout: Option<Duration>,
    /// Inside a QEMU TCG L1 (`--engine nested`) instead of this host's KVM.
    pub nested: bool,
    /// `--gdb ADDR` and `--gdb-wait`.
    pub gdb: Option<(vmm::debug::gdb::GdbAddr, bool)>,
    /// `--api` and `--dump-on-panic`.
    pub control: RunControl,
}

/// The kernel and initrd to boot: the user's, or the guest image's (its
/// vmlinux; its initramfs unless `--initrd`).
pub fn resolve_kernel(
    files: &BootFiles,
) -> Result<(PathBuf, Option<PathBuf>, Option<ImageDir>), ImageUnavailable> {
    if let Some(k) = &files.kernel {
        return Ok((k.clone(), files.initrd.clone(), None));
    }
    let image = image_for(ImageNeed::NoKernel)?;
    let initrd = files
        .initrd
        .clone()
        .unwrap_or_else(|| image.initramfs.clone());
    Ok((image.vmlinux.clone(), Some(initrd), Some(image)))
}

/// Refuses a Linux guest (`kernel`, or the guest image's with `None`) on a
/// KVM that cannot run it (PVM, or no vmx/svm) before anything is built or
/// booted, naming the user's command with `--engine nested`. A kernel that
/// is not Linux (a test payload) may run there.
pub fn refuse_linux_on_this_kvm(kernel: Option<&Path>, host: &HostKvm) -> Result<(), Unavailable> {
    match linux_refusal(kernel, host, std::env::args()) {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// The refusal of [`refuse_linux_on_this_kvm`] for the command line `argv`.
fn linux_refusal(
    kernel: Option<&Path>,
    host: &HostKvm,
    argv: impl IntoIterator<Item = String>,
) -> Option<Unavailable> {
    let linux = kernel.is_none_or(vmm::boot::looks_like_linux);
    let why = host.explanation().filter(|_| linux)?;
    Some(Unavailable::BootNeedsNested {
        why,
        command: crate::guest::engine::with_engine_nested(argv),
    })
}

impl BootSpec {
    /// The VM configuration with the kernel and initrd resolved.
    pub fn config(&self, kernel: PathBuf, initrd: Option<PathBuf>) -> VmConfig {
        VmConfig {
            machine: self.machine.clone(),
            kernel,
            initrd,
            initrd_append: Vec::new(),
            cmdline: self.files.cmdline_or(DEFAULT_CMDLINE),
            console: self.console.clone(),
            channel: self.channel.clone(),
        }
    }
}

/// What this boot needs on this host that an install can provide (QEMU and
/// the L1's tools for nested, the guest image), and an error for anything it
/// cannot: the host placement, the nested engine's refusals and memory.
pub fn preflight(req: &BootSpec, needs: &mut preflight::Needs) -> Result<(), RunError> {
    let m = &req.machine;
    vmm::memory::memory_placement::check_host_placement(
        m.cpus,
        &m.memory_spec(),
        &m.placement,
        &m.nvdimms,
    )
    .map_err(VmError::from)?;
    if !req.nested {
        // A bad kernel is named as such; a good one is refused with the way on.
        if let Some(k) = &req.files.kernel {
            vmm::boot::check_kernel(k).map_err(VmError::from)?;
        }
        refuse_linux_on_this_kvm(req.files.kernel.as_deref(), &HostKvm::probe())?;
    }
    if req.nested {
        if let Some(refusal) = Engine::Nested.refusal(m, &req.control) {
            return Err(refusal.into());
        }
        preflight::engine_on_this_host(Engine::Nested, true, needs).map_err(RunError::from)?;
        preflight::memory(
            Engine::Nested.memory_on_host(m.memory),
            preflight::mem_available(),
        )
        .map_err(RunError::from)?;
    }
    // --modules without --initrd boots the image's initramfs (its init loads them).
    needs.image =
        req.files.kernel.is_none() || req.files.modules.is_some() && req.files.initrd.is_none();
    Ok(())
}

/// `pmemvm boot --engine nested`: the guest under pmemvm inside the L1, its
/// console on this terminal.
fn boot_nested(req: &BootSpec) -> Result<u8, RunError> {
    let refuse = |what| {
        Err(RunError::from(EngineError::from(NestedError::Unsupported(
            what,
        ))))
    };
    if let Some(refusal) = Engine::Nested.refusal(&req.machine, &req.control) {
        return Err(refusal.into());
    }
    // Nested, the console is the terminal's through both levels: no file.
    if req.console.file().is_some() || req.channel.is_some() {
        return refuse("--console-log/--channel of boot");
    }
    if req.files.modules.is_some() {
        return refuse("--modules of boot");
    }
    // This pmemvm listens at --api and --gdb (the L1's doors): a busy port or
    // an existing path is refused as on this host, before the L1 starts.
    drop(vmm::launch::Endpoints::bind(
        req.gdb.as_ref().map(|(addr, _)| (addr, false)),
        req.control.api.as_deref(),
    )?);
    let (kernel, initrd, _) = resolve_kernel(&req.files)?;
    run::check_inputs(&BootFiles {
        kernel: Some(kernel.clone()),
        initrd: initrd.clone(),
        ..Default::default()
    })?;
    preflight::memory(
        Engine::Nested.memory_on_host(req.machine.memory),
        preflight::mem_available(),
    )
    .map_err(RunError::from)?;
    let qemu = crate::guest::qemu::find_qemu().ok_or(RunError::from(
        crate::guest::engine::Unavailable::NoQemu { engine: "nested" },
    ))?;
    let config = req.config(kernel, initrd);
    let boot = crate::guest::engine::nested::InteractiveBoot {
        kernel: &config.kernel,
        initrd: config.initrd.as_deref(),
        cmdline: &config.cmdline,
        spec: &config.machine,
        gdb: req.gdb.as_ref().map(|(a, wait)| (a, *wait)),
        api: req.control.api.as_deref(),
    };
    crate::guest::engine::nested::boot_interactive(&boot, &qemu)
        .map_err(EngineError::from)
        .map_err(RunError::from)
}

/// `pmemvm boot`: returns the exit status.
pub fn boot(req: &BootSpec) -> Result<u8, RunError> {
    if req.nested {
        return boot_nested(req);
    }
    let (kernel, mut initrd, _) = resolve_kernel(&req.files)?;
    let mut modules = Vec::new();
    if let Some(dir) = &req.files.modules {
        let files = crate::guest::modules::ModuleTree::open(dir, &kernel)
            .and_then(|t| t.pack())
            .map_err(RunError::from)?;
        // The modules need an init that loads them: the guest image's, unless --initrd.
        if initrd.is_none() {
            let image = image_for(ImageNeed::ModulesInitrd)?;
            initrd = Some(image.initramfs.clone());
        }
        let list: Vec<(&str, &[u8], u32)> = files
            .iter()
            .map(|(p, d, m)| (p.as_str(), d.as_slice(), *m))
            .collect();
        modules = crate::guest::guest_job::job_archive(&list).map_err(RunError::from)?;
    }
    // A bad kernel is named as such; a good one on a KVM that cannot run it
    // is refused with the way on, before anything is built.
    vmm::boot::check_kernel(&kernel).map_err(VmError::from)?;
    refuse_linux_on_this_kvm(Some(&kernel), &HostKvm::probe())?;
    let mut config = req.config(kernel, initrd);
    config.initrd_append = modules;
    let launch = vmm::launch::Launch {
        config,
        gdb: req.gdb.clone(),
        api: req.control.api.clone(),
        dump_on_panic: req.control.dump_on_panic.clone(),
        timeout: req.timeout,
        log_filter: log::max_level().to_string().to_lowercase(),
        started_ns: vmm::stats::process_start_ns(),
    };
    // The VM runs in the core-only executable where it is installed beside
    // this one (a smaller resident program), else here.
    match vmm::launch::core_executable() {
        Some(exe) => Err(vmm::launch::hand_over(&launch, &exe).into()),
        None => {
            log::debug!(
                "{} is not beside this program: the VM runs in this process",
                vmm::launch::CORE_EXECUTABLE
            );
            Ok(vmm::launch::run(&launch)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::exit_status::Classified;

    fn request(nested: bool) -> BootSpec {
        BootSpec {
            files: BootFiles {
                kernel: Some("/no/such/vmlinux".into()),
                append: vec!["quiet".into()],
                ..Default::default()
            },
            machine: MachineSpec::default(),
            console: ConsoleMode::Null,
            channel: None,
            timeout: None,
            nested,
            gdb: None,
            control: RunControl::default(),
        }
    }

    #[test]
    fn the_config_is_the_machine_with_the_default_command_line_and_the_appended_words() {
        let r = request(false);
        let c = r.config("/k".into(), None);
        assert_eq!(c.machine, r.machine);
        assert_eq!(c.cmdline, format!("{DEFAULT_CMDLINE} quiet"));
        assert_eq!(
            resolve_kernel(&r.files).unwrap().0,
            PathBuf::from("/no/such/vmlinux")
        );
    }

    #[test]
    fn nested_refusals_come_before_anything_starts() {
        let mut r = request(true);
        r.machine.placement = vmm::memory::placement::Placement::parse(Some("0"), None).unwrap();
        let e = boot(&r).unwrap_err();
        assert!(e.is_usage());
        assert!(
            e.to_string()
                .starts_with("--pin is not available with --engine nested"),
            "{e}"
        );
        let mut r = request(true);
        r.channel = Some("/tmp/channel".into());
        let e = boot(&r).unwrap_err();
        assert!(
            e.to_string().contains("--console-log/--channel of boot"),
            "{e}"
        );
        // The kernel is checked before any L1 or QEMU is looked for.
        let e = boot(&request(true)).unwrap_err();
        assert!(e.is_usage());
        assert!(e.to_string().contains("/no/such/vmlinux"), "{e}");
    }

    #[test]
    fn linux_on_a_kvm_that_cannot_run_it_is_refused_with_the_nested_command() {
        let pvm = HostKvm::from_sources("flags : fpu sse2\n", true);
        let hw = HostKvm::from_sources("flags : fpu vmx\n", false);
        let argv = || ["pmemvm", "boot", "--nvdimm", "128G"].map(String::from);
        match linux_refusal(None, &pvm, argv()) {
            Some(e @ Unavailable::BootNeedsNested { .. }) => {
                let text = e.to_string();
                assert!(text.contains("it is PVM"), "{text}");
                assert!(
                    text.ends_with(": pmemvm boot --engine nested --nvdimm 128G"),
                    "{text}"
                );
                assert!(RunError::from(e).is_usage());
            }
            other => panic!("the guest image on PVM: {other:?}"),
        }
        assert_eq!(linux_refusal(None, &hw, argv()), None);
        // A kernel that is not Linux (a test payload) may run on PVM.
        let dir = std::env::temp_dir().join(format!("pmemvm-boot-refuse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let payload = dir.join("tiny.bin");
        std::fs::write(&payload, [0xf4u8; 64]).unwrap();
        assert_eq!(linux_refusal(Some(&payload), &pvm, argv()), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
