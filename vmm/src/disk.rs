//! The virtio disks of a VM (`--disk`): each host file opened (read-only or
//! read-write, never created or resized), locked against a second writer,
//! and put on the MMIO bus as a virtio-mmio block device with its own ISA
//! interrupt line. The guest finds them in the DSDT (`LNRO0005` devices, see
//! [`crate::acpi_setup::describe`]), as Linux's virtio_mmio driver expects on
//! an ACPI platform.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use devices::bus::Bus;
use devices::virtio::blk::{Block, BlockStats};
use devices::virtio::dma::DmaView;
use devices::virtio::mmio::MmioTransport;
use devices::virtio::queues::IoThread;
use devices::virtio::MMIO_DEVICE_SIZE;
use vmm_sys_util::eventfd::EventFd;

use crate::config::DiskSpec;
use crate::layout;

/// Errors opening or attaching disks.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// More disks than interrupt lines.
    #[error("{0} --disk files are more than a pmemvm guest can have (at most {max}, one interrupt line each)", max = layout::VIRTIO_IRQS.len())]
    TooMany(usize),
    /// The file cannot be opened.
    #[error("--disk {path}: cannot open it{mode}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// " for writing" or "".
        mode: &'static str,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file or block device.
    #[error("--disk {0}: it is a directory; give a disk image file")]
    Directory(PathBuf),
    /// Another process holds the file.
    #[error("--disk {0}: another process (a second pmemvm?) is using it; a disk can have one writer or several readers")]
    Locked(PathBuf),
    /// The device model refused the file.
    #[error(transparent)]
    Block(#[from] devices::virtio::blk::BlockError),
    /// The transport refused the device.
    #[error(transparent)]
    Mmio(#[from] devices::virtio::mmio::MmioError),
    /// Wiring the device.
    #[error("placing --disk {path}: {why}")]
    Attach {
        /// The file.
        path: PathBuf,
        /// What failed.
        why: String,
    },
}

impl crate::exit_status::Classified for DiskError {
    fn kind(&self) -> crate::exit_status::ErrorKind {
        use crate::exit_status::ErrorKind::*;
        match self {
            Self::TooMany(_)
            | Self::Open { .. }
            | Self::Directory(_)
            | Self::Locked(_)
            | Self::Block(_) => Usage,
            _ => Environment,
        }
    }
}

/// An opened disk, not yet on a bus.
#[derive(Debug)]
pub struct OpenDisk {
    spec: DiskSpec,
    file: File,
}

/// Opens and locks every disk; nothing is created or changed.
pub fn open_all(specs: &[DiskSpec]) -> Result<Vec<OpenDisk>, DiskError> {
    if specs.len() > layout::VIRTIO_IRQS.len() {
        return Err(DiskError::TooMany(specs.len()));
    }
    specs
        .iter()
        .map(|spec| {
            let open = |source| DiskError::Open {
                path: spec.path.clone(),
                mode: if spec.readonly { "" } else { " for writing" },
                source,
            };
            let file = OpenOptions::new()
                .read(true)
                .write(!spec.readonly)
                .open(&spec.path)
                .map_err(open)?;
            if file.metadata().map_err(open)?.is_dir() {
                return Err(DiskError::Directory(spec.path.clone()));
            }
            if !crate::memory::backing::try_lock(&file, spec.readonly).map_err(open)? {
                return Err(DiskError::Locked(spec.path.clone()));
            }
            Ok(OpenDisk {
                spec: spec.clone(),
                file,
            })
        })
        .collect()
}

/// Guest-physical base of disk `index`'s registers.
pub fn mmio_base(index: usize) -> u64 {
    layout::VIRTIO_MMIO_START.0 + MMIO_DEVICE_SIZE * index as u64
}

/// Offset of the virtio-mmio QueueNotify register in a device's page.
const QUEUE_NOTIFY: u64 = 0x50;

/// One attached disk's counters, for the run's record.
#[derive(Debug, Clone)]
pub struct AttachedDisk {
    /// The file, as given.
    pub path: PathBuf,
    /// Read-only to the guest.
    pub readonly: bool,
    /// The open file, for the exit fdatasync of a writable disk.
    pub file: Option<Arc<File>>,
    /// Its counters.
    pub stats: Arc<BlockStats>,
    /// Its interrupt, for the lost-interrupt watch.
    pub line: crate::vstate::lost_interrupt::Line,
}

/// What [`attach_all`] wires each disk to: its interrupt and, where the host
/// can, a KVM ioeventfd on its notify register.
pub struct Wiring<I, N> {
    /// An eventfd registered as the irqfd of ISA line `gsi`.
    pub irq: I,
    /// Registers `kick` as a KVM ioeventfd for guest writes at `addr`.
    pub notify: N,
}

impl<I, N> std::fmt::Debug for Wiring<I, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wiring").finish_non_exhaustive()
    }
}

