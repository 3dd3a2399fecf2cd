//! `pmemvm suite ndctl`: ndctl's own test suite (the `meson test` of an ndctl source
//! tree, unmodified) against the guest's NVDIMMs and legacy persistent memory.
//!
//! The tree is built once on the host (`guest-images/suites/ndctl-build.sh`, cached by
//! source hash) and run in a Debian root file system in the guest
//! (`guest-images/suites/ndctl-suite.sh`). The tests need different machines and leave
//! state for the next one (`pmem-ns` disables every region of the bus but one), so the
//! chosen tests run in a few boots, each shaped for its tests and in an order that works
//! ([`KNOWN`]); docs/ndctl-suite.md says why each test is where it is.

use std::path::{Path, PathBuf};

pub mod cxl;

use super::junit::{self, Verdict};
pub use super::machines::{Bus, Shape};
pub use super::rows::{failed, Row};

/// One of ndctl's tests this command can place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownTest {
    /// meson's name.
    pub name: &'static str,
    /// The bus it runs on.
    pub bus: Bus,
    /// The machine of its boot.
    pub shape: Shape,
    /// A shell step the guest runs just before it (see its comment in [`KNOWN`]).
    pub before: Option<&'static str>,
}

pub(super) const fn t(name: &'static str, bus: Bus, shape: Shape) -> KnownTest {
    KnownTest {
        name,
        bus,
        shape,
        before: None,
    }
}

/// Every test this command knows, in the order they run. Order matters: the error
/// scripts reset the bus's labels and regions themselves; `pmem-ns` leaves every region
/// but one disabled, so it comes after every other test of its bus in its boot.
pub const KNOWN: &[KnownTest] = &[
    // The nfit_test error paths on pmemvm's bus (ARS, injection, clear, SMART, monitor).
    t("clear.sh", Bus::NfitTestOnAcpi, Shape::Small),
    t("pmem-errors.sh", Bus::NfitTestOnAcpi, Shape::Small),
    t("inject-error.sh", Bus::NfitTestOnAcpi, Shape::Small),
    t("inject-smart.sh", Bus::NfitTestOnAcpi, Shape::Small),
    t("monitor.sh", Bus::NfitTestOnAcpi, Shape::Small),
    // Legacy persistent memory.
    t("dax-dev", Bus::E820, Shape::Small),
    t("dax-ext4.sh", Bus::E820, Shape::Small),
    t("dax-xfs.sh", Bus::E820, Shape::Small),
    t("mmap.sh", Bus::E820, Shape::Small),
    t("device-dax", Bus::E820, Shape::Small),
    t("revoke-devmem", Bus::E820, Shape::Small),
    t("device-dax-fio.sh", Bus::E820, Shape::Small),
    // The destructive ACPI.NFIT tests.
    t("pmem-ns", Bus::AcpiNfit, Shape::Small),
    t("sub-section.sh", Bus::AcpiNfit, Shape::Small),
    // daxctl-devices.sh takes the bus's first namespace as its victim: a 1 GiB one is
    // made for it, first thing in its boot (with none, or after align.sh and dm.sh, the
    // first is a region's idle seed namespace, which it cannot reconfigure, and it skips).
    KnownTest {
        name: "daxctl-devices.sh",
        bus: Bus::AcpiNfit,
        shape: Shape::Large,
        before: Some("ndctl create-namespace -b ACPI.NFIT -s 1G"),
    },
    t("align.sh", Bus::AcpiNfit, Shape::Large),
    t("dm.sh", Bus::AcpiNfit, Shape::Large),
];

/// The destructive tests of ndctl's tree (meson's `destructive` and `keyutils` options)
/// that no plan of this command runs on pmemvm's buses, each with why. The default set
/// lists them as `n/a` so a table shows the whole destructive suite.
pub const NOT_PLANNED: &[(&str, &str)] = &[
    (
        "daxctl-create.sh",
        "its victim is a dax region of the kernel's cxl_test emulation (cxl_acpi.0); it has \
         no NVDIMM or e820 case",
    ),
    (
        "firmware-update.sh",
        "it updates firmware through nfit_test's firmware _DSM functions, which pmemvm's \
         _DSM does not offer; it runs on the kernel's nfit_test with --nfit-test",
    ),
    (
        "nfit-security.sh",
        "it drives nfit_test's security _DSM functions (passphrases through keyutils), \
         which pmemvm's _DSM does not offer",
    ),
    (
        "cxl-update-firmware.sh",
        "a CXL test of the kernel's cxl_test emulation, not of NVDIMMs",
    ),
    (
        "cxl-security.sh",
        "a CXL test of the kernel's cxl_test emulation, not of NVDIMMs",
    ),
];

