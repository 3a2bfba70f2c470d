#!/usr/bin/env bash
# Rust: formatting, lints, docs, and the workspace tests (the Python crate builds through maturin).
set -euxo pipefail
cd "$(dirname "$0")/.."
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo fmt --all --check
# fuzz/ is a workspace of its own, built only by fuzz.sh late in the run: a lock file that a
# dependency change left behind fails here, in the first minute.
cargo metadata --manifest-path fuzz/Cargo.toml --format-version 1 --locked >/dev/null
# The layering of core/src: no import cycle, the engine below the public API.
python3 .ci/layers.py
python3 .ci/test_layers.py
cargo clippy --workspace --all-targets --locked -- -D warnings
# The bindings with their optional features on (the line above builds them without).
cargo clippy -p postbox-ffi -p postbox-python --all-targets --features admin,bridge --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --exclude postbox-python --no-deps --locked
# The broker tests (bridge/, testkit's broker, the bridge command) run in bridge.sh, after
# RabbitMQ is installed.
POSTBOX_BROKER_TESTS=skip cargo test --workspace --exclude postbox-python --exclude postbox-bridge --locked
