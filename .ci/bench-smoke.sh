#!/usr/bin/env bash
# Compiles the benchmarks (criterion suite and comparison binaries) without running them, so CI
# catches bit-rot. A debug build reuses what the test jobs already compiled; a release build of
# the benches takes minutes on 2 cores.
set -euxo pipefail
cd "$(dirname "$0")/.."
cargo build -p postbox-benches --all-targets
bash -n benches/compare/run.sh
python3 -m py_compile benches/compare/peers.py benches/compare/render.py
