#!/usr/bin/env bash
# Header drift: regenerates include/postbox.h from ffi/src with cbindgen and fails when it
# differs from the committed header (commit the regenerated header to fix).
set -euxo pipefail
cd "$(dirname "$0")/.."

CBINDGEN_VERSION=0.29.4 # pinned: another version may format the header differently
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v cbindgen >/dev/null || [ "$(cbindgen --version)" != "cbindgen $CBINDGEN_VERSION" ]; then
    cargo install cbindgen --version "$CBINDGEN_VERSION" --locked
fi

generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
cbindgen --quiet --config ffi/cbindgen.toml --crate postbox-ffi --output "$generated" ffi
if ! diff -u include/postbox.h "$generated"; then
    echo "include/postbox.h is out of date: run .ci/header.sh's cbindgen line with --output include/postbox.h and commit it" >&2
    exit 1
fi
echo "header: include/postbox.h matches ffi/src"