/// Puts each disk on `mmio`, each served by its own I/O thread (the vCPU
/// that notifies a queue goes on at once; the thread does the file I/O).
pub fn attach_all<I, N>(
    disks: Vec<OpenDisk>,
    mem: &DmaView,
    mmio: &mut Bus,
    mut wiring: Wiring<I, N>,
) -> Result<(Vec<AttachedDisk>, Vec<IoThread>), DiskError>
where
    I: FnMut(u32) -> Result<EventFd, String>,
    N: FnMut(u64, &EventFd) -> Result<(), String>,
{
    let mut attached = Vec::with_capacity(disks.len());
    let mut threads = Vec::with_capacity(disks.len());
    for (i, (d, gsi)) in disks.into_iter().zip(layout::VIRTIO_IRQS).enumerate() {
        let attach = |why: String| DiskError::Attach {
            path: d.spec.path.clone(),
            why,
        };
        let file = match d.spec.readonly {
            true => None,
            false => Some(Arc::new(
                d.file.try_clone().map_err(|e| attach(e.to_string()))?,
            )),
        };
        let serial = format!("pmemvm-disk{i}");
        let block = Block::new(
            d.file,
            &d.spec.path.display().to_string(),
            d.spec.readonly,
            &serial,
        )?;
        let stats = block.stats();
        let evt = (wiring.irq)(gsi).map_err(attach)?;
        let mut transport = MmioTransport::new(block, mem.clone(), evt)?;
        let shared = transport.shared();
        let io = IoThread::start(&format!("disk{i}-io"), shared.clone())
            .map_err(|e| attach(format!("starting its I/O thread: {e}")))?;
        transport.set_kick(io.kick().try_clone().map_err(|e| attach(e.to_string()))?);
        // Without the ioeventfd the notify write exits to the vCPU thread,
        // which wakes the I/O thread: slower, the same behaviour.
        if let Err(why) = (wiring.notify)(mmio_base(i) + QUEUE_NOTIFY, io.kick()) {
            log::debug!("disk {i}: no ioeventfd for its notify register ({why}); notifications exit to pmemvm");
        }
        threads.push(io);
        let dev = Arc::new(Mutex::new(transport));
        mmio.insert(dev, mmio_base(i), MMIO_DEVICE_SIZE)
            .map_err(|e| attach(e.to_string()))?;
        let line = crate::vstate::lost_interrupt::Line {
            name: format!("virtio disk {i} ({})", d.spec.path.display()),
            irq: gsi,
            device: Arc::new(Mutex::new(shared)),
        };
        attached.push(AttachedDisk {
            path: d.spec.path,
            readonly: d.spec.readonly,
            file,
            stats,
            line,
        });
    }
    Ok((attached, threads))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit_status::Classified;

    #[test]
    fn every_disk_gets_its_own_page_below_the_flush_hints() {
        assert_eq!(mmio_base(0), 0xd000_0000);
        assert_eq!(mmio_base(4), 0xd000_4000);
        assert!(mmio_base(layout::VIRTIO_IRQS.len()) < layout::NVDIMM_FLUSH_HINT_START.0);
    }

    #[test]
    fn missing_locked_and_too_many_disks_are_refused_without_creating_anything() {
        let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
        let missing = dir.as_path().join("nope.img");
        let e = open_all(&[DiskSpec {
            path: missing.clone(),
            readonly: true,
        }])
        .unwrap_err();
        assert!(
            e.is_usage() && e.to_string().contains("nope.img: cannot open it"),
            "{e}"
        );
        assert!(!missing.exists());

        let img = dir.as_path().join("a.img");
        std::fs::write(&img, vec![0u8; 4096]).unwrap();
        let rw = DiskSpec {
            path: img.clone(),
            readonly: false,
        };
        let held = open_all(std::slice::from_ref(&rw)).unwrap();
        let e = open_all(&[DiskSpec {
            path: img.clone(),
            readonly: true,
        }])
        .unwrap_err();
        assert!(matches!(e, DiskError::Locked(_)), "{e}");
        drop(held);
        let readers = open_all(&[
            DiskSpec {
                path: img.clone(),
                readonly: true,
            },
            DiskSpec {
                path: img.clone(),
                readonly: true,
            },
        ]);
        assert!(readers.is_ok(), "two readers share a disk");

        let six = vec![rw; 6];
        assert!(matches!(open_all(&six), Err(DiskError::TooMany(6))));
        let e = open_all(&[DiskSpec {
            path: dir.as_path().to_path_buf(),
            readonly: true,
        }])
        .unwrap_err();
        assert!(matches!(e, DiskError::Directory(_)), "{e}");
    }
}
