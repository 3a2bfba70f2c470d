"""Selective receives, the blocking peek, and queues that must exist."""

from __future__ import annotations

import threading

import pytest

import postbox


def test_receive_by_id_takes_that_message_only(queue: postbox.Queue) -> None:
    first = queue.send(b"first")
    second = queue.send(b"second")
    msg = queue.receive_by_id(second, timeout=0)
    assert (msg.id, msg.body, msg.state) == (second, b"second", "locked")
    with pytest.raises(postbox.Empty):
        queue.receive_by_id(second, timeout=0)  # locked by us
    with pytest.raises(postbox.Empty):
        queue.receive_by_id(10**9, timeout=0.02)
    msg.complete()
    assert queue.receive(timeout=0).id == first


def test_receive_by_id_wakes_when_the_holder_abandons(queue: postbox.Queue) -> None:
    msg_id = queue.send(b"x")
    held = queue.receive(timeout=0)
    got: list[postbox.Message] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        got.append(queue.receive_by_id(msg_id, timeout=60))

    t = threading.Thread(target=waiter)
    t.start()
    started.wait()
    held.abandon()
    t.join()
    assert got[0].id == msg_id and got[0].delivery_count == 2


def test_three_requesters_share_one_reply_queue(tmp_store: postbox.Store) -> None:
    replies = tmp_store.queue("replies")
    each = 15
    results: dict[int, list[str]] = {}

    def requester(r: int) -> None:
        mine = []
        for _ in range(each):
            with replies.receive_by_correlation_id(f"req-{r}", timeout=60) as m:
                assert m.correlation_id == f"req-{r}"
                mine.append(m.text)
        results[r] = mine

    threads = [threading.Thread(target=requester, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for i in range(each):
        for r in (2, 0, 1):
            replies.send(f"{r}:{i}", correlation_id=f"req-{r}")
    for t in threads:
        t.join()
    assert results == {r: [f"{r}:{i}" for i in range(each)] for r in range(3)}
    assert len(replies) == 0


def test_transactions_select_too(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("jobs")
    a = q.send(b"a", correlation_id="c-1")
    b = q.send(b"b", correlation_id="c-2")
    with pytest.raises(RuntimeError):
        with tmp_store.transaction() as tx:
            assert tx.receive_by_correlation_id(q, "c-2", timeout=0).id == b
            raise RuntimeError("abort")
    assert len(q) == 2
    with tmp_store.transaction() as tx:
        assert tx.receive_by_id(q, a, timeout=0).id == a
        with pytest.raises(postbox.Empty):
            tx.receive_by_correlation_id(q, "none", timeout=0)
    assert q.get(a) is None and q.get(b) is not None


def test_peek_waits_only_when_asked(queue: postbox.Queue) -> None:
    assert queue.peek() is None
    assert queue.peek(timeout=0.02) is None
    started = threading.Event()
    seen: list[postbox.Message | None] = []

    def peeker() -> None:
        started.set()
        seen.append(queue.peek(timeout=60))

    t = threading.Thread(target=peeker)
    t.start()
    started.wait()
    sent = queue.send(b"hello")
    t.join()
    assert seen[0] is not None and seen[0].id == sent and seen[0].state == "active"
    assert queue.stats().locked == 0


def test_open_queue_never_creates(tmp_store: postbox.Store) -> None:
    with pytest.raises(postbox.QueueNotFoundError):
        tmp_store.open_queue("replies-1")
    assert tmp_store.queues() == []
    q = tmp_store.queue("replies-1")
    assert tmp_store.open_queue("replies-1").name == "replies-1"
    assert tmp_store.open_queue(q.dead_letters.name).is_dead_letter_queue
    assert tmp_store.delete_queue("replies-1")
    with pytest.raises(postbox.QueueNotFoundError):
        tmp_store.open_queue("replies-1")
    with pytest.raises(postbox.QueueNotFoundError):
        q.send(b"late reply")
    assert tmp_store.queues() == []
