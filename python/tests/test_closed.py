"""A closed store refuses new work at once: transactions, their sends, processors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import postbox


def test_transaction_after_close_raises_at_once(store_path: Path) -> None:
    store = postbox.Store(store_path)
    store.queue("q")
    store.close()
    assert store.closed
    with pytest.raises(postbox.ClosedError) as info:
        store.transaction()
    assert info.value.code == 9
    assert not isinstance(info.value, postbox.ForkedError)


def test_transaction_send_after_close_raises_at_once(store_path: Path) -> None:
    store = postbox.Store(store_path)
    q = store.queue("q")
    tx = store.transaction()
    store.close()
    with pytest.raises(postbox.ClosedError):
        tx.send(q, b"x")
    with pytest.raises(postbox.ClosedError):
        tx.receive(q, timeout=5)
    # Ending the transaction does not raise anything worse than ClosedError.
    with pytest.raises(postbox.ClosedError):
        tx.commit()
    with postbox.Store(store_path) as again:
        assert len(again.queue("q")) == 0


def test_transaction_with_block_on_a_closed_store(store_path: Path) -> None:
    store = postbox.Store(store_path)
    q = store.queue("q")
    store.close()
    start = time.monotonic()
    with pytest.raises(postbox.ClosedError):
        with store.transaction() as tx:
            tx.send(q, b"never")
    assert time.monotonic() - start < 1.0


def test_processor_on_a_closed_store_raises(store_path: Path) -> None:
    store = postbox.Store(store_path)
    q = store.queue("q")
    store.close()
    with pytest.raises(postbox.ClosedError):
        postbox.Processor(q, lambda m: None)


def test_processor_on_a_deleted_queue_raises(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("gone")
    tmp_store.delete_queue("gone")
    with pytest.raises(postbox.QueueNotFoundError):
        postbox.Processor(q, lambda m: None)


def test_closing_twice_is_harmless(store_path: Path) -> None:
    store = postbox.Store(store_path)
    q = store.queue("q")
    assert not store.closed
    store.close()
    assert store.closed
    with pytest.raises(postbox.ClosedError):
        q.send(b"x")
    store.close()  # harmless twice
