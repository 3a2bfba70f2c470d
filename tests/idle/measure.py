"""Measures how often idle postbox processes wake up (invariant 15, "silent when idle").

Starts every idle scenario of tests/idle (Rust: pbx-idle, C: idle.c built by the caller,
Python: idle.py) as its own child process with its own store in a temporary directory, waits
until each has printed IDLE and has settled, then counts the context switches of all its
threads (voluntary + nonvoluntary, from /proc/PID/task/*/status) across one window. A thread
switches out each time it sleeps again after a wake-up, so the count over the window is the
number of wake-ups. The children run side by side: idle, they do not compete for the CPU.

Prints a Markdown table and exits 1 when a row exceeds its bound: 1 wake-up/s, except the
Python receive on the main thread (5/s: it may wake to look for signals, see STYLE.md).

    python3 tests/idle/measure.py --rust target/debug/pbx-idle --c /tmp/idle \
        --python python/.venv/bin/python [--window 10] [--only REGEX]

Any language whose program is not given is left out (and said so). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
STARTUP_TIMEOUT = 120.0  # seconds for every child to print IDLE (a loaded CI machine)
SETTLE = 2.0  # seconds between the last IDLE and the window: start-up work ends
SAMPLE_EVERY = 0.2  # seconds: catches the last count of a thread that exits in the window


@dataclass
class Row:
    name: str
    argv: list[str]  # {store} stands for the store path
    bound: float
    proc: subprocess.Popen[str] | None = None
    # Highest count seen per thread id, and the count at the window's start.
    seen: dict[int, int] = field(default_factory=dict)
    start: dict[int, int] = field(default_factory=dict)
    rate: float | None = None
    error: str | None = None


def rows(args: argparse.Namespace) -> list[Row]:
    out: list[Row] = []
    langs: list[tuple[str, list[str] | None]] = [
        ("Rust", [args.rust] if args.rust else None),
        ("C", [args.c] if args.c else None),
        ("Python", [args.python, str(HERE / "idle.py")] if args.python else None),
    ]
    for lang, prog in langs:
        if prog is None:
            print(f"(no {lang} program given: its rows are left out)", file=sys.stderr)
            continue
        for multi in (False, True):
            tail = ["multi"] if multi else []
            mode = "multi-process store" if multi else "store"
            out.append(Row(f"{mode}, open, nothing waiting ({lang})", [*prog, "{store}", "open", *tail], 1.0))
            if lang == "Python":
                out.append(
                    Row(
                        f"{mode}, waiting receive, main thread (Python)",
                        [*prog, "{store}", "receive", *tail],
                        5.0,
                    )
                )
                out.append(
                    Row(
                        f"{mode}, waiting receive, other thread (Python)",
                        [*prog, "{store}", "receive-thread", *tail],
                        1.0,
                    )
                )
                out.append(
                    Row(f"{mode}, waiting postbox.aio receive (Python)", [*prog, "{store}", "aio", *tail], 1.0)
                )
            else:
                out.append(Row(f"{mode}, waiting receive ({lang})", [*prog, "{store}", "receive", *tail], 1.0))
            out.append(Row(f"{mode}, idle Processor ({lang})", [*prog, "{store}", "processor", *tail], 1.0))
    if args.only:
        pattern = re.compile(args.only)
        out = [r for r in out if pattern.search(r.name)]
    return out


def switches(pid: int) -> dict[int, int]:
    """Context switches per thread of process `pid` (empty once it is gone)."""
    counts: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return counts
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between the listing and the read
        total = 0
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                total += int(line.split()[1])
        counts[int(tid)] = total
    return counts


def sample(row: Row) -> None:
    assert row.proc is not None
    for tid, n in switches(row.proc.pid).items():
        row.seen[tid] = max(n, row.seen.get(tid, 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rust", help="the pbx-idle binary")
    ap.add_argument("--c", help="tests/idle/idle.c, compiled")
    ap.add_argument("--python", help="a Python with postbox installed")
    ap.add_argument(
        "--window", type=float, default=float(os.environ.get("POSTBOX_IDLE_WINDOW", "10")), help="seconds (10)"
    )
    ap.add_argument("--only", help="measure only the rows whose name matches this regex")
    args = ap.parse_args()
    # The children run in the temporary directory.
    for lang in ("rust", "c", "python"):
        prog = getattr(args, lang)
        if prog and os.sep in prog:
            setattr(args, lang, os.path.abspath(prog))
    if not Path("/proc/self/task").is_dir():
        print("measure.py needs Linux's /proc", file=sys.stderr)
        return 2
    todo = rows(args)
    if not todo:
        print("nothing to measure", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="postbox-idle-"))
    try:
        return run(todo, tmp, args.window)
    finally:
        for r in todo:
            if r.proc is not None and r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def run(todo: list[Row], tmp: Path, window: float) -> int:
    for i, r in enumerate(todo):
        store = str(tmp / f"row{i}.postbox")
        argv = [a.replace("{store}", store) for a in r.argv]
        # The children's stderr goes to ours: a failing child says why.
        r.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=tmp)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    waiting = {r.proc.stdout.fileno(): r for r in todo if r.proc is not None and r.proc.stdout}
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            for r in waiting.values():
                r.error = f"did not become idle within {STARTUP_TIMEOUT:.0f} s"
            break
        ready, _, _ = select.select(list(waiting), [], [], left)
        for fd in ready:
            r = waiting.pop(fd)
            assert r.proc is not None and r.proc.stdout is not None
            line = r.proc.stdout.readline().strip()
            if line != "IDLE":
                r.error = f"did not become idle (said {line!r}, exit status {r.proc.poll()})"
    time.sleep(SETTLE)
    live = [r for r in todo if r.error is None]
    for r in live:
        sample(r)
        r.start = dict(r.seen)
    began = time.monotonic()
    while time.monotonic() - began < window:
        time.sleep(SAMPLE_EVERY)
        for r in live:
            sample(r)
    elapsed = time.monotonic() - began
    for r in live:
        assert r.proc is not None
        if r.proc.poll() is not None:
            r.error = f"exited during the window (status {r.proc.returncode})"
            continue
        # Threads that started in the window count from zero.
        woke = sum(n - r.start.get(tid, 0) for tid, n in r.seen.items())
        r.rate = woke / elapsed
    print(f"Idle wake-ups, context switches over all threads in a {elapsed:.1f} s window:\n")
    print("| idle process | wake-ups/s | bound |")
    print("| --- | ---: | ---: |")
    failed = 0
    for r in todo:
        if r.rate is None:
            shown = f"ERROR: {r.error}"
            failed += 1
        else:
            over = r.rate > r.bound
            failed += over
            shown = f"{r.rate:.1f}" + (" **over**" if over else "")
        print(f"| {r.name} | {shown} | {r.bound:g} |")
    print()
    if failed:
        print(f"{failed} of {len(todo)} rows over their bound or failed")
        return 1
    print(f"all {len(todo)} rows within their bounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
