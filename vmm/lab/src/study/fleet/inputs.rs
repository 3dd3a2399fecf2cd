//! What each side ran must be the same before its runs are pooled: a side label says nothing
//! about the kernel behind it, so two result directories whose `on` side booted two different
//! kernels hold two experiments, not one sample. Kept in ONE function, [`input_keys`], beside
//! the machine and bench keys of [`super::pooling`].
//!
//! Per side (compared only between results that hold that side): the kernel's SHA-256, the
//! initrd's SHA-256, the kernel command line, and the fio command line of each measured phase.
//! For the whole bench: the pmemvm version, every file the job ran (fio job files with
//! runtime, iodepth, size, bs…, the setup script; recorded since results carry them) and every
//! parameter that deviates from the thread (`--size`, `--jobs`, …: the values the job files
//! were made from). A value a result does not record (a boot that failed before the guest
//! reported it, a result written before the field existed) is not compared: there is nothing
//! to compare. `pmemvm report --pool-different-inputs` pools them anyway; the merged report
//! then lists every difference it pooled over.

use std::collections::BTreeMap;
use std::path::Path;

use crate::study::report::BenchReport;

/// One input of the measurement, with its value in one result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputKey {
    /// The side it belongs to; `None`: the whole bench.
    pub side: Option<String>,
    /// What it is (`kernel SHA-256`, `fio job randread-1.fio`, `parameter --size`).
    pub what: String,
    /// Its value (several distinct values of one result joined with `; `).
    pub value: String,
}

/// The value of a parameter the result does not list as a deviation: the thread's.
const THREAD_VALUE: &str = "the thread's value (no deviation recorded)";

/// Every input that must match, with its value in `report`; values it does not record are
/// left out.
pub fn input_keys(report: &BenchReport) -> Vec<InputKey> {
    let mut keys = Vec::new();
    let mut all = |what: String, value: String| {
        keys.push(InputKey {
            side: None,
            what,
            value,
        });
    };
    if let Some(r) = &report.result {
        all("pmemvm version".to_owned(), r.pmemvm_version.clone());
    }
    for f in &report.job_files {
        all(format!("job file {}", f.name), f.text.clone());
    }
    for d in &report.deviations {
        all(format!("parameter {}", d.what), d.here.clone());
    }
    for side in &report.sides {
        let runs: Vec<_> = report.runs.iter().filter(|r| &r.side == side).collect();
        let mut per_side = |what: String, values: Vec<String>| {
            let mut values: Vec<String> = values.into_iter().filter(|v| !v.is_empty()).collect();
            values.sort();
            values.dedup();
            if !values.is_empty() {
                keys.push(InputKey {
                    side: Some(side.clone()),
                    what,
                    value: values.join("; "),
                });
            }
        };
        let prov: Vec<_> = runs.iter().filter_map(|r| r.provenance.as_ref()).collect();
        per_side(
            "kernel SHA-256".to_owned(),
            prov.iter().map(|p| p.kernel_sha256.clone()).collect(),
        );
        per_side(
            "initrd SHA-256".to_owned(),
            prov.iter()
                .filter_map(|p| p.initrd_sha256.clone())
                .collect(),
        );
        per_side(
            "kernel command line".to_owned(),
            runs.iter()
                .filter_map(|r| {
                    r.provenance
                        .as_ref()
                        .map(|p| p.cmdline.clone())
                        .or_else(|| r.kernel_cmdline.clone())
                })
                .collect(),
        );
        let mut phases: Vec<&str> = runs.iter().map(|r| r.phase.as_str()).collect();
        phases.sort_unstable();
        phases.dedup();
        for phase in phases {
            per_side(
                format!("fio command of phase {phase}"),
                runs.iter()
                    .filter(|r| r.phase == phase)
                    .map(|r| r.command.clone())
                    .collect(),
            );
        }
    }
    keys
}

