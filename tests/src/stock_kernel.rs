//! Pieces of Debian's stock `linux-image-6.1.0-*-amd64` package that tests
//! boot as guests with small initramfs images of their own.

use std::path::Path;
use std::process::{Command, Stdio};

/// Unpacks the NVDIMM driver modules (libnvdimm, nd_btt, nd_pmem, nfit) of the
/// kernel package `deb` into `dir/root/lib/modules/NAME.ko`, decompressed so
/// busybox `insmod` can load them. Uses `dir/pkg` as scratch space.
pub fn unpack_nvdimm_modules(deb: &Path, dir: &Path) -> Result<(), String> {
    let script = format!(
        "set -eu -o pipefail
         cd '{d}'
         mkdir -p pkg root/lib/modules
         dpkg-deb --fsys-tarfile '{deb}' | tar -x -C pkg --wildcards \
             './lib/modules/*/kernel/drivers/nvdimm/libnvdimm.ko*' \
             './lib/modules/*/kernel/drivers/nvdimm/nd_btt.ko*' \
             './lib/modules/*/kernel/drivers/nvdimm/nd_pmem.ko*' \
             './lib/modules/*/kernel/drivers/acpi/nfit/nfit.ko*'
         for f in $(find pkg -name '*.ko*'); do
             b=$(basename \"$f\"); b=${{b%%.ko*}}.ko
             case \"$f\" in
             *.xz) xz -dc \"$f\" > root/lib/modules/$b ;;
             *.zst) zstd -qdc \"$f\" > root/lib/modules/$b ;;
             *) cp \"$f\" root/lib/modules/$b ;;
             esac
         done",
        d = dir.display(),
        deb = deb.display()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("bash: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "unpacking the NVDIMM modules of {} failed: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The stock kernel package that [`crate::nested::prepare_l1`] downloaded
/// into the harness cache (`debs/linux-image-*.deb`, the newest). Call it
/// after `prepare_l1` succeeded: a missing package then is a harness fault,
/// and the test fails.
pub fn deb() -> std::path::PathBuf {
    let debs = crate::nested::cache_dir().join("debs");
    std::fs::read_dir(&debs)
        .unwrap_or_else(|e| panic!("{}: {e} (prepare_l1 should have filled it)", debs.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("linux-image-"))
        })
        .max()
        .unwrap_or_else(|| panic!("no linux-image .deb in {} after prepare_l1", debs.display()))
}
