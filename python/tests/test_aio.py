"""postbox.aio: async receives without a thread each, cancellation, transactions, processor."""

from __future__ import annotations

import asyncio
import os
import queue as stdlib_queue
import threading
import time
from pathlib import Path

import pytest

import postbox
import postbox.aio as aio

pytest.importorskip("pytest_asyncio")

pytestmark = pytest.mark.asyncio


def threads() -> int:
    """Threads of this process, native ones included (the driver, the store's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except FileNotFoundError:
        return threading.active_count()


async def test_send_receive_round_trip(queue: postbox.Queue) -> None:
    q = aio.AsyncQueue(queue)
    mid = await q.send(b"hello", label="greeting")
    msg = await q.receive(timeout=5)
    assert msg is not None
    assert (msg.id, msg.body, msg.label, msg.delivery_count) == (mid, b"hello", "greeting", 1)
    await msg.complete()
    assert msg.state == "completed"
    assert queue.stats().active == 0 and queue.stats().locked == 0


async def test_receive_timeout_raises_empty_as_the_blocking_receive(
    queue: postbox.Queue,
) -> None:
    q = aio.AsyncQueue(queue)
    start = time.monotonic()
    with pytest.raises(postbox.Empty):
        await q.receive(timeout=0.2)
    assert 0.15 < time.monotonic() - start < 3
    with pytest.raises(postbox.Empty):
        await q.receive(timeout=0)
    # The same rule as the blocking receive: Empty is also the stdlib's queue.Empty.
    with pytest.raises(stdlib_queue.Empty):
        queue.receive(timeout=0)
    with pytest.raises(stdlib_queue.Empty):
        await q.receive(timeout=0)


async def test_send_from_another_thread_wakes_a_waiting_receive(queue: postbox.Queue) -> None:
    q = aio.AsyncQueue(queue)
    waiting = asyncio.ensure_future(q.receive(timeout=30))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    threading.Thread(target=queue.send, args=(b"wake",)).start()
    msg = await asyncio.wait_for(waiting, 10)
    assert msg is not None and msg.body == b"wake"
    await msg.complete()


async def test_the_loop_is_never_blocked(queue: postbox.Queue) -> None:
    q = aio.AsyncQueue(queue)
    ticks: list[float] = []

    async def heartbeat() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    beat = asyncio.ensure_future(heartbeat())
    receives = [asyncio.ensure_future(q.receive(timeout=0.5)) for _ in range(50)]
    got = await asyncio.gather(*receives, return_exceptions=True)
    assert all(isinstance(r, postbox.Empty) for r in got), got
    beat.cancel()
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert len(ticks) >= 20
    assert max(gaps) < 0.2, max(gaps)


async def test_a_thousand_waiting_receives_cost_no_threads(queue: postbox.Queue) -> None:
    q = aio.AsyncQueue(queue)
    # Start the driver thread (once per process) before counting.
    with pytest.raises(postbox.Empty):
        await q.receive(timeout=0)
    before = threads()
    receives = [asyncio.ensure_future(q.receive(timeout=60)) for _ in range(1000)]
    await asyncio.sleep(0.3)
    waiting = threads()
    assert not any(r.done() for r in receives)
    assert waiting <= before + 2, (before, waiting)
    await asyncio.get_running_loop().run_in_executor(
        None, queue.send_batch, [b"%d" % i for i in range(1000)]
    )
    got = await asyncio.wait_for(asyncio.gather(*receives), 30)
    assert all(m is not None for m in got)
    assert len({m.id for m in got if m is not None}) == 1000
    assert queue.stats().locked == 1000
    for m in got:
        assert m is not None
        m.message.complete()


async def test_cancelled_waiting_receive_loses_nothing(queue: postbox.Queue) -> None:
    q = aio.AsyncQueue(queue)
    waiting = asyncio.ensure_future(q.receive())
    await asyncio.sleep(0.1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    queue.send(b"after the cancel")
    msg = queue.receive(timeout=5)
    assert msg.body == b"after the cancel"
    assert msg.delivery_count == 1
    msg.complete()


async def test_cancel_racing_with_delivery_leaves_nothing_locked(queue: postbox.Queue) -> None:
    # Cancel at every moment around the delivery: the message is never lost nor left locked.
    q = aio.AsyncQueue(queue)
    for i in range(30):
        waiting = asyncio.ensure_future(q.receive())
        await asyncio.sleep(0.005)
        await asyncio.get_running_loop().run_in_executor(None, queue.send, b"%d" % i)
        if i % 3:
            await asyncio.sleep(0.0005 * i)
        waiting.cancel()
        try:
            msg = await waiting
        except asyncio.CancelledError:
            msg = None
        if msg is None:
            # A lock the writer had already taken for the dropped wait is returned by the
            # writer thread a moment later: a plain receive waits for it.
            got = queue.receive(timeout=5)
            assert got.body == b"%d" % i
            # 1 when the wait was withdrawn, 2 when the delivery reached the loop first.
            assert got.delivery_count in (1, 2)
            got.complete()
        else:
            await msg.complete()
    assert queue.stats().active == 0 and queue.stats().locked == 0


async def test_cancel_after_the_result_arrived_abandons_it(queue: postbox.Queue) -> None:
    queue.send(b"x")
    loop = asyncio.get_running_loop()
    done = threading.Event()

    def wake() -> None:
        done.set()

    handle = postbox._postbox._receive_async(queue, 5, wake)
    assert await loop.run_in_executor(None, done.wait, 5)
    assert handle.done()
    # The receive resolved but nobody collected it: cancelling abandons the message.
    assert handle.cancel() is False
    assert queue.stats().locked == 0
    msg = queue.receive(timeout=1)
    assert msg.delivery_count == 2
    msg.complete()


async def test_async_for_in_order(queue: postbox.Queue) -> None:
    q = aio.AsyncQueue(queue)
    queue.send_batch([b"%d" % i for i in range(10)])
    seen = []
    async for msg in q:
        seen.append(msg.body)
        await msg.complete()
        if len(seen) == 10:
            break
    assert seen == [b"%d" % i for i in range(10)]


async def test_async_for_ends_with_closed_error(store_path: Path) -> None:
    store = postbox.Store(store_path)
    q = aio.AsyncQueue(store.queue("jobs"))

    async def drain() -> None:
        async for msg in q:
            await msg.complete()

    task = asyncio.ensure_future(drain())
    await asyncio.sleep(0.1)
    store.close()
    with pytest.raises(postbox.ClosedError):
        await asyncio.wait_for(task, 10)


async def test_transaction_commit_and_rollback(tmp_store: postbox.Store) -> None:
    src = aio.AsyncQueue(tmp_store.queue("src"))
    dst = tmp_store.queue("dst")
    await src.send(b"a")
    await src.send(b"b")

    async with aio.begin(tmp_store) as tx:
        msg = await tx.receive(src, timeout=1)
        assert msg is not None and msg.body == b"a"
        await tx.send(dst, b"from a")
    assert tx.state == "committed"
    assert dst.stats().active == 1
    assert src.queue.stats().active == 1

    with pytest.raises(RuntimeError):
        async with aio.begin(tmp_store) as tx:
            msg = await tx.receive(src, timeout=1)
            assert msg is not None and msg.body == b"b"
            await tx.send(dst, b"from b")
            raise RuntimeError("roll back")
    assert tx.state == "aborted"
    assert dst.stats().active == 1
    assert src.queue.stats().active == 1 and src.queue.stats().locked == 0

    async with aio.begin(tmp_store) as tx:
        assert (await tx.receive(dst, timeout=0.05)).body == b"from a"
        with pytest.raises(postbox.Empty):
            await tx.receive(dst, timeout=0.05)


async def test_processor_runs_async_handlers_and_retries(tmp_store: postbox.Store) -> None:
    queue = tmp_store.queue("work", max_deliveries=5)
    queue.send_batch([b"%d" % i for i in range(20)] + [b"flaky"])
    done: list[bytes] = []
    attempts = 0
    all_done = asyncio.Event()

    async def handle(msg: aio.AsyncMessage) -> None:
        nonlocal attempts
        await asyncio.sleep(0.001)
        if msg.body == b"flaky":
            attempts += 1
            if attempts < 3:
                raise ValueError("not yet")
        done.append(msg.body)
        if len(done) == 21:
            all_done.set()

    proc = aio.AsyncProcessor(queue, handle, concurrency=4)
    async with proc:
        await asyncio.wait_for(all_done.wait(), 20)
    assert sorted(done) == sorted([b"%d" % i for i in range(20)] + [b"flaky"])
    assert attempts == 3
    assert (proc.processed, proc.failed) == (21, 2)
    stats = queue.stats()
    assert (stats.active, stats.locked) == (0, 0)


async def test_processor_stop_gives_back_nothing_locked(queue: postbox.Queue) -> None:
    async def handle(msg: aio.AsyncMessage) -> None:
        pass

    proc = aio.AsyncProcessor(queue, handle, concurrency=8)
    proc.start()
    await asyncio.sleep(0.1)
    await asyncio.wait_for(proc.stop(), 5)
    queue.send(b"later")
    msg = queue.receive(timeout=5)
    assert msg.delivery_count == 1
    msg.complete()


async def test_shared_store_receive_is_woken(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        queue = store.queue("jobs")
        q = aio.AsyncQueue(queue)
        waiting = asyncio.ensure_future(q.receive(timeout=30))
        await asyncio.sleep(0.1)
        threading.Thread(target=queue.send, args=(b"shared",)).start()
        msg = await asyncio.wait_for(waiting, 10)
        assert msg is not None and msg.body == b"shared"
        await msg.complete()
        with pytest.raises(postbox.Empty):
            await q.receive(timeout=0.1)


async def test_wait_for_running_out_gives_nothing_up(queue: postbox.Queue) -> None:
    q = aio.AsyncQueue(queue)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(q.receive(), 0.1)
    queue.send(b"kept")
    msg = queue.receive(timeout=5)
    assert (msg.body, msg.delivery_count) == (b"kept", 1)
    msg.complete()
