//! The threads a running VM serves besides its vCPUs when asked: the gdb
//! stub (`--gdb`), the control socket (`--api`), and the memory dump of
//! a guest panic (`--dump-on-panic`). They share one [`DebugHub`], where
//! the vCPUs park when held; without any of them there is no hub and the
//! vCPU loop checks nothing.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devices::exit::{ExitNotifier, ExitRequest};

use crate::api::server::{Control, Counters};
use crate::debug::dump::Dumper;
use crate::debug::gdb::hub::DebugHub;
use crate::stats::DimmCounters;
use crate::vstate::vm::Vm;

/// How long the VM's end waits for a service thread.
const JOIN_LIMIT: Duration = Duration::from_secs(2);

/// The service threads started for one run.
#[derive(Debug, Default)]
pub(crate) struct Services {
    threads: Vec<JoinHandle<()>>,
}

impl Services {
    /// Waits (briefly) for the threads once the VM has ended.
    pub(crate) fn join(self) {
        for t in self.threads {
            crate::debug::gdb::server::join_within(t, JOIN_LIMIT);
        }
    }
}

impl Vm {
    /// pmemvm's counters, live.
    pub(crate) fn counters(&self) -> Counters {
        Counters {
            exits: self.stats.clone(),
            dimms: self
                .nvdimms
                .iter()
                .map(|n| DimmCounters {
                    file: n.backing.display.clone(),
                    base: n.base,
                    size: n.size(),
                    handle: n.handle,
                    flush: n.flush_stats.clone(),
                    poison: n.poison.as_ref().map(|g| g.0.clone()),
                })
                .collect(),
            dsm: self.dsm.clone(),
            hotplug: self.hotplug.clone(),
        }
    }

    /// The hub the vCPUs park at, when a service needs one; with
    /// `--gdb-wait` the vCPUs start held.
    pub(crate) fn debug_hub(&self) -> Option<Arc<DebugHub>> {
        let wait = self.gdb.as_ref().is_some_and(|g| g.wait);
        (self.gdb.is_some() || self.api.is_some() || self.dump_on_panic.is_some())
            .then(|| Arc::new(DebugHub::new(self.vcpus.len(), wait)))
    }

    /// The dumper of this VM (with a hub), armed for `--dump-on-panic`:
    /// before the vCPUs start, so a guest that panics at once is dumped.
    pub(crate) fn arm_dumps(&mut self, hub: Option<&Arc<DebugHub>>) -> Option<Arc<Dumper>> {
        let dumper = Arc::new(
            Dumper::new(self.mem.clone(), hub?.clone(), &self.kernel)
                .with_nvdimms(self.dma_view.clone()),
        );
        if let Some(path) = self.dump_on_panic.take() {
            self.pvpanic.dump_to(dumper.clone(), path);
        }
        Some(dumper)
    }

    /// Starts the services asked for, once the vCPU threads run; a thread
    /// that cannot start ends the VM.
    pub(crate) fn start_services(
        &mut self,
        hub: Option<Arc<DebugHub>>,
        dumper: Option<Arc<Dumper>>,
        exit: &Arc<ExitNotifier>,
    ) -> Services {
        let mut services = Services::default();
        let (Some(hub), Some(dumper)) = (hub, dumper) else {
            return services;
        };
        let under_gdb = self.gdb.is_some();
        if let Some(listener) = self.gdb.take() {
            let breakpoints = crate::debug::gdb::target::BreakpointMode::for_host(&self.host);
            let server = crate::debug::gdb::server::Server::new(
                listener,
                hub.clone(),
                self.mem.clone(),
                exit.clone(),
                breakpoints,
            );
            match server.spawn() {
                Ok(t) => services.threads.push(t),
                Err(e) => exit.request(ExitRequest::Fatal(format!(
                    "starting the debugger's thread failed: {e}"
                ))),
            }
        }
        if let Some(listener) = self.api.take() {
            let p = listener.path().display().to_string();
            eprintln!(
                "pmemvm: {}{p} (pmemvm ctl {p} stats|pause|resume|dump FILE|media ...)",
                crate::api::READY
            );
            let control = Arc::new(Control {
                dumper,
                counters: self.counters(),
                under_gdb,
                pvpanic: self.pvpanic.clone(),
                started: Instant::now(),
                paused: std::sync::Mutex::new(false),
                media: crate::api::media::MediaControl {
                    dimms: self.nvdimms.iter().map(|n| n.media.clone()).collect(),
                    events: self.events.clone(),
                    hotplug: self.hotplug.clone(),
                    cxl: crate::api::cxl_media::CxlMedia {
                        devices: self.cxl.as_ref().map(|c| c.devices()).unwrap_or_default(),
                        msi: Some(self.vm_fd.clone()),
                    },
                },
                hotplug: self.hotplug.clone(),
            });
            match crate::api::server::spawn(listener, control, exit.clone()) {
                Ok(t) => services.threads.push(t),
                Err(e) => exit.request(ExitRequest::Fatal(format!(
                    "starting the control socket's thread failed: {e}"
                ))),
            }
        }
        services
    }
}