/// The [`NOT_PLANNED`] tests as `n/a` rows of `engine`.
pub fn not_planned_rows(engine: &str) -> Vec<Row> {
    NOT_PLANNED
        .iter()
        .map(|(name, why)| Row {
            test: (*name).into(),
            engine: engine.into(),
            not_applicable: Some(format!("{name}: not in any plan of this command: {why}")),
            bus: Bus::AcpiNfit,
            shape: Shape::Small,
            verdict: None,
            seconds: None,
            reason: None,
        })
        .collect()
}

/// The default set: every test of [`KNOWN`].
pub fn default_tests() -> Vec<&'static str> {
    KNOWN.iter().map(|k| k.name).collect()
}

/// Every test a name can place: [`KNOWN`], then the CXL ones ([`cxl::TESTS`],
/// which run only when named).
pub fn placeable() -> impl Iterator<Item = &'static KnownTest> {
    KNOWN.iter().chain(cxl::TESTS)
}

/// One boot of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    /// Its machine.
    pub shape: Shape,
    /// Its tests, in order.
    pub tests: Vec<KnownTest>,
    /// Whether its machine has the shape's legacy ranges (not on an engine without them).
    pub legacy: bool,
}

impl Boot {
    /// `--pmem-legacy` specs of this boot.
    pub fn legacy_specs(&self) -> &'static [&'static str] {
        if self.legacy {
            self.shape.legacy()
        } else {
            &[]
        }
    }
}

impl Boot {
    /// The guest command: `sh /job/ndctl-suite.sh [--bus ACPI.NFIT] /job/ndctl` and the
    /// tests, each step before its test.
    pub fn argv(&self) -> Vec<String> {
        let mut argv: Vec<String> = vec!["sh".into(), format!("{GUEST_JOB}/ndctl-suite.sh")];
        if self.tests.iter().any(|t| t.bus == Bus::NfitTestOnAcpi) {
            argv.extend(["--bus".into(), "ACPI.NFIT".into()]);
        }
        if self.tests.iter().any(|t| t.bus == Bus::CxlTestOnAcpi) {
            argv.extend(["--cxl-bus".into(), cxl::GUEST_BUS.into()]);
        }
        argv.push(GUEST_TREE.into());
        for t in &self.tests {
            if let Some(step) = t.before {
                argv.push(match steps_fail() {
                    true => "!exit 3".into(),
                    false => format!("!{step}"),
                });
            }
            argv.push(t.name.into());
        }
        argv
    }
}

/// Debug builds only: `PMEMVM_TEST_FAULT=suite-step-fails` makes every setup step
/// exit with status 3 in the guest — the test of a plan whose setup fails
/// (tests/tests/nested_ndctl_suite.rs); release builds never inject it.
fn steps_fail() -> bool {
    cfg!(debug_assertions)
        && std::env::var("PMEMVM_TEST_FAULT")
            .is_ok_and(|v| v.split(',').any(|f| f == "suite-step-fails"))
}

/// Where the guest finds the tree and the script.
pub const GUEST_JOB: &str = "/job";
/// The ndctl tree's guest path.
pub const GUEST_TREE: &str = "/job/ndctl";
/// The results' guest path (`--get`).
pub const GUEST_RESULTS: &str = "/job/ndctl-results";

/// Errors of the plan; [`SuiteError`](super::SuiteError) wraps them.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// A name this command does not know.
    #[error("{0} is not one of ndctl's tests this command runs; it runs: {list}", list = placeable().map(|k| k.name).collect::<Vec<_>>().join(", "))]
    Unknown(String),
    /// A name that is not in the nfit_test set (`--nfit-test`).
    #[error("{name} is not one of ndctl's nfit_test tests this command runs with --nfit-test; it runs: {list}")]
    UnknownNfitTest {
        /// The name given.
        name: String,
        /// The set's names, comma separated.
        list: String,
    },
    /// The same test twice.
    #[error("{0} is named twice; name each test once")]
    Twice(String),
}

/// Refuses a name of `tests` that is not in `known` (as `unknown` says) or is given twice.
pub(super) fn check_names(
    tests: &[String],
    known: &[KnownTest],
    unknown: impl Fn(String) -> PlanError,
) -> Result<(), PlanError> {
    for (i, name) in tests.iter().enumerate() {
        if !known.iter().any(|k| k.name == name) {
            return Err(unknown(name.clone()));
        }
        if tests[..i].contains(name) {
            return Err(PlanError::Twice(name.clone()));
        }
    }
    Ok(())
}

