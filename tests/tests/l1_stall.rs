// test-queue: tcg
//! The stall diagnosis of `--engine nested` (`lab::guest::nested::stall`) against a
//! real QEMU: the L1's command line carries a monitor socket beside its
//! console, and a stopped L1 is described by its vCPUs (registers, local
//! APIC) and QEMU's threads before it is killed. The machine here is QEMU
//! with only its firmware and no boot device, which ends halted: what an L1
//! waiting for an interrupt that never comes looks like.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use lab::guest::nested::l1::{l1_command, L1Options};
use lab::guest::nested::stall;
use lab::guest::nested::L1Image;
use lab::guest::qemu::{QemuAccel, QemuCommand};
use pmemvm_tests::nested::find_qemu;
use pmemvm_tests::pmemvm::TempDir;
use pmemvm_tests::require;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "QEMU did not create {}",
            path.display()
        );
        sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_l1_command_line_has_the_monitor_beside_the_console() {
    let dir = TempDir::new("l1-monitor");
    let console = dir.join("console");
    let image = L1Image {
        vmlinuz: "/c/vmlinuz".into(),
        initramfs: "/c/initramfs.cpio.gz".into(),
        l2_initramfs: "/c/l2.cpio.gz".into(),
        kernel_package: String::new(),
    };
    let opts = L1Options {
        memory_mib: 512,
        cpus: 2,
        mounts: Vec::new(),
        interactive: false,
        gdb: None,
        api: None,
    };
    let cmd = l1_command(Path::new("qemu"), &image, &opts, &console, &dir.join("s"));
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let socket = stall::monitor_socket(&console).expect("a short path fits");
    let at = args.iter().position(|a| a == "-monitor").expect("-monitor");
    assert_eq!(args[at + 1], stall::monitor_arg(&socket), "{args:?}");
}

/// A machine that resets itself ends QEMU with status 0 under `-no-reboot`,
/// as a power-off does: the reset log (`QemuCommand::log_resets`, on every
/// L1) tells them apart. The firmware here is 64 KiB whose reset vector loads
/// an empty interrupt table and raises `int3`: #GP, double fault, triple fault.
#[test]
fn a_triple_fault_is_told_from_a_power_off_by_the_reset_log() {
    let qemu = require!(find_qemu());
    let _tcg = pmemvm_tests::tcg::lock().expect("take a TCG slot");
    let dir = TempDir::new("l1-triple");
    let mut bios = vec![0u8; 0x10000];
    // lidt [0] (a zero limit from RAM), int3
    bios[0xfff0..0xfff6].copy_from_slice(&[0x0f, 0x01, 0x1e, 0x00, 0x00, 0xcc]);
    let firmware = dir.join("triple.bin");
    std::fs::write(&firmware, &bios).expect("write the firmware");
    let console = dir.join("console");
    let log = lab::guest::nested::l1::reset_log(&console);
    let mut q = QemuCommand::new(&qemu, QemuAccel::Tcg, "max,vendor=AuthenticAMD");
    q.memory("64M").serial_file(&console).log_resets(&log);
    let mut cmd = q.into_command();
    cmd.arg("-bios").arg(&firmware);
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run QEMU");
    assert_eq!(
        status.code(),
        Some(0),
        "-no-reboot ends a reset with status 0"
    );
    let text = std::fs::read_to_string(&log).expect("the reset log");
    let cause = lab::guest::nested::l1::reset_cause(&text)
        .unwrap_or_else(|| panic!("no triple fault in:\n{text}"));
    assert!(cause.contains("triple fault"), "{cause}");
}

