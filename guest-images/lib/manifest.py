#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes and checks guest-images/out/manifest.json (used by build.sh).

  manifest.py write OUT GI_DIR ENV_FILE CONTENTS_FILE
  manifest.py check OUT INPUT_HASH     (exit 0 when OUT is complete and current)
"""

import hashlib
import json
import os
import sys

SCHEMA = 1
OUTPUTS = {
    "vmlinux": "vmlinux",
    "bzimage": "bzImage",
    "initramfs": "initramfs.cpio.gz",
}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_env(path):
    env = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            env[key] = value
    return env


def read_inputs(path):
    """Lines 'file <path> <sha256>' or '<package>=<version>'."""
    files, packages = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "file":
                files[parts[1]] = parts[2]
            elif len(parts) == 1 and "=" in parts[0]:
                name, _, version = parts[0].partition("=")
                packages[name] = version
    return files, packages


def write(out, gi_dir, env_file, contents_file):
    env = read_env(env_file)
    files, packages = read_inputs(os.path.join(os.path.dirname(env_file), "manifest.inputs"))
    patches = sorted(
        p for p in os.listdir(os.path.join(gi_dir, "patches")) if p.endswith(".patch")
    )
    files_in_image, counts = [], {}
    with open(contents_file, encoding="utf-8") as f:
        for line in f:
            kind, size, path = line.rstrip("\n").split(" ", 2)
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "f":
                files_in_image.append({"path": path, "size": int(size)})
    kinds = {"f": "files", "d": "directories", "l": "symlinks", "c": "devices"}
    manifest = {
        "schema": SCHEMA,
        "input_hash": env["input_hash"],
        "outputs": {
            key: {
                "path": name,
                "sha256": sha256_file(os.path.join(out, name)),
                "size": os.path.getsize(os.path.join(out, name)),
            }
            for key, name in OUTPUTS.items()
        },
        "kernel": {
            "release": env["kernel_release"],
            "source_package": "linux-source-6.1=" + packages.get("linux-source-6.1", "?"),
            "config_sha256": sha256_file(env["config"]),
            "patches": [
                {"name": p, "sha256": sha256_file(os.path.join(gi_dir, "patches", p))}
                for p in patches
            ],
            "cmdline_params": ["nd_pmem.nowait=0|1 (default 1)", "bcache.bch_nowait=0|1 (default 1)"],
            "build_seconds": int(env["kernel_build_seconds"]),
            "cache_key": env["kernel_key"],
        },
        "initramfs": {
            "format": "newc cpio, gzip -9",
            "fio_version": env["fio_version"],
            "fio_source_package": "fio=" + env["fio_source"],
            "uncompressed_size": int(env["initramfs_uncompressed_size"]),
            "files": files_in_image,
            "entries": {kinds.get(k, k): n for k, n in sorted(counts.items())},
            "build_seconds": int(env["initramfs_build_seconds"]),
            "cache_key": env["initramfs_key"],
        },
        "inputs": {"files_sha256": files, "debian_packages": packages},
        "build_seconds": int(env["total_seconds"]),
        "stages_cached": {
            "kernel": env["kernel_cached"] == "true",
            "initramfs": env["initramfs_cached"] == "true",
        },
    }
    tmp = os.path.join(out, "manifest.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "manifest.json"))


def check(out, input_hash):
    try:
        with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("schema") != SCHEMA or manifest.get("input_hash") != input_hash:
            return 1
        for entry in manifest["outputs"].values():
            if sha256_file(os.path.join(out, entry["path"])) != entry["sha256"]:
                return 1
    except (OSError, ValueError, KeyError, TypeError):
        return 1
    return 0


def main(argv):
    if len(argv) == 6 and argv[1] == "write":
        write(*argv[2:])
        return 0
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
