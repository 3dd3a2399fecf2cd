//! The check that every skip goes through the `pmemvm-skip` crate: a test
//! that prints a skip reason itself and returns passes silently in strict
//! mode, so the suite looks for that shape in every Rust file of the tree.
//!
//! Two findings:
//! * a print macro (`eprintln!`, `println!`, `eprint!`, `print!`,
//!   `writeln!`) followed directly by a bare `return;` or `return Ok(());`:
//!   a test that gives up without the skip crate;
//! * a print macro whose text holds `SKIP` or `skipping`: a hand-written
//!   skip message.
//!
//! The skip crate itself (`tests/skip/`) is the one place allowed to do both.

use std::path::{Path, PathBuf};

/// One place that skips around the skip crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file (relative to the scanned root).
    pub file: String,
    /// 1-based line of the print macro.
    pub line: usize,
    /// What was found.
    pub what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.what)
    }
}

const PRINTS: [&str; 5] = ["eprintln!", "println!", "eprint!", "print!", "writeln!"];

fn starts_print(line: &str) -> bool {
    let t = line.trim_start();
    !t.starts_with("//") && PRINTS.iter().any(|m| t.contains(m))
}

fn is_bare_return(line: &str) -> bool {
    matches!(line.trim(), "return;" | "return Ok(());")
}

/// The findings in one file's text.
pub fn scan_text(file: &str, text: &str) -> Vec<Finding> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !starts_print(lines[i]) {
            i += 1;
            continue;
        }
        // The statement: up to the line that ends with `;` (at most 12 lines).
        let mut end = i;
        while end + 1 < lines.len() && end < i + 12 && !lines[end].trim_end().ends_with(';') {
            end += 1;
        }
        let statement = lines[i..=end].join("\n");
        if statement.contains("SKIP") || statement.contains("skipping") {
            found.push(Finding {
                file: file.into(),
                line: i + 1,
                what: "a skip message printed by hand (use pmemvm_skip::skip! or require!)".into(),
            });
        }
        let next = lines[end + 1..]
            .iter()
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"));
        if next.is_some_and(|l| is_bare_return(l)) {
            found.push(Finding {
                file: file.into(),
                line: i + 1,
                what: "a print followed by a bare return: a skip around the skip crate \
                       (use pmemvm_skip::skip!, or fail with panic!)"
                    .into(),
            });
        }
        i = end + 1;
    }
    found
}

/// Paths never scanned: build output, caches, the skip crate and this file
/// (its tests hold the patterns it looks for).
const EXCLUDED: [&str; 7] = [
    "target",
    ".git",
    "tests/.cache",
    "tests/skip",
    "tests/src/skip_lint.rs",
    "guest-images/build",
    "guest-images/out",
];

/// Every `.rs` file below `root` but the excluded directories, sorted.
pub fn rust_files(root: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.filter_map(Result::ok) {
            let p = e.path();
            let rel = p
                .strip_prefix(root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            if EXCLUDED.iter().any(|x| rel == *x) || rel.ends_with("/target") {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => walk(root, &p, out),
                Ok(t) if t.is_file() && rel.ends_with(".rs") => out.push(p),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// The findings in every Rust file below `root`.
pub fn scan_tree(root: &Path) -> Vec<Finding> {
    rust_files(root)
        .iter()
        .flat_map(|p| {
            let rel = p
                .strip_prefix(root)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(p).unwrap_or_default();
            scan_text(&rel, &text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_made_skip_is_found() {
        let text = "fn t() {\n    if !ok() {\n        eprintln!(\"SKIP: no tool\");\n        return;\n    }\n}\n";
        let f = scan_text("a.rs", text);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f.iter().all(|f| f.line == 3));
    }

    #[test]
    fn a_multi_line_print_then_return_is_found() {
        let text = "    eprintln!(\n        \"no {} here\",\n        x\n    );\n    // gone\n\n    return Ok(());\n";
        let f = scan_text("b.rs", text);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].line, 1);
    }

    #[test]
    fn prints_that_go_on_or_return_a_value_are_fine() {
        let text = "eprintln!(\"{n} skipped\");\nlet x = 1;\neprintln!(\"e\");\nreturn Err(e);\n// eprintln!(\"SKIP\");\n";
        assert!(scan_text("c.rs", text).is_empty());
    }
}