#[test]
fn a_halted_machine_is_described_by_its_vcpus_and_qemus_threads() {
    let qemu = require!(find_qemu());
    let _tcg = pmemvm_tests::tcg::lock().expect("take a TCG slot");
    let dir = TempDir::new("l1-stall");
    let console = dir.join("console");
    let socket = stall::monitor_socket(&console).expect("a short path fits");
    let mut q = QemuCommand::new(&qemu, QemuAccel::Tcg, "max,vendor=AuthenticAMD");
    q.smp(2)
        .memory("128M")
        .serial_file(&console)
        .name_with_threads("pmemvm-l1")
        .monitor(&stall::monitor_arg(&socket));
    let child = q
        .into_command()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start QEMU");
    let qemu = Killed(child);
    wait_for(&socket);
    // The firmware finds no boot device and halts; the second vCPU waits for
    // its start-up IPI from the start.
    sleep(Duration::from_secs(3));
    let summary = stall::diagnose(qemu.0.id(), &console, &dir.join("no-code-ranges"));
    for cpu in ["CPU#0 RIP=", "CPU#1 RIP="] {
        assert!(summary.contains(cpu), "{summary}");
    }
    assert!(summary.contains("HLT=1"), "{summary}");
    assert!(summary.contains("QEMU threads: "), "{summary}");
    assert!(summary.contains("CPU 0/TCG"), "{summary}");
    let full = std::fs::read_to_string(stall::diagnosis_file(&console)).expect("diagnosis file");
    assert!(full.contains("CR0="), "{full}");
    for cpu in 0..2 {
        assert!(
            full.contains(&format!("local APIC state for CPU {cpu}")),
            "{full}"
        );
    }
    assert!(summary.contains(&dir.join("l1-stall.txt").display().to_string()));
    // Still running: the diagnosis asks, it does not stop QEMU.
    let mut qemu = qemu;
    assert!(qemu.0.try_wait().expect("wait").is_none());
    drop(qemu);
    // A QEMU without a monitor: the summary says so instead of failing.
    let gone = Command::new("true").spawn().expect("true").id();
    let other = dir.join("sub/console");
    let none = stall::diagnose(gone, &other, &dir.join("no-code-ranges"));
    assert!(none.contains("cannot connect"), "{none}");
}

/// An L1 whose heartbeat stops (the command kills the init's heartbeat loop,
/// the init's only other child, as a lost wake-up silences it) is sent a key event after
/// `KICK_AFTER` of silence: the L1's keyboard interrupt count grows, the
/// harness reports the wake-up with the vCPUs' state, and the command ends
/// normally. The L1 is asked for on every host (a hardware-KVM host too,
/// where other tests run directly): without QEMU it skips.
#[test]
fn a_silent_l1_is_sent_a_key_event_and_goes_on() {
    use pmemvm_tests::nested::{Mode, NestedVm};
    let vm = require!(NestedVm::nested()).deadline(Duration::from_secs(240));
    let wait = lab::guest::nested::heartbeat::KICK_AFTER.as_secs() + 25;
    let script = format!(
        "kbd() {{ awk '/i8042/ {{ s = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) s += $i; print s; exit }}' /proc/interrupts; }}; \
         before=$(kbd); \
         init=$(tr '\\0' ' ' </proc/1/cmdline); \
         for d in /proc/[0-9]*; do p=${{d#/proc/}}; [ \"$p\" = 1 ] && continue; \
           [ \"$(awk '{{print $4}}' $d/stat 2>/dev/null)\" = 1 ] || continue; \
           [ \"$(tr '\\0' ' ' <$d/cmdline 2>/dev/null)\" = \"$init\" ] && kill $p; done; \
         sleep {wait}; echo \"i8042 before=${{before:-0}} after=$(kbd)\""
    );
    let out = vm.run(&["sh", "-c", &script]).expect("run in the harness");
    assert_eq!(out.status, 0, "{}", out.dump());
    assert_eq!(out.mode, Mode::Nested, "the harness ran no L1");
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("i8042 "))
        .unwrap_or_else(|| panic!("no count: {}", out.dump()));
    let count = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {line}"))
    };
    assert!(
        count("after=") > count("before="),
        "no key event reached L1: {line}"
    );
    assert!(!out.l1_wakeups.is_empty(), "{}", out.dump());
    let w = &out.l1_wakeups[0];
    assert!(w.contains("a key event was sent to wake it"), "{w}");
    assert!(w.contains("CPU#0 RIP="), "{w}");
    // tests/run.sh collects every wake-up of the run in this log and prints it.
    if let Some(log) = std::env::var_os("PMEMVM_L1_WAKEUP_LOG").filter(|p| !p.is_empty()) {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(
            text.lines()
                .any(|l| l.contains("a_silent_l1_is_sent_a_key_event_and_goes_on\t")),
            "{text}"
        );
    }
}
