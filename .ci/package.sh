#!/usr/bin/env bash
# The installable C library: `cargo cinstall` (cargo-c) builds and installs libpostbox with its
# SONAME, the headers and postbox.pc into a temporary prefix; the CMake package config goes
# beside them; then a C program is built once with `pkg-config --cflags --libs postbox` and
# once as a CMake project with find_package(postbox), and both run.
#
# cargo-c is built from crates.io when missing (a few minutes on 2 cores): Debian's package
# is too old to read this workspace's manifests. The version is the last one that supports
# this toolchain (rustc 1.95).
set -euxo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if ! command -v cmake >/dev/null || ! command -v pkg-config >/dev/null || ! command -v cc >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq cmake pkg-config gcc libc6-dev
fi
if ! cargo cinstall --version >/dev/null 2>&1; then
    cargo install cargo-c --version "${POSTBOX_CARGO_C_VERSION:-0.10.24+cargo-0.98.0}" --locked
fi

PREFIX=$(mktemp -d /tmp/postbox-prefix-XXXXXX)
WORK=$(mktemp -d /tmp/postbox-package-XXXXXX)
trap 'rm -rf "$PREFIX" "$WORK"' EXIT

cargo cinstall -p postbox-ffi --release --locked --prefix "$PREFIX" --libdir "$PREFIX/lib"
install -D -m 0644 cmake/postbox-config.cmake "$PREFIX/lib/cmake/postbox/postbox-config.cmake"
ls -l "$PREFIX/lib" "$PREFIX/include" "$PREFIX/lib/pkgconfig"

# The shared library carries a versioned SONAME, and the link name points at it.
soname=$(readelf -d "$PREFIX/lib/libpostbox.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
echo "SONAME: $soname"
case "$soname" in libpostbox.so.*) ;; *) echo "no versioned SONAME"; exit 1 ;; esac
test -e "$PREFIX/lib/$soname"

# pkg-config.
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
pkg-config --modversion postbox
cc -std=c99 -Wall -Wextra -Werror tests/install/hello.c $(pkg-config --cflags --libs postbox) -o "$WORK/hello_pc"
(cd "$WORK" && LD_LIBRARY_PATH=$PREFIX/lib ./hello_pc pc.postbox) | grep -qx 'installed libpostbox works'

# CMake.
cmake -S tests/install -B "$WORK/cmake" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release
cmake --build "$WORK/cmake"
(cd "$WORK" && LD_LIBRARY_PATH=$PREFIX/lib ./cmake/hello cmake.postbox) | grep -qx 'installed libpostbox works'
echo "package: cargo cinstall, pkg-config and find_package(postbox) all work"
