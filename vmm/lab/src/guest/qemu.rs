//! The peer engine: the same guest image and job under `qemu-system-x86_64`
//! with QEMU's own NVDIMM (`-machine nvdimm=on`, `memory-backend-file
//! share=on`), KVM where the host has hardware virtualization, TCG otherwise.

mod cxl;

pub use cxl::QemuCxlDevice;

use std::path::{Path, PathBuf};
use std::process::Command;

use vmm::config::NvdimmSpec;
use vmm::host::HostKvm;

/// The accelerator QEMU uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QemuAccel {
    /// Hardware KVM.
    Kvm,
    /// Software emulation (functional numbers only).
    Tcg,
}

impl QemuAccel {
    /// KVM when the host has vmx/svm and a usable /dev/kvm that is not PVM.
    pub fn choose(host: &HostKvm) -> Self {
        let kvm_ok = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        if kvm_ok && !host.cannot_run_linux() {
            Self::Kvm
        } else {
            Self::Tcg
        }
    }

    /// "kvm" or "tcg".
    pub fn name(self) -> &'static str {
        match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg",
        }
    }
}

/// Finds qemu-system-x86_64 on PATH.
pub fn find_qemu() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.is_file())
}

/// The oldest QEMU this project has run nested guests on without losing their
/// wake-ups: QEMU 7.2's TCG (Debian 12's) left 2-vCPU nested guests halted for
/// good and needed key events to wake idle L1s (docs/nested-platform.md, "QEMU
/// 7.2: lost wake-ups").
pub const NESTED_QEMU_MIN: (u32, u32) = (10, 0);

/// `(major, minor)` from `qemu-system-x86_64 --version`'s first line
/// ("QEMU emulator version 7.2.19 (Debian ...)").
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text
        .lines()
        .next()?
        .split("version ")
        .nth(1)?
        .split_whitespace()
        .next()?;
    let mut parts = v.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// `qemu --version` as `(major, minor)`; `None` when it cannot be run or
/// says no version.
pub fn version_of(qemu: &Path) -> Option<(u32, u32)> {
    let out = Command::new(qemu).arg("--version").output().ok()?;
    parse_version(&String::from_utf8_lossy(&out.stdout))
}

/// The warning for an L1 run by `qemu` when it is older than
/// [`NESTED_QEMU_MIN`] (`None` when it is new enough or says no version).
pub fn nested_qemu_warning(qemu: &Path) -> Option<String> {
    warning_for(version_of(qemu)?)
}

/// What `--gdb` through the nested engine cannot do on QEMU `version`:
/// QEMU 7.2's TCG did not stop a nested guest on its debug registers in
/// pmemvm's tests (QEMU 10.0 did), and pmemvm puts breakpoints there in an
/// L1 under TCG (docs/debugging.md).
pub fn nested_gdb_warning(version: (u32, u32)) -> Option<String> {
    (version < NESTED_QEMU_MIN).then(|| {
        format!(
            "--gdb: QEMU {}.{} runs the L1 VM and its TCG does not stop a nested guest on \
             breakpoints or watchpoints; single step, registers and memory work (QEMU {}.{} \
             or newer: all of them)",
            version.0, version.1, NESTED_QEMU_MIN.0, NESTED_QEMU_MIN.1
        )
    })
}

/// The warning for an L1 of `l1_cpus` vCPUs: with two or more, QEMU's TCG
/// delivers an interrupt now and then where AMD's SVM holds it (right after
/// `#VMEXIT`, before the hypervisor's `STGI`), which ends the L1 or its guest
/// in a triple fault (measured: docs/nested-platform.md, "The L1's own faults"
/// and "Guest faults in a two-vCPU L1").
pub fn nested_smp_warning(l1_cpus: u32) -> Option<String> {
    (l1_cpus >= 2).then(|| {
        format!(
            "the L1 VM has {l1_cpus} vCPUs: QEMU's TCG delivers an interrupt now and then \
             where AMD's SVM holds it (right after #VMEXIT), which ends the L1 or the guest in \
             a triple fault within minutes; pmemvm says so when it happens — run the command \
             again (hardware virtualization has no such limit)"
        )
    })
}

fn warning_for(version: (u32, u32)) -> Option<String> {
    (version < NESTED_QEMU_MIN).then(|| {
        format!(
            "QEMU {}.{} runs the L1 VM: its TCG loses nested guests' wake-ups (a guest with \
             2 or more vCPUs can stay halted until --timeout; an idle L1 needs key events); \
             QEMU {}.{} or newer did not lose them in pmemvm's tests (Debian 12: apt-get install -t bookworm-backports \
             qemu-system-x86)",
            version.0, version.1, NESTED_QEMU_MIN.0, NESTED_QEMU_MIN.1
        )
    })
}

