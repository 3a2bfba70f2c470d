#!/usr/bin/env bash
# Fuzzing: replays fuzz/regressions/ on stable, then builds every cargo-fuzz target (nightly,
# libFuzzer, AddressSanitizer) and runs each for POSTBOX_FUZZ_SECONDS, two at a time. Fails on
# any crash, panic, leak of the limits below, or timeout; the input that did it is kept under
# fuzz/artifacts/<target>/ (replay: cargo +nightly fuzz run <target> <file>).
#
# Knobs (environment):
#   POSTBOX_FUZZ_SECONDS   seconds per target (default 60)
#   POSTBOX_FUZZ_JOBS      targets run at once (default: the number of CPUs, at most 2)
#   POSTBOX_FUZZ_TARGETS   space-separated subset of targets (default: all)
set -euxo pipefail
cd "$(dirname "$0")/.."

seconds="${POSTBOX_FUZZ_SECONDS:-60}"
cpus="$(nproc 2>/dev/null || echo 2)"
jobs="${POSTBOX_FUZZ_JOBS:-$(( cpus < 2 ? 1 : 2 ))}"
targets=(${POSTBOX_FUZZ_TARGETS:-records typed_body open_store queue_model c_api})

# Every committed regression input, through the same logic, without nightly.
cargo test --manifest-path fuzz/Cargo.toml -p postbox-fuzz-harness --locked

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

cd fuzz
cargo +nightly fuzz build
bin="${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# One target: a fresh corpus seeded with its regressions (and a local corpus, if any).
# -rss_limit_mb: a decoder that believes a damaged length allocates far past this.
# -timeout: one input runs in milliseconds; 60 s is a hang even on a loaded machine (one
# open_store input once took 36 s at a load of 10 on 2 cores and never again; see
# fuzz/regressions/open_store/hung-once-in-try-receive-unreproduced).
run_target() {
    local t="$1" corpus="$work/corpus-$1"
    mkdir -p "$corpus" "artifacts/$t"
    local seeds=()
    [ -d "regressions/$t" ] && seeds+=("regressions/$t")
    [ -d "corpus/$t" ] && seeds+=("corpus/$t")
    # The stateful targets run a few executions a second: growing the input length from a
    # few bytes, as libFuzzer does by default, would keep their operation sequences trivial.
    local len=()
    case "$t" in open_store|queue_model|c_api) len=(-len_control=0 -max_len=2048) ;; esac
    if "$bin/$t" "$corpus" "${seeds[@]}" "${len[@]}" -artifact_prefix="artifacts/$t/" \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=60 -print_final_stats=1 \
        >"$work/$t.log" 2>&1; then
        echo "ok" >"$work/$t.status"
    else
        echo "FAILED" >"$work/$t.status"
    fi
}

running=0
for t in "${targets[@]}"; do
    run_target "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait

set +x
failed=()
for t in "${targets[@]}"; do
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)"
    status="$(cat "$work/$t.status" 2>/dev/null || echo FAILED)"
    echo "fuzz $t: ${execs:-?} executions in ${seconds} s: $status"
    if [ "$status" != ok ]; then
        failed+=("$t")
        tail -n 60 "$work/$t.log"
    fi
done
if [ ${#failed[@]} -ne 0 ]; then
    echo "fuzz targets that failed: ${failed[*]} (inputs under fuzz/artifacts/)"
    exit 1
fi
