//! The exits a vCPU thread handles itself, one method each: port and MMIO
//! accesses (the buses, pvpanic, NVDIMM pages KVM could not back, `mce=on`
//! holes), a triple fault, a system event, and `KVM_RUN`'s own errors.

use std::sync::atomic::Ordering;

use devices::exit::ExitRequest;
use kvm_bindings::kvm_run;

use crate::nvdimm::dimm_fault::dimm_space_report;
use crate::stats::ExitStats;
use crate::vstate::vcpu::VcpuContext;
use crate::vstate::vcpu_status::Exit;

impl VcpuContext {
    /// The element size of the port I/O exit KVM just reported, when its
    /// data lies outside the `kvm_run` struct (where KVM puts it).
    fn io_width(&mut self) -> Option<usize> {
        let run = self.vcpu.get_kvm_run();
        // SAFETY: called right after KVM_RUN returned KVM_EXIT_IO, so the
        // `io` member of the union is the valid one.
        let io = unsafe { run.__bindgen_anon_1.io };
        let outside =
            usize::try_from(io.data_offset).is_ok_and(|o| o >= std::mem::size_of::<kvm_run>());
        (outside && io.size > 0).then_some(usize::from(io.size))
    }

    /// KVM put port I/O data where pmemvm does not expect it (never seen:
    /// KVM uses the page after `kvm_run`).
    fn io_layout_error(&self) -> ExitRequest {
        ExitRequest::Fatal(format!(
            "vCPU {}: KVM reported port I/O data inside its kvm_run structure",
            self.index
        ))
    }

    /// A port read (`in`, or `rep insb`'s elements) of the exit's data at
    /// `ptr..ptr+len` in this vCPU's `kvm_run` mapping.
    pub(crate) fn port_in(&mut self, port: u16, ptr: *mut u8, len: usize) -> Option<ExitRequest> {
        self.status.in_exit(Exit::PortIn, port.into());
        ExitStats::bump(&self.stats.io_in);
        // A string IN (`rep insb`) carries `count` elements of `size` bytes.
        let Some(width) = self.io_width() else {
            return Some(self.io_layout_error());
        };
        // SAFETY: `ptr..ptr+len` is the exit's data in this vCPU's kvm_run
        // mapping, alive as long as `self.vcpu`; `io_width` checked it lies
        // beyond the `kvm_run` struct, the only part a reference was taken to
        // since, and that reference is gone.
        let data = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        if port == crate::layout::PVPANIC_PORT {
            data.chunks_mut(width).for_each(|e| self.pvpanic.read(e));
            return None;
        }
        for element in data.chunks_mut(width) {
            if self.pio.read(port.into(), element).is_err() {
                self.stats
                    .unclaimed_access(self.index, "port-read", port.into());
            }
        }
        None
    }

    /// A port write of the exit's data at `ptr..ptr+len` (as [`Self::port_in`]).
    pub(crate) fn port_out(
        &mut self,
        port: u16,
        ptr: *const u8,
        len: usize,
    ) -> Option<ExitRequest> {
        self.status.in_exit(Exit::PortOut, port.into());
        ExitStats::bump(&self.stats.io_out);
        let Some(width) = self.io_width() else {
            return Some(self.io_layout_error());
        };
        // SAFETY: as in `port_in`; read-only here.
        let data = unsafe { std::slice::from_raw_parts(ptr, len) };
        if self.faults.vcpu_panics && port == crate::layout::GUEST_EXIT_PORT {
            panic!("fault injection: vCPU {} panics", self.index);
        }
        if port == crate::layout::PVPANIC_PORT {
            self.pvpanic.write(self.index, &self.vcpu, data);
            return None;
        }
        for element in data.chunks(width) {
            if self.pio.write(port.into(), element).is_err() {
                self.stats
                    .unclaimed_access(self.index, "port-write", port.into());
            }
        }
        None
    }

    /// After a read from a hole of a poisoned DIMM page was filled (`len`
    /// bytes at `addr`): a machine check when it touched poison, else on.
    pub(crate) fn hole_read(
        &mut self,
        poison: &std::sync::Arc<crate::nvdimm::mce::PoisonSlots>,
        addr: u64,
        len: usize,
    ) -> Option<ExitRequest> {
        let locked = crate::nvdimm::mce::vcpu_side::locked_instruction(&self.vcpu, &self.mem);
        let mce = (self.mce_vendor, self.mce_broadcast.as_deref());
        let at = (addr, len, locked);
        crate::nvdimm::mce::vcpu_side::hole_loaded(
            self.index,
            &mut self.vcpu,
            mce,
            poison,
            &self.mmio,
            at,
        )
    }

