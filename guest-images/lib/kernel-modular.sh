# SPDX-License-Identifier: Apache-2.0
# Modular kernel stage of `guest-images/build.sh --modular` (sourced).
#
# The same patched linux-source-6.1 as the image kernel (lib/kernel.sh), with
# config/modular.config merged over tinyconfig + pmemvm.config: CONFIG_MODULES
# on and the NVDIMM drivers as (xz-compressed) modules.  It is what a user's
# own modular kernel looks like to `pmemvm --modules`, and what the nested
# test of that boots.
# Expects: GI_DIR, WORK, JOBS, log(), die() and lib/kernel.sh sourced.
# Produces in "$1": bzImage, vmlinux, config, kernelrelease, build-seconds,
# modules/lib/modules/<release>/ (from `make modules_install`) and tree/ (the
# configured source tree with Module.symvers, for external modules).

kernel_build_modular() {
    local dest="$1"
    local src_tar=/usr/src/linux-source-6.1.tar.xz
    local tree="$WORK/kernel-modular/linux-source-6.1"
    local t0
    t0=$(date +%s)

    [ -f "$src_tar" ] || die "missing $src_tar (apt-get install linux-source-6.1)"
    rm -rf "$WORK/kernel-modular"
    mkdir -p "$WORK/kernel-modular"
    log "modular kernel: unpacking $src_tar"
    tar -C "$WORK/kernel-modular" -xJf "$src_tar"
    local p
    for p in "$GI_DIR"/patches/*.patch; do
        [ -e "$p" ] || continue
        patch -d "$tree" -p1 --forward --batch --quiet < "$p" \
            || die "patch $(basename "$p") does not apply to linux-source-6.1"
    done

    log "modular kernel: tinyconfig + pmemvm.config + modular.config"
    (
        cd "$tree"
        make -s ARCH=x86_64 tinyconfig >/dev/null
        KCONFIG_CONFIG=.config ./scripts/kconfig/merge_config.sh -m -O . .config \
            "$GI_DIR/config/pmemvm.config" "$GI_DIR/config/modular.config" >/dev/null
        make -s ARCH=x86_64 olddefconfig >/dev/null
    )
    kernel_verify_modular_config "$tree/.config"

    log "modular kernel: building bzImage + modules with -j$JOBS (the long step)"
    (
        cd "$tree"
        export KBUILD_BUILD_USER=pmemvm KBUILD_BUILD_HOST=pmemvm
        export KBUILD_BUILD_TIMESTAMP="${SOURCE_DATE_EPOCH_STR:-2024-01-01 00:00:00 UTC}"
        make ARCH=x86_64 -j"$JOBS" vmlinux bzImage modules 2>&1 | tee "$WORK/kernel-modular/build.log" \
            | awk '/^  CC /{n++; if (n % 250 == 0) {printf "[guest-image] modular kernel: %d objects compiled\n", n; fflush()}}
                   /^  (LD|OBJCOPY|BUILD) | error:|Error [0-9]/ {print "[guest-image] modular kernel: " $0; fflush()}' >&2
        make -s ARCH=x86_64 INSTALL_MOD_PATH="$dest/modules" modules_install >/dev/null
    ) || die "modular kernel build failed (log: $WORK/kernel-modular/build.log, tree kept in $tree)"

    mkdir -p "$dest"
    cp "$tree/vmlinux" "$dest/vmlinux"
    cp "$tree/arch/x86/boot/bzImage" "$dest/bzImage"
    cp "$tree/.config" "$dest/config"
    make -s -C "$tree" ARCH=x86_64 kernelrelease > "$dest/kernelrelease"
    local rel
    rel=$(cat "$dest/kernelrelease")
    # The build and source links point into the tree; build.sh points build at the kept
    # tree (below) once the stage is in its final place.
    rm -f "$dest/modules/lib/modules/$rel/build" "$dest/modules/lib/modules/$rel/source"
    [ -s "$dest/modules/lib/modules/$rel/modules.dep" ] || die "modules_install wrote no modules.dep"
    local m
    for m in nfit libnvdimm nd_pmem nd_btt device_dax dax_pmem kmem; do
        grep -q "/$m\.ko\.xz:" "$dest/modules/lib/modules/$rel/modules.dep" \
            || die "the modular kernel has no $m.ko.xz module"
    done
    # The configured and built tree is kept as the kernel's build tree (what a user's
    # lib/modules/<release>/build points at): `pmemvm suite ndctl --nfit-test` builds the
    # kernel's tools/testing/nvdimm modules against it. Its object files are not needed
    # for that (external modules link against Module.symvers) and go.
    find "$tree" -name '*.o' -not -path "$tree/scripts/*" -not -path "$tree/tools/*" -delete
    find "$tree" \( -name '*.ko' -o -name '*.ko.xz' \) -delete
    rm -f "$tree/vmlinux" "$tree/vmlinux.a" "$tree/arch/x86/boot/bzImage" "$tree/arch/x86/boot/compressed/vmlinux"
    mv "$tree" "$dest/tree"
    rm -rf "$WORK/kernel-modular"
    echo $(( $(date +%s) - t0 )) > "$dest/build-seconds"
    log "modular kernel: done in $(cat "$dest/build-seconds") s ($rel, $(find "$dest/modules" -name '*.ko*' | wc -l) modules)"
}

# Fails loudly unless the modular options are as asked: every `=m` of
# modular.config is =m, CONFIG_MODULES=y, and every `=y` of pmemvm.config that
# modular.config does not override is still =y.
kernel_verify_modular_config() {
    local config="$1" opt missing="" wanted_y wanted_m
    wanted_m=$(sed -n 's/^\(CONFIG_[A-Za-z0-9_]*\)=m$/\1/p' "$GI_DIR/config/modular.config")
    wanted_y=$(sed -n 's/^\(CONFIG_[A-Za-z0-9_]*\)=y$/\1/p' "$GI_DIR/config/pmemvm.config" "$GI_DIR/config/modular.config" \
        | grep -vxF "$wanted_m")
    for opt in $wanted_y; do
        grep -qx "$opt=y" "$config" || missing="$missing $opt=y"
    done
    for opt in $wanted_m; do
        grep -qx "$opt=m" "$config" || missing="$missing $opt=m"
    done
    [ -z "$missing" ] || die "modular kernel config is missing required options:$missing (see $config)"
    log "modular kernel: config verified ($(echo $wanted_m | wc -w) options =m)"
}
