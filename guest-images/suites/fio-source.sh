#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Unpacks Debian's fio source package (the version guest-images/build.sh builds fio
# from) into guest-images/build/fio-suite-src/VERSION/src, for fio's own test suite
# (`--put .../src/t:/job/fio/t`, see fio-suite.sh), and prints that src directory.
# A cached image build leaves no fio source behind; this needs the deb-src entry that
# build.sh adds. Cached: a second run only prints the path.
set -eu -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=$(apt-cache showsrc fio 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -n 1)
if [ -z "$version" ]; then
    echo "fio-source.sh: apt-cache showsrc fio finds nothing; run guest-images/build.sh first (it adds the deb-src entry)" >&2
    exit 1
fi
dir="$here/../build/fio-suite-src/$version"
if [ ! -f "$dir/src/t/run-fio-tests.py" ]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    (
        cd "$dir"
        apt-get source -qq -o APT::Sandbox::User=root --download-only "fio=$version" >/dev/null
        dpkg-source -x --no-check ./*.dsc src >/dev/null
        rm -f ./*.dsc ./*.tar.* 
    )
fi
cd "$dir/src" && pwd
