"""Atomic counters and compare-and-set on application tables: ``Table.increment`` and
``Table.put_if`` (one commit each), ``TransactionTable.increment`` and ``put_if`` (checked at
commit: ``ConflictError`` when another commit changed the row since the transaction read it),
and the issue's count: 8 threads x 1,000 increments in each of two processes -> 16,000.

Knob: POSTBOX_COUNTER_INCREMENTS (increments per thread of the two-process count, default 1000).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from pathlib import Path

import pytest

import postbox

PER_THREAD = int(os.environ.get("POSTBOX_COUNTER_INCREMENTS", "1000"))
THREADS = 8


def test_increment_counts_in_decimal_from_a_missing_row(tmp_store: postbox.Store) -> None:
    c = tmp_store.table("c")
    assert c.increment(b"n") == 1
    assert c.increment("n", 41) == 42  # str keys are UTF-8, as everywhere
    assert c.increment(b"n", -50) == -8
    assert c[b"n"] == b"-8" and int(c[b"n"]) == -8
    c.put(b"m", str(2**63 - 2))
    assert c.increment(b"m") == 2**63 - 1
    with pytest.raises(postbox.InvalidArgumentError, match="outside the range"):
        c.increment(b"m")
    assert c[b"m"] == str(2**63 - 1).encode()
    for bad in (b"", b"abc", b"+5", b" 5", b"1.5", (7).to_bytes(8, "little")):
        c.put(b"x", bad)
        with pytest.raises(postbox.InvalidArgumentError, match="not a counter"):
            c.increment(b"x")
        assert c[b"x"] == bad  # untouched
    with pytest.raises(OverflowError):
        c.increment(b"n", 2**63)
    with pytest.raises(TypeError):
        c.increment(b"n", "1")  # type: ignore[arg-type]


def test_put_if_sets_only_what_it_expected(tmp_store: postbox.Store) -> None:
    leases = tmp_store.table("leases")
    assert leases.put_if(b"r", None, b"w1") is True
    assert leases.put_if(b"r", None, b"w2") is False
    assert leases.put_if(b"r", b"w2", b"w3") is False
    assert leases.put_if("r", "w1", b"") is True
    assert leases.put_if(b"r", b"", b"done") is True  # empty is a value, not "no row"
    assert leases[b"r"] == b"done"
    with pytest.raises(postbox.InvalidArgumentError):
        leases.put_if(b"r", b"done", b"x" * ((1 << 20) + 1))
    with pytest.raises(TypeError):
        leases.put_if(b"r", 5, b"x")  # type: ignore[arg-type]


def test_a_changed_row_fails_the_commit_with_a_conflict(tmp_store: postbox.Store) -> None:
    work, out = tmp_store.queue("work"), tmp_store.queue("out")
    work.send(b"job")
    counters = tmp_store.table("c")
    with pytest.raises(postbox.ConflictError) as info:
        with tmp_store.transaction() as tx:
            tx.receive(work, timeout=1)
            c = tx.table("c")
            assert c.increment(b"n") == 1
            assert c.increment(b"n") == 2  # its own increments add up
            assert c[b"n"] == b"2"
            tx.send(out, b"n = 2")
            assert counters.increment(b"n") == 1  # another writer got there first
    e = info.value
    assert (e.code, e.table, e.key) == (20, "c", b"n")
    assert "changed since the transaction read it" in str(e)
    assert isinstance(e, postbox.PostboxError)
    assert counters[b"n"] == b"1" and len(out) == 0
    again = work.receive(timeout=0)  # the job is back
    assert again.delivery_count == 2
    again.abandon()

    # Run again: it commits.
    with tmp_store.transaction() as tx:
        tx.receive(work, timeout=1)
        assert tx.table("c").increment(b"n") == 2
    assert counters[b"n"] == b"2" and len(work) == 0

    # put_if: False records nothing; True is a condition of the commit.
    counters.put(b"r", b"w1")
    with tmp_store.transaction() as tx:
        assert tx.table("c").put_if(b"r", None, b"mine") is False
        counters.put(b"r", b"w2")
    tx = tmp_store.transaction()
    assert tx.table("c").put_if(b"r", b"w2", b"w3") is True
    counters.put(b"r", b"stolen")
    with pytest.raises(postbox.ConflictError):
        tx.commit()
    assert counters[b"r"] == b"stolen"


def test_four_threads_fifty_transactional_increments_make_two_hundred(
    tmp_store: postbox.Store,
) -> None:
    """Seed 000's count, in transactions run again after a conflict."""
    errors: list[BaseException] = []
    conflicts = [0]

    def worker() -> None:
        try:
            for _ in range(50):
                while True:
                    try:
                        with tmp_store.transaction() as tx:
                            tx.table("c").increment(b"n")
                        break
                    except postbox.ConflictError:
                        conflicts[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert tmp_store.table("c")[b"n"] == b"200"


def _count(
    path: str, per_thread: int, in_tx: bool, start: object, results: object
) -> None:
    """A counting process: opens the store itself, waits for the others, then counts on THREADS
    threads and reports every value its increments returned."""
    values: list[int] = []
    lock = threading.Lock()
    with postbox.Store(path, multi_process=True) as store:
        start.wait()  # type: ignore[attr-defined]

        def thread() -> None:
            mine = []
            for _ in range(per_thread):
                if in_tx:
                    while True:
                        try:
                            with store.transaction() as tx:
                                v = tx.table("count").increment(b"n")
                            break
                        except postbox.ConflictError:
                            pass
                else:
                    v = store.table("count").increment(b"n")
                mine.append(v)
            with lock:
                values.extend(mine)

        threads = [threading.Thread(target=thread) for _ in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    results.put(values)  # type: ignore[attr-defined]


def _count_in_two_processes(path: Path, per_thread: int, in_tx: bool) -> list[int]:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(3)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_count, args=(str(path), per_thread, in_tx, start, results))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    start.wait(timeout=120)
    values = [v for _ in procs for v in results.get(timeout=600)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return values


@pytest.mark.timeout(600)
def test_two_processes_of_eight_threads_count_to_sixteen_thousand(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        values = _count_in_two_processes(store_path, PER_THREAD, in_tx=False)
        total = 2 * THREADS * PER_THREAD
        assert store.table("count")[b"n"] == str(total).encode()  # 16,000 by default
        assert sorted(values) == list(range(1, total + 1)), "each value handed out once"


@pytest.mark.timeout(600)
def test_two_processes_count_exactly_in_transactions(store_path: Path) -> None:
    per_thread = max(1, PER_THREAD // 20)
    with postbox.Store(store_path, multi_process=True) as store:
        values = _count_in_two_processes(store_path, per_thread, in_tx=True)
        total = 2 * THREADS * per_thread
        assert store.table("count")[b"n"] == str(total).encode()
        assert sorted(values) == list(range(1, total + 1))
