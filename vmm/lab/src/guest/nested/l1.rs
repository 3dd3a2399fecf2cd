//! The L1 machine's QEMU command line: TCG with emulated AMD SVM, the
//! prepared kernel and initramfs, the share and the backing files'
//! directories over 9p, the serial ports of the doors. One run of it to its
//! end is [`super::l1_run`].

use std::path::{Path, PathBuf};
use std::process::Command;

use super::stall;
use super::L1Image;
use crate::guest::qemu::{QemuAccel, QemuCommand};

pub use super::share::Mount;

/// The L1's size and wiring.
#[derive(Debug, Clone)]
pub struct L1Options {
    /// L1 RAM in MiB.
    pub memory_mib: u32,
    /// L1 vCPUs.
    pub cpus: u32,
    /// Directories mounted beside the share.
    pub mounts: Vec<Mount>,
    /// The command runs on L1's second serial port, relayed to this
    /// process's stdin and stdout (`pmemvm boot --engine nested`).
    pub interactive: bool,
    /// QEMU's chardev for the L1's third serial port ([`GDB_TTY`]), where
    /// pmemvm in the L1 serves gdb (`--gdb`): a private socket the user's door
    /// relays to ([`super::doors`]), or the user's serial device.
    pub gdb: Option<String>,
    /// QEMU's private socket for the L1's [`API_TTY`], where pmemvm in the L1
    /// serves the control protocol; the user's `--api` door relays to it.
    pub api: Option<PathBuf>,
}

/// The L1 serial port pmemvm serves gdb on, as the L1 sees it.
pub const GDB_TTY: &str = "/dev/ttyS2";

/// The L1 serial port pmemvm serves the control socket's protocol on
/// (`--api` through `--engine nested`), as the L1 sees it.
pub const API_TTY: &str = "/dev/ttyS3";

/// QEMU's chardev (without its id) that listens at the user's `--gdb`
/// address and carries the bytes to the L1's [`GDB_TTY`].
pub fn gdb_chardev(addr: &vmm::debug::gdb::GdbAddr) -> String {
    match addr {
        vmm::debug::gdb::GdbAddr::Tcp(a) => format!(
            "socket,host={},port={},server=on,wait=off,nodelay=on",
            a.ip(),
            a.port()
        ),
        vmm::debug::gdb::GdbAddr::Unix(p) => {
            format!("socket,path={},server=on,wait=off", p.display())
        }
        vmm::debug::gdb::GdbAddr::Serial(p) => format!("tty,path={}", p.display()),
    }
}

/// The second serial port of an interactive L1, as the L1 init sees it.
pub const INTERACTIVE_TTY: &str = "/dev/ttyS1";

