//! Assembles the tiny test guests in `guests/` into PVH ELF files with GNU
//! as/ld (binutils). A missing toolchain is not fatal: the tests that need the
//! guests then skip with that reason (`NAME.missing` beside the ELF says why).
//! A guest that does not assemble or link is a build error: the tests fail.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    let src = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("guests");
    println!("cargo:rerun-if-changed=guests");
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
        let missing = out.join(format!("{name}.missing"));
        let _ = std::fs::remove_file(&missing);
        let mut asm = Command::new("as");
        asm.args(["--64", "-I"])
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .arg(&path);
        let mut link = Command::new("ld");
        link.args([
            "-m",
            "elf_x86_64",
            "-Ttext=0x100000",
            "-e",
            "_start",
            "--build-id=none",
            "-o",
        ])
        .arg(&elf)
        .arg(&obj);
        for (tool, cmd) in [("as", &mut asm), ("ld", &mut link)] {
            match cmd.status() {
                Ok(s) if s.success() => {}
                Ok(s) => panic!(
                    "tiny guest {}: {tool} failed ({s}); fix the assembly",
                    path.display()
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let _ = std::fs::write(
                        &missing,
                        format!("GNU {tool} is not installed (apt-get install binutils)"),
                    );
                    failed.push(name.clone());
                    break;
                }
                Err(e) => panic!("tiny guest {}: cannot run {tool}: {e}", path.display()),
            }
        }
    }
    println!("cargo:rustc-env=PMEMVM_TINY_GUESTS={}", out.display());
    if !failed.is_empty() {
        println!("cargo:warning=tiny guests not assembled (is binutils installed?): {failed:?}");
    }
}
