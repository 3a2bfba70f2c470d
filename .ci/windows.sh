#!/usr/bin/env bash
# Windows: cross-builds for x86_64-pc-windows-gnu with mingw-w64 and runs under Wine, in a
# private Wine prefix:
#
# - the core crate's test suite (the power-loss and I/O-fault sweeps at a smaller size: under
#   Wine every image is a fresh store, many times slower to make than on Linux; their long tiers
#   are the Linux ones), the cross-process and crash tests of tests/ (50 kills with
#   TerminateProcess in each crash-checker scenario, tests/jepsen.rs, and 20 in the crash loop)
#   and the CLI's tests;
# - postbox.dll with its import library, the C and C++ tests against it (mingw's gcc and g++),
#   the C examples, the C + Rust shared-store test;
# - README's shortest C and Rust programs, built with the commands README § Platforms gives;
# - the Python module as a win_amd64 abi3 wheel, its contents checked (a Windows CPython is not
#   available here, so it is not imported).
#
# Tests excluded on Windows are compiled out where they are defined, each with its reason
# (README § Platforms lists them). Wine 8 lacks bcryptprimitives.dll!ProcessPrng, which Rust's
# standard library imports: .ci/windows/processprng.c provides it, built into the prefix.
#
# Installs what it needs: mingw-w64 and Wine from Debian, the Rust target with rustup.
# Knob: POSTBOX_WINDOWS_KILLS (kills per crash-checker scenario, default 50).
set -euxo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
T=x86_64-pc-windows-gnu
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/$T/debug

if ! command -v x86_64-w64-mingw32-gcc >/dev/null || ! command -v x86_64-w64-mingw32-g++-posix >/dev/null \
    || ! command -v wine >/dev/null || ! command -v wineboot >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64 \
        wine wine64 python3-venv
fi
rustup target add "$T"

OUT=$(mktemp -d /tmp/postbox-windows-XXXXXX)
export WINEPREFIX=$OUT/wine WINEDEBUG=-all
trap 'wineserver -k >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT
# The first boot of a fresh prefix once failed at once on the reference machine ("could not
# load kernel32.dll, status c0000135") and worked when run again: boot a fresh prefix once more
# before giving up.
if ! wineboot --init; then
    echo "=== windows: wineboot failed; trying once more with a fresh prefix"
    wineserver -k >/dev/null 2>&1 || true
    rm -rf "$WINEPREFIX"
    wineboot --init
fi
# A wineserver quits a few seconds after its last client, and a `wine` started in that moment
# once lost it ("wine client error:0: recvmsg: Connection reset by peer") before the program
# ran. One persistent server serves the whole script (the EXIT trap ends it); its output goes
# nowhere, or it would hold this script's output pipe open after the script is done.
wineserver -w
wineserver -p </dev/null >/dev/null 2>&1
x86_64-w64-mingw32-gcc -O2 -shared -Wall -Wextra -Werror -o \
    "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" .ci/windows/processprng.c -ladvapi32
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
win() { winepath -w "$1"; }
timed() { # NAME COMMAND...: runs it, then prints how long it took
    local start=$SECONDS
    "${@:2}"
    echo "=== windows: $1 took $((SECONDS - start)) s"
}

# Rust: the core suite, the cross-process and crash tests, the CLI.
# One compaction test races a 5 s give-up against another reader; under Wine, beside the other
# compaction tests on two cores, its first retry once came after 4 s: it runs alone, after.
ALONE=the_report_is_what_compaction_freed_not_concurrent_growth
timed core env POSTBOX_POWERLOSS_VARIANTS=1 POSTBOX_IOFAULT_STEP=9 \
    cargo test -p postbox --target "$T" --locked -- --skip "$ALONE"
timed core-alone cargo test -p postbox --target "$T" --locked --test compact -- --exact "$ALONE"
kills=${POSTBOX_WINDOWS_KILLS:-50}
timed processes env POSTBOX_CRASH_ITERATIONS=20 POSTBOX_JEPSEN_KILLS="$kills" \
    cargo test -p postbox-tests --target "$T" --locked -- --nocapture --test-threads=2
