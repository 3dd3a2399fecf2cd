//! Smoke run of the `config` fuzz target (tests/fuzz/src/config.rs:
//! `vmm::config::parse_size` and `NvdimmSpec::from_str`) under plain
//! `cargo test`: the same source file over a deterministic corpus of 10,000
//! texts built from the pieces these parsers care about.

#[path = "../fuzz/src/config.rs"]
mod config;

use pmemvm_tests::rng::Rng;

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "16",
    "64",
    "128",
    "4096",
    "131072",
    "2097152",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "007",
    "",
];
const SUFFIXES: &[&str] = &[
    "", "K", "M", "G", "T", "P", "k", "m", "g", "t", "B", "iB", "KiB", "MB", "GB", "X", " ", ".5",
];
const OPTIONS: &[&str] = &[
    "file=/tmp/x",
    "file=",
    "file",
    "readonly",
    "readonly=1",
    "prealloc",
    "label-size=",
    "label-size=0",
    "label-size=",
    "node=",
    "node=0",
    "node=255",
    "node=256",
    "node=-1",
    "mce=on",
    "mce=off",
    "mce=",
    "mce",
    "record=r",
    "hugepages",
    "bogus",
    "",
    "=",
    "file=a,b",
    "\u{e9}",
    "\0",
];

#[test]
fn config_parsers_survive_hostile_text() {
    let mut rng = Rng(0xc0f1);
    let mut accepted = 0u32;
    for i in 0..10_000 {
        let mut text = String::new();
        if rng.next_u64() & 7 == 0 {
            // Raw bytes, lossily decoded by the target.
            let n = rng.next_u64() % 24;
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64().to_le_bytes()[0]).collect();
            let r = std::panic::catch_unwind(|| config::run(&bytes));
            assert!(
                r.is_ok(),
                "config target panicked on input {i}: {bytes:02x?}"
            );
            continue;
        }
        text.push_str(rng.pick(NUMBERS));
        text.push_str(rng.pick(SUFFIXES));
        for _ in 0..rng.next_u64() % 4 {
            text.push(',');
            let opt = rng.pick(OPTIONS);
            text.push_str(opt);
            if opt == "label-size=" || opt == "node=" {
                text.push_str(rng.pick(NUMBERS));
                text.push_str(rng.pick(SUFFIXES));
            }
        }
        let r = std::panic::catch_unwind(|| config::run(text.as_bytes()));
        assert!(r.is_ok(), "config target panicked on input {i}: {text:?}");
        accepted += u32::from(text.parse::<vmm::config::NvdimmSpec>().is_ok());
    }
    eprintln!("config smoke: {accepted} of 10000 texts were valid --nvdimm specs");
    assert!(accepted > 100, "the corpus should also reach valid specs");
}
