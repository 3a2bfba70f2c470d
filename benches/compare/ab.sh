#!/usr/bin/env bash
# Single-caller A/B: workload A per-message (one client, 1 KiB, durable) for postbox with the
# write-ahead log, postbox without it, plain SQLite WAL FULL and persist-queue, in alternating
# rounds so that the disk's drift hits every system alike; prints each phase's median and
# per-round rates, and the median of the per-round ratios against SQLite.
#
#   benches/compare/ab.sh
#
# Knobs: POSTBOX_AB_ROUNDS (6), POSTBOX_AB_COUNT (messages per round, 5000). Needs the
# harness's Python environment: run benches/compare/run.sh once first.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=$HERE/.work/venv/bin/python
ROUNDS=${POSTBOX_AB_ROUNDS:-6}
COUNT=${POSTBOX_AB_COUNT:-5000}
[ -x "$PY" ] || { echo "run benches/compare/run.sh once first (it sets up $PY)" >&2; exit 1; }
(cd "$ROOT" && cargo build -q --profile bench -p postbox-benches --bin postbox-compare)
BIN=$ROOT/target/release/postbox-compare
DIR=$(mktemp -d "$HERE/.work/ab-XXXXXX")
OUT=$DIR/results
trap 'rm -rf "$DIR"' EXIT
one() { # LABEL command...
    local label=$1
    shift
    rm -rf "$DIR/d" && mkdir -p "$DIR/d"
    "$@" --dir "$DIR/d" --workload A --count "$COUNT" 2>/dev/null | sed "s/^/$label /" >>"$OUT"
}
for _ in $(seq 1 "$ROUNDS"); do
    one log "$BIN" --class per-message
    one no-log "$BIN" --class per-message --no-log
    one sqlite-wal-full "$PY" "$HERE/peers.py" --peer sqlite-wal-full
    one persist-queue "$PY" "$HERE/peers.py" --peer persist-queue
done
"$PY" - "$OUT" <<'EOF'
import collections, json, statistics, sys
rates = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    d = json.loads(js)
    rates[d["phase"]][who].append(d["msgs_per_s"])
for phase, by in rates.items():
    print(f"{phase}:")
    for who, v in by.items():
        print(f"  {who:16} median {statistics.median(v):8,.0f}/s  rounds {[round(x) for x in v]}")
    # The consume loop (one commit per message) is compared with SQLite's receive+complete.
    ref = rates["receive+complete"]["sqlite-wal-full"] if phase == "consume loop" else by.get("sqlite-wal-full")
    if ref and "log" in by:
        ratios = [a / b for a, b in zip(by["log"], ref)]
        print(f"  log / sqlite-wal-full per round: median {statistics.median(ratios):.2f}x "
              f"{[round(r, 2) for r in ratios]}")
EOF
