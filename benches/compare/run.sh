#!/usr/bin/env bash
# The comparison harness: postbox against what its users would pick instead, same machine,
# same run. Prints one table and writes BENCHMARKS.md at the repository root.
#
#   benches/compare/run.sh
#
# Knobs (environment): POSTBOX_COMPARE_COUNT (workload A size, 20000), POSTBOX_COMPARE_CAP
# (seconds a phase of A may take before it stops and reports its rate so far, 15),
# POSTBOX_COMPARE_SECONDS (workload B window, 10), POSTBOX_COMPARE_ONLY (comma-separated
# systems to run, for development), POSTBOX_COMPARE_OUT (the markdown file, BENCHMARKS.md),
# POSTBOX_COMPARE_BUILD_PY=0 (do not try to build the Python binding when `import postbox` fails),
# POSTBOX_COMPARE_RECOVERY_MESSAGES (messages of the large store whose open after kill -9 is
# timed, 1000000), POSTBOX_COMPARE_C_ROUNDS (rounds of workload A through C alternating with
# Rust, 4), POSTBOX_COMPARE_C_BATCHED_COUNT (messages of each batched round, 150000). After the workloads, `postbox-latency` times each of ~12 s of single-thread
# sends across write-ahead log checkpoints beside the fsync probe's per-sync latency (~20 s).
# Last, the RabbitMQ bridge's benchmark (system name `bridge` in
# POSTBOX_COMPARE_ONLY) appends its table.
#
# Everything the script installs goes to benches/compare/.work (git-ignored) or comes from
# apt; servers it starts listen on 127.0.0.1 only and are stopped on exit.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=$HERE/.work
mkdir -p "$WORK"
COUNT=${POSTBOX_COMPARE_COUNT:-20000}
CAP=${POSTBOX_COMPARE_CAP:-15}
SECS=${POSTBOX_COMPARE_SECONDS:-10}
ONLY=${POSTBOX_COMPARE_ONLY:-}
OUT=${POSTBOX_COMPARE_OUT:-$ROOT/BENCHMARKS.md}
REDIS_PORT=${POSTBOX_COMPARE_REDIS_PORT:-6390}
AMQP_PORT=${POSTBOX_COMPARE_AMQP_PORT:-5682}
# A partial run (POSTBOX_COMPARE_ONLY) keeps its results apart, so the last full run's stay
# there to be rendered again: python3 benches/compare/render.py .work/results-full.jsonl
# .work/status-full.jsonl .work/meta-full.json target/postbox-bench-summary.md OUT.md
RUN_KIND=full
[ -z "$ONLY" ] || RUN_KIND=partial
RESULTS=$WORK/results-$RUN_KIND.jsonl
STATUS=$WORK/status-$RUN_KIND.jsonl
META=$WORK/meta-$RUN_KIND.json
DATA=$WORK/data
VENV=$WORK/venv
PY=$VENV/bin/python
: >"$RESULTS"
: >"$STATUS"
rm -rf "$DATA"
mkdir -p "$DATA"
STARTED=$(date +%s)

log() { printf '[compare %3ds] %s\n' "$(($(date +%s) - STARTED))" "$*" >&2; }
wanted() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
# status SYSTEM MESSAGE: a system that could not run, reported in the table.
status() { printf '{"system": "%s", "status": "%s"}\n' "$1" "${2//\"/\'}" >>"$STATUS"; log "$1: $2"; }

