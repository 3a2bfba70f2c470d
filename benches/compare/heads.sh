#!/usr/bin/env bash
# Two heads of postbox in one run: builds the criterion suite of each revision in a worktree of
# its own, then runs the two binaries in alternating rounds (A B B A …) so that the disk's drift
# hits both alike, and prints each benchmark's median throughput per head and the median of the
# per-round ratios (new / old).
#
#   benches/compare/heads.sh OLD_REV [NEW_REV]        # NEW_REV defaults to the work tree
#
# Knobs: POSTBOX_HEADS_ROUNDS (4), POSTBOX_HEADS_FILTER (criterion's regex; default the
# single-caller and 8-sender send, receive+complete and batch rows of the durable setup),
# POSTBOX_HEADS_WORK (where worktrees and targets go; default target/heads).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OLD=${1:?usage: heads.sh OLD_REV [NEW_REV]}
NEW=${2:-}
ROUNDS=${POSTBOX_HEADS_ROUNDS:-4}
FILTER=${POSTBOX_HEADS_FILTER:-'^(send|receive_complete|send_batch100|receive_batch100_complete)/sp-durable/1KiB/t(1|8)$'}
WORK=${POSTBOX_HEADS_WORK:-$ROOT/target/heads}
mkdir -p "$WORK"

build() { # REV|"" -> prints the path of the bench binary
    local rev=$1 src=$ROOT name=work
    if [ -n "$rev" ]; then
        name=$(git -C "$ROOT" rev-parse --short "$rev")
        src=$WORK/src-$name
        [ -d "$src" ] || git -C "$ROOT" worktree add -q --detach "$src" "$rev"
    fi
    (cd "$src" && CARGO_TARGET_DIR=$WORK/target-$name cargo bench -q -p postbox-benches \
        --bench queue --no-run --message-format=json 2>/dev/null) |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "queue":
        print(m["executable"])'
}
A=$(build "$OLD")
B=$(build "$NEW")
[ -x "$A" ] && [ -x "$B" ] || { echo "build failed" >&2; exit 1; }
OUT=$(mktemp "$WORK/results-XXXXXX")
run() { # LABEL BIN
    # The wake-up and paired-target parts run whatever the filter: one short round of each.
    # The filtered run's summary stays here, not where run.sh publishes the full suite's.
    POSTBOX_BENCH_PAIR_ROUNDS=1 POSTBOX_BENCH_SUMMARY=$WORK/summary-$1.md \
        CRITERION_HOME=$WORK/criterion-$1 "$2" --bench "$FILTER" 2>/dev/null |
        sed "s/^/$1 /" >>"$OUT"
}
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then run old "$A"; run new "$B"; else run new "$B"; run old "$A"; fi
done
python3 - "$OUT" "$ROUNDS" <<'EOF'
import collections, re, statistics, sys
unit = {"elem/s": 1, "Kelem/s": 1e3, "Melem/s": 1e6, "Gelem/s": 1e9}
rates = collections.defaultdict(lambda: collections.defaultdict(list))
last = {}
for line in open(sys.argv[1]):
    who, _, rest = line.rstrip("\n").partition(" ")
    m = re.match(r"^(\S+/\S+)", rest)
    if m and not rest.startswith(" "):
        last[who] = m.group(1)
    t = re.search(r"thrpt:\s+\[\S+\s+\S+\s+(\S+)\s+(\S*elem/s)", rest)
    if t and who in last:
        rates[last[who]][who].append(float(t.group(1)) * unit[t.group(2)])
print(f"{'benchmark':52} {'old/s':>10} {'new/s':>10}  new/old per round (median)")
for bench in sorted(rates):
    old, new = rates[bench]["old"], rates[bench]["new"]
    if not old or not new:
        continue
    ratios = [n / o for n, o in zip(new, old)]
    print(f"{bench:52} {statistics.median(old):10,.0f} {statistics.median(new):10,.0f}  "
          f"{statistics.median(ratios):.2f}x {[round(x, 2) for x in ratios]}")
EOF
mv "$OUT" "$WORK/last-run.txt" # the raw criterion output, for a second look
