#!/usr/bin/env bash
# The RabbitMQ bridge against real brokers: first the harness that runs them
# (testkit/src/broker.rs: private nodes and a 3-node cluster, killed and restarted), then the
# bridge crate's tests (both directions, broker kills, nacks, poison, a 3-node cluster with
# node kills), the `postbox bridge` process killed mid-stream, and the C and Python entry
# points against a node of their own. Knob: POSTBOX_BRIDGE_MESSAGES (default 2,000).
#
# Every node the tests start is private: its own name, ports on 127.0.0.1, cookie and data
# directory under /tmp, so a RabbitMQ already running on the machine is neither used nor
# disturbed (only epmd, the Erlang port mapper, is shared).
#
# Installs rabbitmq-server with apt when missing, without letting the package start its
# default node; where it is neither there nor can be installed, says SKIPPED and why, and
# passes.
set -euxo pipefail
cd "$(dirname "$0")/.."

skip() {
  set +x
  echo "SKIPPED: rabbitmq-server is not installed: $1"
  exit 0
}

# Debian's /usr/sbin/rabbitmq-* re-run the scripts as the rabbitmq user with its own HOME,
# which would lose each test node's private settings; the real scripts are here.
debian_bin=/usr/lib/rabbitmq/bin

have_rabbitmq() {
  [ -x "$debian_bin/rabbitmq-server" ] || command -v rabbitmq-server >/dev/null
}

if ! have_rabbitmq; then
  command -v apt-get >/dev/null || skip "there is no apt-get"
  [ "$(id -u)" = 0 ] || skip "installing it needs root"
  export DEBIAN_FRONTEND=noninteractive
  # Exit code 101 tells invoke-rc.d not to start services: the package would otherwise start
  # a default node on 5672, and there is no systemd here to manage it.
  policy=/usr/sbin/policy-rc.d
  made_policy=
  if [ ! -e "$policy" ]; then
    # Also gone if the install is interrupted: left behind, it would stop every later service.
    trap 'rm -f "$policy"' EXIT
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    made_policy=1
  fi
  log=$(mktemp /tmp/postbox-bridge-apt-XXXXXX)
  installed=1
  { apt-get update -qq && apt-get install -y -qq rabbitmq-server; } >"$log" 2>&1 || installed=
  if [ -n "$made_policy" ]; then
    rm -f "$policy"
    trap - EXIT
  fi
  if [ -z "$installed" ]; then
    why=$(grep -E '^(E|W):' "$log" | head -3 | paste -sd ' ')
    rm -f "$log"
    skip "apt-get install rabbitmq-server failed: ${why:-see apt output}"
  fi
  rm -f "$log"
  have_rabbitmq || skip "apt installed rabbitmq-server but no rabbitmq-server script is there"
  # In case a service manager started the default node anyway (the wrapper in /usr/sbin talks
  # to it as the rabbitmq user, with its cookie). It would not clash with the test nodes, but
  # it costs memory and CPU for nothing.
  if timeout 30 /usr/sbin/rabbitmqctl -q status >/dev/null 2>&1; then
    timeout 60 /usr/sbin/rabbitmqctl stop || true
  fi
fi

if [ -z "${POSTBOX_RABBITMQ_BIN_DIR:-}" ] && [ -x "$debian_bin/rabbitmq-server" ]; then
  export POSTBOX_RABBITMQ_BIN_DIR=$debian_bin
fi

start=$SECONDS
cargo test -p postbox-testkit --test broker --locked -- --nocapture
echo "=== broker harness tests took $((SECONDS - start)) s"

cargo test -p postbox-bridge --locked -- --nocapture
cargo test -p postbox-cli --test bridge --locked -- --nocapture
# The C and Python entry points against one node of their own (libpostbox and the Python
# module with their `bridge` feature; python.sh builds the module with it).
cargo build -p postbox-ffi --features admin,bridge --locked
bash tests/bridge/with_node.sh bash tests/c/run_bridge.sh
if [ ! -x python/.venv/bin/python ]; then
  # Run alone: python.sh builds the venv and the module first.
  bash .ci/python.sh
fi
bash tests/bridge/with_node.sh python/.venv/bin/python -m pytest python/tests/test_bridge.py \
  -p no:cacheprovider -q
