#!/usr/bin/env bash
# Python wheel: builds the release wheel as users get it — `maturin build --release --zig
# --compatibility manylinux2014`, the default features (no admin endpoint, no bridge), linked
# by zig for glibc 2.17 — checks that it is the one abi3 wheel (cp39-abi3: every CPython from
# 3.9) of the distribution postbox-mq, that `auditwheel show` finds it manylinux2014
# (manylinux_2_17) with nothing to graft, that `twine check --strict` passes, and that it is
# within its size bound; then installs it into a fresh venv and runs a smoke import, part of
# the pytest suite and the examples (examples/python/) against it. With another CPython on
# PATH (python3.9 … python3.13, e.g. from pyenv) the same wheel is also installed and imported
# there: one wheel, several interpreters.
#
# Knob: POSTBOX_MAX_WHEEL (bytes, default 3 MiB).
set -euxo pipefail
cd "$(dirname "$0")/.."

py=${PYTHON:-python3}
max_wheel=${POSTBOX_MAX_WHEEL:-3145728}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The build tools, in a venv of their own (target/wheel-venv, git-ignored): maturin, zig
# (the ziglang package, which maturin runs as its linker), auditwheel and twine.
tools=target/wheel-venv
if [ ! -x "$tools/bin/python" ]; then
  if ! "$py" -m venv "$tools"; then
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip
    "$py" -m venv "$tools"
  fi
fi
"$tools/bin/python" -m pip install -q --disable-pip-version-check 'maturin>=1.9,<2' ziglang \
  auditwheel twine

(export PATH=$PWD/$tools/bin:$PATH
 maturin build --release --zig --compatibility manylinux2014 -m python/Cargo.toml -o "$work/dist")
shopt -s nullglob
wheels=("$work"/dist/*.whl)
shopt -u nullglob
if [ ${#wheels[@]} -ne 1 ]; then
  echo "expected exactly one wheel, got: ${wheels[*]:-none}" >&2
  exit 1
fi
wheel=${wheels[0]}
case "$(basename "$wheel")" in
  postbox_mq-*-cp39-abi3-*manylinux2014_x86_64*.whl) ;;
  *)
    echo "not the manylinux2014 abi3 wheel of postbox-mq for CPython >= 3.9: $(basename "$wheel")" >&2
    exit 1
    ;;
esac
echo "wheel: $(basename "$wheel")"

# What auditwheel makes of it: manylinux_2_17 (manylinux2014), nothing to graft in.
"$tools/bin/auditwheel" show "$wheel" | tee "$work/auditwheel.txt"
grep -q 'manylinux_2_17_x86_64' "$work/auditwheel.txt"
if grep -q 'will be grafted' "$work/auditwheel.txt"; then
  echo "the wheel needs libraries grafted in" >&2
  exit 1
fi
"$tools/bin/twine" check --strict "$wheel"

# Its size, compressed and installed, against the bound.
wheel_bytes=$(stat -c %s "$wheel")
installed_bytes=$("$tools/bin/python" -c '
import sys, zipfile
print(sum(i.file_size for i in zipfile.ZipFile(sys.argv[1]).infolist()))' "$wheel")
printf '%-44s %12s %12s\n' "wheel, compressed (bytes)" "$wheel_bytes" "$max_wheel"
printf '%-44s %12s\n' "wheel, installed (bytes)" "$installed_bytes"
if [ "$wheel_bytes" -gt "$max_wheel" ]; then
  echo "the wheel outgrew its bound: $wheel_bytes > $max_wheel bytes" >&2
  exit 1
fi

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
