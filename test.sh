#!/usr/bin/env bash
# Runs every test of postbox — Rust, C and Python — on a fresh machine. CI runs exactly this.
# Each concern lives in its own script under .ci/ and installs what it needs itself.
set -euo pipefail
cd "$(dirname "$0")"

scripts=(rust apple header c package python idle wheel sizes snippets windows dashboard bridge stress fuzz concurrency bench-smoke)

# The stress concern runs a CI-sized pass (20 SIGKILLs in the crash loop, 40 per crash-checker
# scenario, one round) and fuzzing 30 s per target, unless asked for more, e.g.
# POSTBOX_STRESS=10 POSTBOX_STRESS_ROUNDS=2 POSTBOX_FUZZ_SECONDS=600 ./test.sh; the other
# concerns run their defaults. (The Windows concern's crash runs add 100 kills under Wine.)
stress_env=(POSTBOX_STRESS="${POSTBOX_STRESS:-1}" POSTBOX_STRESS_ROUNDS="${POSTBOX_STRESS_ROUNDS:-1}")
fuzz_env=(POSTBOX_FUZZ_SECONDS="${POSTBOX_FUZZ_SECONDS:-30}")
# CI builds once from a clean clone, so incremental state (2 GB) would only fill the disk.
if [ -n "${CI:-}" ]; then
  export CARGO_INCREMENTAL=0
fi
disk() { df -h . | awk 'NR == 2 { print "=== disk: " $4 " free of " $2 }'; }
disk
failed=()
for s in "${scripts[@]}"; do
  f=".ci/$s.sh"
  if [ ! -f "$f" ]; then
    echo "=== $f is missing"
    failed+=("$s")
    continue
  fi
  echo "=== $f"
  start=$SECONDS
  env_for=()
  [ "$s" = stress ] && env_for=("${stress_env[@]}")
  [ "$s" = fuzz ] && env_for=("${fuzz_env[@]}")
  if env "${env_for[@]}" bash "$f"; then
    echo "=== $f passed in $((SECONDS - start)) s"
  else
    echo "=== $f FAILED after $((SECONDS - start)) s"
    failed+=("$s")
  fi
  disk
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "failed concerns: ${failed[*]}"
  exit 1
fi
echo "all concerns passed"
