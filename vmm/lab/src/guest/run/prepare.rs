//! The first step of a run: the files it boots resolved (the user's, or the
//! guest image's), its command line, the `--modules` and the transfer disks
//! of a command run packed, and the job archive the guest's init reads —
//! everything before an engine is asked to boot.

use std::path::{Path, PathBuf};

use vmm::config::{ConsoleMode, VmConfig};

use super::{Engine, RunError, RunSpec, JOB_CMDLINE};
use crate::guest::guest_job::{self, ImageDir, ImageNeed};
use crate::guest::modules::PackedModules;
use crate::guest::transfer::{CommandJob, PreparedTransfer};

/// A run ready to boot: the core's [`VmConfig`] (what every engine boots)
/// and what the run reads back and reports beside it.
#[derive(Debug)]
pub(super) struct Prepared<'s> {
    /// The kernel and initrd resolved, the job's newc archive appended to the
    /// initrd, the command line, the machine with a command run's transfer
    /// disks after the user's, COM1 into `console` (and the terminal with
    /// `--console`), COM2 into `channel`.
    pub config: VmConfig,
    /// The scratch file the console goes to.
    pub console: PathBuf,
    /// The scratch file the job's result channel goes to.
    pub channel: PathBuf,
    /// The guest image, when its kernel is booted.
    pub image: Option<ImageDir>,
    /// The `--modules` packed into the job archive, described.
    pub modules: Option<PackedModules>,
    /// A command run and its transfer disks.
    pub transfer: Option<(&'s CommandJob, PreparedTransfer)>,
}

/// The kernel, initrd and guest image `spec` boots on `engine`: a Linux
/// kernel without `--initrd` runs the job from the guest image's initramfs
/// (its /init runs jobs; without the image the job could not run, so that
/// is refused rather than booted without it); no kernel boots the image's
/// (its bzImage on QEMU, its vmlinux elsewhere).
pub(super) fn boot_files(
    spec: &RunSpec,
    engine: Engine,
) -> Result<(PathBuf, Option<PathBuf>, Option<ImageDir>), RunError> {
    let linux = spec.boot.boots_linux();
    Ok(match &spec.boot.kernel {
        Some(k) if linux && spec.boot.initrd.is_none() => {
            let image = guest_job::image_for(ImageNeed::JobInitrd { kernel: k.clone() })?;
            (k.clone(), Some(image.initramfs.clone()), None)
        }
        Some(k) => (k.clone(), spec.boot.initrd.clone(), None),
        None => {
            let image = guest_job::image_for(ImageNeed::NoKernel)?;
            let kernel = match engine {
                Engine::Qemu => image.bz_image.clone(),
                _ => image.vmlinux.clone(),
            };
            let initrd = spec
                .boot
                .initrd
                .clone()
                .or_else(|| Some(image.initramfs.clone()));
            (kernel, initrd, Some(image))
        }
    })
}

/// Prepares `spec` for `engine`, its transfer disks in `scratch`.
pub(super) fn prepare<'s>(
    spec: &'s RunSpec,
    engine: Engine,
    scratch: &Path,
) -> Result<Prepared<'s>, RunError> {
    let (kernel, initrd, image) = boot_files(spec, engine)?;
    let cmdline = spec.boot.cmdline_or(JOB_CMDLINE);
    let mut job = spec.workload.guest_job();
    let mut modules = None;
    if let Some(dir) = &spec.boot.modules {
        let tree = crate::guest::modules::ModuleTree::open(dir, &kernel)?;
        let files = tree.pack()?;
        modules = Some(tree.describe(&files));
        job.extra_files.extend(files);
    }
    let mut machine = spec.machine.clone();
    let transfer = match spec.workload.command() {
        Some(c) => {
            let t = crate::guest::transfer::prepare(c, scratch, machine.disks.len())?;
            job.extra_files.extend(t.files.iter().cloned());
            machine.disks.extend(t.disks.iter().cloned());
            Some((c, t))
        }
        None => None,
    };
    let console = scratch.join("console.log");
    let channel = scratch.join("channel.bin");
    let config = VmConfig {
        machine,
        kernel,
        initrd,
        initrd_append: job.archive()?,
        cmdline,
        // The scratch copy is kept either way: its tail explains failures.
        console: ConsoleMode::from_choice(spec.stream_console, Some(console.clone())),
        channel: Some(channel.clone()),
    };
    Ok(Prepared {
        config,
        console,
        channel,
        image,
        modules,
        transfer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kernel: Option<&Path>, initrd: Option<&Path>) -> RunSpec {
        RunSpec {
            gdb: None,
            gdb_wait: false,
            control: Default::default(),
            engine: Engine::Pmemvm,
            boot: vmm::config::BootFiles {
                kernel: kernel.map(Path::to_path_buf),
                initrd: initrd.map(Path::to_path_buf),
                append: vec!["nd_pmem.nowait=1".into()],
                ..Default::default()
            },
            machine: vmm::config::MachineSpec {
                disks: vec!["/tmp/user.img".parse().expect("disk")],
                ..Default::default()
            },
            workload: crate::guest::run::Workload::Fio(guest_job::GuestJob {
                fio_job: "[x]\nrw=read\n".into(),
                ..Default::default()
            }),
            stream_console: false,
            console_log: None,
            timeout: std::time::Duration::from_secs(1),
        }
    }

    #[test]
    fn a_payload_with_its_own_initrd_boots_as_given_with_the_job_packed() {
        // Not Linux (no bzImage header, no ELF): no guest image is looked for.
        let dir = std::env::temp_dir().join(format!("pmemvm-prepare-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let kernel = dir.join("payload.bin");
        let initrd = dir.join("initrd.cpio");
        std::fs::write(&kernel, b"not a kernel").expect("write");
        let s = spec(Some(&kernel), Some(&initrd));
        let p = prepare(&s, Engine::Pmemvm, &dir).expect("prepared");
        let c = &p.config;
        assert_eq!((&c.kernel, &c.initrd), (&kernel, &Some(initrd)));
        assert!(p.image.is_none() && p.modules.is_none() && p.transfer.is_none());
        assert_eq!(c.cmdline, format!("{JOB_CMDLINE} nd_pmem.nowait=1"));
        assert_eq!(c.machine, s.machine, "no transfer disks added");
        // COM1 and COM2 into the scratch files the run reads back.
        assert_eq!(c.console, ConsoleMode::File(dir.join("console.log")));
        assert_eq!(
            (&p.console, &p.channel),
            (&dir.join("console.log"), &dir.join("channel.bin"))
        );
        assert_eq!(c.channel.as_ref(), Some(&p.channel));
        // The archive is a newc cpio holding the job file.
        let archive = &c.initrd_append;
        assert!(archive.starts_with(b"070701"), "a newc archive");
        assert!(
            archive.windows(b"rw=read".len()).any(|w| w == b"rw=read"),
            "the job is in it"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
