"""Several Python processes share one store opened with multi_process=True."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

import postbox

N_MESSAGES = 5000


def _consume(path: str) -> list[int]:
    """A pool worker: opens the store itself and completes messages until the queue is idle."""
    done = []
    with postbox.Store(path, multi_process=True) as store:
        q = store.queue("jobs")
        while True:
            batch = q.receive_batch(50, timeout=1.0)
            if not batch:
                return done
            q.complete_batch(batch)
            done.extend(int(m.body) for m in batch)


@pytest.mark.timeout(180)
def test_pool_of_four_consumes_each_message_once(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        q = store.queue("jobs")
        for start in range(0, N_MESSAGES, 500):
            q.send_batch([str(i) for i in range(start, start + 500)])
        assert len(q) == N_MESSAGES
        # spawn: each worker is a fresh interpreter that opens the store on its own.
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            results = pool.map(_consume, [str(store_path)] * 4)
        completed = [i for r in results for i in r]
        assert sorted(completed) == list(range(N_MESSAGES)), "each message completed exactly once"
        assert sum(1 for r in results if r) >= 2, "the work was shared"
        s = q.stats()
        assert (s.active, s.locked, s.scheduled, s.dead_lettered) == (0, 0, 0, 0)
