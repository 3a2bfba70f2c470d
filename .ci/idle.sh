#!/usr/bin/env bash
# Idle wake-ups (invariant 15, "silent when idle"): tests/idle/measure.py starts every idle
# scenario — store open, waiting receives (Rust, C, Python on the main thread and another
# thread, postbox.aio), idle processors; single- and multi-process stores — as its own process
# and counts its threads' context switches from /proc over a 10 s window (all rows side by
# side, so the whole run takes about the window). Fails when a row exceeds 1 wake-up/s (5/s
# for the Python main-thread receive). Prints the table.
#
# Knob: POSTBOX_IDLE_WINDOW (seconds, default 10, the issue's window; shorter makes each
# wake-up count more, so the bound stays meaningful down to a few seconds).
# Needs the Python venv of python.sh (built here the same way if missing). Linux only.
set -euxo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if [ ! -d /proc/self/task ]; then
    echo "SKIPPED: idle wake-ups are counted from Linux's /proc"
    exit 0
fi
if ! command -v cc >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq gcc libc6-dev
fi

cargo build -q -p postbox-tests --bin pbx-idle
cargo build -q -p postbox-ffi
LIB=${CARGO_TARGET_DIR:-$ROOT/target}/debug
OUT=$(mktemp -d /tmp/postbox-idle-ci-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
cc -std=c99 -Wall -Wextra -Werror -Iinclude tests/idle/idle.c -L"$LIB" -lpostbox -o "$OUT/idle"

venv=python/.venv
py=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
    if ! "$py" -m venv "$venv"; then
        apt-get update -qq && apt-get install -y -qq python3-venv python3-pip
        "$py" -m venv "$venv"
    fi
fi
if ! "$venv/bin/python" -c "import postbox" 2>/dev/null; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check maturin
    PATH="$PWD/$venv/bin:$PATH" "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
        --force-reinstall --no-deps ./python
fi

LD_LIBRARY_PATH=$LIB python3 tests/idle/measure.py \
    --rust "$LIB/pbx-idle" --c "$OUT/idle" --python "$venv/bin/python" \
    --window "${POSTBOX_IDLE_WINDOW:-10}"