timed cli cargo test -p postbox-cli --target "$T" --locked

# C: postbox.dll, its import library libpostbox.dll.a, and the Rust peers of the C tests.
# The C tests exercise the admin endpoint and the bridge: the library with both features, as
# .ci/c.sh builds it (the default build answers POSTBOX_UNSUPPORTED there).
cargo build -p postbox-ffi --features admin,bridge --target "$T" --locked
cargo build -p postbox-cli --target "$T" --locked
cargo build -p postbox-ffi --features admin,bridge --example pbx_peer --target "$T" --locked
cargo build -p postbox --example typed_json_producer --target "$T" --locked
ls -l "$BIN/postbox.dll" "$BIN/libpostbox.dll.a" "$BIN/postbox.exe" include/postbox.h
cp "$BIN/postbox.dll" "$OUT/"
WARN=(-Wall -Wextra -Werror)
# postbox.dll through its import library, mingw's runtime (winpthreads, libstdc++) linked in:
# the programs need nothing but postbox.dll beside them.
LINK=(-static "$BIN/libpostbox.dll.a")
CC=x86_64-w64-mingw32-gcc
CXX=x86_64-w64-mingw32-g++-posix
c_tests() {
    $CC -std=c99 -pedantic "${WARN[@]}" -Iinclude tests/c/header_check.c "${LINK[@]}" -o "$OUT/header_c.exe"
    $CXX -std=c++11 -pedantic "${WARN[@]}" -x c++ -Iinclude tests/c/header_check.c -x none "${LINK[@]}" \
        -o "$OUT/header_cpp.exe"
    wine "$OUT/header_c.exe"
    wine "$OUT/header_cpp.exe"
    for std in c++17 c++20; do
        $CXX -std=$std -pedantic "${WARN[@]}" -Iinclude tests/cpp/header_check.cpp "${LINK[@]}" \
            -o "$OUT/header_hpp_$std.exe"
        wine "$OUT/header_hpp_$std.exe"
    done
    local t
    for t in test_api test_tracking test_misuse test_admin test_bridge; do
        $CC -std=c99 -g "${WARN[@]}" -Iinclude "tests/c/$t.c" "${LINK[@]}" -lpthread -lws2_32 \
            -o "$OUT/$t.exe"
    done
    $CXX -std=c++17 -g "${WARN[@]}" -Iinclude tests/cpp/test_postbox.cpp "${LINK[@]}" -lpthread \
        -o "$OUT/test_cpp.exe"
    export POSTBOX_PEER POSTBOX_BIN
    POSTBOX_PEER=$(win "$BIN/examples/pbx_peer.exe")
    POSTBOX_BIN=$(win "$BIN/postbox.exe")
    for t in test_api test_tracking test_misuse test_admin test_cpp; do
        wine "$OUT/$t.exe" | tee "$OUT/$t.log"
    done
    env -u POSTBOX_TEST_AMQP wine "$OUT/test_bridge.exe" | tee "$OUT/test_bridge.log"

    # The examples end to end (worker.c waits for POSIX signals: Unix only).
    for ex in producer consumer_tx; do
        $CC -std=c99 "${WARN[@]}" -Iinclude "examples/c/$ex.c" "${LINK[@]}" -lpthread -o "$OUT/$ex.exe"
    done
    local store
    store=$(win "$OUT/demo.postbox")
    wine "$OUT/producer.exe" "$store" orders 5 | tr -d '\r' | grep -c '^sent' | grep -qx 5
    wine "$OUT/consumer_tx.exe" "$store" orders invoices | tr -d '\r' | grep -qx '5 orders invoiced'

    # A C process and a Rust process share one multi-process store: exactly once.
    $CC -std=c99 "${WARN[@]}" -Iinclude tests/c/mp_peer.c "${LINK[@]}" -o "$OUT/mp_peer.exe"
    printf '#!/bin/sh\nexec wine %s "$@"\n' "$OUT/mp_peer.exe" >"$OUT/mp_peer"
    printf '#!/bin/sh\nexec wine %s "$@"\n' "$BIN/examples/pbx_peer.exe" >"$OUT/pbx_peer"
    chmod +x "$OUT/mp_peer" "$OUT/pbx_peer"
    tests/c/cross_process.sh "$OUT/mp_peer" "$OUT/pbx_peer" "${POSTBOX_C_CROSS_COUNT:-1000}"
}
timed c c_tests

