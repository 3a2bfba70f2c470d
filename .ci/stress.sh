#!/usr/bin/env bash
# Stress: the cross-process tests (tests/, crate postbox-tests) in their long versions —
# more processes and messages, many more SIGKILLs — repeated with fresh random seeds.
#
# Knobs (environment):
#   POSTBOX_STRESS             size multiplier for message counts and processes (default 10;
#                              the normal CI run uses 1)
#   POSTBOX_CRASH_ITERATIONS   SIGKILLs in the crash loop (default 20 * POSTBOX_STRESS)
#   POSTBOX_LOG_CRASH_ITERATIONS  SIGKILLs in the write-ahead log's crash loop
#                              (default 12 * POSTBOX_STRESS)
#   POSTBOX_STRESS_ROUNDS      how many times the whole suite runs (default 2)
#   POSTBOX_SEED               fix the crash loop's seed (printed by every run) to replay one
#   POSTBOX_STRESS_PROFILE     cargo profile: dev (default) or release
set -euxo pipefail
cd "$(dirname "$0")/.."

export POSTBOX_STRESS="${POSTBOX_STRESS:-10}"
export POSTBOX_CRASH_ITERATIONS="${POSTBOX_CRASH_ITERATIONS:-$((20 * POSTBOX_STRESS))}"
rounds="${POSTBOX_STRESS_ROUNDS:-2}"
profile="${POSTBOX_STRESS_PROFILE:-dev}"

cargo build -p postbox-tests --all-targets --profile "$profile" --locked
for round in $(seq 1 "$rounds"); do
    echo "=== stress round $round of $rounds (POSTBOX_STRESS=$POSTBOX_STRESS, kills=$POSTBOX_CRASH_ITERATIONS)"
    # One test binary at a time: the tests spawn their own processes, and running the
    # binaries in parallel would only measure the machine's overload.
    cargo test -p postbox-tests --profile "$profile" --locked -- --nocapture --test-threads=2
done
