"""The Python processor's features that Rust and C have too (docs/processors.md, "Processor features in
each language"): transactional handlers, typed bodies, the lock-lost signal and the autoscaling
knobs."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

import postbox

from conftest import wait_for


def poll(predicate: Any, timeout: float = 10.0) -> bool:
    """Polls `predicate` until true or `timeout` passes (inside a handler: no raising there)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_transactional_handler_commits_its_sends_with_the_completion(
    tmp_store: postbox.Store,
) -> None:
    orders = tmp_store.queue("orders", max_deliveries=1)
    receipts = tmp_store.queue("receipts")
    seen: list[tuple[bytes, bool, str]] = []
    refused: list[str] = []
    lent: list[postbox.Transaction] = []

    def handle(msg: postbox.Message, tx: postbox.Transaction) -> None:
        tx.send(receipts, b"receipt " + msg.body)
        # Not visible before the completion commits.
        visible = b"receipt " + msg.body in [m.body for m in receipts.browse()]
        seen.append((msg.body, visible, tx.state))
        for finish in (tx.commit, tx.abort, tx.__enter__):
            try:
                finish()
            except postbox.InvalidArgumentError as e:
                refused.append(str(e))
        lent.append(tx)
        if msg.body == b"bad":
            raise RuntimeError("no receipt for this one")

    orders.send(b"good")
    orders.send(b"bad")
    with postbox.Processor(orders, handle, workers=1, transactional=True) as p:
        wait_for(lambda: len(orders) == 0 and orders.stats().locked == 0)
        wait_for(lambda: orders.stats().dead_lettered == 1)
    assert sorted(seen) == [(b"bad", False, "open"), (b"good", False, "open")]
    assert len(refused) == 6 and all("processor" in r for r in refused)
    assert {t.state for t in lent} == {"closed"}
    with pytest.raises(postbox.InvalidArgumentError):
        lent[0].send(receipts, b"too late")
    # The receipt of the good order committed with its completion; the bad one's was
    # discarded with the failure, and the order dead-lettered as for a peek-lock handler.
    with receipts.receive(timeout=1) as r:
        assert r.body == b"receipt good"
    assert len(receipts) == 0
    [dead] = orders.dead_letters.browse()
    assert dead.body == b"bad"
    assert "no receipt for this one" in (dead.dead_letter_description or "")


def test_transactional_handler_receives_in_its_transaction(tmp_store: postbox.Store) -> None:
    jobs = tmp_store.queue("jobs")
    parts = tmp_store.queue("parts")
    parts.send(b"part")
    got: list[bytes] = []

    def handle(msg: postbox.Message, tx: postbox.Transaction) -> None:
        got.append(tx.receive(parts, timeout=1).body)

    jobs.send(b"job")
    with postbox.Processor(jobs, handle, workers=1, transactional=True) as p:
        wait_for(lambda: p.stats()["processed"] == 1)
    assert got == [b"part"]
    # Completed by the same commit as the job.
    assert len(parts) == 0 and parts.stats().locked == 0 and len(jobs) == 0


def test_typed_processor_decodes_and_dead_letters_undecodable_bodies(
    queue: postbox.Queue,
) -> None:
    typed = postbox.TypedQueue(queue)
    typed.send({"order": 1})
    queue.send(b"not a typed body")
    values: list[Any] = []

    def handle(msg: postbox.TypedMessage[Any]) -> None:
        assert isinstance(msg, postbox.TypedMessage)
        values.append(msg.value)

    with postbox.Processor(queue, handle, workers=2, codec="json") as p:
        wait_for(lambda: len(values) == 1 and queue.stats().dead_lettered == 1)
        wait_for(lambda: p.stats()["dead_lettered"] == 1)
    assert values == [{"order": 1}]
    [dead] = queue.dead_letters.browse()
    assert dead.dead_letter_reason == postbox.REASON_DECODE_FAILED == "DecodeFailed"
    assert dead.delivery_count == 1
    assert dead.body == b"not a typed body"