    /// An MMIO write: a poisoned DIMM's hole, a read-only DIMM (dropped and
    /// counted), a DIMM page KVM could not store to, or a device.
    pub(crate) fn mmio_write(&mut self, addr: u64, data: &[u8]) -> Option<ExitRequest> {
        self.status.in_exit(Exit::MmioWrite, addr);
        ExitStats::bump(&self.stats.mmio_write);
        match self.dimms.iter().find(|d| d.contains(addr)) {
            Some(d) if d.poison.is_some() => {
                let p = d.poison.as_deref()?;
                return crate::nvdimm::mce::vcpu_side::write(self.index, p, addr, data);
            }
            Some(d) if d.readonly => ExitStats::bump(&self.stats.readonly_writes),
            // KVM could not store into the file's page (host disk full):
            // never drop the guest's data silently.
            Some(d) => return Some(d.storage_failure(self.index, "write", addr)),
            None => {
                if let Some(secs) = self.faults.flush_stall_secs {
                    let hints = crate::layout::NVDIMM_FLUSH_HINT_START.0;
                    let window = crate::layout::NVDIMM_FLUSH_HINT_SIZE
                        * crate::layout::NVDIMM_FLUSH_HINT_MAX;
                    if addr.wrapping_sub(hints) < window {
                        std::thread::sleep(std::time::Duration::from_secs(secs));
                    }
                }
                if self.mmio.write(addr, data).is_err() {
                    self.stats.unclaimed_access(self.index, "mmio-write", addr);
                }
            }
        }
        None
    }

    /// A shutdown exit: the guest triple-faulted; its registers where KVM
    /// still has them, else the RIP from the tracepoint.
    pub(crate) fn triple_fault(&mut self) -> Option<ExitRequest> {
        let regs = self.vcpu.get_regs().ok();
        let sregs = self.vcpu.get_sregs().ok();
        Some(ExitRequest::TripleFault(
            crate::vstate::cpu_state::triple_fault(
                self.index,
                regs.as_ref(),
                sregs.as_ref(),
                || {
                    // SAFETY: gettid(2) has no arguments and cannot fail.
                    crate::vstate::cpu_state::shutdown_rip(unsafe { libc::gettid() })
                },
            ),
        ))
    }

    /// `KVM_RUN` returned an error: a kick (the loop goes on; the stop's or
    /// SIGQUIT's snapshot is taken), a guest page the host could not back,
    /// or a failure that ends the VM.
    pub(crate) fn kvm_run_error(&mut self, e: &kvm_ioctls::Error) -> Option<ExitRequest> {
        match e.errno() {
            libc::EINTR | libc::EAGAIN => {
                // A kick: clear what its handler set; the loop checks `stop`.
                self.vcpu.set_kvm_immediate_exit(0);
                ExitStats::bump(&self.stats.interrupted);
                if self.stop.load(Ordering::SeqCst) || self.status.take_snapshot_request() {
                    // The stop's kick (for the report of a time-out) or SIGQUIT's:
                    // where the guest was.
                    if let Some(snapshot) =
                        crate::vstate::vcpu_status::Snapshot::of_vcpu(&self.vcpu, &self.mem)
                    {
                        self.status.record(snapshot);
                    }
                }
                None
            }
            libc::EFAULT => Some(ExitRequest::StorageFailure(format!(
                "vCPU {} could not access guest memory ({e}); an NVDIMM backing file may have \
                 failed to grow: {} — use ',prealloc' to allocate it up front",
                self.index,
                dimm_space_report(&self.dimms)
            ))),
            _ => Some(ExitRequest::Fatal(format!(
                "vCPU {} KVM_RUN failed: {e}",
                self.index
            ))),
        }
    }

    /// A system event: the guest powered off or asked for a reset.
    pub(crate) fn system_event(&self, kind: u32) -> ExitRequest {
        match kind {
            kvm_bindings::KVM_SYSTEM_EVENT_SHUTDOWN => ExitRequest::PowerOff,
            kvm_bindings::KVM_SYSTEM_EVENT_RESET => ExitRequest::Reset,
            other => {
                ExitRequest::Fatal(format!("vCPU {} reported system event {other}", self.index))
            }
        }
    }
}
