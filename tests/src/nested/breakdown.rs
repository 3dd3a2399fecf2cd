//! Telling a breakdown of the emulated platform (an L1 that stalled,
//! panicked or took a triple fault; a guest that triple-faulted inside its
//! TCG-run L1) from a result, and running a step again after one, up to
//! [`BREAKDOWN_TRIES`] runs, each restart noted in the run's summary.

use std::fs;
use std::process::Command;
use std::time::Duration;

use super::{note_wakeup, NestedError, RunOutput};

/// Whether a failed run is the L1's own breakdown rather than a result: a
/// stall, or an end without status after QEMU logged the L1's triple fault.
pub(super) fn l1_broke(e: &NestedError) -> bool {
    match e {
        NestedError::L1Stalled { .. } => true,
        NestedError::NoStatus {
            qemu_status,
            console,
            ..
        } => qemu_status.contains("triple fault") || l1_kernel_panic(console).is_some(),
        _ => false,
    }
}

/// What the nested engine says when the L1's kernel stopped running (its
/// init's heartbeat ceased; seen in CI as an L1 CPU spinning with interrupts
/// off after the guest's job had reported its status).
const L1_STALLED: &str = "the L1 VM stopped running (no heartbeat";

/// The line that says a `pmemvm … --engine nested` run ended in a breakdown of
/// the emulated platform rather than with a result: the L1's own triple fault
/// (QEMU's reset log), a triple fault of the guest inside its TCG-run L1, or
/// the L1's kernel that stopped running (no heartbeat) or panicked.
/// Both were seen in CI only with two or more vCPUs in the L1 (docs/testing.md,
/// "The ndctl suite's two-vCPU L1 on QEMU 7.2"). `None` for any other end.
pub fn platform_breakdown(stderr: &str) -> Option<String> {
    let fault = stderr
        .lines()
        .find(|l| {
            l.contains("the L1's CPU took a triple fault")
                || l.contains(GUEST_TRIPLE_FAULT)
                || l.contains(L1_STALLED)
                || l.contains(LOST_INTERRUPT)
        })
        .map(|l| l.trim().to_owned());
    fault.or_else(|| {
        // The L1's own kernel panicked (its console, as the nested engine
        // prints it after the L1 stopped without a status). A process cannot
        // panic the kernel: this is the TCG-emulated platform's (seen in CI
        // with an interrupt taken right after a #VMEXIT in `__svm_vcpu_run`).
        let (_, console) = stderr.split_once("L1 console, last lines:")?;
        l1_kernel_panic(console).map(|p| format!("the L1's kernel panicked: {p}"))
    })
}

/// The L1 kernel's panic line (from "Kernel panic") in its console `text`.
fn l1_kernel_panic(text: &str) -> Option<&str> {
    text.lines().find_map(|l| {
        l.find("Kernel panic - not syncing")
            .map(|at| l[at..].trim_end())
    })
}

/// Whether a run that met the harness's deadline is run once more: a `pmemvm`
/// command (`is_pmemvm`) in an L1 of two or more vCPUs whose guest made no
/// progress while the L1 stayed alive (seen once in CI: a 2-vCPU guest silent
/// 16 s into a 400 s deadline, the class of the 2-vCPU faults above). Only
/// once per step (`restarted` says whether it was): a guest that hangs every
/// time is a result and costs two deadlines, not [`BREAKDOWN_TRIES`].
pub(super) fn deadline_breakdown(
    e: &NestedError,
    cpus: u32,
    is_pmemvm: bool,
    restarted: &std::cell::Cell<bool>,
) -> Option<String> {
    let NestedError::Deadline {
        deadline, run_dir, ..
    } = e
    else {
        return None;
    };
    if cpus < 2 || !is_pmemvm || restarted.replace(true) {
        return None;
    }
    Some(format!(
        "the nested run was restarted once: in its {cpus}-vCPU L1, alive, the command did not \
         finish within the deadline of {} s (files kept in {})",
        deadline.as_secs(),
        run_dir.display()
    ))
}

