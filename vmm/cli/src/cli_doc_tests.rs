use std::path::{Path, PathBuf};

use clap::CommandFactory;

use super::*;
use crate::cli::Cli;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn cli_doc_reference_is_the_clap_definitions() {
    let path = repo().join("docs/cli.md");
    let text = std::fs::read_to_string(&path).expect("docs/cli.md is part of the tree");
    let at = text
        .find(REFERENCE_MARK)
        .expect("docs/cli.md has the generated reference's mark line");
    let head = &text[..at + REFERENCE_MARK.len()];
    let want = format!("{head}\n\n{}", reference(&mut Cli::command()));
    if std::env::var_os("PMEMVM_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).expect("docs/cli.md is writable");
        return;
    }
    if text != want {
        let line = text
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| text.lines().count().min(want.lines().count()));
        panic!(
            "docs/cli.md's reference differs from the command line from its line {}: \
             have {:?}, the clap definitions give {:?}; rewrite it with \
             PMEMVM_BLESS=1 cargo test -p pmemvm cli_doc",
            line + 1,
            text.lines().nth(line).unwrap_or("(end)"),
            want.lines().nth(line).unwrap_or("(end)")
        );
    }
}

#[test]
fn cli_doc_every_command_line_quoted_in_the_docs_has_only_its_commands_options() {
    let mut root = Cli::command();
    root.build();
    let mut files = vec![repo().join("README.md")];
    let docs = std::fs::read_dir(repo().join("docs")).expect("docs/ is part of the tree");
    files.extend(
        docs.flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md")),
    );
    let mut checked = 0;
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a doc is readable");
        for (path, opt) in quoted_options(&text) {
            checked += 1;
            if !has_option(&root, &path, &opt) {
                wrong.push(format!(
                    "{}: pmemvm {} --{opt}",
                    file.display(),
                    path.join(" ")
                ));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} options quoted in the docs were found: the scan is broken"
    );
    assert!(
        wrong.is_empty(),
        "the docs quote options their command does not have:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn cli_doc_scan_finds_options_in_spans_and_continued_blocks_and_stops_at_the_guest_command() {
    let text = "Use `pmemvm run --nvdimm 1G --fio j.fio` or\n\
                ```sh\n./pmemvm crash-check rec --every 10 \\\n    --torn 7 -- sh -c 'x --y'\n```\n\
                and `pmemvm ctl sock dump out.core --nvdimms | jq --raw`.";
    let got = quoted_options(text);
    let want = [
        (vec!["run"], "nvdimm"),
        (vec!["run"], "fio"),
        (vec!["crash-check", "rec"], "every"),
        (vec!["crash-check", "rec"], "torn"),
        (vec!["ctl", "sock", "dump"], "nvdimms"),
    ];
    let want: Vec<(Vec<String>, String)> = want
        .iter()
        .map(|(p, o)| (p.iter().map(|s| s.to_string()).collect(), o.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn cli_doc_an_option_of_another_command_is_not_taken_for_this_ones() {
    let mut root = Cli::command();
    root.build();
    let run = vec!["run".to_string()];
    assert!(has_option(&root, &run, "fio"));
    assert!(has_option(&root, &run, "verbose"), "a global option counts");
    assert!(!has_option(&root, &run, "runs"), "--runs is bench's");
    let dump = vec!["ctl".to_string(), "sock".to_string(), "dump".to_string()];
    assert!(has_option(&root, &dump, "nvdimms"));
}