# ---- servers we start are stopped on exit -----------------------------------------------------
REDIS_PID=""
RABBIT_PID=""
EPMD_OURS=0
cleanup() {
    if [ -n "$REDIS_PID" ]; then
        kill "$REDIS_PID" 2>/dev/null
        wait "$REDIS_PID" 2>/dev/null
    fi
    if [ -n "$RABBIT_PID" ]; then
        HOME=$WORK/rabbit/home timeout 30 "${RBIN:-/usr/lib/rabbitmq/bin}/rabbitmqctl" \
            -n postbox-bench@localhost stop >/dev/null 2>&1
        kill "$RABBIT_PID" 2>/dev/null
        wait "$RABBIT_PID" 2>/dev/null
    fi
    if [ "$EPMD_OURS" = 1 ]; then
        epmd -kill >/dev/null 2>&1
    fi
    rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

apt_install() {
    # Install without starting the distribution's own service (we start private instances).
    local policy=/usr/sbin/policy-rc.d created=0
    if [ ! -e $policy ]; then
        printf '#!/bin/sh\nexit 101\n' >$policy && chmod +x $policy && created=1
    fi
    if [ ! -f "$WORK/.apt-updated" ]; then
        apt-get update -qq >/dev/null 2>&1 && touch "$WORK/.apt-updated"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >"$WORK/apt.log" 2>&1
    local rc=$?
    [ $created = 1 ] && rm -f $policy
    return $rc
}

# ---- build ---------------------------------------------------------------------------------------
log "building postbox-compare (bench profile, shared with cargo bench)"
if ! (cd "$ROOT" && cargo build -q --profile bench -p postbox-benches --bins); then
    echo "cannot build the postbox benchmark binaries" >&2
    exit 1
fi
# The bench profile inherits release, so its binaries land in release/ of the target directory.
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release

# ---- python venv with the Python peers ----------------------------------------------------------
if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV" || { echo "python3 -m venv failed" >&2; exit 1; }
fi
if ! "$PY" -c "import persistqueue, litequeue, pika, redis" 2>/dev/null; then
    log "installing persist-queue litequeue pika redis into $VENV"
    "$PY" -m pip install -q --disable-pip-version-check persist-queue litequeue pika redis >"$WORK/pip.log" 2>&1 ||
        log "pip install failed (see $WORK/pip.log)"
fi

# ---- Redis: AOF appendfsync always, loopback only ------------------------------------------------
REDIS_OK=0
if wanted redis-streams; then
    command -v redis-server >/dev/null || { log "installing redis-server"; apt_install redis-server; }
    if command -v redis-server >/dev/null; then
        mkdir -p "$WORK/redis"
        rm -f "$WORK/redis/"*.aof "$WORK/redis/appendonlydir" -r 2>/dev/null
        redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes --dir "$WORK/redis" \
            --appendonly yes --appendfsync always --save '' --daemonize no \
            --logfile "$WORK/redis/redis.log" &
        REDIS_PID=$!
        for _ in $(seq 50); do
            redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && { REDIS_OK=1; break; }
            sleep 0.2
        done
        [ $REDIS_OK = 1 ] || status redis-streams "redis-server did not start (see $WORK/redis/redis.log)"
    else
        status redis-streams "redis-server not installed and apt-get install failed"
    fi
fi

# ---- RabbitMQ: private node on loopback ----------------------------------------------------------
RABBIT_OK=0
if wanted rabbitmq-quorum; then
    command -v rabbitmq-server >/dev/null || { log "installing rabbitmq-server"; apt_install rabbitmq-server; }
    if command -v rabbitmq-server >/dev/null; then
        epmd -names >/dev/null 2>&1 || EPMD_OURS=1
        R=$WORK/rabbit
        rm -rf "$R/mnesia"
        mkdir -p "$R/home" "$R/log" "$R/mnesia"
        cat >"$R/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$AMQP_PORT
loopback_users = none
EOF
        printf '[].\n' >"$R/enabled_plugins"
        # Debian's /usr/sbin wrappers switch to the rabbitmq user, who cannot write here: use
        # the scripts behind them when they exist.
        RBIN=/usr/lib/rabbitmq/bin
        [ -x $RBIN/rabbitmq-server ] || RBIN=$(dirname "$(command -v rabbitmq-server)")
        export ERL_EPMD_ADDRESS=127.0.0.1
        HOME=$R/home RABBITMQ_NODENAME=postbox-bench@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
            RABBITMQ_NODE_PORT=$AMQP_PORT RABBITMQ_DIST_PORT=$((AMQP_PORT + 20000)) \
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
            RABBITMQ_CONFIG_FILE=$R/rabbitmq RABBITMQ_MNESIA_BASE=$R/mnesia RABBITMQ_LOG_BASE=$R/log \
            RABBITMQ_ENABLED_PLUGINS_FILE=$R/enabled_plugins \
            $RBIN/rabbitmq-server >"$R/server.out" 2>&1 &
        RABBIT_PID=$!
        log "waiting for RabbitMQ"
        for _ in $(seq 90); do
            if HOME=$R/home $RBIN/rabbitmqctl -n postbox-bench@localhost await_startup --timeout 5 >/dev/null 2>&1; then
                RABBIT_OK=1
                break
            fi
            kill -0 "$RABBIT_PID" 2>/dev/null || break
            sleep 1
        done
        [ $RABBIT_OK = 1 ] || status rabbitmq-quorum "rabbitmq-server did not start (see $R/server.out)"
    else
        status rabbitmq-quorum "rabbitmq-server not installed and apt-get install failed"
    fi
fi

# ---- machine facts, fsync ceiling and raw redb floor ----------------------------------------------
probe() { "$BIN/postbox-probe" "$DATA" 2 2>/dev/null || echo '{}'; }
log "fsync probe and raw redb floor"
PROBE_BEFORE=$(probe)

run_json() { # SYSTEM-LABEL command...: append the JSON lines it prints, or a status line
    local label=$1
    shift
    local out rc
    out=$(timeout 300 "$@" 2>"$WORK/last.err")
    rc=$?
    if [ $rc -ne 0 ] || [ -z "$out" ]; then
        status "$label" "failed (exit $rc): $(tail -c 300 "$WORK/last.err" | tr '\n"' ' _')"
    fi
    printf '%s\n' "$out" | grep '^{' >>"$RESULTS"
}

rust() { run_json postbox "$BIN/postbox-compare" --dir "$DATA" --count "$COUNT" --cap "$CAP" --seconds "$SECS" "$@"; }
peer() { # NAME args...
    local name=$1
    shift
    local d="$DATA/$name-$RANDOM"
    mkdir -p "$d"
    run_json "$name" "$PY" "$HERE/peers.py" --peer "$name" --dir "$d" --count "$COUNT" --cap "$CAP" \
        --seconds "$SECS" --redis-port "$REDIS_PORT" --amqp-port "$AMQP_PORT" "$@"
    rm -rf "$d"
}

PEERS_PM="persist-queue litequeue litequeue-full sqlite-wal-full rabbitmq-quorum redis-streams"
PEERS_BATCHED="sqlite-wal-full rabbitmq-quorum redis-streams"
available() { # a peer that needs a server is skipped (already reported) when it did not start
    case $1 in
    redis-streams) [ $REDIS_OK = 1 ] ;;
    rabbitmq-quorum) [ $RABBIT_OK = 1 ] ;;
    *) "$PY" -c "import persistqueue, litequeue" 2>/dev/null || { status "$1" "python packages missing (pip failed)"; return 1; } ;;
    esac
}

