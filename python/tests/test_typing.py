"""The stubs under ``mypy --strict``: a ``with`` block that returns is the end of its function.

Every context manager of postbox lets an exception through (``__exit__`` returns
``Literal[False]``), so mypy knows that code after such a block is unreachable when the block
returns; a ``bool`` there made it report "Missing return statement".
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SNIPPET = textwrap.dedent(
    """
    from __future__ import annotations

    import postbox


    def body_of_next(q: postbox.Queue) -> bytes:
        with q.receive(timeout=1) as m:
            return m.body


    def value_of_next(q: postbox.TypedQueue[int]) -> int:
        with q.receive(timeout=1) as m:
            return m.value


    def sent_in_a_transaction(store: postbox.Store, q: postbox.Queue) -> int:
        with store.transaction() as tx:
            return tx.send(q, b"x")


    def queues_of(path: str) -> list[str]:
        with postbox.Store(path) as store:
            return store.queues()


    def next_of_a_session(q: postbox.Queue) -> bytes:
        with q.accept_session(1) as s:
            return s.receive(1).body


    def workers_of(q: postbox.Queue) -> int:
        with postbox.Processor(q, lambda m: None, workers=2) as p:
            return p.workers
    """
)


@pytest.mark.timeout(300)
def test_with_blocks_that_return_pass_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    src = tmp_path / "uses.py"
    src.write_text(SNIPPET)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(src)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
