//! The VM's two buses and the platform devices on them: the serial ports
//! (COM1 the console, COM2 the channel), ACPI power, the i8042 reset, the
//! guest-exit port, the PCI host bridge (with legacy pmem ranges) and the
//! NVDIMM flush hints. Disks, the GED and the DSM port are added by the
//! caller, which owns what they need.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use devices::bus::Bus;
use devices::exit::ExitNotifier;
use devices::nvdimm::{FlushHintDevice, FlushTarget};
use devices::pci_ecam::{Bdf, SharedFunction};
use devices::pci_host::PciHostBridge;
use devices::power::{AcpiPowerDevice, GuestExitDevice, I8042Device};
use devices::serial::SerialDevice;
use kvm_ioctls::VmFd;
use vmm_sys_util::eventfd::EventFd;

use super::outputs::{console_writer, create_output};
use super::{io_err, kvm_err, VmError};
use crate::config::VmConfig;
use crate::layout;
use crate::nvdimm::dimm::Nvdimm;

/// An interrupt line: an eventfd KVM raises `gsi` for.
pub(super) fn irq_line(vm_fd: &VmFd, gsi: u32) -> Result<EventFd, VmError> {
    let evt = EventFd::new(libc::EFD_NONBLOCK).map_err(io_err("creating an IRQ eventfd"))?;
    vm_fd
        .register_irqfd(&evt, gsi)
        .map_err(kvm_err("irqfd registration"))?;
    evt.try_clone().map_err(io_err("cloning an IRQ eventfd"))
}

/// The buses with the platform devices, and the serial ports.
pub(super) struct Buses {
    pub pio: Bus,
    pub mmio: Bus,
    pub serial: SerialPorts,
    /// The flush-hint pages of the NVDIMM slots (a hot-added DIMM joins it).
    pub flush: Option<Arc<Mutex<FlushHintDevice>>>,
}

/// COM1 (the console: its input goes to it when the console is the
/// terminal) and COM2 (the channel).
pub(crate) struct SerialPorts {
    pub com1: Arc<Mutex<SerialDevice>>,
    pub com2: Arc<Mutex<SerialDevice>>,
    /// The console's input goes to COM1.
    pub console_input: bool,
}

impl SerialPorts {
    /// COM1 when the console's input goes to it.
    pub fn console_in(&self) -> Option<Arc<Mutex<SerialDevice>>> {
        self.console_input.then(|| self.com1.clone())
    }

    /// Both ports, as the lost-interrupt watch names them.
    pub fn watched(&self) -> Vec<crate::vstate::lost_interrupt::Line> {
        let uart = |name: &str, irq, device: &Arc<Mutex<SerialDevice>>| {
            crate::vstate::lost_interrupt::Line {
                name: name.into(),
                irq,
                device: device.clone(),
            }
        };
        vec![
            uart("ttyS0", layout::COM1_IRQ, &self.com1),
            uart("ttyS1", layout::COM2_IRQ, &self.com2),
        ]
    }
}

/// Ports 0xCF8/0xCFC where the machine needs them: Linux puts legacy
/// persistent memory (E820 type 12) into iomem only after a PCI survey, and
/// it reads the CXL functions' first 256 bytes there (and takes the MCFG's
/// ECAM only where they exist). `cxl`: the CXL bus's functions, if any.
pub(super) fn pci_config(
    pio: &mut Bus,
    legacy_pmem: bool,
    cxl: Option<BTreeMap<Bdf, SharedFunction>>,
) -> Result<(), VmError> {
    let bridge = match cxl {
        Some(functions) => PciHostBridge::with_functions(functions),
        None if legacy_pmem => PciHostBridge::new(),
        None => return Ok(()),
    };
    pio.insert(
        Arc::new(Mutex::new(bridge)),
        layout::PCI_CONFIG_PORT.into(),
        devices::pci_host::LEN,
    )?;
    Ok(())
}

/// Builds the buses of `config`'s machine.
pub(super) fn platform(
    config: &VmConfig,
    vm_fd: &VmFd,
    exit: &Arc<ExitNotifier>,
    (nvdimms, slots): (&[Nvdimm], usize),
) -> Result<Buses, VmError> {
    let mut pio = Bus::new();
    let mut mmio = Bus::new();
    let com1 = Arc::new(Mutex::new(SerialDevice::new(
        irq_line(vm_fd, layout::COM1_IRQ)?,
        console_writer(&config.console)?,
    )));
    pio.insert(
        com1.clone(),
        layout::COM1_PORT.into(),
        layout::SERIAL_PORT_SIZE.into(),
    )?;
    let channel: Box<dyn Write + Send> = match &config.channel {
        Some(p) => Box::new(create_output("channel file", p)?),
        None => Box::new(std::io::sink()),
    };
    let com2 = Arc::new(Mutex::new(SerialDevice::new(
        irq_line(vm_fd, layout::COM2_IRQ)?,
        channel,
    )));
    pio.insert(
        com2.clone(),
        layout::COM2_PORT.into(),
        layout::SERIAL_PORT_SIZE.into(),
    )?;
    pio.insert(
        Arc::new(Mutex::new(AcpiPowerDevice::new(
            exit.clone(),
            layout::ACPI_S5_SLP_TYP,
            layout::ACPI_RESET_VALUE,
        ))),
        layout::ACPI_SLEEP_CONTROL_PORT.into(),
        AcpiPowerDevice::LEN,
    )?;
    pio.insert(
        Arc::new(Mutex::new(I8042Device::new(exit.clone()))),
        layout::I8042_PORT.into(),
        I8042Device::LEN,
    )?;
    pio.insert(
        Arc::new(Mutex::new(GuestExitDevice::new(exit.clone()))),
        layout::GUEST_EXIT_PORT.into(),
        1,
    )?;
    let mut flush = None;
    if slots > 0 {
        let targets = nvdimms
            .iter()
            .map(|n| FlushTarget {
                file: n.backing.file.clone(),
                path: n.backing.display.clone(),
                stats: n.flush_stats.clone(),
                observer: n
                    .recorder
                    .clone()
                    .map(|r| r as Arc<dyn devices::nvdimm::FlushObserver>),
            })
            .collect();
        let dev = FlushHintDevice::with_slots(
            targets,
            slots,
            layout::NVDIMM_FLUSH_HINT_SIZE,
            exit.clone(),
        );
        let len = dev.len();
        let dev = Arc::new(Mutex::new(dev));
        mmio.insert(dev.clone(), layout::NVDIMM_FLUSH_HINT_START.0, len)?;
        flush = Some(dev);
    }
    Ok(Buses {
        pio,
        mmio,
        flush,
        serial: SerialPorts {
            com1,
            com2,
            console_input: config.console.uses_terminal(),
        },
    })
}