# ---- (C) the Python binding ---------------------------------------------------------------------
# Built here and run right after Rust in the loop below, so the disk's drift over the minutes of
# a run does not enter the Python ratios.
PY_OK=0
if wanted postbox-python; then
    WL=$HERE/python/workload.py
    # Build the binding from this tree as a wheel and install it into the harness venv (a
    # `maturin develop` would drop a native module into python/, the binding's source tree).
    if [ "${POSTBOX_COMPARE_BUILD_PY:-1}" != 0 ] && [ -f "$ROOT/python/pyproject.toml" ] && [ -f "$WL" ]; then
        log "building the Python binding wheel (maturin build --release)"
        "$PY" -m pip install -q --disable-pip-version-check maturin >>"$WORK/pip.log" 2>&1
        rm -rf "$WORK/wheels"
        if (cd "$ROOT/python" && timeout 600 "$VENV/bin/maturin" build --release -q -i "$PY" \
            -o "$WORK/wheels" >"$WORK/maturin.log" 2>&1); then
            "$PY" -m pip uninstall -q -y postbox >/dev/null 2>&1
            "$PY" -m pip install -q --disable-pip-version-check --no-deps "$WORK"/wheels/postbox_mq-*.whl \
                >>"$WORK/pip.log" 2>&1 || log "installing the postbox wheel failed (see $WORK/pip.log)"
        else
            log "maturin build failed (see $WORK/maturin.log)"
        fi
    fi
    if [ ! -f "$WL" ]; then
        status postbox-python "not available: benches/compare/python/workload.py does not exist yet"
    elif ! "$PY" -c "import postbox" 2>/dev/null; then
        status postbox-python "not available: import postbox fails in the harness venv"
    else
        PY_OK=1
    fi
