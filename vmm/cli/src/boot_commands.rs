//! `pmemvm boot`: a guest on this terminal, on this host's KVM or nested
//! (pmemvm inside a QEMU TCG L1), with the debugger, the control socket and
//! the panic dump when asked for.

use crate::args::BootArgs;
use crate::commands::{resolve_kernel, warn_if_host_cannot_run, CommandError};
use lab::guest_job::{image_for, ImageNeed};
use lab::preflight;
use lab::run::{self, RunError, RunSpec};
use vmm::exit_status;
use vmm::vm::Vm;

/// `pmemvm boot --engine nested`: the guest under pmemvm inside the L1, its
/// console on this terminal.
fn boot_nested(args: &BootArgs) -> Result<u8, CommandError> {
    use lab::nested::NestedError;
    let refuse = |what| {
        Err(
            RunError::from(lab::engine::EngineError::from(NestedError::Unsupported(
                what,
            )))
            .into(),
        )
    };
    let m = &args.machine;
    let control = lab::run::RunControl {
        api: args.control.api.clone(),
        dump_on_panic: args.control.dump_on_panic.clone(),
    };
    if let Some(refusal) = lab::run::Engine::Nested.refusal(&m.spec(), &control) {
        return Err(RunError::from(refusal).into());
    }
    if args.console.console_log.is_some() || args.channel.is_some() {
        return refuse("--console-log/--channel of boot");
    }
    if args.boot.modules.is_some() {
        return refuse("--modules of boot");
    }
    if let Some(p) = &args.control.api {
        // QEMU listens there: refused as on this host, before the L1 starts.
        drop(vmm::api::ApiListener::bind(p)?);
    }
    if let Some(addr) = &args.gdb {
        // QEMU listens there: refused as on this host, before the L1 starts.
        drop(vmm::gdb::GdbListener::bind(addr, false)?);
    }
    let (kernel, initrd, _) = resolve_kernel(args.boot.kernel.as_ref(), args.boot.initrd.as_ref())?;
    run::check_inputs(&RunSpec {
        boot: vmm::config::BootFiles {
            kernel: Some(kernel.clone()),
            initrd: initrd.clone(),
            ..Default::default()
        },
        ..nested_probe_spec()
    })?;
    preflight::memory(
        lab::run::Engine::Nested.memory_on_host(m.memory.size),
        preflight::mem_available(),
    )
    .map_err(RunError::from)?;
    let qemu = lab::qemu::find_qemu().ok_or(RunError::from(lab::engine::Unavailable::NoQemu {
        engine: "nested",
    }))?;
    let config = args.to_config(kernel, initrd);
    let boot = lab::nested::InteractiveBoot {
        kernel: &config.kernel,
        initrd: config.initrd.as_deref(),
        cmdline: &config.cmdline,
        spec: &config.machine,
        gdb: args.gdb.as_ref().map(|a| (a, args.gdb_wait)),
        api: args.control.api.as_deref(),
    };
    lab::nested::boot_interactive(&boot, &qemu)
        .map_err(lab::engine::EngineError::from)
        .map_err(RunError::from)
        .map_err(CommandError::from)
}

/// A run spec that only carries the files [`run::check_inputs`] looks at.
fn nested_probe_spec() -> RunSpec {
    RunSpec {
        gdb: None,
        gdb_wait: false,
        control: Default::default(),
        engine: lab::run::Engine::Nested,
        boot: vmm::config::BootFiles::default(),
        machine: vmm::config::MachineSpec {
            memory: 0,
            ..Default::default()
        },
        job: lab::guest_job::GuestJob::default(),
        command: None,
        stream_console: false,
        console_log: None,
        timeout: std::time::Duration::from_secs(1),
    }
}

/// `pmemvm boot`: returns the exit status.
pub fn boot(args: &BootArgs) -> Result<u8, CommandError> {
    if args.engine == crate::args::BootEngineArg::Nested {
        return boot_nested(args);
    }
    let (kernel, mut initrd, _) =
        resolve_kernel(args.boot.kernel.as_ref(), args.boot.initrd.as_ref())?;
    let mut modules = Vec::new();
    if let Some(dir) = &args.boot.modules {
        let files = lab::modules::ModuleTree::open(dir, &kernel)
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
        modules = lab::guest_job::job_archive(&list).map_err(RunError::from)?;
    }
    let mut config = args.to_config(kernel, initrd);
    config.initrd_append = modules;
    // Bound first: a busy port or an existing path stops here, before the VM.
    let gdb = args
        .gdb
        .as_ref()
        .map(|a| vmm::gdb::GdbListener::bind(a, args.gdb_wait))
        .transpose()?;
    let api = args
        .control
        .api
        .as_deref()
        .map(vmm::api::ApiListener::bind)
        .transpose()?;
    if let Some(f) = &args.control.dump_on_panic {
        vmm::dump::check_new_file(f)?;
    }
    let mut vm = Vm::build(&config)?;
    if let Some(listener) = gdb {
        vm.attach_gdb(listener);
    }
    if let Some(listener) = api {
        vm.attach_api(listener);
    }
    if let Some(f) = &args.control.dump_on_panic {
        vm.dump_on_panic(f.clone())?;
    }
    warn_if_host_cannot_run(&config.kernel);
    // The terminal is raw for the run when the console uses it (run_loop).
    let outcome = vm.run_with(vmm::run_loop::RunOptions {
        timeout: args.timeout.map(std::time::Duration::from_secs),
        ..vmm::run_loop::RunOptions::default()
    })?;
    let status = exit_status::for_request(&outcome.reason);
    log::info!("VM exits: {:?}", outcome.exits);
    for n in &outcome.nvdimms {
        log::info!(
            "NVDIMM {}: {} flushes, {} label calls",
            n.file,
            n.flushes,
            n.label_calls
        );
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
            for v in &outcome.vcpus {
                eprintln!("pmemvm: {v}");
            }
        }
    }
    Ok(status)
}
