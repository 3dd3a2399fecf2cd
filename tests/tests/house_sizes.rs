//! The code's shape a new maintainer can read (docs/design.md, "Sizes"): no
//! product source file over 600 lines, and no function over 100 lines outside test-only
//! code, in every product crate (the test harness crate is tests). Reads the sources as
//! text (`pmemvm_tests::source_tree`).

use pmemvm_tests::nested::workspace_root;
use pmemvm_tests::source_tree::{function_spans, modules, CRATES};

const MAX_FILE_LINES: usize = 600;
const MAX_FUNCTION_LINES: usize = 100;

/// Every product file over [`MAX_FILE_LINES`] and every function over
/// [`MAX_FUNCTION_LINES`], one line each.
fn oversized() -> Vec<String> {
    let root = workspace_root();
    let mut found = Vec::new();
    for (_, src) in CRATES.iter().filter(|(name, _)| *name != "pmemvm-tests") {
        for file in modules(&root.join(src)).into_values() {
            let rel = file
                .path
                .strip_prefix(&root)
                .unwrap_or(&file.path)
                .display()
                .to_string();
            let lines = file.text.lines().count();
            if lines > MAX_FILE_LINES {
                found.push(format!("{rel}: {lines} lines (at most {MAX_FILE_LINES})"));
            }
            for (name, line, len) in function_spans(&file.product_lines()) {
                if len > MAX_FUNCTION_LINES {
                    found.push(format!(
                        "{rel}:{line}: fn {name} is {len} lines (at most {MAX_FUNCTION_LINES})"
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn no_product_file_over_600_lines_and_no_function_over_100() {
    let found = oversized();
    assert!(found.is_empty(), "too large to read:\n{}", found.join("\n"));
}

#[test]
fn the_reader_sees_every_crates_functions() {
    // Not vacuous: the scan finds the functions of every crate, main included.
    let root = workspace_root();
    for (name, src) in CRATES {
        let count: usize = modules(&root.join(src))
            .values()
            .map(|f| function_spans(&f.product_lines()).len())
            .sum();
        assert!(count > 10, "{name}: only {count} functions found in {src}");
    }
    let cli = modules(&root.join("vmm/cli/src"));
    let main = cli.get("").expect("the CLI's main.rs");
    assert!(function_spans(&main.product_lines())
        .iter()
        .any(|(n, _, _)| n == "main"));
}
