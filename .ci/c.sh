#!/usr/bin/env bash
# C API: builds the default libpostbox (no optional features) and checks that its admin and
# bridge exports answer POSTBOX_UNSUPPORTED with the build command; then builds libpostbox with
# the `admin` and `bridge` features, compiles include/postbox.h as C99 and as C++ with -Wall -Wextra
# -Werror, builds the examples and the workload-A benchmark, runs the C test suite under valgrind
# (shared library) and again against the static library, runs the misuse suite under
# AddressSanitizer + UBSan and valgrind, runs the examples end to end (with a
# SIGINT shutdown of the worker), and the C + Rust shared-store test. The C++ wrapper
# include/postbox.hpp: compiled alone with -pedantic, and its test program run under ASan + UBSan.
#
# Knobs: POSTBOX_C_CROSS_COUNT (messages of the shared-store test), POSTBOX_C_FORK_ROUNDS (forks
# during commits), POSTBOX_C_DISKFULL_STEPS and POSTBOX_C_DISKFULL_MB (the full-disk test's
# rounds and tmpfs size; that test mounts a tmpfs, so it needs root, and says SKIPPED without),
# POSTBOX_C_STRESS (sizes of tests/c/test_tracking.c: small under valgrind; the static run uses
# the issue's sizes, 1, unless set). tests/c/test_processor_calls.c (a processor callback's
# checkpoints across a SIGKILL, its replies, the report of a forked child) runs as
# tests/c/test_tracking.c does: under valgrind, then against the static library.
set -euxo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

if ! command -v valgrind >/dev/null || ! command -v cc >/dev/null || ! command -v c++ >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq valgrind gcc g++ libc6-dev
fi

