//! How a run ends, after every vCPU stopped (or was named for not stopping):
//! the disks' I/O threads stopped, every writable file fdatasynced and each
//! recording ended, the DIMMs marked clean after an orderly end, the
//! reason explained (a panic, a triple fault's function, a host hint), and
//! the [`RunOutcome`] with the machine as measured.

use std::fs::File;
use std::sync::Arc;

use devices::exit::ExitRequest;
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

use crate::exit_status;
use crate::vstate::exit_sync::{sync_all, SYNC_DEADLINE};
use crate::vstate::vcpu::STOP_DEADLINE;
use crate::vstate::vm::{RunOutcome, Vm};

/// Why the VM ended, all told: vCPUs that did not stop, then a storage
/// failure (the guest's own or the final sync's), then the request.
fn end_reason(
    stopped: &Result<(), Vec<usize>>,
    reason: ExitRequest,
    sync_error: Option<String>,
) -> ExitRequest {
    match (stopped, reason, sync_error) {
        (Err(stuck), r, _) => ExitRequest::Fatal(format!(
            "vCPU {} did not leave KVM_RUN within {} s of the stop request (the VM was \
             ending: {}); its memory stays mapped until pmemvm exits",
            stuck
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            STOP_DEADLINE.as_secs(),
            exit_status::describe(&r)
        )),
        (_, r @ ExitRequest::StorageFailure(_), _) => r,
        (_, _, Some(e)) => ExitRequest::StorageFailure(e),
        (_, r, None) => r,
    }
}

impl Vm {
    /// Syncs the backing files and builds the outcome; `stopped` names the
    /// vCPUs that did not stop, whose memory must then stay mapped.
    pub(crate) fn finish(
        mut self,
        reason: Option<ExitRequest>,
        stopped: Result<(), Vec<usize>>,
        statuses: &[Arc<crate::vstate::vcpu_status::VcpuStatus>],
        kvm_pages: Option<crate::host::kvm_stats::KvmPages>,
    ) -> RunOutcome {
        // Hot-added DIMMs end as the boot DIMMs do (synced, marked clean, counted).
        if let Some(h) = self.hotplug.take() {
            self.nvdimms.extend(h.take_dimms());
        }
        let io_stopped = self.stop_disk_threads();
        let sync_error = self.sync_and_end_recordings();
        if sync_error.is_none() && stopped.is_ok() {
            // An orderly end: the data is on stable storage, so the next
            // start counts no unsafe shutdown.
            for n in &self.nvdimms {
                if let Err(e) = crate::nvdimm::media::mark_clean(&n.media) {
                    log::warn!(
                        "NVDIMM backing file {}: clearing the dirty flag failed ({e}); the next start counts an unsafe shutdown",
                        n.backing.display
                    );
                }
            }
        }
        self.log_rss();
        let machine = self.describe_machine(kvm_pages);
        // No request: a vCPU thread could not start (the caller reports it).
        let reason = reason.unwrap_or(ExitRequest::Fatal("the VM did not start".into()));
        let timed_out = matches!(reason, ExitRequest::Timeout(_));
        let reason = self.explained(end_reason(&stopped, reason, sync_error));
        // A time-out: where each vCPU was (guest RIP named from the kernel's
        // symbols, a host call from its device and file), while the DIMMs are known.
        let vcpus = if timed_out {
            self.describe_statuses(statuses)
        } else {
            Vec::new()
        };
        let host_hint = match &reason {
            ExitRequest::Fatal(_) | ExitRequest::TripleFault(_) => self
                .host
                .explanation()
                .map(|why| format!("{why}; {}", crate::host::WAY_ON)),
            _ => None,
        };
        let nvdimms = self.counters().nvdimms();
        if stopped.is_err() || !io_stopped {
            self.leave_mapped();
        }
        RunOutcome {
            reason,
            exits: self.stats.snapshot(),
            nvdimms,
            host_hint,
            machine,
            vcpus,
        }
    }

    /// No disk writes guest memory or its file after this (a request still
    /// in the kernel keeps its thread: the memory then stays mapped). Every
    /// thread is asked first, then each waited for; false when one did not end.
    fn stop_disk_threads(&mut self) -> bool {
        for t in &self.disk_threads {
            t.request_stop();
        }
        let ended: Vec<bool> = self
            .disk_threads
            .iter_mut()
            .map(|t| t.stop(STOP_DEADLINE))
            .collect();
        let all = ended.into_iter().all(|e| e);
        if !all {
            log::warn!(
                "a disk's I/O thread was still in a request {} s after the stop; guest memory stays mapped until pmemvm exits",
                STOP_DEADLINE.as_secs()
            );
        }
        all
    }

    /// The final fdatasync of every writable file, then the stores after the
    /// last flush (read after the sync, as at each flush) and each recording's
    /// end record; the first failure, in words.
    fn sync_and_end_recordings(&self) -> Option<String> {
        let sync_error = sync_all(self.writable_files(), SYNC_DEADLINE);
        let record_error = self
            .nvdimms
            .iter()
            .filter_map(|n| n.recorder.as_ref())
            .find_map(|r| r.finish().err())
            .map(|e| format!("ending the flush recording failed: {e}"));
        sync_error.or(record_error)
    }

