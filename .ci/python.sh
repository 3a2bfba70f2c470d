#!/usr/bin/env bash
# Python: build and install the postbox module into a venv under the repo (python/.venv,
# git-ignored), check the type stubs with mypy.stubtest, then run the pytest suite.
# The last line printed is pytest's summary.
set -euxo pipefail
cd "$(dirname "$0")/.."

venv=python/.venv
py=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv"; then
    # Debian's python3 ships venv separately.
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip
    "$py" -m venv "$venv"
  fi
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install -q --disable-pip-version-check maturin pytest pytest-timeout pytest-asyncio mypy

# The documented install command (a release build through maturin's PEP 517 backend), with the
# optional features on, which test_admin.py and test_bridge.py need; .ci/wheel.sh tests the
# default wheel, built without them.
MATURIN_PEP517_ARGS="--features admin,bridge" python -m pip install -q --disable-pip-version-check \
  --no-build-isolation --force-reinstall --no-deps ./python
python -c 'import postbox; assert postbox.FEATURES == {"admin", "bridge"}, postbox.FEATURES'

# The Rust producer that test_typed_bodies.py reads from (it skips that test without it).
cargo build -q -p postbox --example typed_json_producer
# The postbox command, which test_admin.py drives with --admin.
cargo build -q -p postbox-cli

# Run from outside python/ so that `import postbox` is the installed package, not the sources.
python -m mypy.stubtest postbox
python -m pytest python/tests -p no:cacheprovider -q