/// The boots that run `tests` (empty: the default set, [`KNOWN`]), each test in the boot
/// of its shape, in [`placeable`]'s order; boots in the order of their first test.
pub fn plan(tests: &[String]) -> Result<Vec<Boot>, PlanError> {
    let all: Vec<KnownTest> = placeable().copied().collect();
    check_names(tests, &all, PlanError::Unknown)?;
    let mut boots: Vec<Boot> = Vec::new();
    for k in placeable() {
        let chosen = match tests.is_empty() {
            true => KNOWN.contains(k),
            false => tests.iter().any(|t| t == k.name),
        };
        if !chosen {
            continue;
        }
        match boots.iter_mut().find(|b| b.shape == k.shape) {
            Some(b) => b.tests.push(*k),
            None => boots.push(Boot {
                shape: k.shape,
                tests: vec![*k],
                legacy: true,
            }),
        }
    }
    Ok(boots)
}

/// The rows of `boot` on `engine` from the JUnit files in `results`
/// (`meson-N/testlog.junit.xml`), and the statuses of the setup steps
/// (`step-K.status`, K counting the boot's steps from 1): a test whose step
/// failed fails, whatever meson says of it (it skips without its setup).
pub fn rows(boot: &Boot, engine: &str, results: &Path) -> Vec<Row> {
    let mut cases = Vec::new();
    for n in 1.. {
        let dir = results.join(format!("meson-{n}"));
        if !dir.is_dir() {
            break;
        }
        if let Ok(xml) = std::fs::read_to_string(dir.join("testlog.junit.xml")) {
            cases.extend(junit::cases(&xml));
        }
    }
    let mut step = 0;
    boot.tests
        .iter()
        .map(|k| {
            let case = junit::find(&cases, k.name);
            let mut row = Row {
                test: k.name.into(),
                engine: engine.into(),
                not_applicable: None,
                bus: k.bus,
                shape: boot.shape,
                verdict: case.map(|c| c.verdict),
                seconds: case.map(|c| c.seconds),
                reason: None,
            };
            if let Some(cmd) = k.before {
                step += 1;
                if let Some(why) = failed_step(results, step, cmd) {
                    row.verdict = Some(Verdict::Failure);
                    row.reason = Some(why);
                }
            }
            row
        })
        .collect()
}

/// Why step `k` (`cmd`) of a boot failed, from `step-K.status` in `results`;
/// `None` when it succeeded or left no status (it did not run: the test's row
/// says so itself).
fn failed_step(results: &Path, k: usize, cmd: &str) -> Option<String> {
    let text = std::fs::read_to_string(results.join(format!("step-{k}.status"))).ok()?;
    match text.trim() {
        "0" => None,
        st => Some(format!(
            "its setup step `{cmd}` failed with status {st} (step-{k}.txt has its output)"
        )),
    }
}

/// The table of `rows` in the plan's order ([`placeable`]; tests it does not know last).
pub fn table(rows: &[Row]) -> String {
    super::rows::table_by(rows, |t| placeable().position(|k| k.name == t))
}

/// The part of `boot` an engine without legacy persistent memory can run (no e820
/// tests, no legacy range), and the rows of what it leaves out, with `why`.
pub fn without_e820(boot: &Boot, engine: &str, why: &str) -> (Boot, Vec<Row>) {
    let (mut rest, rows) = leave_out(boot, engine, why, |t| t.bus == Bus::E820);
    rest.legacy = false;
    (rest, rows)
}

/// Tests the default set leaves out on an engine that emulates every guest
/// instruction (`nested`), with why: they would only meet their time limit there.
/// Named on the command line, they run.
pub const SLOW_WHEN_EMULATED: &[(&str, &str)] = &[(
    "mmap.sh",
    "too slow on an emulated CPU: its 36 runs of `mmap` fault in, write and read a 1 GiB \
     DAX file three times each (ext4, then xfs); nested, each of the first two took over \
     4 minutes, so the 36 would take hours, past the test's 30-minute limit; name \
     it to run it",
)];

/// The part of `boot` the default set runs on an emulated-CPU engine, and the rows of
/// the [`SLOW_WHEN_EMULATED`] tests it leaves out.
pub fn without_slow(boot: &Boot, engine: &str) -> (Boot, Vec<Row>) {
    let mut rest = boot.clone();
    let mut rows = Vec::new();
    for (name, why) in SLOW_WHEN_EMULATED {
        let (r, mut out) = leave_out(&rest, engine, why, |t| t.name == *name);
        rest = r;
        rows.append(&mut out);
    }
    (rest, rows)
}

