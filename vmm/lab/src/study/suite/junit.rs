//! The test cases of a JUnit XML file as meson writes it (`meson-logs/testlog.junit.xml`:
//! Python's ElementTree output, attributes in double quotes, text escaped, so a case holds
//! no `<` but its child elements).

use serde::{Deserialize, Serialize};

/// What became of one test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// It ran and passed.
    Passed,
    /// It skipped itself (ndctl's tests: exit status 77).
    Skipped,
    /// It ran and failed.
    Failure,
    /// meson could not run it, or it ended by time-out or a signal.
    Error,
}

impl Verdict {
    /// The word of the tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "pass",
            Verdict::Skipped => "skip",
            Verdict::Failure => "FAIL",
            Verdict::Error => "ERROR",
        }
    }
}

/// One `<testcase>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// Its `name` attribute (meson: the test's name, e.g. `pmem-ns`).
    pub name: String,
    /// Its `time` attribute in seconds (-1 when absent).
    pub seconds: f64,
    /// What became of it.
    pub verdict: Verdict,
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    let len = tag[start..].find('"')?;
    Some(unescape(&tag[start..start + len]))
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The cases of `xml`, in file order. A truncated file gives the cases that are whole.
pub fn cases(xml: &str) -> Vec<Case> {
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find("<testcase ") {
        rest = &rest[i..];
        let Some(tag_end) = rest.find('>') else { break };
        let tag = &rest[..tag_end];
        let body = if tag.ends_with('/') {
            ""
        } else {
            match rest.find("</testcase>") {
                Some(end) => &rest[tag_end..end],
                None => break,
            }
        };
        let verdict = if body.contains("<skipped") {
            Verdict::Skipped
        } else if body.contains("<failure") {
            Verdict::Failure
        } else if body.contains("<error") {
            Verdict::Error
        } else {
            Verdict::Passed
        };
        out.push(Case {
            name: attr(tag, "name").unwrap_or_default(),
            seconds: attr(tag, "time")
                .and_then(|t| t.parse().ok())
                .unwrap_or(-1.0),
            verdict,
        });
        rest = &rest[tag_end..];
    }
    out
}

/// The case of test `name` (meson names a case `name` or `project:suite / name`).
pub fn find<'a>(cases: &'a [Case], name: &str) -> Option<&'a Case> {
    let suffix = format!(" / {name}");
    cases
        .iter()
        .find(|c| c.name == name || c.name.ends_with(&suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meson_results_are_read_case_by_case() {
        let xml = r#"<?xml version='1.0' encoding='utf-8'?>
<testsuites tests="3"><testsuite name="ndctl" tests="3">
<testcase name="ndctl:ndctl / pmem-ns" classname="ndctl" time="12.5"><system-out>found provider: ACPI.NFIT &lt;ok&gt;</system-out></testcase>
<testcase name="sub-section.sh" classname="ndctl:dax" time="3.25"><skipped /></testcase>
<testcase name="dm.sh" classname="ndctl:dax" time="1.0"><failure /><system-err>x</system-err></testcase>
<testcase name="a&amp;b" classname="ndctl:dax" time="1.0"><error message="timeout" /></testcase>
<testcase name="align.sh" classname="ndctl:ndctl" time="2" />
</testsuite></testsuites>"#;
        let got: Vec<(String, Verdict, f64)> = cases(xml)
            .into_iter()
            .map(|c| (c.name, c.verdict, c.seconds))
            .collect();
        assert_eq!(
            got,
            [
                ("ndctl:ndctl / pmem-ns".into(), Verdict::Passed, 12.5),
                ("sub-section.sh".into(), Verdict::Skipped, 3.25),
                ("dm.sh".into(), Verdict::Failure, 1.0),
                ("a&b".into(), Verdict::Error, 1.0),
                ("align.sh".into(), Verdict::Passed, 2.0),
            ]
        );
        let all = cases(xml);
        assert_eq!(find(&all, "pmem-ns").map(|c| c.seconds), Some(12.5));
        assert!(find(&all, "ns").is_none(), "a name matches whole");
    }

    #[test]
    fn a_truncated_file_gives_its_whole_cases_and_never_panics() {
        let xml =
            r#"<testsuites><testcase name="a" time="1"/><testcase name="b" time="2"><skipped"#;
        let got = cases(xml);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name, "a");
        for cut in 0..xml.len() {
            let _ = cases(&xml[..cut]);
        }
        assert!(cases("<testcase ").is_empty());
    }
}
