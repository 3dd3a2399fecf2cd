//! docs/design.md names only what exists: every file path, every function, type,
//! variant and field it quotes is in the tree (or, for the KVM, boot-protocol and
//! library names it cites, in the dependency's own source as Cargo.lock pins it).
//! A rename or a removal in the code fails here until the walk says what is true.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Names of the standard library and of the boot protocol's text the walk cites.
const OUTSIDE_ANY_CRATE: &[&str] = &[
    "FromStr",     // std::str::FromStr
    "current_exe", // std::env::current_exe
    "HdrS",        // the x86 boot protocol's header magic (a bzImage's bytes, not Rust)
];

/// The dependencies whose items the walk cites (KVM ioctls and structures, boot
/// protocol structures, libc, JSON output).
const CITED_CRATES: &[&str] = &[
    "kvm-ioctls",
    "kvm-bindings",
    "linux-loader",
    "libc",
    "serde_json",
    "vm-memory",
    "vmm-sys-util",
    "event-manager",
    "gdbstub",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier at the start of `s`, if any.
fn leading_ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident_char(c)).unwrap_or(s.len());
    &s[..end]
}

/// What a source file defines: items after their keyword, enum variants and struct
/// fields (an identifier opening a line before `(`, `{`, `,` or `:`), shell functions
/// (`name() {`) and assembler labels.
fn defined_in(text: &str) -> HashSet<String> {
    let mut names = HashSet::new();
    let keywords = [
        "fn", "struct", "enum", "trait", "type", "union", "mod", "const", "static",
    ];
    let words: Vec<&str> = text
        .split(|c: char| !is_ident_char(c) && c != '!')
        .collect();
    for pair in words.windows(2) {
        if keywords.contains(&pair[0]) || pair[0] == "macro_rules!" {
            names.insert(pair[1].to_owned());
        }
    }
    for line in text.lines() {
        let mut rest = line.trim_start();
        for prefix in ["pub(crate) ", "pub(super) ", "pub "] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        let name = leading_ident(rest);
        let after = rest[name.len()..].trim_start();
        if !name.is_empty() && (after.starts_with(['(', '{', ',', ':']) || after.is_empty()) {
            names.insert(name.to_owned());
        }
    }
    names
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | ".git" | "out" | "corpus" | "artifacts"
            ) {
                walk(&p, out);
            }
        } else if [".rs", ".sh", ".S", ".inc"]
            .iter()
            .any(|x| name.ends_with(x))
            || name == "init"
        {
            out.push(p);
        }
    }
}

/// Every definition in the dependency sources Cargo.lock pins for `CITED_CRATES`.
fn dependency_names() -> HashSet<String> {
    let lock =
        std::fs::read_to_string(repo().join("Cargo.lock")).expect("Cargo.lock is in the tree");
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME is set");
    let registry = home.join("registry/src");
    let indexes: Vec<PathBuf> = std::fs::read_dir(&registry)
        .unwrap_or_else(|e| {
            panic!(
                "{} (the crates' sources, fetched by the build) cannot be read: {e}",
                registry.display()
            )
        })
        .flatten()
        .map(|e| e.path())
        .collect();
    let mut names = HashSet::new();
    for block in lock.split("[[package]]") {
        let field = |key: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().trim_matches('"').to_owned())
        };
        let (Some(name), Some(version)) = (field("name = "), field("version = ")) else {
            continue;
        };
        if !CITED_CRATES.contains(&name.as_str()) {
            continue;
        }
        let dir = indexes
            .iter()
            .map(|i| i.join(format!("{name}-{version}")))
            .find(|d| d.is_dir());
        let dir = dir.unwrap_or_else(|| {
            panic!(
                "the source of {name} {version} is not under {}",
                registry.display()
            )
        });
        let mut files = Vec::new();
        walk(&dir, &mut files);
        for f in files {
            names.extend(defined_in(&std::fs::read_to_string(&f).unwrap_or_default()));
        }
    }
    names
}

/// The quoted names of a code span: `a::b(`, `a::b`, CamelCase words, and a span that
/// is a single snake_case identifier with an underscore.
fn names_in_span(span: &str) -> Vec<String> {
    let mut names = Vec::new();
    let trimmed = span.trim();
    if trimmed.contains('_')
        && trimmed
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        names.push(trimmed.to_owned());
        return names;
    }
    let bytes: Vec<char> = span.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let before = if i > 0 { bytes[i - 1] } else { ' ' };
        if !(bytes[i].is_ascii_alphabetic() || bytes[i] == '_')
            || is_ident_char(before)
            || before == '-'
            || before == '/'
        {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len()
            && (is_ident_char(bytes[j]) || (bytes[j] == ':' && bytes.get(j + 1) == Some(&':')))
        {
            j += if bytes[j] == ':' { 2 } else { 1 };
        }
        let token: String = bytes[i..j].iter().collect();
        let called = bytes.get(j) == Some(&'(');
        let last = token.rsplit("::").next().unwrap_or("").to_owned();
        let camel = last.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && last.chars().any(|c| c.is_ascii_lowercase())
            && last.chars().skip(1).any(|c| c.is_ascii_uppercase());
        let after_dot = before == '.';
        let ends_in_path = bytes
            .get(j)
            .is_some_and(|c| *c == '-' || *c == '.' || *c == '/');
        if !last.is_empty()
            && (called || (!after_dot && (token.contains("::") || camel)))
            && !ends_in_path
        {
            names.push(last);
        }
        i = j.max(i + 1);
    }
    names
}

