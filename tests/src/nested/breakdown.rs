//! Telling a breakdown of the emulated platform from a result, and running a
//! step again after one. A rerun needs evidence that names the platform:
//! the L1's own triple fault (QEMU's reset log), the L1 kernel's panic or oops
//! on its console, an L1 that stopped running (no heartbeat), or a guest
//! triple fault whose RIP pmemvm found inside the L1 kernel's modules (the
//! emulated CPU ran the guest with the L1's state; docs/nested-platform.md).
//! A guest's triple fault, panic or hang alone, and pmemvm's "interrupt was
//! lost below pmemvm", are results: a pmemvm bug can cause each. A step runs
//! at most [`BREAKDOWN_TRIES`] times; each rerun is printed with its evidence
//! and logged for tests/run.sh's summary, which fails a run with more than two.

use std::fs;
use std::process::Command;
use std::time::Duration;

use super::{NestedError, RunOutput};

/// Whether a failed run is the L1's own breakdown rather than a result: a
/// stall, or an end without status after QEMU logged the L1's triple fault or
/// the L1's kernel panicked or oopsed.
pub(super) fn l1_broke(e: &NestedError) -> bool {
    match e {
        NestedError::L1Stalled { .. } => true,
        NestedError::NoStatus {
            qemu_status,
            console,
            ..
        } => qemu_status.contains("triple fault") || l1_kernel_fault(console).is_some(),
        _ => false,
    }
}

/// What the nested engine says when the L1's kernel stopped running (its
/// init's heartbeat ceased; seen in CI as an L1 CPU spinning with interrupts
/// off after the guest's job had reported its status).
const L1_STALLED: &str = "the L1 VM stopped running (no heartbeat";

/// The evidence that a `pmemvm` run (in the harness's L1 or through
/// `--engine nested`) ended in a breakdown of the emulated platform rather
/// than with a result, from its stderr: the L1's own triple fault (QEMU's
/// reset log), the L1 that stopped running (no heartbeat), the L1 kernel's
/// panic or oops (its console, which the nested engine prints after an L1
/// that ended without a status), or a guest triple fault whose RIP pmemvm
/// found in the L1 kernel's modules. `None` for anything else — a guest
/// triple fault or panic alone, an interrupt lost below pmemvm, a time-out.
pub fn platform_breakdown(stderr: &str) -> Option<String> {
    let fault = stderr
        .lines()
        .find(|l| {
            l.contains("the L1's CPU took a triple fault")
                || l.contains(L1_STALLED)
                || (l.contains(GUEST_TRIPLE_FAULT) && l.contains(vmm::exit_status::HOST_MODULE_RIP))
        })
        .map(|l| l.trim().to_owned());
    fault.or_else(|| {
        // A process cannot panic or oops the L1's kernel: that is the
        // TCG-emulated platform's (seen with an interrupt taken right after a
        // #VMEXIT in `__svm_vcpu_run`).
        let (_, console) = stderr.split_once("L1 console, last lines:")?;
        l1_kernel_fault(console).map(|p| format!("the L1's kernel broke down: {p}"))
    })
}

/// The L1 kernel's panic or oops line in its console `text`.
fn l1_kernel_fault(text: &str) -> Option<&str> {
    text.lines().find_map(|l| {
        [
            "Kernel panic - not syncing",
            "BUG: ",
            "Oops: ",
            "general protection fault",
        ]
        .iter()
        .find_map(|m| l.find(m))
        .map(|at| l[at..].trim_end())
    })
}

/// How many runs in all a test gives one step whose runs end in a breakdown
/// of the emulated platform ([`platform_breakdown`], [`l1_broke`]): two
/// reruns at most, each printed and logged; a breakdown in the last run is
/// the test's result.
pub const BREAKDOWN_TRIES: u32 = 3;

/// Runs `run` until `breakdown` finds no breakdown in its result, at most
/// [`BREAKDOWN_TRIES`] times; every rerun is printed (`who: why`) and noted
/// with [`note_rerun`]. Returns the last result.
pub fn retry_breakdowns<T>(
    who: &str,
    run: impl FnMut() -> T,
    breakdown: impl Fn(&T) -> Option<String>,
) -> T {
    retry_noting(who, run, breakdown, note_rerun)
}

/// Appends a rerun and its evidence to `$PMEMVM_RERUN_LOG` (tests/run.sh
/// lists them and fails a run with more than two).
pub fn note_rerun(why: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("PMEMVM_RERUN_LOG").filter(|p| !p.is_empty()) else {
        return;
    };
    if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{}\t{why}", crate::skip::tier());
    }
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

/// What pmemvm prints when its guest triple-faulted.
const GUEST_TRIPLE_FAULT: &str = "the guest triple-faulted (KVM shutdown exit)";