/// `boot` without the tests `drop` picks, and their rows, `n/a` on `engine` with `why`.
fn leave_out(
    boot: &Boot,
    engine: &str,
    why: &str,
    drop: impl Fn(&KnownTest) -> bool,
) -> (Boot, Vec<Row>) {
    let (gone, tests): (Vec<KnownTest>, Vec<KnownTest>) = boot.tests.iter().partition(|t| drop(t));
    let rows = gone
        .iter()
        .map(|k| Row {
            test: k.name.into(),
            engine: engine.into(),
            not_applicable: Some(why.into()),
            bus: k.bus,
            shape: boot.shape,
            verdict: None,
            seconds: None,
            reason: None,
        })
        .collect();
    (
        Boot {
            shape: boot.shape,
            tests,
            legacy: boot.legacy,
        },
        rows,
    )
}

/// A results directory per boot, under `out`.
pub fn boot_dir(out: &Path, index: usize, boot: &Boot) -> PathBuf {
    out.join(format!("boot-{}-{}", index + 1, boot.shape.name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(b: &Boot) -> Vec<&str> {
        b.tests.iter().map(|t| t.name).collect()
    }

    #[test]
    fn every_known_test_has_one_place_and_the_default_plan_runs_them_all_once() {
        let boots = plan(&[]).unwrap();
        let all: Vec<&str> = boots.iter().flat_map(names).collect();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), KNOWN.len(), "each test once");
        assert_eq!(all.len(), KNOWN.len());
        assert_eq!(boots.len(), 2, "one boot per machine shape");
        // pmem-ns leaves every region but one disabled: nothing of its bus after it.
        let small = boots.iter().find(|b| b.shape == Shape::Small).unwrap();
        let at = names(small).iter().position(|n| *n == "pmem-ns").unwrap();
        assert!(small.tests[at + 1..]
            .iter()
            .all(|t| t.bus == Bus::AcpiNfit && t.name == "sub-section.sh"));
    }

    #[test]
    fn a_chosen_list_keeps_the_known_order_and_only_the_boots_it_needs() {
        let boots = plan(&["sub-section.sh".into(), "pmem-ns".into()]).unwrap();
        assert_eq!(boots.len(), 1);
        assert_eq!(names(&boots[0]), ["pmem-ns", "sub-section.sh"]);
        assert_eq!(
            boots[0].argv(),
            [
                "sh",
                "/job/ndctl-suite.sh",
                "/job/ndctl",
                "pmem-ns",
                "sub-section.sh"
            ]
        );
        let boots = plan(&["daxctl-devices.sh".into(), "clear.sh".into()]).unwrap();
        assert_eq!(boots.len(), 2);
        assert_eq!(
            boots[0].argv(),
            [
                "sh",
                "/job/ndctl-suite.sh",
                "--bus",
                "ACPI.NFIT",
                "/job/ndctl",
                "clear.sh"
            ]
        );
        assert_eq!(
            boots[1].argv(),
            [
                "sh",
                "/job/ndctl-suite.sh",
                "/job/ndctl",
                "!ndctl create-namespace -b ACPI.NFIT -s 1G",
                "daxctl-devices.sh"
            ]
        );
    }

    #[test]
    fn unknown_and_repeated_names_are_refused_with_the_list() {
        let e = plan(&["libndctl".into()]).unwrap_err();
        assert_eq!(e, PlanError::Unknown("libndctl".into()));
        let text = e.to_string();
        assert!(
            text.starts_with("libndctl is not one of ndctl's tests"),
            "{text}"
        );
        assert!(
            text.contains("pmem-ns") && text.contains("daxctl-devices.sh"),
            "{text}"
        );
        assert_eq!(
            plan(&["dm.sh".into(), "dm.sh".into()]).unwrap_err(),
            PlanError::Twice("dm.sh".into())
        );
    }

    /// The tests ndctl v81's test/meson.build adds with its `destructive` and `keyutils`
    /// options, in its order.
    const V81_OPTIONAL: [&str; 17] = [
        "firmware-update.sh",
        "cxl-update-firmware.sh",
        "pmem-ns",
        "sub-section.sh",
        "dax-dev",
        "dax-ext4.sh",
        "dax-xfs.sh",
        "align.sh",
        "device-dax",
        "revoke-devmem",
        "device-dax-fio.sh",
        "daxctl-devices.sh",
        "daxctl-create.sh",
        "dm.sh",
        "mmap.sh",
        "nfit-security.sh",
        "cxl-security.sh",
    ];

    #[test]
    fn every_destructive_test_of_the_tree_is_planned_or_not_applicable_with_its_reason() {
        for t in V81_OPTIONAL {
            let planned = KNOWN.iter().any(|k| k.name == t);
            let not = NOT_PLANNED.iter().any(|(n, _)| *n == t);
            assert!(planned != not, "{t}: planned {planned}, n/a {not}");
        }
        let rows = not_planned_rows("nested");
        assert!(failed(&rows).is_empty(), "n/a is not a failure");
        assert!(table(&rows).contains("n/a on nested: nfit-security.sh: not in any plan"));
        // Where ndctl v81's tree is beside the workspace (this workplace's shared
        // directory), the list is the tree's own.
        let tree = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/third-party/ndctl-v81/test/meson.build");
        if let Ok(meson) = std::fs::read_to_string(&tree) {
            let from = meson.find("get_option('destructive')").expect("the block");
            let block = &meson[from..];
            let block = &block[..block.find("foreach t : tests").expect("its end")];
            let named: Vec<&str> = block
                .lines()
                .filter_map(|l| l.trim().strip_prefix("[ '"))
                .filter_map(|l| l.split('\'').next())
                .collect();
            assert_eq!(named, V81_OPTIONAL, "{}", tree.display());
        }
    }

    #[test]
    fn an_engine_without_legacy_pmem_leaves_the_e820_tests_out_as_not_applicable() {
        let boots = plan(&["dax-dev".into(), "clear.sh".into(), "pmem-ns".into()]).unwrap();
        assert_eq!(boots[0].legacy_specs(), ["3G"]);
        let (qemu, absent) = without_e820(&boots[0], "qemu", "no legacy pmem");
        assert_eq!(names(&qemu), ["clear.sh", "pmem-ns"]);
        assert!(qemu.legacy_specs().is_empty());
        assert!(!qemu.argv().iter().any(|a| a == "dax-dev"));
        assert_eq!(absent.len(), 1);
        assert!(failed(&absent).is_empty(), "n/a is not a failure");
        let mut all = rows(&boots[0], "nested", Path::new("/nonexistent"));
        all.extend(absent);
        let t = table(&all);
        let line = t.lines().find(|l| l.starts_with("dax-dev")).unwrap();
        assert!(line.contains("not run") && line.contains("n/a"), "{t}");
        assert!(t.contains("n/a on qemu: no legacy pmem"), "{t}");
        assert!(
            t.lines().next().unwrap().contains("nested")
                && t.lines().next().unwrap().contains("qemu")
        );
    }

    #[test]
    fn the_emulated_engines_default_set_leaves_the_slow_tests_out_with_why() {
        let boots = plan(&[]).unwrap();
        let small = boots.iter().find(|b| b.shape == Shape::Small).unwrap();
        let (nested, absent) = without_slow(small, "nested");
        assert!(!names(&nested).contains(&"mmap.sh"));
        assert_eq!(names(&nested).len(), names(small).len() - 1);
        assert!(nested.argv().iter().all(|a| a != "mmap.sh"));
        // The legacy range stays: the other e820 tests need it.
        assert_eq!(nested.legacy_specs(), small.legacy_specs());
        assert_eq!(absent.len(), 1);
        assert_eq!(absent[0].test, "mmap.sh");
        assert!(failed(&absent).is_empty(), "n/a is not a failure");
        let t = table(&absent);
        assert!(
            t.contains("n/a on nested: too slow on an emulated CPU"),
            "{t}"
        );
        // Made before the boot's rows, it still sits in the plan's order in the table.
        let mut all = absent.clone();
        all.extend(rows_of_nothing(&nested));
        let t = table(&all);
        let order: Vec<&str> = t
            .lines()
            .skip(1)
            .filter_map(|l| l.split(' ').next())
            .collect();
        let at = |n: &str| order.iter().position(|o| *o == n).unwrap();
        assert!(
            at("dax-xfs.sh") < at("mmap.sh") && at("mmap.sh") < at("device-dax"),
            "{t}"
        );
        // A boot without it keeps every test.
        let large = boots.iter().find(|b| b.shape == Shape::Large).unwrap();
        assert_eq!(without_slow(large, "nested").0, *large);
    }

    fn rows_of_nothing(boot: &Boot) -> Vec<Row> {
        rows(boot, "nested", Path::new("/nonexistent/pmemvm-suite"))
    }
}
