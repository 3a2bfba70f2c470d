#!/usr/bin/env bash
# Builds tests/c/test_bridge.c (the flags of .ci/c.sh, under AddressSanitizer + UBSan with
# LeakSanitizer) against an already built libpostbox and runs it. With POSTBOX_TEST_AMQP set to
# a broker's URI (amqp://user:password@host:port/vhost) it also carries messages through that
# broker; without, that part says it was skipped.
#
# Usage: tests/c/run_bridge.sh [LIBDIR [TEST-NAME-FILTER]]
#        LIBDIR holds libpostbox.so (default: $CARGO_TARGET_DIR/debug, else target/debug; build
#        it first with `cargo build -p postbox-ffi --features bridge`). The last line is "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
LIB=${1:-${CARGO_TARGET_DIR:-$ROOT/target}/debug}
[ $# -gt 0 ] && shift
if [ ! -e "$LIB/libpostbox.so" ]; then
    echo "run_bridge.sh: no libpostbox.so in $LIB (cargo build -p postbox-ffi --features bridge)" >&2
    exit 2
fi
OUT=$(mktemp -d /tmp/postbox-c-bridge-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
cc -std=c99 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all \
    -Wall -Wextra -Werror -Iinclude tests/c/test_bridge.c -L"$LIB" -lpostbox -lpthread \
    -o "$OUT/test_bridge"
LD_LIBRARY_PATH=$LIB ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$OUT/test_bridge" "$@"
