#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Builds the kernel's nfit_test modules (tools/testing/nvdimm: nfit_test.ko,
# nfit_test_iomap.ko and the libnvdimm, nfit, nd_pmem, nd_btt, nd_e820, device_dax and
# dax_pmem modules linked against its mocked resource calls) against a user's modular
# kernel, and makes the module tree a guest boots with to run ndctl's default test set:
# what ndctl's README asks for (`make M=tools/testing/nvdimm modules_install`, depmod) and
# what run_qemu's --nfit-test-run does, without writing the user's tree.
#
#   guest-images/suites/nfit-test-build.sh RELEASE_DIR TREE OUT
#
# RELEASE_DIR is the kernel's lib/modules/<release>/ (what `make modules_install` wrote);
# TREE is the configured and built kernel source tree of that release (its
# lib/modules/<release>/build); OUT is a new directory. The tree must have the options
# tools/testing/nvdimm/config_check.c asks for as modules. The tree is only read: the
# sources of tools/testing/nvdimm, drivers/nvdimm, drivers/acpi/nfit and drivers/dax are
# copied and built there as an external module (`make -C TREE M=...`), cached by a hash
# of those sources, the tree's .config and Module.symvers, and this script in
# ${XDG_CACHE_HOME:-$HOME/.cache}/pmemvm/nfit-test/<hash>/. OUT gets
# lib/modules/<release>/: RELEASE_DIR's modules without the production copies of the
# mocked ones, the test modules in extra/ (where ndctl's test/core.c wants them), and
# depmod's indexes. Prints OUT. See docs/ndctl-suite.md.
set -eu -o pipefail

log() { printf '[nfit-test-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
usage() { echo "nfit-test-build.sh: $*" >&2; exit 2; }
die() { echo "nfit-test-build.sh: $*" >&2; exit 1; }

[ $# -eq 3 ] || usage "give RELEASE_DIR (lib/modules/<release>), TREE (the kernel's build tree) and OUT (a new directory)"
rel_dir=$1 tree=$2 out=$3
[ -f "$rel_dir/modules.dep" ] || usage "$rel_dir has no modules.dep; give the lib/modules/<release> directory that make modules_install wrote"
[ -f "$tree/.config" ] && [ -f "$tree/Makefile" ] ||
    usage "$tree is not a configured kernel tree (no .config and Makefile); give the tree the kernel was built in (its lib/modules/<release>/build)"
[ -f "$tree/Module.symvers" ] ||
    usage "$tree has no Module.symvers: the kernel was not built there (make modules); give the tree it was built in"
[ -f "$tree/tools/testing/nvdimm/Kbuild" ] ||
    usage "$tree has no tools/testing/nvdimm/Kbuild; the nfit_test modules come from the kernel's own tree"
[ ! -e "$out" ] || usage "$out exists; give a new directory"
release=$(basename "$(cd "$rel_dir" && pwd)")
tree_release=$(cat "$tree/include/config/kernel.release" 2>/dev/null || true)
[ "$tree_release" = "$release" ] ||
    usage "$tree is the tree of release ${tree_release:-unknown}, the modules are of $release; give the tree of the same build"

# tools/testing/nvdimm/config_check.c: these must be modules (ACPI_NFIT when enabled);
# ndctl's test/core.c also wants nd_e820 (X86_PMEM_LEGACY) as a module from extra/.
missing=""
for opt in LIBNVDIMM BLK_DEV_PMEM ND_BTT ND_PFN ACPI_NFIT DEV_DAX DEV_DAX_PMEM X86_PMEM_LEGACY; do
    grep -qx "CONFIG_$opt=m" "$tree/.config" || missing="$missing CONFIG_$opt=m"
done
[ -z "$missing" ] ||
    usage "the kernel of $tree lacks what nfit_test needs:$missing (tools/testing/nvdimm/config_check.c and ndctl's test/core.c want them as modules); rebuild it with them"

sources="tools/testing/nvdimm drivers/nvdimm drivers/acpi/nfit drivers/dax"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pmemvm/nfit-test
key=$( {
    for d in $sources; do
        (cd "$tree" && find "$d" -type f \( -name '*.c' -o -name '*.h' -o -name Kbuild -o -name Makefile \) -print0 |
            LC_ALL=C sort -z | xargs -0 sha256sum)
    done
    sha256sum "$tree/.config" "$tree/Module.symvers" | cut -d' ' -f1
    sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1
    echo "$release"
} | sha256sum | cut -c1-16)
built="$cache/$key"
mocked="libnvdimm nd_pmem nd_btt nd_e820 nfit device_dax dax_pmem"
if [ -f "$built/test/nfit_test.ko" ]; then
    log "cached ($built)"
else
    mkdir -p "$cache"
    tmp=$(mktemp -d "$cache/.$key.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    for d in $sources; do
        mkdir -p "$tmp/src/$(dirname "$d")"
        cp -a "$tree/$d" "$tmp/src/$d"
    done
    # Objects a copied directory may carry from an in-tree build.
    find "$tmp/src" \( -name '*.o' -o -name '*.ko' -o -name '.*.cmd' -o -name '*.mod*' \) -delete
    log "building tools/testing/nvdimm against $tree ($release)"
    if ! make -C "$tree" M="$tmp/src/tools/testing/nvdimm" -j"$(nproc)" modules >"$tmp/build.log" 2>&1; then
        tail -n 20 "$tmp/build.log" >&2
        die "building tools/testing/nvdimm against $tree failed (the log's end is above)"
    fi
    mkdir -p "$tmp/out/test"
    for m in $mocked; do
        cp "$tmp/src/tools/testing/nvdimm/$m.ko" "$tmp/out/" || die "the build made no $m.ko"
    done
    for m in nfit_test nfit_test_iomap; do
        cp "$tmp/src/tools/testing/nvdimm/test/$m.ko" "$tmp/out/test/" || die "the build made no test/$m.ko"
    done
    cp "$tmp/build.log" "$tmp/out/"
    rm -rf "$built"
    mv "$tmp/out" "$built"
    log "built in $built"
fi

# The guest's module tree: the kernel's own, less the production copies of the mocked
# modules (so nothing but extra/ can answer for them), plus the test modules.
dest="$out/lib/modules/$release"
mkdir -p "$dest"
cp -a "$rel_dir/." "$dest/"
rm -f "$dest/build" "$dest/source"
for m in $mocked nfit_test nfit_test_iomap; do
    find "$dest" -type f \( -name "$m.ko" -o -name "$m.ko.*" \) -delete
done
mkdir -p "$dest/extra"
cp "$built"/*.ko "$built"/test/*.ko "$dest/extra/"
depmod -b "$out" "$release" || die "depmod -b $out $release failed"
for m in $mocked nfit_test nfit_test_iomap; do
    grep -q "^extra/$m\.ko:" "$dest/modules.dep" || die "depmod did not index extra/$m.ko"
done
log "module tree for nfit_test: $dest ($(find "$dest/extra" -name '*.ko' | wc -l) test modules in extra/)"
echo "$out"
