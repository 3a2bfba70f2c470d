#!/usr/bin/env bash
# The installable C library: `cargo cinstall` (cargo-c) builds and installs the default
# libpostbox with its SONAME, the headers and postbox.pc into temporary prefixes, once with
# LIBDIR lib and once with the multiarch LIBDIR lib/x86_64-linux-gnu (Debian's); the CMake
# package config and its version file go beside them; then a C program is built once with
# `pkg-config --cflags --libs postbox` and once as a CMake project with
# find_package(postbox 0.1), and both run; find_package(postbox 0.2) and (postbox 1.0) must
# fail.
#
# cargo-c is built from crates.io when missing: Debian's package is too old to read this
# workspace's manifests. The version is the one whose rust-version is the workspace's (1.90):
# cargo-c 0.10.19 (cargo 0.93). It is built unoptimised (`--debug`): it only drives cargo, and
# its optimised build took 11m43s of a CI run on 2 cores.
set -euxo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if ! command -v cmake >/dev/null || ! command -v pkg-config >/dev/null || ! command -v cc >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq cmake pkg-config gcc libc6-dev
fi
cargo_c=${POSTBOX_CARGO_C_VERSION:-0.10.19+cargo-0.93.0}
if ! cargo install --list | grep -qF "cargo-c v$cargo_c:"; then
    cargo install cargo-c --version "$cargo_c" --locked --debug --force
fi
cargo cinstall --version

WORK=$(mktemp -d /tmp/postbox-package-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# One prefix: install, then build and run the program both ways. $1 is LIBDIR under the prefix.
check_prefix() {
    local libdir=$1 prefix
    prefix=$(mktemp -d "$WORK/prefix-XXXXXX")
    cargo cinstall -p postbox-ffi --release --locked --prefix "$prefix" --libdir "$prefix/$libdir"
    for f in postbox-config.cmake postbox-config-version.cmake postbox-dirs.cmake; do
        install -D -m 0644 "cmake/$f" "$prefix/$libdir/cmake/postbox/$f"
    done
    ls -l "$prefix/$libdir" "$prefix/include" "$prefix/$libdir/pkgconfig"

    # The shared library carries a versioned SONAME, and the link name points at it.
    local soname
    soname=$(readelf -d "$prefix/$libdir/libpostbox.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
    echo "SONAME: $soname"
    case "$soname" in libpostbox.so.*) ;; *) echo "no versioned SONAME"; exit 1 ;; esac
    test -e "$prefix/$libdir/$soname"

    # pkg-config.
    PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --modversion postbox
    cc -std=c99 -Wall -Wextra -Werror tests/install/hello.c \
        $(PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --cflags --libs postbox) \
        -o "$prefix/hello_pc"
    (cd "$prefix" && LD_LIBRARY_PATH=$prefix/$libdir ./hello_pc pc.postbox) | grep -qx 'installed libpostbox works'

    # CMake, with the version asked for: 0.1 is found; 0.2 and 1.0 are not this library.
    cmake -S tests/install -B "$prefix/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
    cmake --build "$prefix/cmake"
    (cd "$prefix" && LD_LIBRARY_PATH=$prefix/$libdir ./cmake/hello cmake.postbox) | grep -qx 'installed libpostbox works'
    for want in 0.2 1.0; do
        if cmake -S tests/install -B "$prefix/cmake-$want" -DCMAKE_PREFIX_PATH="$prefix" \
            -DPOSTBOX_WANT="$want" >"$prefix/cmake-$want.log" 2>&1; then
            cat "$prefix/cmake-$want.log"
            echo "find_package(postbox $want) accepted libpostbox $(PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --modversion postbox)"
            exit 1
        fi
        grep -q 'version' "$prefix/cmake-$want.log"
    done
}

check_prefix lib
check_prefix lib/x86_64-linux-gnu
echo "package: cargo cinstall (lib and lib/x86_64-linux-gnu), pkg-config and find_package(postbox 0.1) all work"