/// How many runs in all a test gives one step when its runs end in a
/// breakdown of the TCG-emulated platform (an L1 that stalled or took a triple
/// fault, or a 2-vCPU guest whose interrupt delivery triple-faulted in its
/// TCG-run L1; docs/testing.md §6b). Each restart is noted in the summary of
/// tests/run.sh; a breakdown in the last run is the test's result.
pub const BREAKDOWN_TRIES: u32 = 5;

/// Runs `run` until `breakdown` finds no breakdown in its result, at most
/// [`BREAKDOWN_TRIES`] times; every restart is printed (`who: why`) and noted
/// with [`note_wakeup`]. Returns the last result.
pub fn retry_breakdowns<T>(
    who: &str,
    run: impl FnMut() -> T,
    breakdown: impl Fn(&T) -> Option<String>,
) -> T {
    retry_noting(who, run, breakdown, note_wakeup)
}

/// [`retry_breakdowns`] with the restarts noted by `note`.
fn retry_noting<T>(
    who: &str,
    mut run: impl FnMut() -> T,
    breakdown: impl Fn(&T) -> Option<String>,
    note: impl Fn(&str),
) -> T {
    let mut tries = 1;
    loop {
        let result = run();
        match breakdown(&result) {
            Some(why) if tries < BREAKDOWN_TRIES => {
                tries += 1;
                eprintln!("{who}: {why}; run {tries} of at most {BREAKDOWN_TRIES}");
                note(&why);
            }
            _ => return result,
        }
    }
}

/// What pmemvm prints when an interrupt it raised never reached its idle
/// guest (vmm/src/lost_interrupt.rs): the KVM below it lost it — under the
/// TCG-emulated SVM of the L1 (seen in CI: the ndctl suite's guest idle, its
/// results unsent, until `--timeout`).
const LOST_INTERRUPT: &str = "the interrupt was lost below pmemvm";

/// What pmemvm prints when its guest triple-faulted.
const GUEST_TRIPLE_FAULT: &str = "the guest triple-faulted (KVM shutdown exit)";

/// An L1 script that boots 2-vCPU guests itself, with what it needs to run a
/// boot again after the platform's breakdown as [`retry_breakdowns`] does:
/// `$TRIES` is [`BREAKDOWN_TRIES`]; `breakdown FILE` prints the line of
/// pmemvm's stderr FILE that says its guest triple-faulted or an interrupt
/// was lost below pmemvm (status 1 when there is none). A script appends
/// each restart's line to `once-more.txt`, which [`note_l1_restarts`] reads.
pub fn l1_script_with_retries(script: &str) -> String {
    format!(
        "TRIES={BREAKDOWN_TRIES}\nbreakdown() {{ grep -m1 -e \"{GUEST_TRIPLE_FAULT}\" -e \"{LOST_INTERRUPT}\" \"$1\"; }}\n{script}"
    )
}

/// Prints and notes (in the run's summary) the restarts an L1 script of
/// [`l1_script_with_retries`] wrote to `once-more.txt`.
pub fn note_l1_restarts(who: &str, out: &RunOutput) {
    let restarts = fs::read_to_string(out.path("once-more.txt")).unwrap_or_default();
    for line in restarts.lines() {
        eprintln!("{who}: run again after a platform breakdown: {line}");
        note_wakeup(&format!("the nested run was restarted: {line}"));
    }
}

