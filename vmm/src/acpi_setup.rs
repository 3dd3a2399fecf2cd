//! From a VM's configuration to the ACPI description of its machine
//! (`acpi::GuestPlatform`), the tables in guest memory, and the NVDIMM
//! `_DSM` doorbell that serves the guest's AML: label, health and (root
//! device) scrub and error-injection requests.

use std::sync::Arc;

use acpi::{AcpiTables, DsmTransport, GuestPlatform, NvdimmDescription};
use devices::bus::{Bus, BusDevice};
use devices::nvdimm_dsm::{DsmHandler, FileLabels, DSM_PAGE_SIZE};
use devices::platform_events::{PlatformEventPort, PlatformEvents};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::config::NvdimmSpec;
use crate::layout;
use crate::nvdimm::identity;
use devices::bus::BusError;

use crate::config::ConfigError;
use crate::nvdimm::dimm::Nvdimm;

/// Errors of describing the machine and installing its tables.
#[derive(Debug, thiserror::Error)]
pub enum AcpiSetupError {
    /// The table builder refused the description, or writing the tables into guest memory failed.
    #[error("building the ACPI tables failed: {0}")]
    Tables(String),
    /// The DIMMs' NUMA nodes.
    #[error(transparent)]
    Nodes(#[from] ConfigError),
    /// Placing the `_DSM` doorbell.
    #[error("placing devices failed: {0}")]
    Bus(#[from] BusError),
    /// Host I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// One DIMM as placed: spec, guest base, serial number, NUMA node.
#[derive(Debug, Clone, Copy)]
pub struct PlacedNvdimm<'a> {
    /// What the user asked for.
    pub spec: &'a NvdimmSpec,
    /// Guest physical base.
    pub base: u64,
    /// NFIT serial: from the backing file's identity block, or `None` for
    /// an order-based one ([`crate::nvdimm::identity::order_serial`]).
    pub serial: Option<u32>,
    /// Guest NUMA node (= SRAT proximity domain), from
    /// [`crate::config::resolve_nodes`].
    pub node: u32,
}

/// The NFIT description of the DIMM in slot `i`, placed as `d`.
pub fn describe_dimm(d: &PlacedNvdimm, i: u32) -> NvdimmDescription {
    NvdimmDescription {
        handle: acpi::nfit_handle(i),
        spa_base: d.base,
        spa_size: d.spec.spa_size(),
        flush_hint_addr: Some(
            layout::NVDIMM_FLUSH_HINT_START.0 + u64::from(i) * layout::NVDIMM_FLUSH_HINT_SIZE,
        ),
        readonly: d.spec.readonly,
        serial: d.serial.unwrap_or_else(|| identity::order_serial(i)),
        label_size: u32::try_from(d.spec.label_size).unwrap_or(0),
        proximity_domain: Some(d.node),
    }
}

/// The machine as ACPI describes it: `ram` is the guest RAM as (base, length),
/// `slots` the NVDIMM slots (at least `dimms.len()`), `disks` the number of
/// virtio disks (at most [`layout::VIRTIO_IRQS`]'s length), `cxl` the CXL
/// platform.
pub fn describe(
    cpus: u8,
    ram: &[(u64, u64)],
    (dimms, slots): (&[PlacedNvdimm], usize),
    disks: usize,
    cxl: Option<acpi::CxlDescription>,
) -> GuestPlatform {
    let nvdimms: Vec<NvdimmDescription> = dimms
        .iter()
        .zip(0u32..)
        .map(|(d, i)| describe_dimm(d, i))
        .collect();
    let slots = slots.max(nvdimms.len());
    // Every DIMM answers the health functions and the root device answers
    // ARS, so the transport is there whenever there is a DIMM or a slot for one.
    let dsm = (slots > 0).then_some(DsmTransport {
        page_addr: layout::NVDIMM_DSM_PAGE_START.0,
        doorbell_port: layout::NVDIMM_DSM_PORT,
        event_port: layout::PLATFORM_EVENT_PORT,
        event_gsi: layout::PLATFORM_EVENT_GSI,
    });
    GuestPlatform {
        cpus: u32::from(cpus),
        lapic_addr: u32::try_from(layout::LAPIC_START.0).unwrap_or(0),
        ioapic_addr: u32::try_from(layout::IOAPIC_START.0).unwrap_or(0),
        ioapic_id: cpus,
        sleep_control_port: layout::ACPI_SLEEP_CONTROL_PORT,
        sleep_status_port: layout::ACPI_SLEEP_STATUS_PORT,
        reset_port: layout::ACPI_RESET_PORT,
        reset_value: layout::ACPI_RESET_VALUE,
        s5_slp_typ: layout::ACPI_S5_SLP_TYP,
        serial_ports: vec![
            (
                layout::COM1_PORT,
                u8::try_from(layout::COM1_IRQ).unwrap_or(4),
            ),
            (
                layout::COM2_PORT,
                u8::try_from(layout::COM2_IRQ).unwrap_or(3),
            ),
        ],
        virtio_mmio: (0..disks)
            .zip(layout::VIRTIO_IRQS)
            .map(|(i, irq)| {
                (
                    u32::try_from(crate::disk::mmio_base(i)).unwrap_or(0),
                    u8::try_from(irq).unwrap_or(0),
                )
            })
            .collect(),
        pvpanic_port: Some(layout::PVPANIC_PORT),
        ram: ram.to_vec(),
        nvdimms,
        nvdimm_slots: slots,
        dsm,
        cxl,
    }
}

/// Builds the tables at pmemvm's fixed addresses.
pub fn build(desc: &GuestPlatform) -> Result<AcpiTables, AcpiSetupError> {
    acpi::build_tables(
        desc,
        layout::RSDP_ADDR.0,
        layout::ACPI_TABLES_START.0,
        layout::ACPI_TABLES_MAX_SIZE,
    )
    .map_err(|e| AcpiSetupError::Tables(e.to_string()))
}

// The AML's `_FIT` asks for the function the device model answers.
const _: () = assert!(
    acpi::nvdimm_ssdt::FUNC_READ_FIT == devices::nvdimm_fit::FUNC_READ_FIT,
    "_FIT's root function differs between the AML and the device"
);
// ... and a reply of the device is never as long as a page nothing answered.
const _: () = assert!(
    4 + devices::nvdimm_fit::CHUNK_MAX as u64 == acpi::nvdimm_ssdt::FIT_REPLY_MAX,
    "_FIT's longest reply differs between the AML and the device"
);

/// Serves `_DSM` calls: the guest's AML writes the DSM page address here.
struct DsmDoorbell {
    mem: GuestMemoryMmap,
    handler: Arc<DsmHandler>,
}

impl BusDevice for DsmDoorbell {
    /// 1 when the last root `_DSM` call asks the AML to notify the root
    /// device of new media errors, else 0.
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if offset == 0 && self.handler.take_notification() {
            data[0] = 1;
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let addr = match (offset, <[u8; 4]>::try_from(data)) {
            (0, Ok(b)) => u64::from(u32::from_le_bytes(b)),
            _ => return,
        };
        // Only the reserved page is ever used: a guest naming another address is ignored.
        if addr != layout::NVDIMM_DSM_PAGE_START.0 {
            log::debug!("DSM doorbell with unexpected page address {addr:#x} ignored");
            return;
        }
        let mut page = [0u8; DSM_PAGE_SIZE];
        if self.mem.read_slice(&mut page, GuestAddress(addr)).is_err() {
            return;
        }
        self.handler.handle(&mut page);
        let _ = self.mem.write_slice(&page, GuestAddress(addr));
    }
}

/// The tables a guest of `machine` laid out as `placed` gets, without a VM:
/// what `pmemvm acpi` writes. The DIMMs' serials are read from existing
/// backing files (read-only, nothing is created), order-based otherwise —
/// as a guest would see them. [`install`] assembles them the same way
/// ([`describe`], [`build`]) from the opened backings.
pub fn machine_tables(
    machine: &crate::config::MachineSpec,
    placed: &crate::memory::MachineLayout,
) -> Result<AcpiTables, AcpiSetupError> {
    let nodes = crate::config::resolve_nodes(&machine.nvdimms)?;
    let dimms: Vec<PlacedNvdimm> = machine
        .nvdimms
        .iter()
        .zip(&placed.nvdimms)
        .zip(nodes)
        .map(|((spec, &(base, _)), node)| PlacedNvdimm {
            spec,
            base,
            serial: identity::peek_serial(spec),
            node,
        })
        .collect();
    build(&describe(
        machine.cpus,
        &placed.ram,
        (&dimms, machine.slots()),
        machine.disks.len(),
        placed.cxl.description(),
    ))
}

/// What [`install`] set up.
#[derive(Debug, Default)]
pub struct Installed {
    /// The `_DSM` handler, when there is a DIMM or a slot for one.
    pub dsm: Option<Arc<DsmHandler>>,
    /// The boot DIMMs as the NFIT describes them, in order.
    pub nvdimms: Vec<NvdimmDescription>,
}

/// Writes the tables into guest memory and puts the DSM doorbell and the
/// GED's event register (`events`, given with DIMMs or slots) on the bus.
pub fn install(
    cpus: u8,
    ram: &[(u64, u64)],
    mem: &GuestMemoryMmap,
    (nvdimms, slots, events): (&[Nvdimm], usize, Option<Arc<PlatformEvents>>),
    (disks, cxl): (usize, Option<acpi::CxlDescription>),
    pio: &mut Bus,
) -> Result<Installed, AcpiSetupError> {
    let specs: Vec<NvdimmSpec> = nvdimms.iter().map(|n| n.backing.spec.clone()).collect();
    let nodes = crate::config::resolve_nodes(&specs)?;
    let placed: Vec<PlacedNvdimm> = nvdimms
        .iter()
        .zip(nodes)
        .map(|(n, node)| PlacedNvdimm {
            spec: &n.backing.spec,
            base: n.base,
            serial: n.backing.serial,
            node,
        })
        .collect();
    let desc = describe(cpus, ram, (&placed, slots), disks, cxl);
    let tables = build(&desc)?;
    let write = |bytes: &[u8], addr: u64| {
        mem.write_slice(bytes, GuestAddress(addr))
            .map_err(|e| AcpiSetupError::Tables(format!("writing tables into guest memory: {e}")))
    };
    write(&tables.rsdp, tables.rsdp_addr)?;
    for t in &tables.tables {
        write(&t.bytes, t.addr)?;
    }
    if desc.dsm.is_none() {
        return Ok(Installed::default());
    }
    let mut handler = DsmHandler::new();
    for (n, d) in nvdimms.iter().zip(&desc.nvdimms) {
        let file = n
            .backing
            .file
            .try_clone()
            .map_err(|source| AcpiSetupError::Io {
                what: format!("duplicating the fd of {}", n.backing.display),
                source,
            })?;
        handler.add_dimm(
            d.handle,
            FileLabels::new(
                file,
                n.backing.spec.label_offset(),
                d.label_size,
                d.readonly,
            )
            .through_mapping(n.backing.fs == crate::memory::hugepages::FsKind::Hugetlbfs)
            .store_gate(n.recorder.as_ref().map(|r| r.store_gate())),
        );
        handler.add_media(n.media.clone());
    }
    handler.enable_root();
    handler.set_fit(acpi::nfit::fit(&desc.nvdimms));
    if let Some(events) = &events {
        let index = desc
            .nvdimms
            .iter()
            .enumerate()
            .map(|(i, d)| (d.handle, i))
            .collect();
        handler.notify_health_on(events.clone(), index);
    }
    let handler = Arc::new(handler);
    pio.insert(
        Arc::new(std::sync::Mutex::new(DsmDoorbell {
            mem: mem.clone(),
            handler: handler.clone(),
        })),
        layout::NVDIMM_DSM_PORT.into(),
        4,
    )?;
    if let Some(events) = events {
        pio.insert(
            Arc::new(std::sync::Mutex::new(PlatformEventPort(events))),
            layout::PLATFORM_EVENT_PORT.into(),
            4,
        )?;
    }
    Ok(Installed {
        dsm: Some(handler),
        nvdimms: desc.nvdimms,
    })
}
