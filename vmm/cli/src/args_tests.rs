//! `--gdb`'s reach as `boot` and `run` parse it.

use clap::Parser;
use vmm::exit_status::Classified;

#[test]
fn gdb_beyond_loopback_is_refused_without_its_own_option() {
    use crate::cli::{Cli, Command};
    let parse = |words: &[&str]| {
        Cli::try_parse_from(std::iter::once("pmemvm").chain(words.iter().copied()))
            .expect("parses")
            .command
    };
    for command in ["boot", "run"] {
        let words = |extra: &[&'static str]| {
            let mut w = vec![command, "--kernel", "/k", "--gdb", "0.0.0.0:1234"];
            w.extend_from_slice(extra);
            if command == "run" {
                w.extend(["--", "true"]);
            }
            w
        };
        let checked = |c: Command| match c {
            Command::Boot(a) => a.gdb.checked().map(drop),
            Command::Run(a) => a.gdb.checked().map(drop),
            other => panic!("{other:?}"),
        };
        let e = checked(parse(&words(&[]))).expect_err("refused");
        let e = crate::commands::CommandError::from(e);
        assert!(e.is_usage(), "{command}: status 2: {e}");
        assert!(
            e.to_string()
                .starts_with("--gdb 0.0.0.0:1234 is not a loopback address"),
            "{command}: {e}"
        );
        assert!(e.to_string().contains("--gdb-any-address"), "{e}");
        checked(parse(&words(&["--gdb-any-address"]))).expect("allowed when asked");
    }
    let plain = Cli::try_parse_from(["pmemvm", "boot", "--kernel", "/k", "--gdb-any-address"]);
    assert!(plain.is_err(), "--gdb-any-address needs --gdb");
}