def test_typed_transactional_processor(tmp_store: postbox.Store) -> None:
    orders = postbox.TypedQueue(tmp_store.queue("orders"), postbox.JsonCodec())
    totals = postbox.TypedQueue(tmp_store.queue("totals"))
    orders.send({"qty": 3, "price": 2})

    def handle(msg: postbox.TypedMessage[Any], tx: postbox.Transaction) -> None:
        totals.send_in(tx, msg.value["qty"] * msg.value["price"])

    with postbox.Processor(
        orders.queue, handle, workers=1, transactional=True, codec=postbox.JsonCodec()
    ) as p:
        wait_for(lambda: p.stats()["processed"] == 1)
    with totals.receive(timeout=1) as t:
        assert t.value == 6


def test_bad_codec_is_refused(queue: postbox.Queue) -> None:
    with pytest.raises(postbox.InvalidArgumentError):
        postbox.Processor(queue, lambda m: None, codec="xml")
    with pytest.raises(TypeError):
        postbox.Processor(queue, lambda m: None, codec=object())  # type: ignore[arg-type]


def test_lock_lost_is_seen_by_the_running_handler(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("slow", lock_duration=1)
    q.send(b"work")
    first: list[tuple[bool, bool, bool, bool]] = []
    second = threading.Event()

    def handle(msg: postbox.Message) -> None:
        if msg.delivery_count == 1:
            before = (msg.lock_lost, msg.cancelled)
            lost = poll(lambda: msg.lock_lost)
            first.append((*before, lost, msg.cancelled))
        else:
            assert not msg.lock_lost and not msg.cancelled
            second.set()

    # No renewal: the lock expires after 1 s while the handler still runs.
    with postbox.Processor(q, handle, workers=2, max_auto_renew=0) as p:
        assert second.wait(20)
        report = p.shutdown(10)
    assert first == [(False, False, True, True)]
    assert report.finished and report.lock_lost == 1 and report.processed == 1


def test_handler_timeout_cancels_without_losing_the_lock(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("timed", lock_duration=30, max_deliveries=1)
    q.send(b"work")
    seen: list[tuple[bool, bool, bool]] = []

    def handle(msg: postbox.Message) -> None:
        before = msg.cancelled
        cancelled = poll(lambda: msg.cancelled)
        seen.append((before, cancelled, msg.lock_lost))

    with postbox.Processor(q, handle, workers=1, handler_timeout=1) as p:
        wait_for(lambda: p.stats()["dead_lettered"] == 1, timeout=20)
    assert seen == [(False, True, False)]


def test_lock_signals_are_false_outside_a_processor(queue: postbox.Queue) -> None:
    queue.send(b"x")
    with queue.receive(timeout=1) as m:
        assert (m.lock_lost, m.cancelled) == (False, False)


def test_autoscale_from_zero_workers_with_on_scale(queue: postbox.Queue) -> None:
    counts: list[int] = []
    release = threading.Event()

    def handle(msg: postbox.Message) -> None:
        release.wait(20)

    with postbox.Processor(
        queue,
        handle,
        workers=0,
        autoscale=(0, 3),
        messages_per_worker=1,
        check_interval=0.05,
        on_scale=counts.append,
    ) as p:
        assert p.workers == 0
        queue.send_batch([b"x"] * 6)
        wait_for(lambda: p.workers == 3, timeout=20)
        assert 3 in counts and max(counts) == 3
        release.set()
        wait_for(lambda: len(queue) == 0 and queue.stats().locked == 0, timeout=20)
        wait_for(lambda: p.workers == 0, timeout=20)
        wait_for(lambda: counts[-1] == 0)
        assert p.stats()["processed"] == 6


def test_on_scale_exceptions_are_logged(
    queue: postbox.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(workers: int) -> None:
        raise RuntimeError(f"scaled to {workers}")

    with caplog.at_level(logging.ERROR, logger="postbox"):
        with postbox.Processor(
            queue, lambda m: None, workers=1, autoscale=(1, 2), on_scale=boom
        ) as p:
            wait_for(lambda: any("on_scale" in r.getMessage() for r in caplog.records))
            queue.send(b"x")
            wait_for(lambda: p.stats()["processed"] == 1)
    record = next(r for r in caplog.records if "on_scale" in r.getMessage())
    assert record.name == "postbox"
    assert record.exc_info is not None and "scaled to" in str(record.exc_info[1])


@pytest.mark.parametrize(
    "options",
    [
        {"autoscale": (0, 2), "messages_per_worker": 0},
        {"autoscale": (0, 2), "check_interval": 0},
        {"messages_per_worker": 5},
        {"check_interval": 1},
        {"autoscale": (0, 0)},
        {"autoscale": (2, 1)},
        {"autoscale": (0, 2000)},
        {"workers": 0},
    ],
)
def test_bad_autoscale_knobs(queue: postbox.Queue, options: dict[str, Any]) -> None:
    with pytest.raises(postbox.InvalidArgumentError):
        postbox.Processor(queue, lambda m: None, **options)


def test_bad_knob_types(queue: postbox.Queue) -> None:
    with pytest.raises(ValueError):
        postbox.Processor(queue, lambda m: None, autoscale=(0, 2), check_interval=-1)
    with pytest.raises(TypeError, match="on_scale"):
        postbox.Processor(queue, lambda m: None, autoscale=(0, 2), on_scale=3)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        postbox.Processor(queue, lambda m: None, autoscale=(0, 2), messages_per_worker=-1)


@pytest.mark.parametrize("transactional", [False, True])
def test_a_raising_handler_is_logged_and_reaches_on_error(
    queue: postbox.Queue, caplog: pytest.LogCaptureFixture, transactional: bool
) -> None:
    def handler(m: postbox.Message, *tx: object) -> None:
        raise ValueError(f"cannot handle {m.body!r}")

    seen: list[tuple[int, int, BaseException]] = []
    called = threading.Event()

    def on_error(m: postbox.Message, exc: BaseException) -> None:
        seen.append((m.id, m.delivery_count, exc))
        called.set()

    mid = queue.send(b"x")
    with caplog.at_level(logging.WARNING, logger="postbox"):
        with postbox.Processor(
            queue, handler, workers=1, retry_delay=60, transactional=transactional, on_error=on_error
        ) as p:
            assert called.wait(20)
            wait_for(lambda: p.stats()["failed"] == 1)
    [(got_id, delivery, exc)] = seen
    assert (got_id, delivery) == (mid, 1)
    assert isinstance(exc, ValueError) and "cannot handle" in str(exc)
    [record] = [r for r in caplog.records if "handler raised" in r.getMessage()]
    assert (record.name, record.levelno) == ("postbox", logging.WARNING)
    assert f"message {mid} of queue 'jobs' (delivery 1)" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[1] is exc
    # The traceback reaches the handler's own frame.
    assert "in handler" in caplog.text
    # Retried later with the exception's text, as without a hook.
    assert queue.stats().scheduled == 1


def test_on_error_exceptions_are_logged_not_raised(
    queue: postbox.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(m: postbox.Message) -> None:
        raise RuntimeError("handler failed")

    def on_error(m: postbox.Message, exc: BaseException) -> None:
        raise KeyError("hook failed too")

    queue.send(b"x")
    with caplog.at_level(logging.WARNING, logger="postbox"):
        with postbox.Processor(queue, handler, workers=1, retry_delay=60, on_error=on_error) as p:
            wait_for(lambda: any("on_error raised" in r.getMessage() for r in caplog.records))
            wait_for(lambda: p.stats()["failed"] == 1)
    record = next(r for r in caplog.records if "on_error raised" in r.getMessage())
    assert (record.name, record.levelno) == ("postbox", logging.ERROR)
    assert record.exc_info is not None and "hook failed too" in str(record.exc_info[1])
    with pytest.raises(TypeError, match="on_error"):
        postbox.Processor(queue, lambda m: None, on_error=3)  # type: ignore[arg-type]


def test_a_handler_that_returns_reaches_no_hook(
    queue: postbox.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[object] = []
    queue.send(b"x")
    with caplog.at_level(logging.WARNING, logger="postbox"):
        with postbox.Processor(
            queue, lambda m: None, workers=1, on_error=lambda m, e: seen.append(e)
        ) as p:
            wait_for(lambda: p.stats()["processed"] == 1)
    assert seen == []
    assert not [r for r in caplog.records if r.name == "postbox"]
