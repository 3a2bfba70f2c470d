"""`for msg in queue.consume(timeout=...)`."""

from __future__ import annotations

import postbox


def test_consume_until_idle(queue: postbox.Queue) -> None:
    queue.send_batch([str(i) for i in range(20)])
    seen = []
    for msg in queue.consume(timeout=0.1):
        with msg:
            seen.append(msg.text)
    assert seen == [str(i) for i in range(20)]
    assert len(queue) == 0 and queue.stats().locked == 0


def test_consume_zero_timeout_on_empty_queue(queue: postbox.Queue) -> None:
    assert list(queue.consume(timeout=0)) == []


def test_consume_break_leaves_rest(queue: postbox.Queue) -> None:
    queue.send_batch([b"a", b"b", b"c"])
    it = queue.consume(timeout=1)
    assert iter(it) is it
    first = next(it)
    first.complete()
    assert len(queue) == 2
