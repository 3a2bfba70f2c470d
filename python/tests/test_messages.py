"""Sending and reading messages: every property round trip, bodies, order, scheduling."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

import postbox


def test_every_property_round_trips(queue: postbox.Queue) -> None:
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    mid = queue.send(
        b"payload",
        label="resize",
        content_type="application/json",
        priority=6,
        correlation_id="corr-1",
        reply_to="replies",
        ttl=3600,
        group="g1",
        sequence=7,
        properties={"tenant": "acme", "blob": b"\x00\xff", "ba": bytearray(b"ab")},
        message_key="k-1",
    )
    assert isinstance(mid, int)
    for m in (queue.peek(), queue.get(mid), next(iter(queue.browse())), queue.receive(timeout=1)):
        assert m is not None
        assert m.id == mid
        assert m.queue == "jobs"
        assert m.body == b"payload"
        assert m.text == "payload"
        assert m.label == "resize"
        assert m.content_type == "application/json"
        assert m.priority == 6
        assert m.correlation_id == "corr-1"
        assert m.reply_to == "replies"
        assert m.group == "g1"
        assert m.sequence == 7
        assert m.message_key == "k-1"
        assert m.properties == {"tenant": "acme", "blob": b"\x00\xff", "ba": b"ab"}
        assert m.enqueued_at.tzinfo is not None
        assert before <= m.enqueued_at <= datetime.now(timezone.utc)
        assert m.expires_at is not None
        assert abs((m.expires_at - m.enqueued_at) - timedelta(hours=1)) < timedelta(seconds=1)
        assert m.visible_at is None
        assert m.dead_letter_reason is None
        assert m.dead_letter_description is None
        assert m.dead_letter_source is None
        assert m.dead_lettered_at is None
    assert m.delivery_count == 1
    assert m.state == "locked"
    assert isinstance(m.lock_token, int)
    assert m.locked_until is not None and m.locked_until > datetime.now(timezone.utc)
    m.complete()


def test_defaults(queue: postbox.Queue) -> None:
    queue.send(b"")
    m = queue.receive(timeout=1)
    assert m.body == b""
    assert m.priority == postbox.DEFAULT_PRIORITY == 3
    for attr in ("label", "content_type", "correlation_id", "reply_to", "group", "sequence",
                 "message_key", "expires_at", "visible_at"):
        assert getattr(m, attr) is None, attr
    assert m.properties == {}
    m.complete()


@pytest.mark.parametrize(
    "body, expected",
    [
        (b"bytes", b"bytes"),
        (bytearray(b"bytearray"), b"bytearray"),
        (memoryview(b"memoryview"), b"memoryview"),
        (memoryview(b"0123456789")[::2], b"02468"),
        ("h\u00e9llo \u2603", "h\u00e9llo \u2603".encode()),
        (b"\x00" * 100_000, b"\x00" * 100_000),
    ],
)
def test_body_types(queue: postbox.Queue, body: object, expected: bytes) -> None:
    queue.send(body)  # type: ignore[arg-type]
    m = queue.receive(timeout=1)
    assert m.body == expected
    assert type(m.body) is bytes
    m.complete()


def test_priority_then_send_order(queue: postbox.Queue) -> None:
    queue.send(b"low-1", priority=0)
    queue.send(b"mid-1")
    queue.send(b"high", priority=7)
    queue.send(b"mid-2", priority=3)
    queue.send(b"low-2", priority=0)
    got = []
    for _ in range(5):
        m = queue.receive(timeout=1)
        got.append(m.body)
        m.complete()
    assert got == [b"high", b"mid-1", b"mid-2", b"low-1", b"low-2"]


def test_delay_and_visible_at(queue: postbox.Queue) -> None:
    queue.send(b"later", delay=timedelta(milliseconds=300))
    queue.send(b"at", visible_at=datetime.now(timezone.utc) + timedelta(milliseconds=300))
    s = queue.stats()
    assert s.scheduled == 2 and s.active == 0 and len(queue) == 0
    with pytest.raises(postbox.Empty):
        queue.receive(timeout=0.05)
    t0 = time.monotonic()
    a = queue.receive(timeout=5)
    b = queue.receive(timeout=5)
    assert time.monotonic() - t0 < 3
    assert {a.body, b.body} == {b"later", b"at"}
    assert a.visible_at is not None
    a.complete()
    b.complete()


def test_ttl_and_expires_at_dead_letter(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("short")
    q.send(b"ttl", ttl=0.1)
    q.send(b"abs", expires_at=datetime.now(timezone.utc) + timedelta(milliseconds=100))
    time.sleep(0.3)
    with pytest.raises(postbox.Empty):
        q.receive(timeout=0)
    s = q.stats()
    assert s.dead_lettered == 2
    dlq = q.dead_letters
    assert dlq.is_dead_letter_queue and dlq.source_name == "short"
    reasons = set()
    for m in dlq.browse():
        reasons.add(m.dead_letter_reason)
        assert m.dead_letter_source == "short"
        assert m.dead_lettered_at is not None
    assert reasons == {postbox.REASON_TTL_EXPIRED}


def test_default_ttl_of_the_queue(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("ttl", default_ttl=timedelta(minutes=5))
    q.send(b"x")
    m = q.peek()
    assert m is not None and m.expires_at is not None


def test_send_batch(queue: postbox.Queue) -> None:
    ids = queue.send_batch(
        [b"a", "b", bytearray(b"c"), {"body": b"d", "label": "L", "priority": 7, "properties": {"k": "v"}}]
    )
    assert len(ids) == 4 and ids == sorted(ids)
    first = queue.receive(timeout=1)
    assert first.body == b"d" and first.label == "L" and first.properties == {"k": "v"}
    first.complete()
    assert [m.body for m in queue.browse()] == [b"a", b"b", b"c"]
    assert queue.send_batch([]) == []


def test_send_batch_is_atomic(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("small", max_message_size=4)
    with pytest.raises(postbox.MessageTooLargeError):
        q.send_batch([b"ok", b"too large"])
    assert len(q) == 0


def test_dedup_window(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("dedup", dedup_window=60)
    a = q.send(b"first", message_key="order-1")
    b = q.send(b"second", message_key="order-1")
    assert a == b
    assert len(q) == 1


def test_get_missing_and_peek_empty(queue: postbox.Queue) -> None:
    assert queue.peek() is None
    assert queue.get(12345) is None
    assert list(queue.browse()) == []


def test_browse_does_not_lock(queue: postbox.Queue) -> None:
    for i in range(100):
        queue.send(str(i))
    seen = [m.text for m in queue.browse()]
    assert seen == [str(i) for i in range(100)]
    assert queue.stats().locked == 0
    assert len(queue) == 100


def test_stats_len_and_purge(queue: postbox.Queue) -> None:
    queue.send_batch([b"1", b"22", b"333"])
    queue.send(b"later", delay=60)
    held = queue.receive(timeout=1)
    s = queue.stats()
    assert (s.active, s.locked, s.scheduled, s.dead_lettered) == (2, 1, 1, 0)
    assert s.bytes == 1 + 2 + 3 + 5
    assert s._asdict() == {
        "active": 2,
        "locked": 1,
        "scheduled": 1,
        "deferred": 0,
        "dead_lettered": 0,
        "bytes": 11,
    }
    assert s == queue.stats()
    assert "active=2" in repr(s)
    assert len(queue) == 2
    assert queue.purge() == 4
    assert len(queue) == 0
    with pytest.raises(postbox.LockLostError):
        held.complete()


def test_message_repr_and_unicode_errors(queue: postbox.Queue) -> None:
    queue.send(b"\xff\xfe binary")
    m = queue.receive(timeout=1)
    assert "postbox.Message" in repr(m) and "locked" in repr(m)
    with pytest.raises(UnicodeDecodeError):
        m.text  # noqa: B018
    m.complete()


def test_a_message_looked_up_by_id_has_its_queue_state(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=60)
    a, b, c = q.send_batch([b"a", b"b", b"c"])
    later = q.send(b"later", delay=60)
    first = q.receive(timeout=0)
    assert first.id == a
    q.receive(timeout=0).defer()  # b
    # What another receiver holds reads "locked", not "unlocked".
    assert q.get(a).state == "locked"  # type: ignore[union-attr]
    first.abandon()
    assert q.get(a).state == "active"  # type: ignore[union-attr]
    assert q.get(b).state == "deferred"  # type: ignore[union-attr]
    assert q.get(later).state == "scheduled"  # type: ignore[union-attr]
    assert q.get(10_000) is None
    peeked = q.peek()
    assert peeked is not None and peeked.state == "active"
    assert {m.state for m in q.browse()} == {"active"}
    # A dead letter is active in its dead-letter queue (locked while held there).
    held = q.receive_by_id(c, timeout=0)
    held.dead_letter("Bad")
    assert q.dead_letters.get(c).state == "active"  # type: ignore[union-attr]
    assert q.get(c) is None


def test_len_counts_receivable_messages_only_stats_counts_all(tmp_store: postbox.Store) -> None:
    # The trap: a queue whose only message is locked has length 0 but is not empty.
    q = tmp_store.queue("q")
    q.send(b"x")
    held = q.receive(timeout=0)
    assert len(q) == 0
    s = q.stats()
    assert (s.active, s.locked) == (0, 1)
    held.abandon()
    assert len(q) == 1