fi

for W in A B; do
    for CLASS in per-message batched; do
        if wanted postbox; then
            log "workload $W $CLASS: postbox"
            rust --workload "$W" --class "$CLASS"
        fi
        if [ "$PY_OK" = 1 ]; then
            log "workload $W $CLASS: postbox (Python)"
            d="$DATA/py-$RANDOM"
            mkdir -p "$d"
            run_json postbox-python "$PY" "$WL" --workload "$W" --class "$CLASS" --dir "$d" \
                --count "$COUNT" --cap "$CAP" --seconds "$SECS"
            rm -rf "$d"
        fi
        if [ $CLASS = per-message ]; then list=$PEERS_PM; else list=$PEERS_BATCHED; fi
        for P in $list; do
            wanted "$P" || continue
            available "$P" || continue
            log "workload $W $CLASS: $P"
            peer "$P" --workload "$W" --class "$CLASS"
        done
    done
done

# ---- workload A through the C API ----------------------------------------------------------------
if wanted postbox-c; then
    CW=$HERE/c/workload_a.c
    if [ ! -f "$CW" ]; then
        status postbox-c "not available: benches/compare/c/workload_a.c does not exist yet"
    elif ! (cd "$ROOT" && cargo build -q --profile bench -p postbox-ffi) 2>"$WORK/ffi.log" ||
        ! cc -O2 -std=c11 -I"$ROOT/include" "$CW" -L"$BIN" -lpostbox -Wl,-rpath,"$BIN" \
            -o "$WORK/workload_a" 2>>"$WORK/ffi.log"; then
        status postbox-c "not available: build failed (see $WORK/ffi.log)"
    else
        # One run of each is within the disk's noise of the other (a batched run lasts half a
        # second; the C and Rust profiles of it are the same functions at the same shares), so
        # C and Rust alternate over rounds, each going first in every other round, and the
        # verdict is the median of the per-round ratios.
        # A batched run of $COUNT messages lasts about half a second, within which the disk's
        # noise moved single rounds by 30 % either way: batched rounds move 150,000 messages.
        c_once() {
            log "workload A $CLASS round $R: postbox (C)"
            d="$DATA/c-$RANDOM"
            mkdir -p "$d"
            run_json postbox-c "$WORK/workload_a" --class "$CLASS" --dir "$d" --count "$C_COUNT" --cap "$CAP"
            rm -rf "$d"
        }
        rust_once() {
            if wanted postbox; then
                log "workload A $CLASS round $R: postbox (Rust), alternating with C"
                run_json postbox "$BIN/postbox-compare" --dir "$DATA" --count "$C_COUNT" --cap "$CAP" \
                    --seconds "$SECS" --workload A --class "$CLASS" --system postbox-next-to-c --no-consume-loop
            fi
        }
        for CLASS in per-message batched; do
            if [ $CLASS = batched ]; then C_COUNT=${POSTBOX_COMPARE_C_BATCHED_COUNT:-150000}; else C_COUNT=$COUNT; fi
            for R in $(seq 1 "${POSTBOX_COMPARE_C_ROUNDS:-4}"); do
                if [ $((R % 2)) -eq 1 ]; then c_once; rust_once; else rust_once; c_once; fi
            done
        done
    fi
