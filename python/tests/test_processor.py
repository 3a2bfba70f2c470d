"""postbox.Processor: Rust worker threads running a Python handler, graceful shutdown."""

from __future__ import annotations

import threading
import time

import pytest

import postbox
from conftest import wait_for


def test_processes_every_message(queue: postbox.Queue) -> None:
    queue.send_batch([str(i) for i in range(200)])
    seen: list[str] = []
    lock = threading.Lock()

    def handler(msg: postbox.Message) -> None:
        assert msg.state == "processor"
        with lock:
            seen.append(msg.text)

    with postbox.Processor(queue, handler, workers=4) as p:
        assert p.queue.name == "jobs"
        wait_for(lambda: len(seen) == 200)
    assert sorted(seen, key=int) == [str(i) for i in range(200)]
    s = queue.stats()
    assert (s.active, s.locked) == (0, 0)
    assert p.is_stopped and "shut down" in repr(p)


def test_failures_retry_then_dead_letter(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("flaky", max_deliveries=3)
    q.send(b"x")
    calls: list[int] = []

    def handler(msg: postbox.Message) -> None:
        calls.append(msg.delivery_count)
        raise ValueError("cannot parse")

    with postbox.Processor(q, handler, workers=1, retry_delay=0.01, max_retry_delay=0.02) as p:
        wait_for(lambda: q.stats().dead_lettered == 1)
        stats = p.stats()
    assert calls == [1, 2, 3]
    assert stats["failed"] == 3
    dead = q.dead_letters.receive(timeout=1)
    assert dead.dead_letter_reason == postbox.REASON_MAX_DELIVERIES
    assert "ValueError: cannot parse" in (dead.dead_letter_description or "")


def test_handler_dead_letters_and_cannot_settle_itself(queue: postbox.Queue) -> None:
    queue.send(b"poison")
    queue.send(b"good")
    errors: list[Exception] = []

    def handler(msg: postbox.Message) -> None:
        for settle in (msg.complete, msg.abandon):
            try:
                settle()
            except postbox.InvalidArgumentError as e:
                errors.append(e)
        if msg.body == b"poison":
            msg.dead_letter("Poison", "refused")
            with pytest.raises(postbox.InvalidArgumentError):
                msg.dead_letter("Twice")

    with postbox.Processor(queue, handler, workers=1) as p:
        wait_for(lambda: p.stats()["processed"] + p.stats()["dead_lettered"] == 2)
    assert len(errors) == 4 and "settled by the processor" in str(errors[0])
    dead = queue.dead_letters.receive(timeout=1)
    assert (dead.dead_letter_reason, dead.dead_letter_description) == ("Poison", "refused")
    assert len(queue) == 0


def test_a_dead_letter_request_wins_over_a_raise(queue: postbox.Queue) -> None:
    # As in Rust and C: the request is applied whatever the handler then does.
    queue.send(b"poison")

    def handler(msg: postbox.Message) -> None:
        msg.dead_letter("Poison", "asked, then raised")
        raise RuntimeError("after asking")

    with postbox.Processor(queue, handler, workers=1, retry_delay=0.01) as p:
        wait_for(lambda: p.stats()["dead_lettered"] == 1)
    dead = queue.dead_letters.receive(timeout=1)
    assert (dead.dead_letter_reason, dead.dead_letter_description) == ("Poison", "asked, then raised")
    assert len(queue) == 0


def test_shutdown_waits_for_slow_handlers_in_flight(queue: postbox.Queue) -> None:
    queue.send_batch([str(i) for i in range(10)])
    started: list[int] = []
    finished: list[int] = []
    lock = threading.Lock()

    def slow(msg: postbox.Message) -> None:
        with lock:
            started.append(msg.id)
        time.sleep(1.0)
        with lock:
            finished.append(msg.id)

    p = postbox.Processor(queue, slow, workers=4)
    wait_for(lambda: len(started) == 4)
    assert p.in_flight == 4
    t0 = time.monotonic()
    report = p.shutdown(timeout=30)
    elapsed = time.monotonic() - t0
    assert report.finished and report.still_running == 0
    assert 0.3 < elapsed < 5, elapsed
    assert sorted(finished) == sorted(started), "every in-flight handler ran to its end"
    assert report.processed == len(finished)
    s = queue.stats()
    assert s.locked == 0, "nothing left locked"
    assert s.active == 10 - len(finished)
    for mid in finished:
        assert queue.get(mid) is None, "the handled messages were completed"
    with pytest.raises(postbox.InvalidArgumentError, match="already shut down"):
        p.shutdown()


def test_shutdown_timeout_reports_unfinished(queue: postbox.Queue) -> None:
    queue.send(b"x")
    release = threading.Event()
    started = threading.Event()

    def blocked(msg: postbox.Message) -> None:
        started.set()
        release.wait(10)

    p = postbox.Processor(queue, blocked, workers=1)
    assert started.wait(5)
    report = p.shutdown(timeout=0.2)
    assert not report.finished and report.still_running == 1
    release.set()
    report = p.join(timeout=10)
    assert report.finished and report.processed == 1
    p.shutdown()


def test_idle_workers_do_not_hold_the_gil(queue: postbox.Queue) -> None:
    with postbox.Processor(queue, lambda m: None, workers=4):
        counter = 0
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            counter += 1
    assert counter > 50_000


def test_stop_then_join(queue: postbox.Queue) -> None:
    p = postbox.Processor(queue, lambda m: None, workers=2)
    assert p.workers == 2 and not p.is_stopped
    p.stop()
    assert p.is_stopped
    report = p.join(timeout=5)
    assert report.finished
    assert "ShutdownReport(" in repr(report)
    queue.send(b"after stop")
    time.sleep(0.2)
    assert len(queue) == 1


def test_autoscale_and_options(queue: postbox.Queue) -> None:
    with postbox.Processor(
        queue,
        lambda m: None,
        workers=1,
        autoscale=(1, 3),
        prefetch=2,
        handler_timeout=5,
        max_auto_renew=60,
        drop_timeout=1,
    ) as p:
        queue.send_batch([b"x"] * 20)
        wait_for(lambda: len(queue) == 0 and queue.stats().locked == 0)
        assert 1 <= p.workers <= 3


def test_bad_arguments(queue: postbox.Queue) -> None:
    with pytest.raises(TypeError, match="callable"):
        postbox.Processor(queue, "not callable")  # type: ignore[arg-type]
    with pytest.raises(postbox.InvalidArgumentError):
        postbox.Processor(queue, lambda m: None, workers=0)
    with pytest.raises(postbox.InvalidArgumentError):
        postbox.Processor(queue, lambda m: None, autoscale=(3, 1))
    with pytest.raises(ValueError):
        postbox.Processor(queue, lambda m: None, retry_delay=-1)
    with pytest.raises(TypeError):
        postbox.Processor("queue", lambda m: None)  # type: ignore[arg-type]


def test_worker_counts_past_1024_are_refused(queue: postbox.Queue) -> None:
    for kwargs in ({"workers": 1025}, {"autoscale": (0, 1025)}):
        with pytest.raises(postbox.InvalidArgumentError):
            postbox.Processor(queue, lambda m: None, **kwargs)  # type: ignore[arg-type]