/// One `qemu-system-x86_64` command line: the options every use in pmemvm
/// shares (accelerator, CPU model, no default devices, no user config, no
/// display, no reboot), then what the caller adds. The peer engine
/// ([`QemuMachine`]), the nested test harness's L1 and the table tests all
/// build their QEMU through it.
#[derive(Debug)]
pub struct QemuCommand {
    cmd: Command,
}

impl QemuCommand {
    /// `qemu -accel ACCEL -cpu CPU -nodefaults -no-user-config -display none -no-reboot`.
    pub fn new(qemu: &Path, accel: QemuAccel, cpu: &str) -> Self {
        let mut cmd = Command::new(qemu);
        cmd.args(["-accel", accel.name(), "-cpu", cpu]);
        cmd.args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ]);
        Self { cmd }
    }

    /// `-machine TYPE[,OPTIONS]`.
    pub fn machine(&mut self, machine: &str) -> &mut Self {
        self.arg2("-machine", machine)
    }

    /// `-smp N`.
    pub fn smp(&mut self, cpus: u32) -> &mut Self {
        self.arg2("-smp", &cpus.to_string())
    }

    /// `-m SPEC` (e.g. `3072M` or `512M,slots=2,maxmem=4G`).
    pub fn memory(&mut self, spec: &str) -> &mut Self {
        self.arg2("-m", spec)
    }

    /// `-kernel K [-initrd I] -append CMDLINE`.
    pub fn kernel(&mut self, kernel: &Path, initrd: Option<&Path>, cmdline: &str) -> &mut Self {
        self.cmd.arg("-kernel").arg(kernel);
        if let Some(i) = initrd {
            self.cmd.arg("-initrd").arg(i);
        }
        self.arg2("-append", cmdline)
    }

    /// The next serial port, written to `path` (COM1 first).
    pub fn serial_file(&mut self, path: &Path) -> &mut Self {
        self.serial(&format!("file:{}", path.display()))
    }

    /// The next serial port on a QEMU character backend (`stdio`, `null`, ...).
    pub fn serial(&mut self, backend: &str) -> &mut Self {
        self.arg2("-serial", backend)
    }

    /// `-chardev SPEC` (e.g. `stdio,id=user,signal=off`, used by `-serial chardev:user`).
    pub fn chardev(&mut self, spec: &str) -> &mut Self {
        self.arg2("-chardev", spec)
    }

    /// A host directory as a virtio-9p share with mount tag `tag`.
    pub fn virtfs(&mut self, dir: &Path, tag: &str) -> &mut Self {
        let dir = opt_escape(&dir.to_string_lossy());
        self.arg2(
            "-virtfs",
            &format!("local,path={dir},mount_tag={tag},security_model=none"),
        )
    }

    /// An extra ACPI table from a file (`-acpitable file=PATH`).
    pub fn acpitable(&mut self, path: &Path) -> &mut Self {
        let file = opt_escape(&path.to_string_lossy());
        self.arg2("-acpitable", &format!("file={file}"))
    }

    /// `-object SPEC`.
    pub fn object(&mut self, spec: &str) -> &mut Self {
        self.arg2("-object", spec)
    }

    /// `-name NAME,debug-threads=on`: QEMU's threads are named for what they
    /// run (`CPU 0/TCG`, `worker`), as `/proc` shows them.
    pub fn name_with_threads(&mut self, name: &str) -> &mut Self {
        self.arg2("-name", &format!("{name},debug-threads=on"))
    }

    /// `-monitor SPEC` (e.g. `unix:PATH,server=on,wait=off`).
    pub fn monitor(&mut self, spec: &str) -> &mut Self {
        self.arg2("-monitor", spec)
    }

    /// `-drive SPEC`.
    pub fn drive(&mut self, spec: &str) -> &mut Self {
        self.arg2("-drive", spec)
    }

    /// `-device SPEC`.
    pub fn device(&mut self, spec: &str) -> &mut Self {
        self.arg2("-device", spec)
    }

    /// `-d cpu_reset -D PATH`: QEMU writes each CPU reset and each triple
    /// fault (`Triple fault`) of the guest to `path`, so a guest that ended
    /// by resetting itself (which `-no-reboot` turns into an exit with
    /// status 0) can be told from one that powered off.
    pub fn log_resets(&mut self, path: &Path) -> &mut Self {
        self.cmd.args(["-d", "cpu_reset", "-D"]).arg(path);
        self
    }

    /// The command, to add stdio and spawn.
    pub fn into_command(self) -> Command {
        self.cmd
    }

    fn arg2(&mut self, option: &str, value: &str) -> &mut Self {
        self.cmd.args([option, value]);
        self
    }
}

/// Escapes a value for a QEMU option list (commas are doubled).
pub fn opt_escape(value: &str) -> String {
    value.replace(',', ",,")
}

