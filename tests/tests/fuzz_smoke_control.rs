//! Smoke run of the `control` fuzz target (tests/fuzz/src/control.rs: the
//! control socket's request parser and the VMCOREINFO search of guest
//! memory) under plain `cargo test`: 10,000 inputs made from real requests
//! and real notes by truncation, splicing and byte flips.

#[path = "../fuzz/src/control.rs"]
mod control;

use pmemvm_tests::rng::Rng;

const SEEDS: &[&str] = &[
    r#"{"command":"stats"}"#,
    r#"{"command":"dump","file":"/tmp/x.core","id":7}"#,
    r#"{"command":"dump","file":"x.core"}"#,
    r#"{"command":"pause","id":"a"}"#,
    r#"{"command":"resume","file":"/x"}"#,
    r#"{"command":"version","extra":{"a":[1,2,{"b":null}]}}"#,
    r#"{"command":"dump","file":"/\u0000"}"#,
    r#"{"command":1e999}"#,
    r#"{"command":"media","action":"inject","dimm":0,"range":"1M+4K:8M+512"}"#,
    r#"{"command":"media","action":"list","dimm":4294967295}"#,
    r#"{"command":"health","action":"set","dimm":1,"set":"health=fatal,temperature=-100,spares=0,alarm=spares+mtemp+ctemp"}"#,
    r#"{"command":"health","action":"get","dimm":0}"#,
    r#"{"command":"nvdimm","action":"add","spec":"1G,file=/tmp/n.img,label-size=256K,badblocks=0+512"}"#,
    r#"{"command":"nvdimm","action":"remove","dimm":4294967295}"#,
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
];

fn note(desc: &[u8], descsz: u32) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&11u32.to_le_bytes());
    v.extend_from_slice(&descsz.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(b"VMCOREINFO\0\0");
    v.extend_from_slice(desc);
    v
}

#[test]
fn ten_thousand_requests_and_memory_images_break_nothing() {
    let mut rng = Rng(0x5eed_c0de);
    let desc = b"OSRELEASE=6.1.0\nPAGESIZE=4096\nSYMBOL(swapper_pg_dir)=ffffffff82a0a000\n";
    let mut found = 0;
    for i in 0..10_000 {
        let mut input: Vec<u8> = if i % 2 == 0 {
            SEEDS[rng.below(SEEDS.len())].as_bytes().to_vec()
        } else {
            let own = u32::try_from(desc.len()).expect("short");
            let size = [0u32, 10, own, 4096, 4097, u32::MAX][rng.below(6)];
            let mut m = vec![0u8; rng.below(64)];
            m.extend(note(desc, size));
            m.extend(vec![0u8; rng.below(64)]);
            m
        };
        for _ in 0..rng.below(4) {
            if input.is_empty() {
                break;
            }
            let at = rng.below(input.len());
            match rng.below(3) {
                0 => input[at] ^= 1 << rng.below(8),
                1 => input.truncate(at),
                _ => {
                    let other = SEEDS[rng.below(SEEDS.len())].as_bytes();
                    input.splice(at..at, other.iter().copied());
                }
            }
        }
        if vmm::debug::dump::vmcoreinfo::find(&Mem(&input))
            .ok()
            .flatten()
            .is_some()
        {
            found += 1;
        }
        control::run(&input);
    }
    assert!(
        found > 100,
        "the corpus reaches the note's acceptance: {found}"
    );
}

struct Mem<'a>(&'a [u8]);

impl vmm::debug::dump::elf::Ram for Mem<'_> {
    fn ranges(&self) -> Vec<(u64, u64)> {
        vec![(0x1000, self.0.len() as u64)]
    }
    fn read(&self, gpa: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let at = usize::try_from(gpa - 0x1000).map_err(std::io::Error::other)?;
        buf.copy_from_slice(&self.0[at..at + buf.len()]);
        Ok(())
    }
}
