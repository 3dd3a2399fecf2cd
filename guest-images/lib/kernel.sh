# SPDX-License-Identifier: Apache-2.0
# Kernel stage of guest-images/build.sh (sourced, not run directly).
#
# Builds Debian's linux-source-$KERNEL_VERSION with $KERNEL_PATCHES applied and
# the config fragments $KERNEL_FRAGMENTS merged over tinyconfig, built in only.
# build.sh sets them per variant: the image kernel (6.1, patches/*.patch,
# config/pmemvm.config) and `--linux 6.12` (no patches, config/pmemvm.config
# then config/linux-6.12.config).  Paths are relative to guest-images/.
# Expects: GI_DIR (guest-images/), WORK (build dir), JOBS, KERNEL_VERSION,
# KERNEL_PATCHES, KERNEL_FRAGMENTS, log(), die().
# Produces in "$1": vmlinux, bzImage, config, modules.builtin{,.modinfo},
# kernelrelease, build-seconds.

# Settings that must hold in the final .config beyond the fragments' own (no
# silent Kconfig drops of what the VMM relies on).
KERNEL_EXTRA_REQUIRED="CONFIG_SERIAL_8250_CONSOLE=y CONFIG_RD_GZIP=y CONFIG_DEVPORT=y CONFIG_PVH=y CONFIG_HZ=1000"

kernel_build() {
    local dest="$1" ver="$KERNEL_VERSION"
    local src_tar="/usr/src/linux-source-$ver.tar.xz"
    local kwork="$WORK/kernel-$ver"
    local tree="$kwork/linux-source-$ver"
    local t0 p f frags=()
    t0=$(date +%s)
    for f in $KERNEL_FRAGMENTS; do frags+=("$GI_DIR/$f"); done

    [ -f "$src_tar" ] || die "missing $src_tar (apt-get install linux-source-$ver)"
    rm -rf "$kwork"
    mkdir -p "$kwork"
    log "kernel $ver: unpacking $src_tar"
    tar -C "$kwork" -xJf "$src_tar"

    for p in $KERNEL_PATCHES; do
        log "kernel $ver: applying $(basename "$p")"
        patch -d "$tree" -p1 --forward --batch --quiet < "$GI_DIR/$p" \
            || die "patch $(basename "$p") does not apply to linux-source-$ver"
    done

    log "kernel $ver: tinyconfig + $(echo $KERNEL_FRAGMENTS | sed 's|config/||g')"
    (
        cd "$tree"
        make -s ARCH=x86_64 tinyconfig >/dev/null
        KCONFIG_CONFIG=.config ./scripts/kconfig/merge_config.sh -m -O . .config "${frags[@]}" >/dev/null
        make -s ARCH=x86_64 olddefconfig >/dev/null
    )
    kernel_verify_config "$tree/.config" "${frags[@]}"

    log "kernel $ver: building vmlinux + bzImage with -j$JOBS (the long step)"
    (
        cd "$tree"
        # Reproducible-ish: fixed build identity, no timestamp from the host clock.
        export KBUILD_BUILD_USER=pmemvm KBUILD_BUILD_HOST=pmemvm
        export KBUILD_BUILD_TIMESTAMP="${SOURCE_DATE_EPOCH_STR:-2024-01-01 00:00:00 UTC}"
        make ARCH=x86_64 -j"$JOBS" vmlinux bzImage 2>&1 | tee "$kwork/build.log" \
            | awk -v what="kernel $ver" '/^  CC /{n++; if (n % 250 == 0) {printf "[guest-image] %s: %d objects compiled\n", what, n; fflush()}}
                   /^  (LD|OBJCOPY|BUILD) | error:|Error [0-9]/ {print "[guest-image] " what ": " $0; fflush()}' >&2
    ) || die "kernel $ver build failed (log: $kwork/build.log, tree kept in $tree)"

    mkdir -p "$dest"
    cp "$tree/vmlinux" "$dest/vmlinux"
    cp "$tree/arch/x86/boot/bzImage" "$dest/bzImage"
    cp "$tree/.config" "$dest/config"
    # What is built in, for kmod in the guest: daxctl asks kmod for "kmem"
    # and fails without /lib/modules/$(uname -r)/modules.builtin*.
    cp "$tree/modules.builtin" "$tree/modules.builtin.modinfo" "$dest/"
    make -s -C "$tree" ARCH=x86_64 kernelrelease > "$dest/kernelrelease"
    echo $(( $(date +%s) - t0 )) > "$dest/build-seconds"
    log "kernel $ver: done in $(cat "$dest/build-seconds") s ($(cat "$dest/kernelrelease"))"
}

# kernel_verify_config CONFIG FRAGMENT...: fails loudly unless every setting of
# the fragments holds in CONFIG: `CONFIG_X=V` exactly (y, m, a number, a string),
# `# CONFIG_X is not set` as not set (or absent); where fragments disagree, the
# later one wins, as in merge_config.sh.  Then KERNEL_EXTRA_REQUIRED.
kernel_verify_config() {
    local config="$1" line opt missing="" n=0
    shift
    while IFS= read -r line; do
        n=$((n + 1))
        opt=${line%%=*}
        case "$line" in
            *=n) grep -q "^$opt=" "$config" && missing="$missing !$opt" ;;
            *) grep -qxF "$line" "$config" || missing="$missing $line" ;;
        esac
    done < <(sed -n -e 's/^\(CONFIG_[A-Za-z0-9_]*=.*\)$/\1/p' \
                    -e 's/^# \(CONFIG_[A-Za-z0-9_]*\) is not set$/\1=n/p' "$@" \
             | awk -F= '!($1 in v) {order[++k] = $1} {v[$1] = $0} END {for (i = 1; i <= k; i++) print v[order[i]]}'
             printf '%s\n' $KERNEL_EXTRA_REQUIRED)
    [ -z "$missing" ] || die "kernel config does not have what the fragments ask:$missing (see $config)"
    log "kernel: config verified ($n settings of $(echo "$@" | xargs -n1 basename | xargs))"
}

# kernel_builtin_tree DIR RELEASE MODULES_BUILTIN_DIR: DIR/lib/modules/RELEASE with
# the kernel's modules.builtin{,.modinfo}, indexed by depmod (an empty modules.dep):
# what `pmemvm --modules DIR` packs into the guest, so kmod users there (daxctl
# looks up "kmem") find the built-in drivers of a kernel the initramfs was not made for.
kernel_builtin_tree() {
    local rel_dir="$1/lib/modules/$2"
    mkdir -p "$rel_dir"
    cp "$3/modules.builtin" "$3/modules.builtin.modinfo" "$rel_dir/"
    depmod -b "$1" "$2" || die "depmod for $rel_dir failed"
    [ -f "$rel_dir/modules.dep" ] && [ -s "$rel_dir/modules.builtin.bin" ] \
        || die "depmod wrote no modules.dep or modules.builtin.bin in $rel_dir"
}

# The VMM enters vmlinux through the PVH ELF note (XEN_ELFNOTE_PHYS32_ENTRY = 18).
kernel_check_pvh() {
    readelf -n "$1" | grep -q 'Xen.*0x00000012\|NT_XEN_PHYS32_ENTRY\|Unknown note type: (0x00000012)' \
        || die "$1 has no PVH (Xen PHYS32_ENTRY) ELF note"
}