/// The L1's QEMU command: TCG with emulated AMD SVM
/// (`-cpu max,vendor=AuthenticAMD`), the prepared kernel and initramfs, COM1
/// to `console`, `share` as the 9p tag `share` and every [`Mount`]; an
/// interactive L1 has COM2 on this process's stdio (`signal=off`: Ctrl-C
/// reaches the guest).
pub fn l1_command(
    qemu: &Path,
    l1: &L1Image,
    opts: &L1Options,
    console: &Path,
    share: &Path,
) -> Command {
    let mut q = QemuCommand::new(qemu, QemuAccel::Tcg, "max,vendor=AuthenticAMD");
    q.memory(&format!("{}M", opts.memory_mib))
        .smp(opts.cpus)
        .serial_file(console);
    if opts.interactive {
        q.chardev("stdio,id=user,signal=off").serial("chardev:user");
    }
    if let Some(gdb) = &opts.gdb {
        if !opts.interactive {
            // The gdb port is the third: the second exists, unconnected.
            q.serial("null");
        }
        q.chardev(&format!("{gdb},id=gdb")).serial("chardev:gdb");
    }
    if let Some(api) = &opts.api {
        // The API port is the fourth: the ones before it exist, unconnected
        // when nothing else uses them.
        let before = 1
            + usize::from(opts.interactive || opts.gdb.is_some())
            + usize::from(opts.gdb.is_some());
        for _ in before..3 {
            q.serial("null");
        }
        q.chardev(&format!(
            "socket,path={},server=on,wait=off,id=api",
            api.display()
        ))
        .serial("chardev:api");
    }
    q.kernel(
        &l1.vmlinuz,
        Some(&l1.initramfs),
        // TCG runs the L1: on a busy host its check that the IO-APIC routes
        // the timer can miss its ticks and panic at boot ("IO-APIC + timer
        // doesn't work!", seen in CI); KVM guests skip that check themselves.
        L1_CMDLINE,
    )
    .virtfs(share, "share");
    for m in &opts.mounts {
        q.virtfs(&m.host_dir, &m.tag);
    }
    // The monitor a stall is diagnosed through, and thread names it reads (see `stall`).
    q.name_with_threads("pmemvm-l1");
    // An L1 that resets itself ends QEMU with status 0 (`-no-reboot`): the
    // reset log tells that from a power-off (see `reset_cause`).
    q.log_resets(&reset_log(console));
    if let Some(socket) = stall::monitor_socket(console) {
        q.monitor(&stall::monitor_arg(&socket));
    }
    let mut cmd = q.into_command();
    if makes_user_socket(opts) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only umask, which is async-signal-safe and cannot fail: the
        // control and gdb sockets QEMU makes are the user's alone from their
        // creation.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o077);
                Ok(())
            });
        }
    }
    cmd
}

/// True when QEMU makes a Unix socket at a path the user named (`--api`, or
/// `--gdb PATH`): QEMU then runs under umask 077, so the socket is
/// owner-only from its creation. QEMU accepts the connections itself, so
/// their credentials are not checked as pmemvm's own sockets' are; the
/// mode is the lock.
fn makes_user_socket(opts: &L1Options) -> bool {
    opts.api.is_some()
        || opts
            .gdb
            .as_deref()
            .is_some_and(|c| c.starts_with("socket,path="))
}

/// The L1 kernel's command line.
pub const L1_CMDLINE: &str = "console=ttyS0 panic=-1 rdinit=/init no_timer_check";

/// QEMU's log of the L1's CPU resets, beside its console.
pub fn reset_log(console: &Path) -> PathBuf {
    console.with_file_name("l1-resets.log")
}

