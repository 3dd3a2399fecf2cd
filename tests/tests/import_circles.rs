//! No new import circle between the modules of a crate (docs/design.md, "Import circles").
//!
//! Reads every source file of the workspace's crates as text (test-only code left out, as
//! `pmemvm_tests::source_tree` reads it), takes each
//! `crate::…` and `super::…` path to the module that holds it, and finds the groups of
//! modules that reach each other. A module and its own ancestors or descendants are not a
//! circle (a parent re-exports its children, a child uses its parent's items). The circles
//! still there are listed in [`KNOWN`]; any other fails the test, and so does a listed one
//! that is gone (strike it from the list and from docs/design.md).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use pmemvm_tests::nested::workspace_root;
use pmemvm_tests::source_tree::{self, CRATES};

/// The circles still there, as `crate: module, module, ...` (sorted): none. A new one fails
/// the test; list one here only with the plan that removes it.
const KNOWN: &[&str] = &[];

/// Module path → its text without test-only code and without `//` comments.
fn modules(src: &Path) -> BTreeMap<String, String> {
    source_tree::modules(src)
        .into_iter()
        .map(|(m, file)| {
            let lines: Vec<&str> = file
                .product_lines()
                .into_iter()
                .map(|l| l.split("//").next().unwrap_or_default())
                .collect();
            (m, lines.join("\n"))
        })
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a `use` tree or an inline path starting at `s` names (after its `crate::` or
/// `super::`), each as segments: `a::{b, c::d}` → `[a, b]`, `[a, c, d]`.
fn paths(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut cur = prefix.to_vec();
    let b = s.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < b.len() && is_ident(b[i] as char) {
            i += 1;
        }
        if i > start {
            cur.push(s[start..i].to_string());
        }
        if s[i..].starts_with("::") {
            i += 2;
            if s[i..].starts_with('{') {
                i += 1;
                loop {
                    while s[i..].starts_with([' ', '\n', '\t', ',']) {
                        i += 1;
                    }
                    if i >= b.len() || s[i..].starts_with('}') {
                        return i + 1;
                    }
                    i += paths(&s[i..], &cur, out);
                    // Skip to the next item of the group (past `as x`, `self`).
                    while i < b.len() && !s[i..].starts_with([',', '}']) {
                        i += 1;
                    }
                }
            }
            continue;
        }
        out.push(cur);
        return i;
    }
}

/// Every module path named from `module`'s text, from the crate root.
fn references(module: &str, text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let base: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let mut rest = text;
    while let Some(at) = rest.find(['c', 's']) {
        let here = &rest[at..];
        let boundary = at == 0 || !is_ident(rest[..at].chars().next_back().unwrap_or(' '));
        if boundary && here.starts_with("crate::") {
            let n = paths(&here[7..], &[], &mut out);
            rest = &here[7 + n.min(here.len() - 7)..];
        } else if boundary && here.starts_with("super::") {
            let mut prefix = base.clone();
            let mut h = here;
            while h.starts_with("super::") {
                prefix.pop();
                h = &h[7..];
            }
            let n = paths(h, &prefix, &mut out);
            rest = &h[n.min(h.len())..];
        } else {
            rest = &here[1..];
        }
    }
    out
}

/// The longest module of `known` that `path` starts with ("" when none).
fn owner<'a>(path: &[String], known: &'a BTreeSet<String>) -> &'a str {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find_map(|p| known.get(&p).map(String::as_str))
        .unwrap_or("")
}

fn related(a: &str, b: &str) -> bool {
    a.is_empty()
        || b.is_empty()
        || a == b
        || a.starts_with(&format!("{b}::"))
        || b.starts_with(&format!("{a}::"))
}

/// The import circles of one crate: each a sorted list of its modules.
fn circles(src: &Path) -> Vec<Vec<String>> {
    let mods = modules(src);
    let known: BTreeSet<String> = mods.keys().cloned().collect();
    let names: Vec<&String> = mods.keys().collect();
    let index: BTreeMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let n = names.len();
    let mut reach = vec![vec![false; n]; n];
    for (m, text) in &mods {
        for p in references(m, text) {
            let to = owner(&p, &known);
            if !related(m, to) {
                reach[index[m.as_str()]][index[to]] = true;
            }
        }
    }
    // Transitive closure (Warshall): i reaches j through k.
    for k in 0..n {
        let via = reach[k].clone();
        for row in reach.iter_mut() {
            if row[k] {
                for (r, v) in row.iter_mut().zip(&via) {
                    *r |= *v;
                }
            }
        }
    }
    let mut seen = vec![false; n];
    let mut out = Vec::new();
    for i in 0..n {
        if seen[i] {
            continue;
        }
        let group: Vec<String> = (0..n)
            .filter(|&j| j == i || (reach[i][j] && reach[j][i]))
            .map(|j| {
                seen[j] = true;
                names[j].clone()
            })
            .collect();
        if group.len() > 1 {
            out.push(group);
        }
    }
    out
}

#[test]
fn no_crate_has_an_import_circle_beyond_the_known_ones() {
    let root = workspace_root();
    let mut found = Vec::new();
    for (name, src) in CRATES {
        let dir = root.join(src);
        assert!(dir.is_dir(), "{} is not a directory", dir.display());
        for c in circles(&dir) {
            found.push(format!("{name}: {}", c.join(", ")));
        }
    }
    let new: Vec<&String> = found
        .iter()
        .filter(|f| !KNOWN.contains(&f.as_str()))
        .collect();
    let gone: Vec<&&str> = KNOWN
        .iter()
        .filter(|k| !found.iter().any(|f| f == *k))
        .collect();
    assert!(
        new.is_empty(),
        "import circles (modules that reach each other through `crate::`/`super::` paths): {new:?}"
    );
    assert!(
        gone.is_empty(),
        "circles listed in KNOWN that are gone (strike them here and in docs/design.md): {gone:?}"
    );
}

#[test]
fn the_reader_finds_a_planted_circle_and_ignores_parents_and_tests() {
    let dir = std::env::temp_dir().join(format!("import-circles-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("a")).expect("dir");
    let write = |rel: &str, text: &str| fs::write(dir.join(rel), text).expect("write");
    write(
        "lib.rs",
        "mod a;\nmod b;\nmod c;\n#[cfg(test)]\nmod c_tests;\n",
    );
    write(
        "a/mod.rs",
        "mod inner;\npub use inner::X;\nuse crate::b::Y;\n",
    );
    // A child using its parent is no circle; its path to c is one half of a circle.
    write(
        "a/inner.rs",
        "use super::super::c::{Z, self as cc};\npub struct X;\n",
    );
    write("b.rs", "pub struct Y;\n// use crate::a::X; (a comment)\n");
    // c names a::inner inline; the test module's import of b does not count.
    write(
        "c.rs",
        "pub struct Z;\nfn f() { let _ = crate::a::inner::X; }\n#[cfg(test)]\nmod tests { use crate::b::Y; }\n",
    );
    let found = circles(&dir);
    assert_eq!(found, vec![vec!["a::inner".to_string(), "c".to_string()]]);
    // Break it: the circle is gone.
    write("c.rs", "pub struct Z;\n");
    assert!(circles(&dir).is_empty());
    fs::remove_dir_all(&dir).expect("cleanup");
}
