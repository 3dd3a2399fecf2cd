//! The machine the shared options describe, and `--machine FILE`.

use super::*;
use clap::Parser;

#[derive(Debug, Parser)]
struct Machine {
    #[command(flatten)]
    m: MachineArgs,
}

fn parse(words: &[&str]) -> MachineArgs {
    Machine::try_parse_from(std::iter::once("pmemvm").chain(words.iter().copied()))
        .expect("parses")
        .m
}

#[test]
fn a_machine_file_replaces_the_options_and_reads_back_the_same_machine() {
    let typed = parse(&[
        "--cpus",
        "3",
        "--memory",
        "1G,thp",
        "--pin",
        "0-2",
        "--host-node",
        "0",
        "--nvdimm",
        "64M,label-size=0,badblocks=4096+512",
        "--nvdimm",
        "32M,file=/tmp/x.img,readonly",
        "--disk",
        "/tmp/d.img,readonly",
        "--pmem-legacy",
        "16M",
        "--nvdimm-slots",
        "4",
    ]);
    let spec = typed.spec();
    assert_eq!(spec.nvdimm_slots, 4);
    let file = std::env::temp_dir().join(format!("pmemvm-machine-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec(&spec).expect("json")).expect("write");
    let mut loaded = parse(&["--machine", file.to_str().expect("utf-8")]);
    assert_eq!(loaded.spec().cpus, 1, "before loading: the defaults");
    loaded.load_machine_file().expect("loads");
    assert_eq!(loaded.spec(), spec);
    assert_eq!(loaded.machine_file, None);
    // The words it prints are the options that give it again.
    let words = spec.to_args();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_eq!(parse(&words).spec(), spec);

    std::fs::write(&file, b"{\"cpus\": \"many\"}").expect("write");
    let mut bad = parse(&["--machine", file.to_str().expect("utf-8")]);
    let e = bad.load_machine_file().expect_err("not a machine");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!(
            "--machine {}: not a machine description",
            file.display()
        )),
        "{text}"
    );
    std::fs::remove_file(&file).expect("cleanup");
    let mut missing = parse(&["--machine", "/no/such/machine.json"]);
    assert!(missing
        .load_machine_file()
        .expect_err("missing")
        .to_string()
        .contains("/no/such/machine.json"));
}

#[test]
fn the_nvdimm_help_names_every_key_the_parser_takes() {
    use clap::CommandFactory;
    let help = Machine::command().render_long_help().to_string();
    for (key, _) in vmm::config::NVDIMM_KEYS {
        assert!(
            help.contains(&format!(",{key}")),
            "--nvdimm's help does not name {key}:\n{help}"
        );
    }
}
