# SPDX-License-Identifier: Apache-2.0
# Initramfs stage of guest-images/build.sh (sourced, not run directly).
#
# Builds a static fio from Debian's fio source package and packs busybox,
# fio, ndctl/daxctl/cxl, mkfs.xfs, make-bcache (with the shared libraries they
# need) and guest-images/rootfs/init into a reproducible newc cpio (gzip).
# Expects: GI_DIR, WORK, JOBS, KDIR (the built kernel), log(), die().
# Produces in "$1": initramfs.cpio.gz, contents.txt, fio-version, build-seconds.

# Dynamic binaries copied from the Debian packages (with their libraries).
INITRAMFS_BINARIES="/usr/bin/ndctl /usr/bin/daxctl /usr/bin/cxl /usr/sbin/mkfs.xfs /usr/sbin/xfs_io
    /usr/sbin/make-bcache /usr/sbin/bcache-super-show /usr/sbin/mke2fs /usr/sbin/e2fsck
    /usr/sbin/tune2fs /usr/sbin/xfs_repair"
# Every file in the archive gets this mtime (reproducible archive).
INITRAMFS_EPOCH=1704067200 # 2024-01-01 00:00:00 UTC

fio_build() {
    local fdir="$WORK/fio"
    rm -rf "$fdir"
    mkdir -p "$fdir"
    log "fio: apt-get source fio ($FIO_VERSION)"
    (
        cd "$fdir"
        # Downloads as root: keep apt from warning about the _apt sandbox.
        apt-get source -qq -o APT::Sandbox::User=root --download-only "fio=$FIO_VERSION" >/dev/null
        dpkg-source -x --no-check ./*.dsc src >/dev/null
    ) || die "could not fetch/unpack fio's source package (is the deb-src entry there?)"
    log "fio: configure --build-static"
    (
        cd "$fdir/src"
        ./configure --build-static --disable-native --disable-numa --disable-rdma \
            --disable-rados --disable-rbd --disable-http --disable-gfapi --disable-libnfs \
            --disable-pmem --disable-xnvme --disable-libzbc --disable-tcmalloc --disable-dfs \
            > "$fdir/configure.log" 2>&1
    ) || die "fio configure failed (see $fdir/configure.log)"
    grep -q 'define CONFIG_LIBAIO$' "$fdir/src/config-host.h" \
        || die "fio configure did not find libaio (apt-get install libaio-dev)"
    log "fio: make -j$JOBS"
    make -C "$fdir/src" -j"$JOBS" fio > "$fdir/make.log" 2>&1 \
        || die "fio build failed (see $fdir/make.log)"
    file "$fdir/src/fio" | grep 'statically linked' >/dev/null || die "fio is not statically linked"
    local engines
    engines=$("$fdir/src/fio" --enghelp) || die "the static fio does not run: fio --enghelp failed"
    for e in io_uring libaio psync mmap; do
        # A here-string, not a pipe: under pipefail, a reader that stops early
        # could fail the check by a SIGPIPE of the writer.
        grep -qw -e "$e" <<<"$engines" \
            || die "static fio lacks the $e engine (fio --enghelp: $(tr '\n' ' ' <<<"$engines"))"
    done
    strip -o "$fdir/fio" "$fdir/src/fio"
}

# copy_with_libs ROOT BINARY: copies BINARY and the shared libraries ldd lists.
copy_with_libs() {
    local root="$1" bin="$2" lib
    [ -x "$bin" ] || die "missing $bin (is its Debian package installed?)"
    install -D -m 0755 "$bin" "$root$bin"
    for lib in $(ldd "$bin" | awk '/=> \//{print $3} /^[ \t]*\/[^ ]*ld-linux/{print $1}'); do
        [ -e "$root$lib" ] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

initramfs_build() {
    local dest="$1" t0
    t0=$(date +%s)
    mkdir -p "$dest"
    fio_build
    local root="$dest/root"
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,mnt,root,job,lib64}

    log "initramfs: busybox, fio, ndctl, xfsprogs, e2fsprogs, bcache-tools"
    install -m 0755 /bin/busybox "$root/bin/busybox"
    local applet
    for applet in $(/bin/busybox --list-full); do
        [ "$applet" = bin/busybox ] && continue
        [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
    done
    install -m 0755 "$WORK/fio/fio" "$root/usr/bin/fio"
    local b
    for b in $INITRAMFS_BINARIES; do copy_with_libs "$root" "$b"; done
    # e2fsprogs: mkfs.ext4 is mke2fs by name; its defaults file is read at run time.
    local e
    for e in mkfs.ext4 mkfs.ext2; do ln -sf mke2fs "$root/usr/sbin/$e"; done
    ln -sf e2fsck "$root/usr/sbin/fsck.ext4"
    install -m 0644 /etc/mke2fs.conf "$root/etc/mke2fs.conf"
    install -m 0755 "$GI_DIR/rootfs/init" "$root/init"
    # The kernel's list of built-in modules, indexed by depmod: kmod users in
    # the guest (daxctl reconfigure-device --mode=system-ram looks up "kmem")
    # then know that what they need is built in.
    local krel
    krel=$(cat "$KDIR/kernelrelease")
    mkdir -p "$root/lib/modules/$krel"
    cp "$KDIR/modules.builtin" "$KDIR/modules.builtin.modinfo" "$root/lib/modules/$krel/"
    depmod -b "$root" "$krel" || die "depmod for the guest's modules.builtin failed"
    [ -s "$root/lib/modules/$krel/modules.builtin.bin" ] || die "depmod wrote no modules.builtin.bin"
    printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
    printf 'root:x:0:\n' > "$root/etc/group"
    printf 'pmemvm\n' > "$root/etc/hostname"
    # The kernel opens /dev/console for init before devtmpfs is mounted.
    mknod -m 0600 "$root/dev/console" c 5 1

    # Smoke-test the copied dynamic binaries inside the tree.
    for b in $INITRAMFS_BINARIES; do
        local rc=0
        chroot "$root" "$b" -V >/dev/null 2>&1 || rc=$?
        # 127: the loader could not start it (missing library); other codes are usage errors.
        [ "$rc" -ne 127 ] || die "$b does not run inside the initramfs tree (missing library?)"
    done
    chroot "$root" /usr/bin/fio --version > "$dest/fio-version" \
        || die "static fio does not run inside the initramfs tree"

    log "initramfs: packing newc cpio + gzip"
    find "$root" -exec touch -h -d "@$INITRAMFS_EPOCH" {} +
    (
        cd "$root"
        find . -mindepth 1 | LC_ALL=C sort \
            | cpio --quiet -o -H newc -R 0:0 --reproducible > "$dest/initramfs.cpio"
    )
    gzip -n -9 -c "$dest/initramfs.cpio" > "$dest/initramfs.cpio.gz"
    # "<type> <size> <path>" per entry (f: file, d: directory, l: symlink, c: device).
    (cd "$root" && find . -mindepth 1 -printf '%y %s /%P\n' | LC_ALL=C sort -k3) > "$dest/contents.txt"
    stat -c %s "$dest/initramfs.cpio" > "$dest/uncompressed-size"
    rm -f "$dest/initramfs.cpio"
    rm -rf "$root"
    echo $(( $(date +%s) - t0 )) > "$dest/build-seconds"
    log "initramfs: done in $(cat "$dest/build-seconds") s ($(du -h "$dest/initramfs.cpio.gz" | cut -f1), $(cat "$dest/fio-version"))"
}
