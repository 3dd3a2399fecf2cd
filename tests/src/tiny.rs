//! The tiny test guests assembled by build.rs (tests/guests/*.S), and the
//! check that this host has a usable /dev/kvm for them.

use std::path::PathBuf;

use crate::skip::Skip;

/// Path of tiny guest `name` (e.g. "hello"), or a skip reason.
pub fn guest(name: &str) -> Result<PathBuf, Skip> {
    let p = PathBuf::from(env!("PMEMVM_TINY_GUESTS")).join(format!("{name}.elf"));
    if p.exists() {
        Ok(p)
    } else {
        Err(Skip::new(format!(
            "tiny guest {name} was not assembled (binutils 'as'/'ld' missing at build time)"
        )))
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
