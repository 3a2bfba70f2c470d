"""Settling received messages: complete, abandon, dead_letter, resubmit, renew_lock, `with`."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

import postbox


def test_complete_removes(queue: postbox.Queue) -> None:
    mid = queue.send(b"x")
    m = queue.receive(timeout=1)
    assert queue.stats().locked == 1
    m.complete()
    assert m.state == "completed"
    assert queue.get(mid) is None
    assert queue.stats() == postbox_stats(0, 0, 0, 0)


def postbox_stats(active: int, locked: int, scheduled: int, dead: int) -> object:
    class Expected:
        def __eq__(self, other: object) -> bool:
            assert isinstance(other, postbox.QueueStats)
            return (other.active, other.locked, other.scheduled, other.dead_lettered) == (
                active,
                locked,
                scheduled,
                dead,
            )

    return Expected()


def test_abandon_redelivers_with_count(queue: postbox.Queue) -> None:
    queue.send(b"x")
    m = queue.receive(timeout=1)
    assert m.delivery_count == 1
    m.abandon()
    assert m.state == "abandoned"
    again = queue.receive(timeout=1)
    assert again.id == m.id and again.delivery_count == 2
    again.complete()


def test_abandon_with_delay(queue: postbox.Queue) -> None:
    queue.send(b"x")
    queue.receive(timeout=1).abandon(delay=timedelta(milliseconds=200))
    assert queue.stats().scheduled == 1
    with pytest.raises(postbox.Empty):
        queue.receive(timeout=0.05)
    assert queue.receive(timeout=5).delivery_count == 2


def test_dead_letter_and_resubmit(queue: postbox.Queue) -> None:
    mid = queue.send(b"poison", label="p")
    queue.receive(timeout=1).dead_letter("BadFormat", "field x missing")
    assert queue.stats().dead_lettered == 1
    dlq = queue.dead_letters
    with pytest.raises(postbox.InvalidArgumentError):
        dlq.dead_letters  # noqa: B018 - a dead-letter queue has none
    dead = dlq.receive(timeout=1)
    assert dead.id == mid and dead.label == "p" and dead.queue == dlq.name
    assert dead.dead_letter_reason == "BadFormat"
    assert dead.dead_letter_description == "field x missing"
    assert dead.dead_letter_source == "jobs"
    dead.resubmit()
    back = queue.receive(timeout=1)
    assert back.id == mid and back.dead_letter_reason is None and back.delivery_count == 1
    with pytest.raises(postbox.InvalidArgumentError):
        back.resubmit()  # not from a dead-letter queue


def test_max_deliveries_dead_letters(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("retry", max_deliveries=2)
    q.send(b"x")
    q.receive(timeout=1).abandon()
    q.receive(timeout=1).abandon()
    with pytest.raises(postbox.Empty):
        q.receive(timeout=0.1)
    dead = q.dead_letters.receive(timeout=1)
    assert dead.dead_letter_reason == postbox.REASON_MAX_DELIVERIES


def test_lock_expiry_gives_lock_lost(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("short-lock", lock_duration=0.2)
    q.send(b"x")
    first = q.receive(timeout=1)
    time.sleep(0.3)
    second = q.receive(timeout=1)  # the expired lock lets another receiver in
    assert second.id == first.id and second.delivery_count == 2
    with pytest.raises(postbox.LockLostError) as info:
        first.complete()
    assert info.value.message_id == first.id
    assert info.value.code == 2
    second.complete()
    assert q.get(first.id) is None


def test_renew_lock_extends(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("renew", lock_duration=0.4)
    q.send(b"x")
    m = q.receive(timeout=1)
    before = m.locked_until
    assert before is not None
    for _ in range(3):
        time.sleep(0.2)
        until = m.renew_lock()
        assert until.tzinfo is not None
    assert m.locked_until is not None and m.locked_until > before
    with pytest.raises(postbox.Empty):
        q.receive(timeout=0)
    m.complete()


def test_renew_after_loss(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("renew-lost", lock_duration=0.1)
    q.send(b"x")
    m = q.receive(timeout=1)
    time.sleep(0.2)
    q.receive(timeout=1)
    with pytest.raises(postbox.LockLostError):
        m.renew_lock()


def test_settle_once(queue: postbox.Queue) -> None:
    queue.send(b"x")
    m = queue.receive(timeout=1)
    m.complete()
    for settle in (m.complete, m.abandon, m.resubmit, m.renew_lock, lambda: m.dead_letter("r")):
        with pytest.raises(postbox.InvalidArgumentError, match="already settled"):
            settle()


def test_peeked_messages_cannot_be_settled(queue: postbox.Queue) -> None:
    queue.send(b"x")
    m = queue.peek()
    assert m is not None and m.state == "active" and m.lock_token is None and m.locked_until is None
    with pytest.raises(postbox.InvalidArgumentError, match="holds no lock"):
        m.complete()
    with pytest.raises(ValueError):
        m.abandon()


def test_with_completes_on_success(queue: postbox.Queue) -> None:
    queue.send(b"x")
    with queue.receive(timeout=1) as m:
        assert m.body == b"x"
    assert m.state == "completed"
    assert len(queue) == 0 and queue.stats().locked == 0


def test_with_abandons_on_exception(queue: postbox.Queue) -> None:
    queue.send(b"x")
    with pytest.raises(RuntimeError, match="handler failed"):
        with queue.receive(timeout=1) as m:
            raise RuntimeError("handler failed")
    assert m.state == "abandoned"
    again = queue.receive(timeout=1)
    assert again.delivery_count == 2
    again.complete()


def test_with_leaves_a_message_settled_inside(queue: postbox.Queue) -> None:
    queue.send(b"x")
    with queue.receive(timeout=1) as m:
        m.dead_letter("Manual")
    assert m.state == "dead-lettered"
    assert queue.stats().dead_lettered == 1


def test_dropping_an_unsettled_message_releases_it(queue: postbox.Queue) -> None:
    queue.send(b"x")
    m = queue.receive(timeout=1)
    mid = m.id
    del m
    again = queue.receive(timeout=5)
    assert again.id == mid and again.delivery_count == 2
    again.complete()


def test_receive_batch_and_complete_batch(queue: postbox.Queue) -> None:
    queue.send_batch([str(i) for i in range(10)])
    got = queue.receive_batch(4, timeout=1)
    assert [m.text for m in got] == ["0", "1", "2", "3"]
    queue.complete_batch(got)
    assert all(m.state == "completed" for m in got)
    assert len(queue) == 6
    rest = queue.receive_batch(100, timeout=0)
    assert len(rest) == 6
    assert queue.receive_batch(5, timeout=0.05) == []
    queue.complete_batch(rest)
    with pytest.raises(postbox.InvalidArgumentError):
        queue.receive_batch(0)


def test_complete_batch_and_receive_settles_and_locks_in_one_call(queue: postbox.Queue) -> None:
    queue.send_batch([str(i) for i in range(5)])
    got = queue.complete_batch_and_receive([], 2, timeout=0)
    assert [m.text for m in got] == ["0", "1"]
    nxt = queue.complete_batch_and_receive(got, 2, timeout=0)
    assert all(m.state == "completed" for m in got)
    assert [m.text for m in nxt] == ["2", "3"]
    last = queue.complete_batch_and_receive(nxt, 10, timeout=0)
    assert [m.text for m in last] == ["4"]
    assert queue.complete_batch_and_receive(last, 10, timeout=0.05) == []
    assert len(queue) == 0 and queue.stats().locked == 0
    with pytest.raises(postbox.InvalidArgumentError):
        queue.complete_batch_and_receive([], 0)


def test_complete_batch_all_or_none(queue: postbox.Queue) -> None:
    queue.send_batch([b"a", b"b"])
    a, b = queue.receive_batch(2, timeout=1)
    b.complete()
    with pytest.raises(postbox.InvalidArgumentError):
        queue.complete_batch([a, b])
    assert a.state == "locked"  # put back untouched
    with pytest.raises(TypeError):
        queue.complete_batch([a, "not a message"])  # type: ignore[list-item]
    assert a.state == "locked"
    queue.complete_batch([a])


def test_locked_until_is_in_the_future(queue: postbox.Queue) -> None:
    queue.send(b"x")
    m = queue.receive(timeout=1)
    assert m.locked_until is not None
    assert m.locked_until - datetime.now(timezone.utc) > timedelta(seconds=20)
    m.complete()
