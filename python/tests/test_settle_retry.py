"""A refused or failed settle leaves the message held, so a valid settle can follow; a lost lock
spends the handle."""

from __future__ import annotations

import time

import pytest

import postbox


def test_refused_resubmit_keeps_the_message(queue: postbox.Queue) -> None:
    queue.send(b"x")
    m = queue.receive(timeout=1)
    with pytest.raises(postbox.InvalidArgumentError):
        m.resubmit()  # only messages of a dead-letter queue can be resubmitted
    assert m.state == "locked"
    assert queue.stats().locked == 1
    m.complete()
    assert m.state == "completed"
    assert queue.stats().locked == 0 and len(queue) == 0


def test_refused_dead_letter_reason_keeps_the_message(queue: postbox.Queue) -> None:
    queue.send(b"x")
    m = queue.receive(timeout=1)
    with pytest.raises(postbox.InvalidArgumentError, match="reason"):
        m.dead_letter("r" * 300, "a reason longer than 256 bytes is refused")
    assert m.state == "locked"
    m.renew_lock()
    # The longest reason allowed goes through.
    m.dead_letter("r" * 256)
    dead = queue.dead_letters.receive(timeout=1)
    assert dead.dead_letter_reason == "r" * 256
    dead.complete()


def test_refused_settle_then_with_block_completes(queue: postbox.Queue) -> None:
    queue.send(b"x")
    with queue.receive(timeout=1) as m:
        with pytest.raises(postbox.InvalidArgumentError):
            m.resubmit()
    assert m.state == "completed"
    assert queue.peek() is None


def test_refused_settle_then_drop_releases(queue: postbox.Queue) -> None:
    import gc

    queue.send(b"x")
    m = queue.receive(timeout=1)
    with pytest.raises(postbox.InvalidArgumentError):
        m.dead_letter("é" * 200)  # 400 bytes of UTF-8
    del m
    gc.collect()
    again = queue.receive(timeout=2)  # released at once, not after lock_duration
    assert again.delivery_count == 2
    again.complete()


def test_resubmit_from_a_dead_letter_queue_still_works(queue: postbox.Queue) -> None:
    queue.send(b"x")
    queue.receive(timeout=1).dead_letter("poison")
    dead = queue.dead_letters.receive(timeout=1)
    with pytest.raises(postbox.InvalidArgumentError):
        dead.dead_letter("again")  # a dead-letter queue has no dead-letter queue
    dead.resubmit()
    back = queue.receive(timeout=1)
    assert back.body == b"x"
    back.complete()


def test_lock_lost_spends_the_handle(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("short", lock_duration=0.1)
    q.send(b"x")
    m = q.receive(timeout=1)
    time.sleep(0.2)
    other = q.receive(timeout=1)  # the expired lock let another receiver in
    with pytest.raises(postbox.LockLostError):
        m.complete()
    assert m.state == "lock lost"
    with pytest.raises(postbox.InvalidArgumentError, match="already settled"):
        m.complete()
    with pytest.raises(postbox.InvalidArgumentError, match="already settled"):
        m.renew_lock()
    other.complete()
    assert q.get(m.id) is None


def test_processor_dead_letter_reason_is_checked_at_once(queue: postbox.Queue) -> None:
    outcomes: list[str] = []

    def handler(m: postbox.Message) -> None:
        try:
            m.dead_letter("r" * 300)
        except postbox.InvalidArgumentError:
            outcomes.append("refused")
        m.dead_letter("too-long-reason-refused")

    queue.send(b"x")
    with postbox.Processor(queue, handler, workers=1) as p:
        dead = queue.dead_letters.receive(timeout=5)
    assert outcomes == ["refused"]
    assert dead.dead_letter_reason == "too-long-reason-refused"
    dead.complete()
    assert p.is_stopped