# README's shortest programs, with README § Platforms' commands.
snippets() {
    mkdir -p "$OUT/snippet-rust/src" "$OUT/run-c" "$OUT/run-rust"
    python3 .ci/snippet.py c "$OUT/hello.c"
    $CC -std=c11 "${WARN[@]}" -Iinclude "$OUT/hello.c" -L"$BIN" -lpostbox -o "$OUT/run-c/hello.exe"
    cp "$BIN/postbox.dll" "$OUT/run-c/"
    (cd "$OUT/run-c" && wine hello.exe | tr -d '\r' | grep -qx 'processed hello')
    python3 .ci/snippet.py rust "$OUT/snippet-rust/src/main.rs"
    cat >"$OUT/snippet-rust/Cargo.toml" <<TOML
[package]
name = "hello"
version = "0.1.0"
edition = "2024"

[dependencies]
postbox = { path = "$ROOT/core" }

[workspace]
TOML
    cp Cargo.lock "$OUT/snippet-rust/Cargo.lock"
    (cd "$OUT/snippet-rust" && CARGO_TARGET_DIR=$TARGET cargo build -q --target "$T")
    (cd "$OUT/run-rust" && wine "$BIN/hello.exe" | tr -d '\r' | grep -qx 'processed hello')
}
timed snippets snippets

# The Python module: a win_amd64 abi3 wheel (pyo3 links python3.dll through raw-dylib, so no
# import library is needed), checked by its contents: it cannot be imported here. Built in the
# dev profile the tests above use, which shares their build; `--release` makes the one to ship.
wheel() {
    local maturin
    if [ -x python/.venv/bin/maturin ]; then
        maturin=python/.venv/bin/maturin
    else
        python3 -m venv "$OUT/build"
        "$OUT/build/bin/python" -m pip install -q --disable-pip-version-check maturin
        maturin=$OUT/build/bin/maturin
    fi
    "$maturin" build --target "$T" -m python/Cargo.toml -o "$OUT/dist"
    python3 - "$OUT/dist" <<'PY'
import pathlib, sys, zipfile
wheels = list(pathlib.Path(sys.argv[1]).glob("*.whl"))
assert len(wheels) == 1, wheels
w = wheels[0]
assert w.name.startswith("postbox_mq-") and w.name.endswith("-cp39-abi3-win_amd64.whl"), w.name
z = zipfile.ZipFile(w)
names = set(z.namelist())
package = {"__init__.py", "_errors.py", "_typed.py", "aio.py", "_postbox.pyi", "py.typed", "_postbox.pyd"}
missing = {f"postbox/{n}" for n in package} - names
assert not missing, f"missing from the wheel: {missing}"
info = [n for n in names if n.endswith(".dist-info/WHEEL")]
assert len(info) == 1 and "Tag: cp39-abi3-win_amd64" in z.read(info[0]).decode(), info
z.extract("postbox/_postbox.pyd", sys.argv[1])
print(f"wheel: {w.name}, {w.stat().st_size} bytes, {len(names)} files")
PY
    local pyd=$OUT/dist/postbox/_postbox.pyd dump
    dump=$(x86_64-w64-mingw32-objdump -p "$pyd")
    grep -q 'PyInit__postbox' <<<"$dump"
    grep -q 'DLL Name: python3.dll' <<<"$dump"
    # Only system DLLs and python3.dll: no mingw runtime to ship beside it.
    if grep -Ei 'DLL Name: (libgcc|libstdc|libwinpthread|python3[0-9]+\.dll)' <<<"$dump"; then
        echo "the module needs a DLL that Windows does not have"
        exit 1
    fi
}
timed wheel wheel
echo "windows: core, processes, cli, C and C++, snippets and wheel passed"
