//! `--engine pmemvm`: pmemvm's own VMM core, in this process.

use devices::exit::ExitRequest;
use vmm::exit_status;
use vmm::host::HostKvm;
use vmm::vstate::run_loop::RunOptions;

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
        let building = std::time::Instant::now();
        let endpoints = match m.take_endpoints() {
            Some(bound) => bound,
            None => vmm::launch::Endpoints::bind(m.gdb, m.control.api.as_deref())?,
        };
        let vm = vmm::launch::build(m.config, endpoints, m.control.dump_on_panic.as_deref())?;
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
