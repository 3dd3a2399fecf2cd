# SPDX-License-Identifier: Apache-2.0
# Kernel stage of guest-images/build.sh (sourced, not run directly).
#
# Builds Debian's linux-source-6.1 with guest-images/patches/*.patch and the
# config fragment guest-images/config/pmemvm.config merged over tinyconfig.
# Expects: GI_DIR (guest-images/), WORK (build dir), JOBS, log(), die().
# Produces in "$1": vmlinux, bzImage, config, modules.builtin{,.modinfo},
# kernelrelease, build-seconds.

# Options that must be exactly =y in the final .config.  Taken from every
# `CONFIG_X=y` line of the fragment, plus these (no silent Kconfig drops).
KERNEL_EXTRA_REQUIRED="CONFIG_SERIAL_8250_CONSOLE CONFIG_RD_GZIP CONFIG_DEVPORT CONFIG_PVH"

kernel_build() {
    local dest="$1"
    local src_tar=/usr/src/linux-source-6.1.tar.xz
    local tree="$WORK/kernel/linux-source-6.1"
    local t0
    t0=$(date +%s)

    [ -f "$src_tar" ] || die "missing $src_tar (apt-get install linux-source-6.1)"
    rm -rf "$WORK/kernel"
    mkdir -p "$WORK/kernel"
    log "kernel: unpacking $src_tar"
    tar -C "$WORK/kernel" -xJf "$src_tar"

    local p
    for p in "$GI_DIR"/patches/*.patch; do
        [ -e "$p" ] || continue
        log "kernel: applying $(basename "$p")"
        patch -d "$tree" -p1 --forward --batch --quiet < "$p" \
            || die "patch $(basename "$p") does not apply to linux-source-6.1"
    done

    log "kernel: tinyconfig + pmemvm.config"
    (
        cd "$tree"
        make -s ARCH=x86_64 tinyconfig >/dev/null
        KCONFIG_CONFIG=.config ./scripts/kconfig/merge_config.sh -m -O . .config \
            "$GI_DIR/config/pmemvm.config" >/dev/null
        make -s ARCH=x86_64 olddefconfig >/dev/null
    )
    kernel_verify_config "$tree/.config"

    log "kernel: building vmlinux + bzImage with -j$JOBS (the long step)"
    (
        cd "$tree"
        # Reproducible-ish: fixed build identity, no timestamp from the host clock.
        export KBUILD_BUILD_USER=pmemvm KBUILD_BUILD_HOST=pmemvm
        export KBUILD_BUILD_TIMESTAMP="${SOURCE_DATE_EPOCH_STR:-2024-01-01 00:00:00 UTC}"
        make ARCH=x86_64 -j"$JOBS" vmlinux bzImage 2>&1 | tee "$WORK/kernel/build.log" \
            | awk '/^  CC /{n++; if (n % 250 == 0) {printf "[guest-image] kernel: %d objects compiled\n", n; fflush()}}
                   /^  (LD|OBJCOPY|BUILD) | error:|Error [0-9]/ {print "[guest-image] kernel: " $0; fflush()}' >&2
    ) || die "kernel build failed (log: $WORK/kernel/build.log, tree kept in $tree)"

    mkdir -p "$dest"
    cp "$tree/vmlinux" "$dest/vmlinux"
    cp "$tree/arch/x86/boot/bzImage" "$dest/bzImage"
    cp "$tree/.config" "$dest/config"
    # What is built in, for kmod in the guest: daxctl asks kmod for "kmem"
    # and fails without /lib/modules/$(uname -r)/modules.builtin*.
    cp "$tree/modules.builtin" "$tree/modules.builtin.modinfo" "$dest/"
    make -s -C "$tree" ARCH=x86_64 kernelrelease > "$dest/kernelrelease"
    echo $(( $(date +%s) - t0 )) > "$dest/build-seconds"
    log "kernel: done in $(cat "$dest/build-seconds") s ($(cat "$dest/kernelrelease"))"
}

# Fails loudly unless every wanted option is =y in the final config.
kernel_verify_config() {
    local config="$1" opt missing=""
    local wanted
    wanted=$(sed -n 's/^\(CONFIG_[A-Za-z0-9_]*\)=y$/\1/p' "$GI_DIR/config/pmemvm.config")
    for opt in $wanted $KERNEL_EXTRA_REQUIRED; do
        grep -qx "$opt=y" "$config" || missing="$missing $opt"
    done
    # Values that are not plain booleans.
    grep -qx 'CONFIG_HZ=1000' "$config" || missing="$missing CONFIG_HZ=1000"
    grep -qx '# CONFIG_MODULES is not set' "$config" || missing="$missing !CONFIG_MODULES"
    local uarts
    uarts=$(sed -n 's/^CONFIG_SERIAL_8250_NR_UARTS=//p' "$config")
    [ "${uarts:-0}" -ge 2 ] || missing="$missing CONFIG_SERIAL_8250_NR_UARTS>=2"
    [ -z "$missing" ] || die "kernel config is missing required options:$missing (see $config)"
    log "kernel: config verified ($(echo $wanted $KERNEL_EXTRA_REQUIRED | wc -w) options =y)"
}

# The VMM enters vmlinux through the PVH ELF note (XEN_ELFNOTE_PHYS32_ENTRY = 18).
kernel_check_pvh() {
    readelf -n "$1" | grep -q 'Xen.*0x00000012\|NT_XEN_PHYS32_ENTRY\|Unknown note type: (0x00000012)' \
        || die "$1 has no PVH (Xen PHYS32_ENTRY) ELF note"
}
