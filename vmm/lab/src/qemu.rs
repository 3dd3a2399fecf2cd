//! The peer engine: the same guest image and job under `qemu-system-x86_64`
//! with QEMU's own NVDIMM (`-machine nvdimm=on`, `memory-backend-file
//! share=on`), KVM where the host has hardware virtualization, TCG otherwise.

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
    /// Console output file (COM1).
    pub console: &'a Path,
    /// Channel output file (COM2).
    pub channel: &'a Path,
}

impl QemuMachine<'_> {
    /// The full QEMU command.
    pub fn command(&self) -> Command {
        let mut c = Command::new(self.qemu);
        let mib = |b: u64| b.div_ceil(1 << 20);
        let dimm_total: u64 = self.nvdimms.iter().map(|(s, _)| s.file_len()).sum();
        c.args(["-accel", self.accel.name()]);
        c.args([
            "-cpu",
            if self.accel == QemuAccel::Kvm {
                "host"
            } else {
                "max"
            },
        ]);
        c.args(["-machine", "pc,nvdimm=on"]);
        c.args(["-smp", &self.cpus.to_string()]);
        c.args([
            "-m",
            &format!(
                "{}M,slots={},maxmem={}M",
                mib(self.memory),
                self.nvdimms.len().max(1),
                mib(self.memory) + mib(dimm_total) + 1024
            ),
        ]);
        for (i, (spec, path)) in self.nvdimms.iter().enumerate() {
            let ro = if spec.readonly { ",readonly=on" } else { "" };
            c.args([
                "-object",
                &format!(
                    "memory-backend-file,id=pmem{i},share=on,mem-path={},size={}{ro}",
                    path.display(),
                    // QEMU's region is size − label-size: the same SIZE as
                    // pmemvm's, labels after it (the identity page beyond
                    // `size` is left alone: QEMU accepts a longer file).
                    spec.size + spec.label_size
                ),
            ]);
            let mut dev = format!("nvdimm,memdev=pmem{i},id=nv{i}");
            if spec.label_size > 0 {
                dev.push_str(&format!(",label-size={}", spec.label_size));
            }
            if spec.readonly {
                dev.push_str(",unarmed=on");
            }
            c.args(["-device", &dev]);
        }
        c.arg("-kernel").arg(self.kernel);
        if let Some(i) = self.initrd {
            c.arg("-initrd").arg(i);
        }
        c.args(["-append", self.cmdline]);
        c.args([
            "-display",
            "none",
            "-nodefaults",
            "-no-user-config",
            "-no-reboot",
        ]);
        c.args(["-serial", &format!("file:{}", self.console.display())]);
        c.args(["-serial", &format!("file:{}", self.channel.display())]);
        c.args(["-device", "isa-debug-exit,iobase=0x501,iosize=1"]);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            console: Path::new("/c"),
            channel: Path::new("/d"),
        };
        let args: Vec<String> = m
            .command()
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        assert!(joined.contains("-m 512M,slots=2,maxmem=2625M"), "{joined}");
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
    }
}