    /// The reason with what the VM knows of it: a kernel that panicked and
    /// then reset (panic=N) ended in its panic; a triple fault names its
    /// function from the kernel's symbols.
    fn explained(&self, reason: ExitRequest) -> ExitRequest {
        match reason {
            ExitRequest::Reset if self.pvpanic.panicked() => ExitRequest::GuestPanic,
            ExitRequest::TripleFault(mut t) => {
                if let Some(rip) = t.rip {
                    t.symbol = crate::debug::symbols::Symbols::load(&self.kernel).name(rip);
                    t.host_module = crate::debug::symbols::host_module_at(rip);
                }
                ExitRequest::TripleFault(t)
            }
            r => r,
        }
    }

    /// A vCPU may still be in KVM_RUN on these mappings, or a disk's I/O
    /// thread in a copy to or from them: they stay mapped until the process exits.
    fn leave_mapped(&mut self) {
        std::mem::forget(self.mem.clone());
        for n in std::mem::take(&mut self.nvdimms) {
            std::mem::forget(n.mapping);
        }
        for l in std::mem::take(&mut self.legacy_pmem) {
            std::mem::forget(l.mapping);
        }
    }

    /// The machine description with the page sizes that backed guest RAM
    /// and each DIMM, read from this process's smaps now that the guest ran.
    fn describe_machine(
        &self,
        kvm_pages: Option<crate::host::kvm_stats::KvmPages>,
    ) -> crate::host::machine::MachineDescription {
        let mut maps: Vec<(String, usize, usize)> = self
            .mem
            .iter()
            .filter_map(|r| {
                let host = self.mem.get_host_address(r.start_addr()).ok()?;
                Some((
                    "ram".to_string(),
                    host as usize,
                    usize::try_from(r.len()).ok()?,
                ))
            })
            .collect();
        maps.extend(self.nvdimms.iter().enumerate().map(|(i, n)| {
            (
                format!("nvdimm{i}"),
                n.mapping.as_ptr() as usize,
                n.mapping.size(),
            )
        }));
        let pages = crate::host::smaps::measure(&maps).unwrap_or_else(|e| {
            log::warn!("{e}");
            Vec::new()
        });
        for p in &pages {
            let file = p
                .what
                .strip_prefix("nvdimm")
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| self.nvdimms.get(i))
                .map(|n| format!(" ({})", n.backing.display))
                .unwrap_or_default();
            log::info!(
                "memory: {}{file} backed by {}, {} KiB resident",
                p.what,
                p.describe(),
                p.resident >> 10
            );
        }
        let mut m = crate::host::machine::MachineDescription::probe().with_run(
            &self.placement.pin,
            self.placement.host_node,
            pages,
        );
        m.vcpu_memory_policy = self
            .vcpu_policy
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default();
        if let Some(p) = &kvm_pages {
            log::info!("memory: KVM maps the guest's memory with {}", p.describe());
        }
        m.kvm_pages = kvm_pages;
        m
    }

    /// The writable DIMMs' and legacy ranges' files, named for messages:
    /// legacy persistent memory is synced at the end like a DIMM (it has
    /// no flush hint, so this is the only sync it gets from pmemvm).
    pub(crate) fn writable_files(&self) -> Vec<(String, Arc<File>)> {
        self.nvdimms
            .iter()
            .filter(|n| !n.backing.spec.readonly)
            .map(|n| (n.backing.display.clone(), n.backing.file.clone()))
            .chain(
                self.legacy_pmem
                    .iter()
                    .filter(|l| !l.backing.spec.readonly)
                    .map(|l| (l.backing.display.clone(), l.backing.file.clone())),
            )
            .chain(self.cxl.iter().flat_map(|c| {
                c.backings
                    .iter()
                    .map(|b| (b.display.clone(), b.file.clone()))
            }))
            .chain(self.disks.iter().filter_map(|d| {
                d.file
                    .as_ref()
                    .map(|f| (d.path.display().to_string(), f.clone()))
            }))
            .collect()
    }

    fn log_rss(&self) {
        let mut guest_maps: Vec<(usize, usize)> = self
            .mem
            .iter()
            .filter_map(|r| {
                let host = self.mem.get_host_address(r.start_addr()).ok()?;
                Some((host as usize, usize::try_from(r.len()).ok()?))
            })
            .collect();
        guest_maps.extend(
            self.nvdimms
                .iter()
                .map(|n| (n.mapping.as_ptr() as usize, n.mapping.size())),
        );
        guest_maps.extend(
            self.legacy_pmem
                .iter()
                .map(|l| (l.mapping.as_ptr() as usize, l.mapping.size())),
        );
        if let Some(kib) = crate::stats::rss_excluding_kib(&guest_maps) {
            log::info!("memory: VMM RSS excluding guest memory {kib} KiB");
        }
    }
}
