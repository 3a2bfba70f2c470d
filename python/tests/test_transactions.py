"""Transactions: `with store.transaction() as tx:` commits on success, aborts on exception."""

from __future__ import annotations

import pytest

import postbox


def test_receive_and_send_commit_together(tmp_store: postbox.Store) -> None:
    orders = tmp_store.queue("orders")
    invoices = tmp_store.queue("invoices")
    orders.send(b"order 7")
    with tmp_store.transaction() as tx:
        assert tx.state == "open"
        order = tx.receive(orders, timeout=1)
        assert order.state == "transaction"
        tx.send(invoices, b"invoice for " + order.body, label="invoice", priority=5,
                properties={"order": str(order.id)})
        assert len(invoices) == 0  # invisible until the commit
    assert tx.state == "committed"
    assert order.state == "completed"
    assert len(orders) == 0 and orders.stats().locked == 0
    inv = invoices.receive(timeout=1)
    assert inv.body == b"invoice for order 7" and inv.label == "invoice" and inv.priority == 5
    assert inv.properties == {"order": str(order.id)}
    with pytest.raises(postbox.InvalidArgumentError, match="transaction"):
        order.complete()


def test_exception_aborts_and_propagates(tmp_store: postbox.Store) -> None:
    orders = tmp_store.queue("orders")
    invoices = tmp_store.queue("invoices")
    orders.send(b"order 8")
    with pytest.raises(KeyError):
        with tmp_store.transaction() as tx:
            tx.receive(orders, timeout=1)
            tx.send(invoices, b"never")
            raise KeyError("boom")
    assert tx.state == "aborted"
    assert len(invoices) == 0
    back = orders.receive(timeout=1)
    assert back.delivery_count == 2


def test_a_transactions_message_says_how_it_ended(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=0.1)
    q.send_batch([b"a", b"b", b"c", b"d"])
    # Aborted: the message went back to its queue.
    tx = tmp_store.transaction()
    m = tx.receive(q, timeout=1)
    assert m.state == "transaction"
    tx.abort()
    assert m.state == "abandoned"
    # Dropped (and so aborted).
    tx = tmp_store.transaction()
    dropped = tx.receive(q, timeout=1)
    del tx
    import gc

    gc.collect()
    assert dropped.state == "abandoned"
    # A commit that failed applied nothing: its messages went back too.
    tx = tmp_store.transaction()
    late = tx.receive(q, timeout=1)
    import time

    time.sleep(0.2)  # past the lock: the commit fails with LockLostError
    with pytest.raises(postbox.LockLostError):
        tx.commit()
    assert tx.state == "aborted" and late.state == "abandoned"
    # An enlisted message follows its transaction too.
    held = q.receive(timeout=1)
    tx = tmp_store.transaction()
    tx.complete(held)
    assert held.state == "transaction"
    tx.abort()
    assert held.state == "abandoned"
    # Committed: completed.
    with tmp_store.transaction() as tx:
        done = tx.receive(q, timeout=1)
    assert done.state == "completed"
    assert "completed" in repr(done)


def test_reentering_a_finished_transaction_raises(tmp_store: postbox.Store) -> None:
    tx = tmp_store.transaction()
    with tx:
        pass
    with pytest.raises(postbox.InvalidArgumentError, match="already committed"):
        with tx:
            pass
    with pytest.raises(postbox.InvalidArgumentError):
        tx.commit()
    with pytest.raises(postbox.InvalidArgumentError):
        tx.send(tmp_store.queue("q"), b"x")
    aborted = tmp_store.transaction()
    aborted.abort()
    with pytest.raises(postbox.InvalidArgumentError, match="already aborted"):
        aborted.__enter__()


def test_explicit_commit_inside_with(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    with tmp_store.transaction() as tx:
        tx.send(q, b"a")
        tx.commit()
    assert len(q) == 1


def test_enlist_received_message(tmp_store: postbox.Store) -> None:
    src = tmp_store.queue("src")
    dst = tmp_store.queue("dst")
    src.send(b"x")
    m = src.receive(timeout=1)
    with tmp_store.transaction() as tx:
        tx.complete(m)
        assert m.state == "transaction"
        tx.send(dst, m.body)
    assert len(src) == 0 and src.stats().locked == 0
    assert len(dst) == 1
    # An aborted enlistment returns the message.
    src.send(b"y")
    m2 = src.receive(timeout=1)
    tx2 = tmp_store.transaction()
    tx2.complete(m2)
    tx2.abort()
    assert src.receive(timeout=1).delivery_count == 2
    with pytest.raises(postbox.InvalidArgumentError):
        tx2.complete(m2)


def test_transaction_receive_timeout(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("empty")
    with tmp_store.transaction() as tx:
        with pytest.raises(postbox.Empty):
            tx.receive(q, timeout=0.05)


def test_commit_with_lost_lock_applies_nothing(tmp_store: postbox.Store) -> None:
    import time

    src = tmp_store.queue("src", lock_duration=0.1)
    dst = tmp_store.queue("dst")
    src.send(b"x")
    tx = tmp_store.transaction()
    tx.receive(src, timeout=1)
    tx.send(dst, b"y")
    time.sleep(0.2)
    with pytest.raises(postbox.LockLostError):
        tx.commit()
    assert len(dst) == 0
    assert len(src) == 1


def test_quota_error_at_commit(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("tiny", max_messages=1)
    with pytest.raises(postbox.QueueFullError):
        with tmp_store.transaction() as tx:
            tx.send(q, b"1")
            tx.send(q, b"2")
    assert len(q) == 0
    assert "Transaction" in repr(tx)
