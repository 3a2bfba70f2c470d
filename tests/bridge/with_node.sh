#!/usr/bin/env bash
# Runs a command with a private RabbitMQ node up and its URI in POSTBOX_TEST_AMQP (for the C
# and Python bridge tests), then removes the node: with_node.sh COMMAND [ARGS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -q -p postbox-testkit --bin pbx-rabbit --locked
target_dir=${CARGO_TARGET_DIR:-target}
coproc NODE { "$target_dir/debug/pbx-rabbit"; }
node_pid=$NODE_PID
read -r uri <&"${NODE[0]}" || { echo "with_node.sh: the node did not start" >&2; exit 1; }
export POSTBOX_TEST_AMQP=$uri
echo "with_node.sh: node at $uri"
status=0
"$@" || status=$?
# End of its standard input: the node is stopped and its directory removed.
eval "exec ${NODE[1]}>&-"
wait "$node_pid" || true
exit "$status"
