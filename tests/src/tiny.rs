//! The tiny test guests assembled by build.rs (tests/guests/*.S), and the
//! check that this host has a usable /dev/kvm for them.

use std::path::PathBuf;

use crate::skip::Skip;

/// Path of tiny guest `name` (e.g. "hello"); a skip when binutils was
/// missing at build time. A guest that build.rs does not know fails the test.
pub fn guest(name: &str) -> Result<PathBuf, Skip> {
    let dir = PathBuf::from(env!("PMEMVM_TINY_GUESTS"));
    let p = dir.join(format!("{name}.elf"));
    if p.exists() {
        return Ok(p);
    }
    match std::fs::read_to_string(dir.join(format!("{name}.missing"))) {
        Ok(why) => Err(Skip::new(format!(
            "tiny guest {name} was not assembled: {why}"
        ))),
        Err(_) => panic!(
            "tiny guest {name} does not exist in {} (no tests/guests/{name}.S?)",
            dir.display()
        ),
    }
}

/// Ok when /dev/kvm can be opened read-write, else a skip reason.
pub fn kvm_available() -> Result<(), Skip> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(|_| ())
        .map_err(|e| Skip::new(format!("/dev/kvm is not usable here: {e}")))
}
