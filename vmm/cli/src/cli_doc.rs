//! docs/cli.md's reference section, written from the clap definitions, and the
//! check that every `pmemvm` command line quoted in the docs names only options
//! its command has. Both run as unit tests (`cargo test -p pmemvm cli_doc`);
//! `PMEMVM_BLESS=1` rewrites the reference after a change of the command line.

use std::fmt::Write as _;

use clap::{Arg, Command};

/// The line after which docs/cli.md holds the generated reference.
pub const REFERENCE_MARK: &str =
    "<!-- The rest of this file is generated from the clap definitions: PMEMVM_BLESS=1 cargo test -p pmemvm cli_doc -->";

/// The reference of every visible command under `root` (built), as Markdown.
pub fn reference(root: &mut Command) -> String {
    root.build();
    let mut out = String::from("## Reference\n\n");
    write_command(root, &mut out, 3);
    out
}

fn write_command(cmd: &mut Command, out: &mut String, depth: usize) {
    let name = cmd
        .get_bin_name()
        .map(str::to_owned)
        .unwrap_or_else(|| cmd.get_name().to_owned());
    let heading = "#".repeat(depth.min(4));
    let _ = writeln!(out, "{heading} `{name}`\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", one_paragraph(&about.to_string()));
    }
    let usage = cmd.render_usage().to_string();
    let _ = writeln!(out, "```text\n{}\n```\n", usage.trim_end());
    let args: Vec<String> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version")
        .map(describe_arg)
        .collect();
    for line in &args {
        let _ = writeln!(out, "{line}");
    }
    if !args.is_empty() {
        out.push('\n');
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name().to_owned())
        .collect();
    for sub in names {
        if let Some(s) = cmd.find_subcommand_mut(&sub) {
            write_command(s, out, depth + 1);
        }
    }
}

/// One list item: how the argument is written, then its help, its values and default.
fn describe_arg(arg: &Arg) -> String {
    let values = arg
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
    let written = match (arg.get_long(), arg.get_short()) {
        _ if arg.is_positional() => values.clone(),
        (Some(l), Some(s)) => format!("-{s}, --{l}"),
        (Some(l), None) => format!("--{l}"),
        (None, Some(s)) => format!("-{s}"),
        (None, None) => arg.get_id().to_string(),
    };
    let written = if !arg.is_positional() && takes_value && !values.is_empty() {
        format!("{written} {values}")
    } else {
        written
    };
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| one_paragraph(&h.to_string()))
        .unwrap_or_default();
    let mut line = format!("- `{written}`: {help}");
    if !help.is_empty() && !help.ends_with(['.', '!', '?']) {
        line.push('.');
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !possible.is_empty() && takes_value {
        let _ = write!(line, " Values: {}.", possible.join(", "));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && takes_value {
        let _ = write!(line, " Default: `{}`.", defaults.join(","));
    }
    line
}

/// Help text on one line (Markdown list items are single paragraphs here).
fn one_paragraph(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The long options `--x` of each `pmemvm SUB ...` command line quoted in `text`
/// (inline code and code blocks, `\` continuations joined), up to a ` -- `.
/// Returns (subcommand path, option) pairs.
pub fn quoted_options(text: &str) -> Vec<(Vec<String>, String)> {
    let mut found = Vec::new();
    for line in command_lines(text) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(start) = words
            .iter()
            .position(|w| matches!(*w, "pmemvm" | "./pmemvm" | "target/release/pmemvm"))
        else {
            continue;
        };
        let mut path = Vec::new();
        let mut options_started = false;
        for w in &words[start + 1..] {
            if matches!(*w, "--" | "|" | "&&" | ";" | ">" | "2>&1") || w.starts_with(['\'', '"']) {
                break;
            }
            if let Some(opt) = w.strip_prefix("--") {
                options_started = true;
                let opt = opt
                    .split(['=', '`', ')', ',', ';', '.'])
                    .next()
                    .unwrap_or("");
                if !opt.is_empty() && opt.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                    found.push((path.clone(), opt.to_owned()));
                }
            } else if !options_started && is_word(w) {
                path.push((*w).to_owned());
            }
        }
    }
    found
}

fn is_word(w: &str) -> bool {
    !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
}

/// Each inline code span on a line and each code block line, continuations joined.
fn command_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for raw in text.lines() {
        if raw.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let code = raw.split(" #").next().unwrap_or(raw);
            match code.trim_end().strip_suffix('\\') {
                Some(head) => pending.push_str(head),
                None => {
                    pending.push_str(code);
                    lines.push(std::mem::take(&mut pending));
                }
            }
        } else {
            lines.extend(raw.split('`').skip(1).step_by(2).map(str::to_owned));
        }
    }
    lines
}

/// Whether `root` (built) has the long option `opt` on the command its
/// subcommand words in `path` lead to (other words, arguments, are passed over),
/// or as a global option.
pub fn has_option(root: &Command, path: &[String], opt: &str) -> bool {
    let mut cmd = root;
    for word in path {
        if let Some(sub) = cmd.find_subcommand(word) {
            cmd = sub;
        }
    }
    cmd.get_arguments().any(|a| a.get_long() == Some(opt))
        || root.get_arguments().any(|a| a.get_long() == Some(opt))
}

#[cfg(test)]
#[path = "cli_doc_tests.rs"]
mod tests;
