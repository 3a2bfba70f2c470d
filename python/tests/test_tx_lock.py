"""Messages received through a transaction carry their lock and can renew it."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

import postbox


def test_transaction_message_exposes_its_lock(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=30)
    q.send(b"x")
    with tmp_store.transaction() as tx:
        m = tx.receive(q, timeout=1)
        assert m.state == "transaction"
        assert isinstance(m.lock_token, int)
        assert m.locked_until is not None
        assert m.locked_until > datetime.now(timezone.utc)


def test_renewal_keeps_the_lock_past_its_first_expiry(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=0.5)
    q.send(b"x")
    tx = tmp_store.transaction()
    m = tx.receive(q, timeout=1)
    first = m.locked_until
    assert first is not None
    deadline = time.monotonic() + 1.5  # three times the lock duration
    while time.monotonic() < deadline:
        time.sleep(0.2)
        until = m.renew_lock()
        assert m.locked_until == until
        # Nobody else can take it meanwhile.
        with pytest.raises(postbox.Empty):
            q.receive(timeout=0)
    assert m.locked_until is not None and m.locked_until > first
    tx.commit()
    assert q.stats().locked == 0 and len(q) == 0
    assert q.get(m.id) is None


def test_without_renewal_the_commit_loses_the_lock(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=0.2)
    q.send(b"x")
    tx = tmp_store.transaction()
    tx.receive(q, timeout=1)
    time.sleep(0.4)
    with pytest.raises(postbox.LockLostError):
        tx.commit()
    m = q.receive(timeout=1)
    assert m.delivery_count == 2
    m.complete()


def test_renewing_an_enlisted_message(tmp_store: postbox.Store) -> None:
    # 0.6 s of slack on each side of the renewal: a loaded CI machine stalls for a while.
    q = tmp_store.queue("q", lock_duration=1.5)
    q.send(b"x")
    m = q.receive(timeout=1)
    token = m.lock_token
    with tmp_store.transaction() as tx:
        tx.complete(m)
        assert m.state == "transaction" and m.lock_token == token
        time.sleep(0.9)
        m.renew_lock()
        time.sleep(0.9)  # past the first expiry
    assert len(q) == 0 and q.stats().locked == 0


def test_renew_after_the_transaction_finished_raises(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    q.send(b"x")
    with tmp_store.transaction() as tx:
        m = tx.receive(q, timeout=1)
    with pytest.raises(postbox.InvalidArgumentError, match="committed"):
        m.renew_lock()
    q.send(b"y")
    tx = tmp_store.transaction()
    m = tx.receive(q, timeout=1)
    tx.abort()
    with pytest.raises(postbox.InvalidArgumentError, match="aborted"):
        m.renew_lock()


def test_a_message_does_not_keep_a_dropped_transaction_alive(tmp_store: postbox.Store) -> None:
    import gc

    q = tmp_store.queue("q")
    q.send(b"x")
    tx = tmp_store.transaction()
    m = tx.receive(q, timeout=1)
    del tx
    gc.collect()
    # Dropping the transaction aborted it: the message is back in its queue.
    again = q.receive(timeout=2)
    assert again.id == m.id and again.delivery_count == 2
    with pytest.raises(postbox.InvalidArgumentError, match="dropped"):
        m.renew_lock()
    again.complete()