#[test]
fn every_file_function_and_type_design_md_names_exists() {
    let root = repo();
    let design = std::fs::read_to_string(root.join("docs/design.md"))
        .expect("docs/design.md is in the tree");
    let mut sources = Vec::new();
    walk(&root, &mut sources);
    let per_file: Vec<(PathBuf, HashSet<String>)> = sources
        .iter()
        .map(|p| {
            (
                p.clone(),
                defined_in(&std::fs::read_to_string(p).unwrap_or_default()),
            )
        })
        .collect();
    let ours: HashSet<String> = per_file
        .iter()
        .flat_map(|(_, d)| d.iter().cloned())
        .collect();
    let theirs = dependency_names();
    let test_binaries: HashSet<String> = sources
        .iter()
        .filter(|p| {
            p.parent()
                .is_some_and(|d| d.ends_with("tests") || d.ends_with("benches"))
        })
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    let known = |n: &str| {
        ours.contains(n)
            || theirs.contains(n)
            || OUTSIDE_ANY_CRATE.contains(&n)
            || test_binaries.contains(n)
    };
    let mut checked = 0;
    let mut wrong = Vec::new();
    for span in design
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.contains('\n'))
    {
        let (head, named) = match span.split_once(": ") {
            Some((h, n)) if h.ends_with(".rs") || h.ends_with('/') || h.ends_with("init") => {
                (Some(h), Some(n))
            }
            _ => (None, None),
        };
        let path_like = span.split_whitespace().next().unwrap_or("");
        if head.is_none()
            && ["vmm/", "devices/", "acpi/", "tests/", "guest-images/"]
                .iter()
                .any(|p| path_like.starts_with(p))
        {
            checked += 1;
            let p = path_like.trim_end_matches([',', '.', ':', ')']);
            if !root.join(p).exists() {
                wrong.push(format!("`{span}`: no file {p}"));
            }
            continue;
        }
        if let (Some(file), Some(named)) = (head, named) {
            checked += 1;
            let in_file: Vec<&HashSet<String>> = per_file
                .iter()
                .filter(|(p, _)| {
                    p.to_string_lossy().ends_with(file.trim_end_matches('/'))
                        || (file.ends_with('/') && p.starts_with(root.join(file)))
                })
                .map(|(_, d)| d)
                .collect();
            let name = leading_ident(named.rsplit("::").next().unwrap_or(named).trim());
            let name = named
                .split("::")
                .map(|s| leading_ident(s.trim()))
                .last()
                .filter(|n| !n.is_empty())
                .unwrap_or(name);
            if in_file.is_empty() {
                wrong.push(format!("`{span}`: no file ending in {file}"));
            } else if !in_file.iter().any(|d| d.contains(name)) {
                wrong.push(format!("`{span}`: {file} defines no {name}"));
            }
            continue;
        }
        for name in names_in_span(span) {
            checked += 1;
            if !known(&name) {
                wrong.push(format!("`{span}`: nothing defines {name}"));
            }
        }
    }
    assert!(
        checked > 300,
        "only {checked} names were found in docs/design.md: the scan is broken"
    );
    assert!(
        wrong.is_empty(),
        "docs/design.md names what the code does not have:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scan_takes_calls_paths_and_types_and_leaves_options_and_files() {
    assert_eq!(
        names_in_span("run_spec_with(args, true)"),
        ["run_spec_with"]
    );
    assert_eq!(
        names_in_span("vm.run_with(RunOptions { timeout: Some(600 s), .. })"),
        ["run_with", "RunOptions", "Some"]
    );
    assert_eq!(names_in_span("Engine::resolve"), ["resolve"]);
    assert_eq!(names_in_span("check_host"), ["check_host"]);
    assert!(names_in_span("--nvdimm 1G,file=dimm.img").is_empty());
    assert!(names_in_span("nd_pmem.nowait=1").is_empty());
    assert!(names_in_span("job/job.fio").is_empty());
}

#[test]
fn definitions_are_found_as_items_variants_fields_and_shell_functions() {
    let d = defined_in(
        "pub(crate) fn run_job(x: u8) {}\nenum E {\n    GuestExit(u8),\n    PowerOff,\n}\nstruct S {\n    pub timeout: u8,\n}\nrun_job() {\n",
    );
    for n in ["run_job", "E", "GuestExit", "PowerOff", "S", "timeout"] {
        assert!(d.contains(n), "{n} missing from {d:?}");
    }
    assert!(!d.contains("u8"));
}
