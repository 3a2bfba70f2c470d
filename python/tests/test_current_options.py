"""Invariant 12 and fresh reads: a running processor follows the queue's options as stored now,
and peek/browse show what a receive would take now."""

from __future__ import annotations

import threading
import time

import pytest

import postbox
from conftest import wait_for


def test_lock_duration_lowered_while_a_handler_runs(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("jobs", lock_duration=10)
    q.send(b"slow")
    started = threading.Event()
    calls: list[int] = []

    def handler(msg: postbox.Message) -> None:
        calls.append(msg.delivery_count)
        started.set()
        time.sleep(1.5)  # the work itself, longer than the new lock duration

    with postbox.Processor(q, handler, workers=2) as p:
        assert started.wait(10)
        # Another handle lowers the lock duration below the handler's running time.
        tmp_store.queue("jobs", lock_duration=0.4)
        wait_for(lambda: p.stats()["processed"] == 1)
    assert calls == [1]
    s = q.stats()
    assert (s.active, s.locked, s.dead_lettered) == (0, 0, 0)


def test_max_deliveries_raised_while_running(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("jobs", max_deliveries=2)
    q.send(b"flaky")
    calls: list[int] = []
    first = threading.Event()
    raised = threading.Event()

    def handler(msg: postbox.Message) -> None:
        calls.append(msg.delivery_count)
        if msg.delivery_count == 1:
            first.set()
            assert raised.wait(10)
        if msg.delivery_count < 4:
            raise RuntimeError("not yet")

    with postbox.Processor(q, handler, workers=1, retry_delay=0.01, max_retry_delay=0.02) as p:
        assert first.wait(10)
        tmp_store.queue("jobs", max_deliveries=10)
        raised.set()
        wait_for(lambda: p.stats()["processed"] == 1)
    assert calls == [1, 2, 3, 4]
    assert q.stats().dead_lettered == 0
    assert q.options["max_deliveries"] == 10


def test_closing_the_store_under_a_processor_is_counted(store_path: object) -> None:
    store = postbox.Store(store_path)  # type: ignore[arg-type]
    q = store.queue("jobs")
    q.send(b"job")
    started = threading.Event()

    def handler(msg: postbox.Message) -> None:
        started.set()
        time.sleep(0.3)

    p = postbox.Processor(q, handler, workers=1)
    assert started.wait(10)
    store.close()
    report = p.shutdown()
    assert report.finished and report.unsettled >= 1 and not report.forked


def test_browse_never_returns_a_purged_message(queue: postbox.Queue) -> None:
    queue.send_batch([b"m"] * 200)
    it = iter(queue.browse())
    next(it)
    assert queue.purge() == 200
    with pytest.raises(StopIteration):
        next(it)


def test_peek_sees_a_message_whose_lock_expired(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("jobs", lock_duration=0.2)
    q.send(b"held")
    held = q.receive(timeout=1)
    assert q.peek() is None
    time.sleep(0.3)  # past the lock, with nothing writing meanwhile
    peeked = q.peek()
    assert peeked is not None and peeked.id == held.id
    assert [m.id for m in q.browse()] == [held.id]
