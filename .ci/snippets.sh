#!/usr/bin/env bash
# The docs' checked programs: extracts the code block after each `<!-- snippet: LANG -->` marker
# in README.md or docs/*.md and builds and runs it exactly as written (Rust, C, C++, Python),
# each in a fresh directory, expecting it to print "processed hello"; fails if a marker has no
# runner here or fewer blocks than before are found. Then checks every relative link and
# anchor of the docs (.ci/links.py). Needs the Python module that .ci/python.sh installs into
# python/.venv.
set -euxo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=$(mktemp -d /tmp/postbox-snippets-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# Writes the block for $1 to $2; fails if the marker or its block is missing.
RAN=0
extract() { python3 .ci/snippet.py "$1" "$2"; RAN=$((RAN + 1)); }

# Every marker must be one this script runs, and none may go missing: a block moved between
# README.md and docs/ is still found, and a block that stops being checked fails here.
RUNS="c cpp python rust"
MIN_BLOCKS=4
LIST=$(python3 .ci/snippet.py --list)
FOUND=$(printf '%s\n' "$LIST" | grep -c . || true)
echo "snippets: $FOUND checked blocks found in README.md and docs/*.md (at least $MIN_BLOCKS expected)"
if [ "$FOUND" -lt "$MIN_BLOCKS" ]; then
    echo "$LIST"
    echo "fewer than $MIN_BLOCKS checked blocks"
    exit 1
fi
MARKED=$(printf '%s\n' "$LIST" | cut -d' ' -f1 | sort | tr '\n' ' ' | sed 's/ $//')
if [ "$MARKED" != "$RUNS" ]; then
    echo "$LIST"
    echo "snippet markers found: '$MARKED'; this script runs: '$RUNS'"
    exit 1
fi

python3 .ci/links.py --self-test
python3 .ci/links.py

expect_processed() { grep -qx 'processed hello' "$1" || { cat "$1"; echo "no 'processed hello' from $2"; exit 1; }; }

cargo build -q -p postbox-ffi
LIB=$TARGET/debug

# Rust: a project of its own, depending on the core by path, with the workspace's lock file.
mkdir -p "$WORK/rust/src"
extract rust "$WORK/rust/src/main.rs"
cat > "$WORK/rust/Cargo.toml" <<TOML
[package]
name = "hello"
version = "0.1.0"
edition = "2024"

[dependencies]
postbox = { path = "$ROOT/core" }

[workspace]
TOML
cp Cargo.lock "$WORK/rust/Cargo.lock"
(cd "$WORK/rust" && CARGO_TARGET_DIR=$TARGET cargo build -q)
mkdir "$WORK/run-rust"
(cd "$WORK/run-rust" && "$TARGET/debug/hello" > out.txt)
expect_processed "$WORK/run-rust/out.txt" Rust

# C and C++, warnings as errors.
extract c "$WORK/hello.c"
cc -std=c11 -Wall -Wextra -Werror -Iinclude "$WORK/hello.c" -L"$LIB" -lpostbox -lpthread -o "$WORK/hello_c"
mkdir "$WORK/run-c"
(cd "$WORK/run-c" && LD_LIBRARY_PATH=$LIB "$WORK/hello_c" > out.txt)
expect_processed "$WORK/run-c/out.txt" C

extract cpp "$WORK/hello.cpp"
c++ -std=c++17 -Wall -Wextra -Werror -Iinclude "$WORK/hello.cpp" -L"$LIB" -lpostbox -lpthread -o "$WORK/hello_cpp"
mkdir "$WORK/run-cpp"
(cd "$WORK/run-cpp" && LD_LIBRARY_PATH=$LIB "$WORK/hello_cpp" > out.txt)
expect_processed "$WORK/run-cpp/out.txt" C++

# Python, with the module .ci/python.sh installed.
PY=$ROOT/python/.venv/bin/python
if ! "$PY" -c 'import postbox' 2>/dev/null; then
    echo "python/.venv has no postbox module: run .ci/python.sh first"
    exit 1
fi
extract python "$WORK/hello.py"
mkdir "$WORK/run-py"
(cd "$WORK/run-py" && "$PY" "$WORK/hello.py" > out.txt)
expect_processed "$WORK/run-py/out.txt" Python
if [ "$RAN" -lt "$MIN_BLOCKS" ]; then
    echo "only $RAN blocks were run, fewer than $MIN_BLOCKS"
    exit 1
fi
echo "snippets: rust c cpp python ran ($RAN blocks); links resolve"
