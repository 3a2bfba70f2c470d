#!/usr/bin/env bash
# The dashboard of `postbox dashboard`, in a real browser: Debian's headless Chromium driven by
# Selenium (tests/dashboard). The page loads with the right counts, counts and their change per
# second follow sends from another process, the resubmit button moves a dead letter back, the
# purge button empties a queue after a confirmation, a missing or wrong token is said at the top
# of the page, and /metrics parses with prometheus_client's parser. The last test takes the
# The screenshot in docs/cli.md: POSTBOX_SCREENSHOT=docs/dashboard.png bash .ci/dashboard.sh refreshes it.
#
# Installs chromium and chromium-driver with apt when missing; where neither is there nor can be
# installed, says SKIPPED and why, and passes. Python packages go into a venv of their own,
# target/dashboard-venv (git-ignored), so python/.venv stays python.sh's.
set -euxo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

cargo build -p postbox-cli --locked
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir=$ROOT/$target_dir ;; esac
export POSTBOX_BIN=$target_dir/debug/postbox
test -x "$POSTBOX_BIN"

skip() {
  set +x
  echo "SKIPPED: no browser could be installed: $1"
  exit 0
}

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  command -v apt-get >/dev/null || skip "chromium is not installed and there is no apt-get"
  [ "$(id -u)" = 0 ] || skip "chromium is not installed and installing it needs root"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp /tmp/postbox-dashboard-apt-XXXXXX)
  if ! { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; } >"$log" 2>&1; then
    why=$(grep -E '^(E|W):' "$log" | head -3 | paste -sd ' ')
    rm -f "$log"
    skip "apt-get install chromium chromium-driver failed: ${why:-see apt output}"
  fi
  rm -f "$log"
fi
[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] \
  || skip "apt installed chromium but /usr/bin/chromium or /usr/bin/chromedriver is missing"

venv=target/dashboard-venv
py=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  if ! "$py" -m venv "$venv"; then
    # Debian's python3 ships venv separately.
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip
    "$py" -m venv "$venv"
  fi
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  'selenium>=4.10,<5' 'prometheus_client>=0.17,<1' 'pytest>=7,<9' 'pytest-timeout>=2,<3'

"$venv/bin/python" -m pytest tests/dashboard -p no:cacheprovider -q --timeout 120
