#!/usr/bin/env bash
# Apple systems: no macOS SDK runs here, so every library and binary crate of the workspace is
# type-checked (`cargo check`) and linted (`cargo clippy -D warnings`, which reuses the check's
# work on the dependencies) for aarch64-apple-darwin and x86_64-apple-darwin. Test, bench and
# example targets are left out: their dev-dependencies (criterion's alloca) build C code, which
# needs the SDK's headers and linker. Nothing is linked or run.
set -euxo pipefail
cd "$(dirname "$0")/.."

for target in aarch64-apple-darwin x86_64-apple-darwin; do
    rustup target add "$target"
    start=$SECONDS
    cargo check --workspace --lib --bins --target "$target" --locked
    cargo clippy --workspace --lib --bins --target "$target" --locked -- -D warnings
    echo "=== apple: $target took $((SECONDS - start)) s"
done
echo "apple: every library and binary crate type-checks and lints clean on both targets"