/// What the reset log (`-d cpu_reset`) says ended the L1: a triple fault of
/// the L1 itself (not of a guest inside it, which KVM in the L1 sees as a
/// shutdown exit). `None` when it logged none.
pub fn reset_cause(log: &str) -> Option<String> {
    let faults = log.lines().filter(|l| l.trim() == "Triple fault").count();
    (faults > 0).then(|| {
        format!("the L1's CPU took a triple fault (QEMU's reset log counted {faults}), which -no-reboot turned into QEMU's exit")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The L1's QEMU arguments for `opts`.
    fn args_of(l1: &L1Image, opts: &L1Options) -> Vec<String> {
        l1_command(
            Path::new("qemu"),
            l1,
            opts,
            Path::new("/s/console"),
            Path::new("/s/share"),
        )
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
    }

    fn image() -> L1Image {
        L1Image {
            vmlinuz: "/c/vmlinuz".into(),
            initramfs: "/c/initramfs.cpio.gz".into(),
            l2_initramfs: "/c/l2.cpio.gz".into(),
            kernel_package: String::new(),
        }
    }

    #[test]
    fn command_line_has_svm_the_share_and_the_mounts() {
        let l1 = image();
        let opts = L1Options {
            memory_mib: 1536,
            cpus: 1,
            mounts: vec![Mount {
                tag: "dimm0".into(),
                host_dir: "/var/tmp".into(),
                l1_dir: "/host/dimm0".into(),
            }],
            interactive: true,
            gdb: None,
            api: None,
        };
        let args = args_of(&l1, &opts);
        let joined = args.join(" ");
        assert!(joined.contains("-accel tcg -cpu max,vendor=AuthenticAMD"));
        assert!(joined.contains("-m 1536M"));
        assert!(joined.contains(
            "-serial file:/s/console -chardev stdio,id=user,signal=off -serial chardev:user"
        ));
        assert!(joined.contains("local,path=/s/share,mount_tag=share,security_model=none"));
        assert!(joined.contains("local,path=/var/tmp,mount_tag=dimm0,security_model=none"));
        assert!(joined.contains("-d cpu_reset -D /s/l1-resets.log"));
        // The TCG-run L1 skips the IO-APIC timer check a busy host can fail.
        let append = args
            .iter()
            .position(|a| a == "-append")
            .and_then(|i| args.get(i + 1))
            .expect("an -append argument");
        assert!(append.split_whitespace().any(|w| w == "no_timer_check"));
    }

    #[test]
    fn the_api_socket_is_the_l1s_fourth_serial_port() {
        let l1 = image();
        let serials = |interactive: bool, gdb: Option<&str>| {
            let opts = L1Options {
                memory_mib: 1536,
                cpus: 1,
                mounts: Vec::new(),
                interactive,
                gdb: gdb.map(str::to_owned),
                api: Some("/home/u/api.sock".into()),
            };
            let args = args_of(&l1, &opts);
            let ports: Vec<String> = args
                .windows(2)
                .filter(|w| w[0] == "-serial")
                .map(|w| w[1].clone())
                .collect();
            assert!(
                args.join(" ")
                    .contains("-chardev socket,path=/home/u/api.sock,server=on,wait=off,id=api"),
                "{args:?}"
            );
            ports
        };
        let api = "chardev:api".to_string();
        let console = "file:/s/console".to_string();
        assert_eq!(
            serials(false, None),
            [console.clone(), "null".into(), "null".into(), api.clone()]
        );
        assert_eq!(
            serials(true, None),
            [
                console.clone(),
                "chardev:user".into(),
                "null".into(),
                api.clone()
            ]
        );
        assert_eq!(
            serials(false, Some("tcp::1234")),
            [console, "null".into(), "chardev:gdb".into(), api]
        );
    }

    #[test]
    fn qemu_makes_its_user_sockets_owner_only() {
        let opts = |gdb: Option<vmm::debug::gdb::GdbAddr>, api: Option<&str>| L1Options {
            memory_mib: 1536,
            cpus: 1,
            mounts: Vec::new(),
            interactive: false,
            gdb: gdb.as_ref().map(gdb_chardev),
            api: api.map(PathBuf::from),
        };
        let unix = vmm::debug::gdb::GdbAddr::Unix("/home/u/gdb.sock".into());
        let tcp = vmm::debug::gdb::GdbAddr::parse(":1234").expect("an address");
        assert!(makes_user_socket(&opts(Some(unix), None)));
        assert!(makes_user_socket(&opts(None, Some("/home/u/api.sock"))));
        assert!(!makes_user_socket(&opts(Some(tcp), None)));
        assert!(!makes_user_socket(&opts(None, None)));
    }

    #[test]
    fn a_triple_fault_in_the_reset_log_is_named_and_start_up_resets_are_not() {
        // What QEMU 10 writes at start-up (a reset per CPU, with its registers).
        let start =
            "CPU Reset (CPU 0)\nEAX=00000000 EBX=00000000\nCPU Reset (CPU 1)\nEAX=00000000\n";
        assert_eq!(reset_cause(start), None);
        assert_eq!(reset_cause(""), None);
        let fault = format!("{start}Triple fault\n");
        let cause = reset_cause(&fault).expect("a triple fault");
        assert!(
            cause.contains("triple fault") && cause.contains("counted 1"),
            "{cause}"
        );
    }
}
