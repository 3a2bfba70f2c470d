#!/usr/bin/env bash
# Python wheel: builds the release wheel with `maturin build --release`, checks that it is the
# one abi3 wheel (cp39-abi3: every CPython from 3.9), installs it into a fresh venv and runs a
# smoke import, part of the pytest suite and the examples (examples/python/) against it. With
# another CPython on PATH (python3.9 … python3.13, e.g. from pyenv) the same wheel is also
# installed and imported there: one wheel, several interpreters.
set -euxo pipefail
cd "$(dirname "$0")/.."

py=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# maturin: python.sh's venv has it; alone, this script makes a build venv of its own.
if [ -x python/.venv/bin/maturin ]; then
  maturin=python/.venv/bin/maturin
else
  if ! "$py" -m venv "$work/build"; then
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip
    "$py" -m venv "$work/build"
  fi
  "$work/build/bin/python" -m pip install -q --disable-pip-version-check maturin
  maturin=$work/build/bin/maturin
fi

"$maturin" build --release -m python/Cargo.toml -o "$work/dist"
shopt -s nullglob
wheels=("$work"/dist/*.whl)
shopt -u nullglob
if [ ${#wheels[@]} -ne 1 ]; then
  echo "expected exactly one wheel, got: ${wheels[*]:-none}" >&2
  exit 1
fi
wheel=${wheels[0]}
case "$(basename "$wheel")" in
  postbox_mq-*-cp39-abi3-*.whl) ;;
  *)
    echo "not an abi3 wheel for CPython >= 3.9: $(basename "$wheel")" >&2
    exit 1
    ;;
esac
echo "wheel: $(basename "$wheel")"

# A fresh venv with nothing but the wheel and the test tools.
"$py" -m venv "$work/venv"
vpy=$work/venv/bin/python
"$vpy" -m pip install -q --disable-pip-version-check "$wheel" pytest pytest-timeout

# From a directory without the sources, so that `import postbox` is the installed wheel.
(cd "$work" && "$vpy" -c '
import postbox, postbox._postbox as native, sys
assert "site-packages" in postbox.__file__, postbox.__file__
assert native.__file__.endswith(".abi3.so"), native.__file__
assert postbox.FEATURES == frozenset(), postbox.FEATURES  # the default wheel: no admin, no bridge
print("postbox", postbox.__version__, "on", sys.version.split()[0], "from", postbox.__file__)
')

# The examples: each exits 0 when its pattern did what it says.
for ex in examples/python/*.py; do
  (cd "$work" && timeout 60 "$vpy" "$OLDPWD/$ex")
done

# Part of the suite (the whole of it runs in python.sh): the API surface, the main patterns.
"$vpy" -m pytest -p no:cacheprovider -q \
  python/tests/test_repr.py python/tests/test_store.py python/tests/test_messages.py \
  python/tests/test_transactions.py python/tests/test_jobs.py python/tests/test_processor.py \
  python/tests/test_topics.py python/tests/test_sessions.py python/tests/test_errors.py \
  python/tests/test_features.py

# The same wheel on the other CPythons present (none is required): python3.9 … python3.14 on
# PATH, pyenv's versions, and any listed in POSTBOX_WHEEL_PYTHONS (space-separated paths).
others=(${POSTBOX_WHEEL_PYTHONS:-})
for v in 9 10 11 12 13 14; do
  others+=("$(command -v "python3.$v" || true)")
done
others+=("${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python3)
mine=$("$vpy" -c 'import sys; print(sys.version_info[:2])')
declare -A seen=(["$mine"]=1)
for other in "${others[@]}"; do
  [ -n "$other" ] && [ -x "$other" ] || continue
  # A pyenv shim of a version not selected fails here; so does anything older than 3.9.
  ver=$("$other" -c 'import sys; assert sys.version_info >= (3, 9); print(sys.version_info[:2])' 2>/dev/null) || continue
  [ -z "${seen[$ver]:-}" ] || continue
  seen[$ver]=1
  if ! "$other" -m venv "$work/other" 2>/dev/null; then
    echo "$other: no venv module, skipped"
    continue
  fi
  "$work/other/bin/python" -m pip install -q --disable-pip-version-check "$wheel"
  (cd "$work" && "$work/other/bin/python" -c 'import postbox, sys; print("postbox", postbox.__version__, "imports on", sys.version.split()[0])' &&
    "$work/other/bin/python" "$OLDPWD/examples/python/batch_of_tiles.py")
  rm -rf "$work/other"
done
