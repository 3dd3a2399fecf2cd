//! Smoke run of the `get_archive` fuzz target (tests/fuzz/src/get_archive.rs:
//! the decoder of the tar archive a guest writes for `pmemvm run --get`) under
//! plain `cargo test`: 6,000 inputs made from real tar archives (names inside,
//! beside and escaping the asked paths, long GNU names) by truncation and
//! byte flips.

#[path = "../fuzz/src/get_archive.rs"]
mod get_archive;

use pmemvm_tests::rng::Rng;

const NAMES: &[&str] = &[
    "results/a",
    "results/sub/b.txt",
    "results",
    "job/out.txt",
    "data/x/y",
    "a/b/c/d",
    "x",
    "results/../../etc/passwd",
    "../x",
    "/results/abs",
    "./results/dot",
    "results//double",
    "resultsX/near",
    "etc/shadow",
];

fn archive(rng: &mut Rng) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for _ in 0..1 + rng.below(4) {
        let mut name = NAMES[rng.below(NAMES.len())].to_string();
        if rng.below(5) == 0 {
            name = format!("results/{}", "long/".repeat(30));
        }
        let data = vec![0x61u8; rng.below(1500)];
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(match rng.below(4) {
            0 => tar::EntryType::Directory,
            1 => tar::EntryType::Symlink,
            _ => tar::EntryType::Regular,
        });
        // append_data writes long names as GNU extensions; hostile ones go in raw.
        if b.append_data(&mut h.clone(), &name, data.as_slice())
            .is_err()
        {
            let raw = &mut h.as_old_mut().name;
            let n = name.len().min(raw.len());
            raw[..n].copy_from_slice(&name.as_bytes()[..n]);
            h.set_cksum();
            b.append(&h, data.as_slice()).expect("append");
        }
    }
    b.into_inner().expect("tar")
}

#[test]
fn get_archive_decoder_survives_mutated_archives() {
    let mut rng = Rng(0x7e57_0014);
    for _ in 0..6000 {
        let mut input = vec![u8::try_from(rng.below(256)).unwrap_or(0)];
        let mut a = archive(&mut rng);
        match rng.below(4) {
            0 => a.truncate(rng.below(a.len() + 1)),
            1 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(a.len());
                    a[i] = u8::try_from(rng.below(256)).unwrap_or(0);
                }
            }
            _ => {}
        }
        input.extend_from_slice(&a);
        get_archive::run(&input);
    }
}
