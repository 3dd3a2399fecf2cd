//! `--engine pmemvm`: pmemvm's own VMM core, in this process.

use devices::exit::ExitRequest;
use vmm::config::{ConsoleMode, VmConfig};
use vmm::exit_status;
use vmm::host::HostKvm;
use vmm::vstate::run_loop::RunOptions;

use std::path::Path;

use super::{in_nested_l1, Ended, Engine, EngineError, GuestEngine, Machine};

/// pmemvm's own VMM core, in this process.
#[derive(Debug)]
pub struct Pmemvm {
    pub(super) kvm: HostKvm,
}

impl GuestEngine for Pmemvm {
    fn engine(&self) -> Engine {
        Engine::Pmemvm
    }

    fn boot(&self, m: &Machine<'_>) -> Result<Ended, EngineError> {
        let config = VmConfig {
            kernel: m.kernel.to_path_buf(),
            initrd: m.initrd.map(Path::to_path_buf),
            initrd_append: m.job_archive.to_vec(),
            cmdline: m.cmdline.to_string(),
            machine: m.spec.clone(),
            // The scratch copy is kept either way: its tail explains failures.
            console: ConsoleMode::from_choice(m.stream_console, Some(m.console.to_path_buf())),
            channel: Some(m.channel.to_path_buf()),
        };
        let building = std::time::Instant::now();
        let endpoints = match m.take_endpoints() {
            Some(bound) => bound,
            None => vmm::launch::Endpoints::bind(m.gdb, m.control.api.as_deref())?,
        };
        let vm = vmm::launch::build(&config, endpoints, m.control.dump_on_panic.as_deref())?;
        log::debug!(
            "startup: VM built (memory, devices, kernel and initrd loaded, ACPI) in {:.3} s",
            building.elapsed().as_secs_f64()
        );
        let outcome = vm.run_with(RunOptions {
            timeout: Some(m.timeout),
            ..RunOptions::default()
        })?;
        let error = match &outcome.reason {
            ExitRequest::GuestExit(_) | ExitRequest::PowerOff => None,
            other => {
                let mut msg = exit_status::describe(other);
                if let Some(h) = &outcome.host_hint {
                    msg.push_str("; ");
                    msg.push_str(h);
                }
                for v in &outcome.vcpus {
                    msg.push_str("; ");
                    msg.push_str(v);
                }
                Some(msg)
            }
        };
        Ok(Ended {
            status: Some(exit_status::for_request(&outcome.reason)),
            error,
            accelerator: "kvm".into(),
            // Nested guests run on a real KVM, but their numbers are not performance.
            functional_only: self.kvm.cannot_run_linux() || in_nested_l1(),
            exits: Some(outcome.exits.clone()),
            nvdimm_stats: outcome.nvdimms.clone(),
            machine: Some(outcome.machine.clone()),
        })
    }
}