/// `value` for a sentence: quoted, and for a multi-line value the first line in which it
/// differs from `other` (with its number).
fn shown(value: &str, other: &str) -> String {
    if !value.contains('\n') && !other.contains('\n') {
        return format!("{value:?}");
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (value.lines().collect(), other.lines().collect());
    let line = (0..a.len().max(b.len()))
        .find(|&i| a.get(i) != b.get(i))
        .unwrap_or(0);
    match a.get(line) {
        Some(l) => format!("line {} {l:?}", line + 1),
        None => format!("no line {}", line + 1),
    }
}

/// One sentence per input in which a result differs from the first result that holds the
/// same side (for whole-bench inputs: the first result), naming both values and both
/// directories. A parameter one result lists as a deviation and the other does not differs
/// too (the other ran the thread's value).
pub fn differences(results: &[(&Path, &[InputKey])]) -> Vec<String> {
    // (side, what) -> per result, its value.
    let mut table: BTreeMap<(Option<String>, String), Vec<Option<&str>>> = BTreeMap::new();
    for (i, (_, keys)) in results.iter().enumerate() {
        for k in *keys {
            let row = table
                .entry((k.side.clone(), k.what.clone()))
                .or_insert_with(|| vec![None; results.len()]);
            row[i] = Some(&k.value);
        }
    }
    let holds_side =
        |i: usize, side: &str| results[i].1.iter().any(|k| k.side.as_deref() == Some(side));
    let mut out = Vec::new();
    for ((side, what), values) in &table {
        let is_parameter = side.is_none() && what.starts_with("parameter ");
        let value_of = |i: usize| match (values[i], is_parameter) {
            (Some(v), _) => Some(v),
            (None, true) => Some(THREAD_VALUE),
            (None, false) => None,
        };
        // The results this input can be compared in: every one for the whole bench's
        // parameters, else those that record it.
        let comparable: Vec<usize> = (0..results.len())
            .filter(|&i| match side {
                Some(s) => holds_side(i, s) && values[i].is_some(),
                None => value_of(i).is_some(),
            })
            .collect();
        let Some((&first, rest)) = comparable.split_first() else {
            continue;
        };
        let Some(a) = value_of(first) else { continue };
        for &i in rest {
            let Some(b) = value_of(i) else { continue };
            if a == b {
                continue;
            }
            let scope = side
                .as_ref()
                .map_or_else(|| "every side".to_owned(), |s| format!("side {s}"));
            out.push(format!(
                "{scope}: {what} differs: {} in {}, {} in {}",
                shown(a, b),
                results[first].0.display(),
                shown(b, a),
                results[i].0.display(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::study::report::{Deviation, JobFile, Provenance};

    /// The real result of `host-a/on-1` (tests/fixtures/fleet), to be altered one field at a
    /// time.
    fn fixture(name: &str) -> BenchReport {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/fleet")
            .join(name)
            .join("report.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn diff(a: &BenchReport, b: &BenchReport) -> Vec<String> {
        let (ka, kb) = (input_keys(a), input_keys(b));
        differences(&[(Path::new("A"), &ka), (Path::new("B"), &kb)])
    }

    fn prov(r: &mut BenchReport) -> &mut Provenance {
        r.runs[0].provenance.as_mut().unwrap()
    }

    #[test]
    fn the_same_inputs_have_no_difference() {
        let a = fixture("host-a/on-1");
        assert_eq!(diff(&a, &a.clone()), Vec::<String>::new());
        // host-b/on-2 is another boot of the same bench: the same inputs.
        assert_eq!(diff(&a, &fixture("host-b/on-2")), Vec::<String>::new());
    }

    #[test]
    fn each_input_is_named_with_both_values_and_directories() {
        let a = fixture("host-a/on-1");
        type Edit = fn(&mut BenchReport);
        let cases: [(Edit, &str); 6] = [
            (
                |r| prov(r).kernel_sha256 = "ffff".into(),
                "side on: kernel SHA-256 differs: \"ddb998ba1eb23ac69197603c17533608521a8391a55522fa17a77f04ad604485\" in A, \"ffff\" in B",
            ),
            (
                |r| prov(r).initrd_sha256 = Some("eeee".into()),
                "side on: initrd SHA-256 differs: ",
            ),
            (
                |r| prov(r).cmdline.push_str(" mitigations=off"),
                "side on: kernel command line differs: \"console=ttyS0 reboot=acpi panic=-1 loglevel=4 nd_pmem.nowait=1\" in A, \"console=ttyS0 reboot=acpi panic=-1 loglevel=4 nd_pmem.nowait=1 mitigations=off\" in B",
            ),
            (
                |r| r.runs[0].command.push_str(" --runtime=5"),
                "side on: fio command of phase write-and-verify differs: ",
            ),
            (
                |r| r.result.as_mut().unwrap().pmemvm_version = "0.2.0".into(),
                "every side: pmemvm version differs: \"0.1.0\" in A, \"0.2.0\" in B",
            ),
            (
                |r| r.deviations[1].here = "16 MiB".into(),
                "every side: parameter --size differs: \"8 MiB\" in A, \"16 MiB\" in B",
            ),
        ];
        for (edit, want) in cases {
            let mut b = a.clone();
            edit(&mut b);
            let d = diff(&a, &b);
            assert_eq!(d.len(), 1, "{want}: {d:?}");
            assert!(d[0].starts_with(want), "{d:?}\nwanted {want}");
        }
    }

    #[test]
    fn job_files_name_the_first_line_that_differs() {
        let mut a = fixture("host-a/on-1");
        a.job_files = vec![JobFile {
            name: "randread-1.fio".into(),
            text: "[global]\nbs=4k\niodepth=2\nruntime=60\n".into(),
        }];
        let mut b = a.clone();
        b.job_files[0].text = "[global]\nbs=4k\niodepth=2\nruntime=1\n".into();
        assert_eq!(
            diff(&a, &b),
            ["every side: job file randread-1.fio differs: line 4 \"runtime=60\" in A, line 4 \"runtime=1\" in B"]
        );
        // A result written before job files were recorded has nothing to compare.
        let mut old = a.clone();
        old.job_files.clear();
        assert!(diff(&a, &old).is_empty());
    }

    #[test]
    fn a_parameter_listed_on_one_side_only_differs_from_the_threads_value() {
        let a = fixture("host-a/on-1");
        let mut b = a.clone();
        b.deviations.push(Deviation::new(
            "--runtime",
            "60 s",
            "5 s",
            "set with --runtime",
        ));
        assert_eq!(
            diff(&a, &b),
            ["every side: parameter --runtime differs: \"the thread's value (no deviation recorded)\" in A, \"5 s\" in B"]
        );
    }

    #[test]
    fn sides_are_compared_only_where_both_results_hold_them() {
        // off-1 and on-1 booted different command lines (nowait=0 and 1): not a difference.
        let off = fixture("host-a/off-1");
        let on = fixture("host-a/on-1");
        assert!(diff(&off, &on).is_empty(), "{:?}", diff(&off, &on));
        // A failed boot that recorded no provenance is not compared either.
        let mut failed = on.clone();
        failed.runs[0].provenance = None;
        failed.runs[0].kernel_cmdline = None;
        failed.runs[0].command.clear();
        assert!(diff(&on, &failed).is_empty());
    }
}
