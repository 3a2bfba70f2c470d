"""The GIL is released while postbox waits or writes: other Python threads keep running."""

from __future__ import annotations

import threading
import time

import pytest

import postbox


def test_blocking_receive_does_not_block_other_threads(queue: postbox.Queue) -> None:
    started = threading.Event()
    result: list[object] = []

    def receiver() -> None:
        started.set()
        try:
            result.append(queue.receive(timeout=1.5))
        except postbox.Empty as e:
            result.append(e)

    t = threading.Thread(target=receiver)
    t.start()
    started.wait()
    # Pure-Python work needs the GIL: it only progresses if the receiver released it.
    counter = 0
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        counter += 1
    t.join()
    assert isinstance(result[0], postbox.Empty)
    assert counter > 100_000, f"only {counter} iterations while another thread waited"


def test_forever_receive_is_woken_by_another_thread(queue: postbox.Queue) -> None:
    got: list[bytes] = []

    def receiver() -> None:
        with queue.receive() as m:  # no timeout: waits until a message comes
            got.append(m.body)

    t = threading.Thread(target=receiver)
    t.start()
    time.sleep(0.3)
    assert t.is_alive() and not got
    queue.send(b"wake up")
    t.join(timeout=5)
    assert got == [b"wake up"]


def test_concurrent_producers_and_consumers(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("work")
    n_producers, per_producer = 4, 250
    seen: list[int] = []
    lock = threading.Lock()
    done = threading.Event()

    def produce(p: int) -> None:
        for i in range(per_producer):
            q.send(f"{p}:{i}")

    def consume() -> None:
        while True:
            try:
                m = q.receive(timeout=0.2)
            except postbox.Empty:
                if done.is_set():
                    return
                continue
            m.complete()
            with lock:
                seen.append(m.id)

    consumers = [threading.Thread(target=consume) for _ in range(4)]
    producers = [threading.Thread(target=produce, args=(p,)) for p in range(n_producers)]
    for t in consumers + producers:
        t.start()
    for t in producers:
        t.join()
    done.set()
    for t in consumers:
        t.join()
    assert len(seen) == len(set(seen)) == n_producers * per_producer
    assert len(q) == 0
    # Group commit: concurrent threads share commits.
    stats = tmp_store.stats()
    assert stats["operations"] > stats["commits"]


@pytest.mark.parametrize("timeout", [0.05, 0.3])
def test_timeouts_are_honoured(queue: postbox.Queue, timeout: float) -> None:
    t0 = time.monotonic()
    with pytest.raises(postbox.Empty):
        queue.receive(timeout=timeout)
    elapsed = time.monotonic() - t0
    assert timeout <= elapsed < timeout + 0.5


def test_one_holder_at_a_time_across_threads(queue: postbox.Queue) -> None:
    queue.send_batch([str(i) for i in range(200)])
    holders: dict[int, int] = {}
    lock = threading.Lock()

    def worker() -> None:
        for m in queue.consume(timeout=0.2):
            with lock:
                holders[m.id] = holders.get(m.id, 0) + 1
            m.complete()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(holders) == 200 and set(holders.values()) == {1}
