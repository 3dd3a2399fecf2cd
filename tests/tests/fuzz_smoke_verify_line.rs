//! Smoke run of the `verify_line` fuzz target (tests/fuzz/src/verify_line.rs: the reader of
//! fio's verify error as a guest sends it) under plain `cargo test`: 20,000 inputs made from
//! fio 3.33's own verify lines by truncation, byte flips, splices and number swaps.

#[path = "../fuzz/src/verify_line.rs"]
mod verify_line;

use pmemvm_tests::rng::Rng;

/// fio 3.33's words (as a failed run's reason carries them).
const LINES: &[&str] = &[
    "fio error 84 in job write-and-verify (verify: bad header numberio 7156, wanted 7159 at file \
     /dev/pmem0 offset 19742720, length 4096 (requested block: offset=19742720, length=4096))",
    "fio error 84 in job write-and-verify (crc32c: verify failed at file /dev/pmem0 offset \
     180224, length 4096 (requested block: offset=180224, length=4096, flags=88))",
    "side off run 1 (write-and-verify): fio error 84 in job write-and-verify (verify: bad magic \
     header 0, wanted acca at file /dev/bcache0 offset 0, length 4096)",
    "fio error 84 in job j",
    "fio error 5 in job x (fio: pid=1, err=5/file:io_u.c:1845, func=io_u error, error=Input/output error)",
];
const NUMBERS: &[&str] = &[
    "0",
    "18446744073709551615",
    "99999999999999999999999",
    "-1",
    "",
    "4096",
];

#[test]
fn verify_line_reader_survives_mutated_fio_lines() {
    let mut rng = Rng(0x7e57_0015);
    let mut read = 0u32;
    for _ in 0..20_000 {
        let mut line = LINES[rng.below(LINES.len())].as_bytes().to_vec();
        match rng.below(5) {
            0 => line.truncate(rng.below(line.len() + 1)),
            1 => {
                for _ in 0..1 + rng.below(6) {
                    let i = rng.below(line.len());
                    line[i] = u8::try_from(rng.below(256)).unwrap_or(0);
                }
            }
            2 => {
                let other = LINES[rng.below(LINES.len())].as_bytes();
                let at = rng.below(line.len() + 1);
                line.splice(at..at, other[rng.below(other.len())..].iter().copied());
            }
            3 => {
                let text = String::from_utf8_lossy(&line).into_owned();
                let n = NUMBERS[rng.below(NUMBERS.len())];
                line = text
                    .replacen("7156", n, 1)
                    .replacen("wanted ", &format!("wanted {n}"), 1)
                    .into_bytes();
            }
            _ => {}
        }
        verify_line::run(&line);
        read += u32::from(
            lab::study::report::VerifyObservation::parse("off", 3, &String::from_utf8_lossy(&line))
                .is_some(),
        );
    }
    eprintln!("verify_line smoke: {read} of 20000 inputs read as verify errors");
    assert!(read > 1000, "the inputs should reach the reader's paths");
}
