#!/usr/bin/env bash
# Concurrency checks: postbox's in-process synchronisation (the commit pipeline's leader
# hand-off, parked receives racing their timeouts, a processor's shutdown) under shuttle's
# random and PCT schedulers. Built with `--cfg shuttle` in a target dir of its own, so the
# normal build's cache stays valid. See docs/design.md § Concurrency checking.
#
# Knobs (environment):
#   POSTBOX_SHUTTLE_ITERATIONS  executions per scheduler and check (default 2000; the long
#                               tier is 100x that: POSTBOX_SHUTTLE_ITERATIONS=200000)
set -euxo pipefail
cd "$(dirname "$0")/.."

export POSTBOX_SHUTTLE_ITERATIONS="${POSTBOX_SHUTTLE_ITERATIONS:-2000}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/shuttle"
export RUSTFLAGS="--cfg shuttle"
cargo clippy -p postbox --all-targets --locked -- -D warnings
cargo test -p postbox --lib --locked concurrency_checking -- --test-threads=2