/// What to run under QEMU.
#[derive(Debug)]
pub struct QemuMachine<'a> {
    /// QEMU binary.
    pub qemu: &'a Path,
    /// Accelerator.
    pub accel: QemuAccel,
    /// vCPUs.
    pub cpus: u8,
    /// RAM bytes.
    pub memory: u64,
    /// Kernel (bzImage).
    pub kernel: &'a Path,
    /// Initrd file.
    pub initrd: Option<&'a Path>,
    /// Command line.
    pub cmdline: &'a str,
    /// DIMMs with the backing file path to use for each.
    pub nvdimms: Vec<(&'a NvdimmSpec, PathBuf)>,
    /// virtio disks (virtio-blk-pci here: QEMU's pc machine has no virtio-mmio).
    pub disks: &'a [vmm::config::DiskSpec],
    /// CXL persistent-memory devices (the machine is q35 with them).
    pub cxl: Vec<QemuCxlDevice<'a>>,
    /// Console output file (COM1).
    pub console: &'a Path,
    /// Channel output file (COM2).
    pub channel: &'a Path,
}

impl QemuMachine<'_> {
    /// The full QEMU command.
    pub fn command(&self) -> Command {
        let mib = |b: u64| b.div_ceil(1 << 20);
        let dimm_total: u64 = self.nvdimms.iter().map(|(s, _)| s.file_len()).sum();
        let cpu = if self.accel == QemuAccel::Kvm {
            "host"
        } else {
            "max"
        };
        let mut q = QemuCommand::new(self.qemu, self.accel, cpu);
        q.machine(cxl::machine_type(&self.cxl))
            .smp(u32::from(self.cpus))
            .memory(&format!(
                "{}M,slots={},maxmem={}M",
                mib(self.memory),
                self.nvdimms.len().max(1),
                mib(self.memory) + mib(dimm_total) + 1024
            ));
        for (i, (spec, path)) in self.nvdimms.iter().enumerate() {
            let ro = if spec.readonly { ",readonly=on" } else { "" };
            q.object(&format!(
                "memory-backend-file,id=pmem{i},share=on,mem-path={},size={}{ro}",
                opt_escape(&path.to_string_lossy()),
                // QEMU's region is size − label-size: the same SIZE as
                // pmemvm's, labels after it (the identity page beyond
                // `size` is left alone: QEMU accepts a longer file).
                spec.size + spec.label_size
            ));
            let mut dev = format!("nvdimm,memdev=pmem{i},id=nv{i}");
            if spec.label_size > 0 {
                dev.push_str(&format!(",label-size={}", spec.label_size));
            }
            if spec.readonly {
                dev.push_str(",unarmed=on");
            }
            q.device(&dev);
        }
        cxl::add_devices(&mut q, &self.cxl);
        let disk_bus = cxl::root_bus(&self.cxl)
            .map(|b| format!(",bus={b}"))
            .unwrap_or_default();
        for (i, d) in self.disks.iter().enumerate() {
            let ro = if d.readonly { ",readonly=on" } else { "" };
            q.drive(&format!(
                "file={},format=raw,if=none,id=vd{i}{ro}",
                opt_escape(&d.path.to_string_lossy())
            ));
            q.device(&format!(
                "virtio-blk-pci,drive=vd{i},serial=pmemvm-disk{i}{disk_bus}"
            ));
        }
        // Under TCG on a busy host the guest's check that the IO-APIC routes
        // the timer can miss its ticks and panic ("IO-APIC + timer doesn't
        // work"); KVM guests skip that check by themselves, TCG ones are told to.
        let cmdline = match self.accel {
            QemuAccel::Tcg
                if !self
                    .cmdline
                    .split_whitespace()
                    .any(|w| w == "no_timer_check") =>
            {
                format!("{} no_timer_check", self.cmdline)
            }
            _ => self.cmdline.to_string(),
        };
        q.kernel(self.kernel, self.initrd, &cmdline)
            .serial_file(self.console)
            .serial_file(self.channel)
            .device("isa-debug-exit,iobase=0x501,iosize=1");
        q.into_command()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_beside_cxl_devices_sits_on_the_root_bus() {
        let cxl: vmm::config::CxlPmemSpec = "512M".parse().unwrap();
        let disks: [vmm::config::DiskSpec; 1] = ["/r/root.ext4,readonly".parse().unwrap()];
        let m = QemuMachine {
            qemu: Path::new("/usr/bin/qemu-system-x86_64"),
            accel: QemuAccel::Tcg,
            cpus: 1,
            memory: 512 << 20,
            kernel: Path::new("bzImage"),
            initrd: None,
            cmdline: "console=ttyS0",
            nvdimms: Vec::new(),
            disks: &disks,
            console: Path::new("/c"),
            channel: Path::new("/d"),
            cxl: vec![cxl::QemuCxlDevice {
                spec: &cxl,
                memory: "/s/cxl0.img".into(),
                lsa: "/s/cxl0.lsa".into(),
                serial: 1,
            }],
        };
        let args: Vec<String> = m
            .command()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        assert!(
            joined.contains("virtio-blk-pci,drive=vd0,serial=pmemvm-disk0,bus=pcie.0"),
            "{joined}"
        );
    }

    #[test]
    fn command_line_describes_dimms() {
        let spec: NvdimmSpec = "1G,readonly".parse().unwrap();
        let spec2: NvdimmSpec = "64M,label-size=0".parse().unwrap();
        let m = QemuMachine {
            qemu: Path::new("/usr/bin/qemu-system-x86_64"),
            accel: QemuAccel::Tcg,
            cpus: 2,
            memory: 512 << 20,
            kernel: Path::new("bzImage"),
            initrd: Some(Path::new("initrd")),
            cmdline: "console=ttyS0",
            nvdimms: vec![(&spec, "/a".into()), (&spec2, "/b".into())],
            disks: &[
                "/r,x/root.ext4,readonly".parse().unwrap(),
                "/t/get.img".parse().unwrap(),
            ],
            console: Path::new("/c"),
            channel: Path::new("/d"),
            cxl: Vec::new(),
        };
        let args: Vec<String> = m
            .command()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        assert!(joined.contains("-m 512M,slots=2,maxmem=2625M"), "{joined}");
        assert!(
            joined.contains("-drive file=/r,,x/root.ext4,format=raw,if=none,id=vd0,readonly=on -device virtio-blk-pci,drive=vd0,serial=pmemvm-disk0"),
            "{joined}"
        );
        assert!(
            joined.contains(
                "-drive file=/t/get.img,format=raw,if=none,id=vd1 -device virtio-blk-pci,drive=vd1"
            ),
            "{joined}"
        );
        assert!(
            joined.contains("mem-path=/a,size=1073872896,readonly=on"),
            "{joined}"
        );
        assert!(
            joined.contains("nvdimm,memdev=pmem0,id=nv0,label-size=131072,unarmed=on"),
            "{joined}"
        );
        assert!(
            joined.contains("-device nvdimm,memdev=pmem1,id=nv1 "),
            "{joined}"
        );
        assert!(joined.contains("-serial file:/d"), "{joined}");
        assert!(joined.contains("-accel tcg -cpu max"), "{joined}");
        assert!(joined.contains("-nodefaults -no-user-config -display none -no-reboot"));
        assert_eq!(opt_escape("/tmp/a,b"), "/tmp/a,,b");
        // TCG: the guest skips the IO-APIC timer check a busy host can fail; once.
        let append = |m: &QemuMachine| {
            let args: Vec<String> = m
                .command()
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let i = args.iter().position(|a| a == "-append").expect("-append");
            args[i + 1].clone()
        };
        assert_eq!(append(&m), "console=ttyS0 no_timer_check");
        let already = QemuMachine {
            cmdline: "console=ttyS0 no_timer_check",
            ..m
        };
        assert_eq!(append(&already), "console=ttyS0 no_timer_check");
        let kvm = QemuMachine {
            accel: QemuAccel::Kvm,
            cmdline: "console=ttyS0",
            ..already
        };
        assert_eq!(append(&kvm), "console=ttyS0");
    }

    #[test]
    fn qemu_versions_older_than_the_nested_minimum_are_warned_about() {
        assert_eq!(
            parse_version(
                "QEMU emulator version 7.2.19 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright"
            ),
            Some((7, 2))
        );
        assert_eq!(
            parse_version("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"),
            Some((10, 0))
        );
        assert_eq!(parse_version("something else"), None);
        assert_eq!(parse_version(""), None);
        let w = warning_for((7, 2)).expect("7.2 is warned about");
        assert!(w.starts_with("QEMU 7.2 runs the L1 VM"), "{w}");
        assert!(w.contains("bookworm-backports"), "{w}");
        assert!(warning_for((9, 2)).is_some());
        assert_eq!(warning_for((10, 0)), None);
        assert_eq!(warning_for((11, 1)), None);
        assert_eq!(nested_smp_warning(1), None);
        let w = nested_smp_warning(2).expect("two vCPUs are warned about");
        assert!(
            w.starts_with("the L1 VM has 2 vCPUs: ") && w.contains("triple fault"),
            "{w}"
        );
        let g = nested_gdb_warning((7, 2)).expect("7.2 is warned about for --gdb");
        assert!(g.starts_with("--gdb: QEMU 7.2 runs the L1 VM"), "{g}");
        assert!(!g.contains("  "), "one sentence, single spaces: {g}");
        assert_eq!(nested_gdb_warning((10, 0)), None);
    }
}
