"""``Store.compact()``: the file gives back the space of deleted queues and purged messages;
messages, locks, counts and dead letters stay as they were; sends from other threads during it
wait and succeed; a closed store raises ``ClosedError``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import postbox

BODY = b"x" * (64 * 1024)


def fill(q: postbox.Queue, mib: int) -> None:
    for _ in range(mib):
        q.send_batch([BODY] * 16)


def test_deleting_a_queue_then_compacting_shrinks_the_file(
    tmp_store: postbox.Store, store_path: Path
) -> None:
    keep = tmp_store.queue("keep")
    ids = [keep.send(f"kept {i}".encode()) for i in range(5)]
    fill(tmp_store.queue("big"), 8)
    assert tmp_store.delete_queue("big")

    before, after = tmp_store.compact()
    assert before >= 8 << 20
    assert after < 1 << 20
    assert store_path.stat().st_size == after
    assert [m.id for m in keep.browse()] == ids
    assert keep.stats().active == 5


def test_purge_then_compact_shrinks_the_file(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    fill(q, 4)
    assert q.purge() == 64
    before, after = tmp_store.compact()
    assert after + (3 << 20) < before
    assert len(q) == 0


def test_locks_counts_and_dead_letters_survive(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        q = store.queue("work")
        q.send(b"held")
        q.send(b"dead")
        q.send(b"active", label="l", properties={"k": "v"})
        held = q.receive(timeout=1)
        q.receive(timeout=1).dead_letter("Broken", "it broke")
        fill(store.queue("scratch"), 2)
        store.delete_queue("scratch")
        stats_before = q.stats()

        before, after = store.compact()
        assert after < before
        assert q.stats() == stats_before
        # The lock taken before the compaction still settles.
        held.complete()
        (m,) = list(q.browse())
        assert (m.body, m.label, m.properties) == (b"active", "l", {"k": "v"})
        dead = q.dead_letters.receive(timeout=1)
        assert (dead.body, dead.dead_letter_reason) == (b"dead", "Broken")
        dead.abandon()

    with postbox.Store(store_path) as store:
        q = store.queue("work")
        s = q.stats()
        assert (s.active, s.locked, s.dead_lettered) == (1, 0, 1)


def test_sends_from_other_threads_wait_and_succeed(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    fill(tmp_store.queue("scratch"), 4)
    tmp_store.delete_queue("scratch")
    stop = threading.Event()
    sent = [0, 0]
    errors: list[BaseException] = []

    def sender(slot: int) -> None:
        try:
            while not stop.is_set() or sent[slot] < 20:
                q.send(b"m")
                sent[slot] += 1
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        results = [tmp_store.compact() for _ in range(2)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert any(after < before for before, after in results)
    assert len(q) == sum(sent)


def test_a_closed_store_raises_closed(store_path: Path) -> None:
    store = postbox.Store(store_path)
    store.close()
    with pytest.raises(postbox.ClosedError):
        store.compact()
