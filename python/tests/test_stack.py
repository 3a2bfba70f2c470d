"""Processor workers get the stack Python's own threads get, so a deep recursion in a handler
ends in RecursionError, as it would in a threading.Thread, instead of crashing the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DEEP_HANDLER = textwrap.dedent(
    """
    import sys, threading, postbox

    sys.setrecursionlimit(30_000)

    class Nested:
        # repr() of a Nested recurses through C (repr -> __repr__ -> repr ...): each level uses
        # C stack, unlike a plain Python call, which 3.11+ runs without growing it.
        def __init__(self, depth):
            self.depth = depth

        def __repr__(self):
            return repr(Nested(self.depth - 1)) if self.depth else "bottom"

    def handler(msg):
        repr(Nested(20_000))  # ends in RecursionError, past the recursion limit

    mode, path = sys.argv[1], sys.argv[2]
    if mode == "thread":
        # The control: the same recursion in a thread Python started itself.
        outcome = []
        def run():
            try:
                handler(None)
            except RecursionError:
                outcome.append("RecursionError")
        t = threading.Thread(target=run)
        t.start()
        t.join()
        print(*outcome, flush=True)
    else:
        if mode == "stack_size":
            threading.stack_size(16 << 20)
        with postbox.Store(path) as store:
            q = store.queue("deep", max_deliveries=1)
            q.send(b"recurse")
            with postbox.Processor(q, handler, workers=1):
                dead = q.dead_letters.receive(timeout=30)
            print(dead.dead_letter_description.split(":")[0], flush=True)
            dead.complete()
    """
)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["thread", "default", "stack_size"])
def test_deep_recursion_in_a_handler_raises_recursion_error(tmp_path: Path, mode: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", DEEP_HANDLER, mode, str(tmp_path / "s.postbox")],
        capture_output=True,
        text=True,
        timeout=80,
    )
    assert run.returncode == 0, f"exit status {run.returncode}: {run.stderr[-2000:]}"
    assert run.stdout.split() == ["RecursionError"], run.stdout + run.stderr[-2000:]
