//! The workspace's product sources read as text, for the tests that hold the
//! code's shape (import circles, file and function sizes): which crates there
//! are, each source file by module path, and its text without test-only code
//! (a `#[cfg(test)]` item that opens a block, to the end of its file; the
//! files `tests.rs`, `*_tests.rs` and `tests_*.rs`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The crates: name and source directory, relative to the workspace root.
pub const CRATES: &[(&str, &str)] = &[
    ("vmm", "vmm/src"),
    ("lab", "vmm/lab/src"),
    ("cli", "vmm/cli/src"),
    ("devices", "devices/src"),
    ("acpi", "acpi/src"),
    ("pmemvm-tests", "tests/src"),
];

/// One product source file.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its whole text.
    pub text: String,
}

impl SourceFile {
    /// The lines outside test-only code, as written (comments kept).
    pub fn product_lines(&self) -> Vec<&str> {
        product_lines(&self.text)
    }
}

/// Module path (`a::b`, "" for the crate root) → the file, for every source
/// file of `src` that is not test-only.
pub fn modules(src: &Path) -> BTreeMap<String, SourceFile> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "tests" && name != "testdata" {
                    dirs.push(p);
                }
                continue;
            }
            if !name.ends_with(".rs") || is_test_file(&name) {
                continue;
            }
            let Ok(text) = fs::read_to_string(&p) else {
                continue;
            };
            out.insert(module_path(src, &p), SourceFile { path: p, text });
        }
    }
    out
}

/// The file names of test-only modules: `tests.rs`, `*_tests.rs`, `tests_*.rs`.
pub fn is_test_file(name: &str) -> bool {
    name == "tests.rs" || name.ends_with("_tests.rs") || name.starts_with("tests_")
}

/// `a/b.rs` → `a::b`, `a/mod.rs` → `a`, `lib.rs`/`main.rs` → "".
pub fn module_path(src: &Path, file: &Path) -> String {
    let rel: PathBuf = file.strip_prefix(src).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// The lines of `text` outside test-only code: up to a `#[cfg(test)]` whose
/// item opens a block (`mod tests {`), without the lines of one that declares
/// a module in its own file (`mod tests;`, read, if at all, as that file).
pub fn product_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == "#[cfg(test)]" {
            let item = lines[i + 1..].iter().find(|l| !l.trim().is_empty());
            match item {
                Some(l) if l.trim_end().ends_with(';') => {
                    i += 2;
                    continue;
                }
                _ => break,
            }
        }
        out.push(lines[i]);
        i += 1;
    }
    out
}

/// Where each function with a body starts and how many lines it spans, in
/// `lines` (1-based line numbers of `lines`): from its `fn` line to the line of
/// its closing brace. Braces in string and character literals and in comments
/// are not counted.
pub fn function_spans(lines: &[&str]) -> Vec<(String, usize, usize)> {
    let text = lines.join("\n");
    let braces = code_braces(&text);
    let line_of = |byte: usize| text[..byte].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(found) = text[search..].find("fn ") {
        let at = search + found;
        search = at + 3;
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = text[at + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body's `{`, unless a `;` (a declaration) comes first.
        let Some(&(open, _)) = braces.iter().find(|(pos, _)| *pos > at) else {
            continue;
        };
        if text[at..open].contains(';') || !starts_a_fn(&text, at) {
            continue;
        }
        let mut depth = 0i64;
        let close = braces
            .iter()
            .skip_while(|(p, _)| *p < open)
            .find(|(_, open)| {
                depth += if *open { 1 } else { -1 };
                depth == 0
            });
        if let Some(&(close, _)) = close {
            out.push((name, line_of(at), line_of(close) - line_of(at) + 1));
        }
    }
    out
}

/// True when the `fn` at `at` begins an item (not a word inside a string or
/// a comment): it is the first word of its line after visibility and
/// qualifiers.
fn starts_a_fn(text: &str, at: usize) -> bool {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let head = text[line_start..at].trim();
    head.split_whitespace().all(|w| {
        matches!(
            w,
            "pub" | "const" | "async" | "unsafe" | "extern" | "\"C\"" | "default"
        ) || w.starts_with("pub(")
    })
}

/// Each `{` (true) and `}` (false) of `text` that is code, by byte offset:
/// literals (`"…"`, `r#"…"#`, `'x'`) and comments (`//`, `/* */`) skipped.
fn code_braces(text: &str) -> Vec<(usize, bool)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i = text[i..].find('\n').map_or(b.len(), |n| i + n);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = text[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
            }
            b'r' if raw_string_at(b, i).is_some() => {
                let hashes = raw_string_at(b, i).unwrap_or(0);
                let end = format!("\"{}", "#".repeat(hashes));
                let body = i + 2 + hashes;
                i = text[body..]
                    .find(&end)
                    .map_or(b.len(), |n| body + n + end.len());
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'\'' => i += char_literal_len(b, i),
            b'{' => {
                out.push((i, true));
                i += 1;
            }
            b'}' => {
                out.push((i, false));
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// The number of `#`s of a raw string literal starting at `i` (`r"`, `r#"`),
/// or None.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(i + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

/// The length of a character literal at `i` (`'x'`, `'\n'`, `'\''`), or 1
/// for a lifetime's or label's quote.
fn char_literal_len(b: &[u8], i: usize) -> usize {
    match (b.get(i + 1), b.get(i + 2), b.get(i + 3)) {
        (Some(b'\\'), _, _) => {
            let close = b[i + 2..].iter().position(|&c| c == b'\'');
            close.map_or(1, |n| n + 3)
        }
        (Some(_), Some(b'\''), _) => 3,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_measured_from_fn_to_their_closing_brace() {
        let text = r##"
pub fn short() -> u8 {
    let s = "}}}{";
    let c = '}';
    // } a comment
    /* { */
    1
}

trait T {
    fn declared(&self);
}

pub(crate) fn generic<'a>(x: &'a str) -> &'a str {
    let r = r#"{"#;
    x
}
"##;
        let lines: Vec<&str> = text.lines().collect();
        let spans = function_spans(&lines);
        assert_eq!(
            spans,
            vec![("short".into(), 2, 7), ("generic".into(), 14, 4)]
        );
    }

    #[test]
    fn test_code_is_left_out() {
        let text =
            "fn a() {}\n#[cfg(test)]\nmod tests;\nfn b() {}\n#[cfg(test)]\nmod t {\nfn c() {}\n}\n";
        assert_eq!(product_lines(text), ["fn a() {}", "fn b() {}"]);
    }
}
