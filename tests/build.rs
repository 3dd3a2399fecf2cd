//! Assembles the tiny test guests in `guests/` into PVH ELF files with GNU
//! as/ld (binutils). A missing toolchain is not fatal: the tests that need the
//! guests then skip with that reason.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    let src = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("guests");
    println!("cargo:rerun-if-changed=guests");
    let mut built = Vec::new();
    let mut failed = Vec::new();
    let Ok(entries) = std::fs::read_dir(&src) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_string();
        if path.extension().and_then(|e| e.to_str()) != Some("S")
            || name == "common"
            || name == "long64"
        {
            continue;
        }
        let obj = out.join(format!("{name}.o"));
        let elf = out.join(format!("{name}.elf"));
        let ok = Command::new("as")
            .args(["--64", "-I"])
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new("ld")
                .args([
                    "-m",
                    "elf_x86_64",
                    "-Ttext=0x100000",
                    "-e",
                    "_start",
                    "--build-id=none",
                    "-o",
                ])
                .arg(&elf)
                .arg(&obj)
                .status()
                .is_ok_and(|s| s.success());
        if ok {
            built.push(name);
        } else {
            failed.push(name);
        }
    }
    println!("cargo:rustc-env=PMEMVM_TINY_GUESTS={}", out.display());
    if !failed.is_empty() {
        println!("cargo:warning=tiny guests not assembled (is binutils installed?): {failed:?}");
    }
}
