"""Opening, closing, listing and deleting: postbox.Store."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import postbox


def test_context_manager_closes(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        assert not store.closed
        assert store.path == store_path
        assert store.durability == "immediate"
        assert store.multi_process is False
        store.queue("a").send(b"x")
    assert store.closed
    with pytest.raises(postbox.ClosedError):
        store.queues()
    store.close()  # closing twice is harmless


def test_reopen_keeps_messages(store_path: Path) -> None:
    with postbox.Store(str(store_path)) as store:
        q = store.queue("orders")
        q.send(b"one")
        q.send(b"two")
        del q
    gc.collect()
    with postbox.Store(store_path) as store:
        q = store.queue("orders")
        assert len(q) == 2
        assert [m.body for m in q.browse()] == [b"one", b"two"]


def test_queue_options_are_applied_and_merged(tmp_store: postbox.Store) -> None:
    from datetime import timedelta

    q = tmp_store.queue("q", lock_duration=5, max_deliveries=3, default_ttl=timedelta(hours=1))
    o = q.options
    assert o["lock_duration"] == timedelta(seconds=5)
    assert o["max_deliveries"] == 3
    assert o["default_ttl"] == timedelta(hours=1)
    assert o["max_message_size"] == 4 << 20
    assert o["max_messages"] is None and o["max_bytes"] is None and o["dedup_window"] is None
    # Options not given keep their current values; given ones change.
    q2 = tmp_store.queue("q", max_messages=10, max_bytes=1000, dedup_window=60.5, max_message_size=100)
    o2 = q2.options
    assert o2["lock_duration"] == timedelta(seconds=5)
    assert o2["max_deliveries"] == 3
    assert o2["max_messages"] == 10 and o2["max_bytes"] == 1000 and o2["max_message_size"] == 100
    assert o2["dedup_window"] == timedelta(seconds=60.5)
    # Opening without options changes nothing.
    assert tmp_store.queue("q").options == o2


def test_queues_and_delete(tmp_store: postbox.Store) -> None:
    a = tmp_store.queue("a")
    tmp_store.queue("b")
    a.send(b"x")
    assert sorted(tmp_store.queues()) == ["a", "b"]
    assert tmp_store.delete_queue("a") is True
    assert tmp_store.delete_queue("a") is False
    assert tmp_store.queues() == ["b"]
    with pytest.raises(postbox.QueueNotFoundError) as info:
        a.send(b"y")
    assert isinstance(info.value, LookupError)
    assert info.value.queue == "a"


def test_durability_none(store_path: Path) -> None:
    with postbox.Store(store_path, durability="none") as store:
        assert store.durability == "none"
        q = store.queue("fast")
        q.send_batch([b"a", b"b"])
        assert len(q) == 2


def test_store_stats_counts_commits(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    before = tmp_store.stats()
    q.send(b"x")
    after = tmp_store.stats()
    assert after["commits"] > before["commits"]
    assert after["operations"] > before["operations"]


def test_builder_keywords(store_path: Path) -> None:
    with postbox.Store(
        store_path,
        "immediate",
        True,
        cache_size=1 << 20,
        poll_interval=(0.001, 0.02),
        verify_on_open=False,
    ) as store:
        assert store.multi_process is True
        assert "multi_process=true" in repr(store)


def test_multi_process_handles_share_one_file(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as a, postbox.Store(
        store_path, multi_process=True
    ) as b:
        a.queue("q").send(b"from a")
        assert b.queue("q").receive(timeout=5).body == b"from a"
