"""Deferral: `Message.defer()` sets a message aside, receivable only by id."""

from __future__ import annotations

from pathlib import Path

import pytest

import postbox


def counts(q: postbox.Queue) -> tuple[int, int, int, int]:
    s = q.stats()
    return (s.active, s.locked, s.scheduled, s.deferred)


def test_defer_hides_the_message(queue: postbox.Queue) -> None:
    first = queue.send(b"first")
    second = queue.send(b"second")
    msg = queue.receive(timeout=0)
    assert (msg.id, msg.delivery_count) == (first, 1)
    msg.defer()
    assert msg.state == "deferred"
    assert msg.body == b"first"  # still readable

    # Normal receives, peeks and browses skip it: the second comes, then nothing.
    other = queue.receive(timeout=0)
    assert other.id == second
    other.complete()
    with pytest.raises(postbox.Empty):
        queue.receive(timeout=0.02)
    assert queue.peek() is None
    assert queue.peek(timeout=0.02) is None
    assert list(queue.browse()) == []
    assert len(queue) == 0

    # A lookup by id still finds it; the counts show it.
    got = queue.get(first)
    assert got is not None and got.body == b"first"
    assert counts(queue) == (0, 0, 0, 1)
    s = queue.stats()
    assert s.deferred == 1 and s.dead_lettered == 0 and s.bytes == len(b"first")
    assert s._asdict()["deferred"] == 1
    assert "deferred=1" in repr(s)


def test_receive_by_id_and_abandon_keep_it_deferred(queue: postbox.Queue) -> None:
    mid = queue.send(b"step 1 done")
    queue.receive(timeout=0).defer()

    again = queue.receive_by_id(mid, timeout=0)
    assert (again.id, again.delivery_count, again.state) == (mid, 2, "locked")
    assert counts(queue) == (0, 1, 0, 0)  # locked while received by id
    again.abandon()
    assert counts(queue) == (0, 0, 0, 1)  # deferred again, not receivable
    with pytest.raises(postbox.Empty):
        queue.receive(timeout=0.02)
    assert queue.peek() is None

    # An exception in a `with` block abandons: still deferred.
    with pytest.raises(RuntimeError):
        with queue.receive_by_id(mid, timeout=0) as m:
            assert m.delivery_count == 3
            raise RuntimeError("not yet")
    assert counts(queue) == (0, 0, 0, 1)

    last = queue.receive_by_id(mid, timeout=0)
    assert last.delivery_count == 4
    last.complete()
    assert counts(queue) == (0, 0, 0, 0)
    assert queue.stats().bytes == 0
    assert queue.get(mid) is None


def test_a_reopened_store_keeps_it_deferred(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        q = store.queue("jobs")
        mid = q.send(b"wait for payment")
        q.receive(timeout=0).defer()
    with postbox.Store(store_path) as store:
        q = store.open_queue("jobs")
        assert counts(q) == (0, 0, 0, 1)
        with pytest.raises(postbox.Empty):
            q.receive(timeout=0)
        msg = q.receive_by_id(mid, timeout=0)
        assert (msg.body, msg.delivery_count) == (b"wait for payment", 2)
        msg.complete()
        assert counts(q) == (0, 0, 0, 0) and q.stats().dead_lettered == 0


def test_settling_twice_raises(queue: postbox.Queue) -> None:
    mid = queue.send(b"x")
    msg = queue.receive(timeout=0)
    msg.defer()
    with pytest.raises(postbox.InvalidArgumentError):
        msg.defer()
    with pytest.raises(postbox.InvalidArgumentError):
        msg.complete()

    again = queue.receive_by_id(mid, timeout=0)
    again.defer()  # deferred once more, from a receive by id
    assert again.state == "deferred"
    with pytest.raises(postbox.InvalidArgumentError):
        again.complete()
    with pytest.raises(postbox.InvalidArgumentError):
        again.defer()
    assert counts(queue) == (0, 0, 0, 1)

    last = queue.receive_by_id(mid, timeout=0)
    assert last.delivery_count == 3
    last.complete()
    with pytest.raises(postbox.InvalidArgumentError):
        last.complete()
    with pytest.raises(postbox.InvalidArgumentError):
        last.defer()
    with pytest.raises(postbox.InvalidArgumentError):
        last.abandon()
    assert counts(queue) == (0, 0, 0, 0)


def test_only_a_held_message_can_be_deferred(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("jobs")
    mid = q.send(b"x")
    peeked = q.peek()
    assert peeked is not None
    with pytest.raises(postbox.InvalidArgumentError):
        peeked.defer()
    with tmp_store.transaction() as tx:
        in_tx = tx.receive(q, timeout=0)
        assert in_tx.id == mid
        with pytest.raises(postbox.InvalidArgumentError):
            in_tx.defer()
        tx.abort()
    assert counts(q) == (1, 0, 0, 0)