/// Runs `pmemvm … --engine nested` (the command made by `command` for each
/// try), again after a [`platform_breakdown`] (the line pmemvm printed: the
/// vCPU and, in the SVM L1, the RIP from the kvm:kvm_exit tracepoint), up to
/// [`BREAKDOWN_TRIES`] runs ([`retry_breakdowns`]).
pub fn run_engine_nested(
    command: impl Fn() -> Command,
    deadline: Duration,
) -> crate::pmemvm::Output {
    retry_breakdowns(
        "nested engine",
        || crate::pmemvm::run_cmd(&mut command(), deadline),
        |out| {
            if out.timed_out {
                return None;
            }
            let why = platform_breakdown(&out.stderr)?;
            eprintln!("{}", out.dump());
            Some(format!("the nested run was restarted: {why}"))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_triple_faulted_or_stalled_l1_is_run_again() {
        let no_status = |qemu_status: &str| NestedError::NoStatus {
            qemu_status: qemu_status.into(),
            qemu_log: String::new(),
            run_dir: "/tmp/x".into(),
            console: String::new(),
        };
        let fault = lab::nested::l1::reset_cause("Triple fault\n").expect("a cause");
        assert!(l1_broke(&no_status(&format!("exit status: 0; {fault}"))));
        // A power-off or a QEMU error without a logged triple fault is a result.
        assert!(!l1_broke(&no_status("exit status: 0")));
        assert!(!l1_broke(&no_status("exit status: 1")));
    }

    #[test]
    fn a_deadline_of_a_multi_vcpu_pmemvm_run_is_run_again_once() {
        use std::cell::Cell;
        let deadline = || NestedError::Deadline {
            deadline: Duration::from_secs(400),
            killed_after: Duration::from_secs(401),
            mode: super::super::Mode::Nested,
            run_dir: "/tmp/kept".into(),
            console: String::new(),
            stderr: String::new(),
        };
        // One vCPU, or a command other than pmemvm: a result.
        assert_eq!(
            deadline_breakdown(&deadline(), 1, true, &Cell::new(false)),
            None
        );
        assert_eq!(
            deadline_breakdown(&deadline(), 2, false, &Cell::new(false)),
            None
        );
        // Two vCPUs: once, saying where the files are; a second deadline is the result.
        let restarted = Cell::new(false);
        let why = deadline_breakdown(&deadline(), 2, true, &restarted).expect("a restart");
        assert!(why.contains("400 s") && why.contains("/tmp/kept"), "{why}");
        assert_eq!(deadline_breakdown(&deadline(), 2, true, &restarted), None);
        // Another error is not a hang.
        let other = NestedError::Io {
            what: "x".into(),
            source: std::io::Error::other("y"),
        };
        assert_eq!(deadline_breakdown(&other, 2, true, &Cell::new(false)), None);
    }

    #[test]
    fn a_step_is_run_again_after_breakdowns_up_to_the_limit() {
        use super::{retry_noting, BREAKDOWN_TRIES};
        use std::cell::{Cell, RefCell};
        // Every run breaks down: BREAKDOWN_TRIES runs, the last result
        // returned, each restart noted (here, not in the run's summary).
        let runs = Cell::new(0);
        let notes = RefCell::new(Vec::new());
        let note = |why: &str| notes.borrow_mut().push(why.to_owned());
        let last = retry_noting(
            "t",
            || {
                runs.set(runs.get() + 1);
                runs.get()
            },
            |_| Some("fault".to_owned()),
            note,
        );
        assert_eq!((runs.get(), last), (BREAKDOWN_TRIES, BREAKDOWN_TRIES));
        assert_eq!(notes.borrow().len(), BREAKDOWN_TRIES as usize - 1);
        // The second run is a result: no third.
        runs.set(0);
        notes.borrow_mut().clear();
        let last = retry_noting(
            "t",
            || {
                runs.set(runs.get() + 1);
                runs.get()
            },
            |n| (*n == 1).then(|| "fault".to_owned()),
            note,
        );
        assert_eq!((runs.get(), last), (2, 2));
        assert_eq!(*notes.borrow(), ["fault"]);
    }

    #[test]
    fn a_panic_of_the_l1_kernel_is_a_breakdown_and_the_guests_is_not() {
        use super::platform_breakdown;
        let l1 = "pmemvm-init: found /dev/pmem0 (131072 sectors)\n\
                  pmemvm: --engine nested: the L1 VM stopped without reporting the command's \
                  exit status (QEMU exit status: 0); QEMU said: \n\
                  L1 console, last lines:\n\
                  [   30.737179] RIP: 0010:__svm_vcpu_run+0x9c/0x210 [kvm_amd]\n\
                  [   30.737179] Kernel panic - not syncing: Fatal exception in interrupt\n";
        assert_eq!(
            platform_breakdown(l1).as_deref(),
            Some("the L1's kernel panicked: Kernel panic - not syncing: Fatal exception in interrupt")
        );
        // The guest's own panic (its console, before the L1's) is a result.
        let guest = "pmemvm: last lines of the guest console:\n\
                     [    2.1] Kernel panic - not syncing: Attempted to kill init!\n";
        assert_eq!(platform_breakdown(guest), None);
        let no_status = NestedError::NoStatus {
            qemu_status: "exit status: 0".into(),
            qemu_log: String::new(),
            run_dir: "/tmp/x".into(),
            console: "[ 30.7] Kernel panic - not syncing: Fatal exception\n".into(),
        };
        assert!(l1_broke(&no_status));
    }

    #[test]
    fn an_l1_script_knows_the_tries_and_finds_the_guests_triple_fault() {
        let script = super::l1_script_with_retries(
            "breakdown err.txt; echo \"$TRIES\"; breakdown lost.txt; breakdown ok.txt || echo none",
        );
        let dir = std::env::temp_dir().join(format!("pmemvm-l1-retry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("err.txt"),
            "x\npmemvm: the guest triple-faulted (KVM shutdown exit) on vCPU 1\n",
        )
        .unwrap();
        let lost = "pmemvm: ttyS1's interrupt (IRQ 3) has gone unanswered for 20 s: the interrupt \
                    was lost below pmemvm, in the host's KVM or its CPU virtualization";
        std::fs::write(dir.join("lost.txt"), format!("{lost}\n")).unwrap();
        std::fs::write(dir.join("ok.txt"), "pmemvm: the guest powered off\n").unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .current_dir(&dir)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!(
                "pmemvm: the guest triple-faulted (KVM shutdown exit) on vCPU 1\n{BREAKDOWN_TRIES}\n\
                 {lost}\nnone\n"
            )
        );
    }

    #[test]
    fn triple_faults_and_stalls_of_the_platform_are_breakdowns() {
        use super::platform_breakdown;
        let l1 = "pmemvm: --engine nested: the L1 VM stopped without reporting the command's \
                  exit status (QEMU exit status: 0; the L1's CPU took a triple fault (QEMU's \
                  reset log counted 1), which -no-reboot turned into QEMU's exit); QEMU said:";
        let l2 = "pmemvm: pmemvm in the L1 VM: pmemvm: the guest triple-faulted (KVM shutdown \
                  exit) on vCPU 1 at RIP 0xffffffff81002fad; CR2 0x0 (exit status 4)";
        assert!(platform_breakdown(&format!("warning\n{l1}\nL1 console")).is_some());
        assert_eq!(platform_breakdown(l2).as_deref(), Some(l2));
        let stall = "pmemvm: --engine nested: the L1 VM stopped running (no heartbeat from the \
                     L1 init for 150 s after 3 heartbeats; it prints one every 10 s) and was \
                     killed; what it was doing:";
        assert_eq!(platform_breakdown(stall).as_deref(), Some(stall));
        let lost = "pmemvm: pmemvm in the L1 VM: pmemvm: ttyS1's interrupt (IRQ 3) has gone \
                    unanswered for 20.1 s though every vCPU is idle (halted, interrupts on), also \
                    after pmemvm raised it again 10.0 s ago: the interrupt was lost below pmemvm, \
                    in the host's KVM or its CPU virtualization; vCPU 0: … (exit status 5)";
        assert_eq!(platform_breakdown(lost).as_deref(), Some(lost));
        assert_eq!(platform_breakdown("pmemvm: the guest powered off"), None);
        assert_eq!(
            platform_breakdown("pmemvm: the guest did not finish within 90 s"),
            None
        );
    }
}