LIB=${CARGO_TARGET_DIR:-$ROOT/target}/debug
PEER=$LIB/examples/pbx_peer
OUT=$(mktemp -d /tmp/postbox-c-ci-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
WARN=(-Wall -Wextra -Werror)
extra_passed=0

# The default library (README, "Features and defaults"): the admin endpoint and the bridge are
# left out, and their exports say so (tests/c/test_features.c, under ASan + UBSan), shared and
# static.
cargo build -p postbox-ffi
cargo test -q -p postbox-ffi
mkdir "$OUT/lean"
cp "$LIB/libpostbox.so" "$LIB/libpostbox.a" "$OUT/lean/"
cc -std=c99 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
    "${WARN[@]}" -Iinclude tests/c/test_features.c -L"$OUT/lean" -lpostbox -lpthread \
    -o "$OUT/test_features"
LD_LIBRARY_PATH=$OUT/lean ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$OUT/test_features" | tee "$OUT/features_asan.log"
cc -std=c99 "${WARN[@]}" -Iinclude tests/c/test_features.c "$OUT/lean/libpostbox.a" \
    -Wl,--gc-sections -lpthread -ldl -lm -o "$OUT/test_features_static"
"$OUT/test_features_static" | tee "$OUT/features_static.log"

# Everything else runs against the library with both features on.
cargo build -p postbox-ffi --features admin,bridge
cargo test -q -p postbox-ffi --features admin,bridge
cargo build -p postbox-ffi --features admin,bridge --example pbx_peer
# The Rust producer of typed bodies (typed_body_from_rust finds it beside pbx_peer).
cargo build -p postbox --example typed_json_producer

# The header, as C99 and as C++.
cc -std=c99 -pedantic "${WARN[@]}" -Iinclude tests/c/header_check.c -L"$LIB" -lpostbox -o "$OUT/header_c"
c++ -std=c++11 -pedantic "${WARN[@]}" -x c++ -Iinclude tests/c/header_check.c -L"$LIB" -lpostbox -o "$OUT/header_cpp"
LD_LIBRARY_PATH=$LIB "$OUT/header_c"
LD_LIBRARY_PATH=$LIB "$OUT/header_cpp"
extra_passed=$((extra_passed + 2))
# The C++ wrapper alone (its templates instantiated), as C++17 and as C++20 (std::span bodies).
for std in c++17 c++20; do
    c++ -std=$std -pedantic "${WARN[@]}" -Iinclude tests/cpp/header_check.cpp -L"$LIB" -lpostbox \
        -o "$OUT/header_hpp_$std"
    LD_LIBRARY_PATH=$LIB "$OUT/header_hpp_$std"
done
extra_passed=$((extra_passed + 2))

# Examples, the peers and the benchmark compile cleanly.
for ex in producer consumer_tx worker; do
    cc -std=c99 "${WARN[@]}" -Iinclude "examples/c/$ex.c" -L"$LIB" -lpostbox -lpthread -o "$OUT/$ex"
done
cc -std=c99 "${WARN[@]}" -Iinclude tests/c/mp_peer.c -L"$LIB" -lpostbox -o "$OUT/mp_peer"
cc -O2 -std=c11 "${WARN[@]}" -Iinclude benches/compare/c/workload_a.c -L"$LIB" -lpostbox -o "$OUT/workload_a"

# The test suites against the shared library, under valgrind: zero errors, zero leaks (the
# suppressions file lists the Rust runtime's one-time allocations, each explained). Valgrind
# runs all of a process's threads on one core, so the suites run in two lanes side by side:
# test_api split in two (POSTBOX_C_SHARD, tests/c/harness.h), and test_tracking and
# test_processor_calls after the half without disk_full, which alone takes 2.5 minutes under
# valgrind (each test's time is on its stderr). Each suite's output goes to its log, shown
# when both lanes are done.
cc -std=c99 -g "${WARN[@]}" -Iinclude tests/c/test_api.c -L"$LIB" -lpostbox -lpthread -o "$OUT/test_api"
cc -std=c99 -g "${WARN[@]}" -Iinclude tests/c/test_tracking.c -L"$LIB" -lpostbox -lpthread -o "$OUT/test_tracking"
cc -std=c99 -g "${WARN[@]}" -Iinclude tests/c/test_processor_calls.c -L"$LIB" -lpostbox -lpthread \
    -o "$OUT/test_processor_calls"
under_valgrind() { # LOG PROGRAM: the suite under valgrind, both its streams in $OUT/LOG
    valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect,possible \
        --error-exitcode=99 --suppressions=tests/c/valgrind.supp "$2" >"$OUT/$1" 2>&1
}
(
    export LD_LIBRARY_PATH=$LIB POSTBOX_PEER=$PEER
    POSTBOX_C_SHARD=0/2 under_valgrind api0_shared.log "$OUT/test_api"
    under_valgrind tracking_shared.log "$OUT/test_tracking"
    under_valgrind processor_calls_shared.log "$OUT/test_processor_calls"
) &
lane_a=$!
(
    export LD_LIBRARY_PATH=$LIB POSTBOX_PEER=$PEER
    POSTBOX_C_SHARD=1/2 under_valgrind api1_shared.log "$OUT/test_api"
) &
lane_b=$!
lanes_ok=1
wait "$lane_a" || lanes_ok=0
wait "$lane_b" || lanes_ok=0
for log in api0 api1 tracking processor_calls; do
    if [ -f "$OUT/${log}_shared.log" ]; then
        echo "--- $log under valgrind"
        cat "$OUT/${log}_shared.log"
    fi
done
[ "$lanes_ok" = 1 ] || { echo "a suite under valgrind failed: its output is above"; exit 1; }

# The misuse suite (tests/c/test_misuse.c): the C side under AddressSanitizer and
# UndefinedBehaviorSanitizer, with LeakSanitizer on. libpostbox itself is not instrumented, but
# ASan's allocator interposes its malloc and free, so a handle or buffer the library leaks, frees
# twice or that C overruns is reported; any report fails the run (ASan and LSan exit non-zero,
# UBSan aborts). No LSan suppressions are needed: what valgrind.supp lists is reachable to LSan,
# which counts interior pointers.
cc -std=c99 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
    "${WARN[@]}" -Iinclude tests/c/test_misuse.c -L"$LIB" -lpostbox -lpthread -o "$OUT/test_misuse_asan"
LD_LIBRARY_PATH=$LIB ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$OUT/test_misuse_asan" | tee "$OUT/misuse_asan.log"
# And under valgrind, which also sees inside the library (about a minute).
cc -std=c99 -g "${WARN[@]}" -Iinclude tests/c/test_misuse.c -L"$LIB" -lpostbox -lpthread -o "$OUT/test_misuse"
LD_LIBRARY_PATH=$LIB valgrind -q --leak-check=full \
    --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
    --suppressions=tests/c/valgrind.supp "$OUT/test_misuse" | tee "$OUT/misuse_shared.log"

# The admin endpoint served from C, reached by the real `postbox` command and by plain HTTP;
# under ASan + UBSan for the C side.
cargo build -p postbox-cli
cc -std=c99 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
    "${WARN[@]}" -Iinclude tests/c/test_admin.c -L"$LIB" -lpostbox -lpthread -o "$OUT/test_admin"
LD_LIBRARY_PATH=$LIB ASAN_OPTIONS=detect_leaks=1 POSTBOX_BIN=$LIB/postbox "$OUT/test_admin" \
    | tee "$OUT/admin_asan.log"

# The RabbitMQ bridge started from C (tests/c/test_bridge.c), under ASan + UBSan: its part
# without a broker (bad configurations, a broker nobody answers for, stop). .ci/bridge.sh runs
# it again through tests/c/run_bridge.sh with POSTBOX_TEST_AMQP set to a real broker.
cc -std=c99 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
    "${WARN[@]}" -Iinclude tests/c/test_bridge.c -L"$LIB" -lpostbox -lpthread -o "$OUT/test_bridge"
env -u POSTBOX_TEST_AMQP LD_LIBRARY_PATH=$LIB ASAN_OPTIONS=detect_leaks=1 \
    UBSAN_OPTIONS=print_stacktrace=1 "$OUT/test_bridge" | tee "$OUT/bridge_asan.log"

# The C++ wrapper's test program (tests/cpp/test_postbox.cpp) under ASan + UBSan with
# LeakSanitizer: a double free after a move, a leaked handle or an exception escaping a
# processor trampoline fails it.
c++ -std=c++17 -g "${WARN[@]}" -fsanitize=address,undefined -fno-omit-frame-pointer \
    -fno-sanitize-recover=all -Iinclude tests/cpp/test_postbox.cpp -L"$LIB" -lpostbox -lpthread \
    -o "$OUT/test_cpp_asan"
LD_LIBRARY_PATH=$LIB ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$OUT/test_cpp_asan" | tee "$OUT/cpp_asan.log"

# The same suite linked against the static library.
cc -std=c99 "${WARN[@]}" -Iinclude tests/c/test_api.c "$LIB/libpostbox.a" -lpthread -ldl -lm -o "$OUT/test_api_static"
POSTBOX_PEER=$PEER "$OUT/test_api_static" | tee "$OUT/static.log"
cc -std=c99 "${WARN[@]}" -Iinclude tests/c/test_tracking.c "$LIB/libpostbox.a" -lpthread -ldl -lm -o "$OUT/test_tracking_static"
POSTBOX_PEER=$PEER POSTBOX_C_STRESS=${POSTBOX_C_STRESS:-1} "$OUT/test_tracking_static" | tee "$OUT/tracking_static.log"
cc -std=c99 "${WARN[@]}" -Iinclude tests/c/test_processor_calls.c "$LIB/libpostbox.a" -lpthread -ldl -lm \
    -o "$OUT/test_processor_calls_static"
"$OUT/test_processor_calls_static" | tee "$OUT/processor_calls_static.log"

# The examples end to end: produce 5 orders, invoice them in transactions, then a processor
# worker handles the invoices and shuts down gracefully on SIGINT.
export LD_LIBRARY_PATH=$LIB
store=$OUT/demo.postbox
"$OUT/producer" "$store" orders 5 | grep -c '^sent' | grep -qx 5
"$OUT/consumer_tx" "$store" orders invoices | grep -qx '5 orders invoiced'
"$OUT/worker" "$store" invoices 2 >"$OUT/worker.out" 2>"$OUT/worker.err" &
worker=$!
for _ in $(seq 1 300); do
    [ "$(grep -c '^handled' "$OUT/worker.out" || true)" = 5 ] && break
    sleep 0.1
done
kill -INT "$worker"
wait "$worker"
grep -q 'finished; processed 5, failed 0' "$OUT/worker.err"
extra_passed=$((extra_passed + 1))

# A C process and a Rust process share one multi-process store: exactly-once processing.
tests/c/cross_process.sh "$OUT/mp_peer" "$PEER" "${POSTBOX_C_CROSS_COUNT:-1000}"
extra_passed=$((extra_passed + 1))

counts() { # FIELD: sums field 1 (passed) or 2 (failed) of the suites' closing lines
    sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\'"$1"'/p' "$OUT"/*shared.log "$OUT"/*static.log \
        "$OUT"/*asan.log | paste -sd+
}
passed=$(($(counts 1) + extra_passed))
failed=$(($(counts 2)))
echo "c: $passed passed, $failed failed"