fi

PROBE_AFTER=$(probe)
log "send latency across write-ahead log checkpoints, beside the fsync probe's (postbox-latency)"
LATENCY=$("$BIN/postbox-latency" "$DATA" 2>/dev/null || echo '{}')
log "recovery: open after kill -9 with a full write-ahead log, and with a large store"
RECOVERY=$("$BIN/postbox-recovery" "$DATA" "${POSTBOX_COMPARE_RECOVERY_MESSAGES:-1000000}" 2>/dev/null || echo '{}')

# ---- versions and the table ---------------------------------------------------------------------
pyver() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || echo "?"; }
RABBIT_VER=$(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null || echo "?")
ERLANG_VER=$(dpkg-query -W -f='${Version}' erlang-base 2>/dev/null || echo "?")
REDIS_VER=$(redis-server --version 2>/dev/null | sed -n 's/.*v=\([^ ]*\).*/\1/p')
"$PY" - "$META" <<EOF
import json, sys
# The measuring binaries' JSON is pasted in below as Python literals.
null, true, false = None, True, False
json.dump({
  "date": "$(date -u '+%Y-%m-%d %H:%M UTC')",
  "cpu": "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)",
  "cores": "$(nproc)",
  "memory": "$(free -h 2>/dev/null | awk '/^Mem:/ {print $2}')",
  "kernel": "$(uname -sr)",
  "filesystem": "$(df -T "$WORK" 2>/dev/null | awk 'NR==2 {print $2 " on " $1}')",
  "load": "$(cut -d' ' -f1-3 /proc/loadavg)",
  "rustc": "$(rustc --version 2>/dev/null)",
  "postbox": "$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null)$(cd "$ROOT" && git diff --quiet HEAD -- core 2>/dev/null || echo '+uncommitted core changes')",
  "redb": "4.6.0",
  "python": "$("$PY" -c 'import sys, sqlite3; print(sys.version.split()[0], "/ SQLite", sqlite3.sqlite_version)')",
  "persist-queue": "$(pyver persist-queue)",
  "litequeue": "$(pyver litequeue)",
  "pika": "$(pyver pika)",
  "redis-py": "$(pyver redis)",
  "redis": "${REDIS_VER:-?}",
  "rabbitmq": "$RABBIT_VER (Erlang $ERLANG_VER)",
  "count": $COUNT, "cap": $CAP, "seconds": $SECS,
  "probe_before": $PROBE_BEFORE, "probe_after": $PROBE_AFTER, "recovery": $RECOVERY,
  "latency": $LATENCY,
  "elapsed_s": $(($(date +%s) - STARTED)),
}, open(sys.argv[1], "w"))
EOF
"$PY" "$HERE/render.py" "$RESULTS" "$STATUS" "$META" "$ROOT/target/postbox-bench-summary.md" "$OUT"

# ---- the RabbitMQ bridge against the broker's own publish rate, same machine ---------------------
if wanted bridge; then
    log "bridge: forwarding to and from a private RabbitMQ node (cargo bench -p postbox-bridge)"
    BRIDGE_TABLE=$WORK/bridge.md
    rm -f "$BRIDGE_TABLE"
    (cd "$ROOT" && POSTBOX_BRIDGE_BENCH_OUT=$BRIDGE_TABLE \
        cargo bench -q -p postbox-bridge --bench forward >&2)
    {
        echo
        echo "## Bridge to RabbitMQ"
        echo
        echo "\`cargo bench -p postbox-bridge --bench forward\` (run by this script after the comparison):"
        echo "1 KiB persistent messages, a private RabbitMQ node on 127.0.0.1, quorum queues; the"
        echo "broker's own rate is \`lapin\` publishing with 1,000 confirms in flight, before and after."
        echo
        if [ -s "$BRIDGE_TABLE" ]; then cat "$BRIDGE_TABLE"; else echo "Not measured: the benchmark failed or RabbitMQ is not installed."; fi
    } >>"$OUT"
fi
log "done; wrote $OUT"