/// An L1 script that boots guests itself, with what it needs to boot one
/// again after the platform's breakdown as [`retry_breakdowns`] does:
/// `$TRIES` is [`BREAKDOWN_TRIES`]; `breakdown FILE` prints the line of
/// pmemvm's stderr FILE that says its guest triple-faulted at a RIP inside
/// the L1 kernel's modules (status 1 when there is none). A script appends
/// each rerun's line to `once-more.txt`, which [`note_l1_restarts`] reads.
pub fn l1_script_with_retries(script: &str) -> String {
    let host_module = vmm::exit_status::HOST_MODULE_RIP;
    format!(
        "TRIES={BREAKDOWN_TRIES}\nbreakdown() {{ grep -F \"{GUEST_TRIPLE_FAULT}\" \"$1\" | grep -m1 -F \"{host_module}\"; }}\n{script}"
    )
}

/// Prints and notes (in the run's summary) the restarts an L1 script of
/// [`l1_script_with_retries`] wrote to `once-more.txt`.
pub fn note_l1_restarts(who: &str, out: &RunOutput) {
    let restarts = fs::read_to_string(out.path("once-more.txt")).unwrap_or_default();
    for line in restarts.lines() {
        eprintln!("{who}: run again after a platform breakdown: {line}");
        note_rerun(&format!("the nested run was restarted: {line}"));
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
        let fault = lab::guest::nested::l1::reset_cause("Triple fault\n").expect("a cause");
        assert!(l1_broke(&no_status(&format!("exit status: 0; {fault}"))));
        // A power-off or a QEMU error without a logged triple fault is a result.
        assert!(!l1_broke(&no_status("exit status: 0")));
        assert!(!l1_broke(&no_status("exit status: 1")));
    }

    #[test]
    fn a_step_is_run_again_after_breakdowns_up_to_two_reruns() {
        use super::{retry_noting, BREAKDOWN_TRIES};
        use std::cell::{Cell, RefCell};
        assert_eq!(BREAKDOWN_TRIES, 3, "two reruns at most");
        // Every run breaks down: BREAKDOWN_TRIES runs, the last result
        // returned, each rerun noted (here, not in the run's log).
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
    fn a_panic_or_oops_of_the_l1_kernel_is_a_breakdown_and_the_guests_is_not() {
        use super::platform_breakdown;
        let l1 = "pmemvm-init: found /dev/pmem0 (131072 sectors)\n\
                  pmemvm: --engine nested: the L1 VM stopped without reporting the command's \
                  exit status (QEMU exit status: 0); QEMU said: \n\
                  L1 console, last lines:\n\
                  [   30.737179] RIP: 0010:__svm_vcpu_run+0x9c/0x210 [kvm_amd]\n\
                  [   30.737179] Kernel panic - not syncing: Fatal exception in interrupt\n";
        assert_eq!(
            platform_breakdown(l1).as_deref(),
            Some("the L1's kernel broke down: Kernel panic - not syncing: Fatal exception in interrupt")
        );
        let oops = "pmemvm: --engine nested: the L1 VM stopped without reporting\n\
                    L1 console, last lines:\n\
                    [  448.1] BUG: TASK stack guard page was hit at 00000000 (stack is 1..2)\n";
        assert_eq!(
            platform_breakdown(oops).as_deref(),
            Some("the L1's kernel broke down: BUG: TASK stack guard page was hit at 00000000 (stack is 1..2)")
        );
        // The guest's own panic or oops (its console, before the L1's) is a result.
        let guest = "pmemvm: last lines of the guest console:\n\
                     [    2.1] BUG: kernel NULL pointer dereference, address: 0\n\
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

    /// A guest triple fault, as pmemvm describes it, at `rip` with `module`
    /// found there (the description pmemvm writes, not a copy of it).
    fn guest_triple_fault(rip: u64, module: Option<&str>) -> String {
        let fault = devices::exit::ExitRequest::TripleFault(devices::exit::TripleFault {
            vcpu: 1,
            rip: Some(rip),
            symbol: None,
            state: "CR2 0x0".into(),
            host_module: module.map(str::to_owned),
        });
        format!(
            "pmemvm: pmemvm in the L1 VM: pmemvm: {} (exit status 4)",
            vmm::exit_status::describe(&fault)
        )
    }

    #[test]
    fn a_guest_triple_fault_is_a_breakdown_only_with_its_rip_in_the_l1s_modules() {
        let planted = guest_triple_fault(0xffff_ffff_8100_2fad, None);
        assert_eq!(platform_breakdown(&planted), None, "{planted}");
        let in_kvm = guest_triple_fault(
            0xffff_ffff_c047_d20c,
            Some("kvm_amd at 0xffffffffc0470000+0x26000"),
        );
        assert_eq!(platform_breakdown(&in_kvm).as_deref(), Some(in_kvm.trim()));
    }

    #[test]
    fn a_planted_guest_triple_fault_runs_once_and_the_l1s_reset_runs_again_once() {
        use std::cell::{Cell, RefCell};
        // The step's results, in order, and what the harness's classifier
        // (`platform_breakdown` of the run's stderr) makes of each.
        let run = |results: Vec<String>| {
            let runs = Cell::new(0usize);
            let notes = RefCell::new(Vec::new());
            let last = retry_noting(
                "t",
                || {
                    runs.set(runs.get() + 1);
                    results[runs.get() - 1].clone()
                },
                |stderr: &String| platform_breakdown(stderr),
                |why: &str| notes.borrow_mut().push(why.to_owned()),
            );
            (runs.get(), last, notes.into_inner())
        };
        // A guest triple fault with no platform evidence: one run, its result.
        let planted = guest_triple_fault(0xffff_ffff_8100_2fad, None);
        let (runs, last, notes) = run(vec![planted.clone(), "passed".into()]);
        assert_eq!((runs, last.as_str(), notes.len()), (1, planted.as_str(), 0));
        // The L1's reset (QEMU's reset log, as the nested engine words it): one rerun, named.
        let reset = format!(
            "pmemvm: --engine nested: the L1 VM stopped without reporting the command's exit \
             status (QEMU exit status: 0; {}, which -no-reboot turned into QEMU's exit)",
            lab::guest::nested::l1::reset_cause("Triple fault\n").expect("a cause")
        );
        let (runs, last, notes) = run(vec![reset, "passed".into()]);
        assert_eq!((runs, last.as_str()), (2, "passed"));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("the L1's CPU took a triple fault"),
            "{notes:?}"
        );
    }

    #[test]
    fn an_l1_script_knows_the_tries_and_finds_only_the_platforms_triple_fault() {
        let script = super::l1_script_with_retries(
            "breakdown err.txt; echo \"$TRIES\"; breakdown plain.txt || echo none; \
             breakdown lost.txt || echo none",
        );
        let dir = std::env::temp_dir().join(format!("pmemvm-l1-retry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let in_kvm = guest_triple_fault(
            0xffff_ffff_c047_d20c,
            Some("kvm_amd at 0xffffffffc0470000+0x26000"),
        );
        std::fs::write(dir.join("err.txt"), format!("x\n{in_kvm}\n")).unwrap();
        let plain = guest_triple_fault(0xffff_ffff_8100_2fad, None);
        std::fs::write(dir.join("plain.txt"), format!("{plain}\n")).unwrap();
        let lost = "pmemvm: ttyS1's interrupt (IRQ 3) has gone unanswered for 20 s: the interrupt \
                    was lost below pmemvm, in the host's KVM or its CPU virtualization";
        std::fs::write(dir.join("lost.txt"), format!("{lost}\n")).unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .current_dir(&dir)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{in_kvm}\n{BREAKDOWN_TRIES}\nnone\nnone\n")
        );
    }

    #[test]
    fn triple_faults_and_stalls_of_the_l1_are_breakdowns_and_the_guests_alone_are_not() {
        use super::platform_breakdown;
        let l1 = "pmemvm: --engine nested: the L1 VM stopped without reporting the command's \
                  exit status (QEMU exit status: 0; the L1's CPU took a triple fault (QEMU's \
                  reset log counted 1), which -no-reboot turned into QEMU's exit); QEMU said:";
        assert!(platform_breakdown(&format!("warning\n{l1}\nL1 console")).is_some());
        let stall = "pmemvm: --engine nested: the L1 VM stopped running (no heartbeat from the \
                     L1 init for 150 s after 3 heartbeats; it prints one every 10 s) and was \
                     killed; what it was doing:";
        assert_eq!(platform_breakdown(stall).as_deref(), Some(stall));
        // pmemvm's own sentences, with no evidence of the platform: results.
        let lost = "pmemvm: pmemvm in the L1 VM: pmemvm: ttyS1's interrupt (IRQ 3) has gone \
                    unanswered for 20.1 s though every vCPU is idle (halted, interrupts on), also \
                    after pmemvm raised it again 10.0 s ago: the interrupt was lost below pmemvm, \
                    in the host's KVM or its CPU virtualization; vCPU 0: … (exit status 5)";
        assert_eq!(platform_breakdown(lost), None);
        let guest = guest_triple_fault(0xffff_ffff_8100_2fad, None);
        assert_eq!(platform_breakdown(&guest), None);
        assert_eq!(platform_breakdown("pmemvm: the guest powered off"), None);
        assert_eq!(
            platform_breakdown("pmemvm: the guest did not finish within 90 s"),
            None
        );
    }
}
