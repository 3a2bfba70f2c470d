"""Queues deleted after an idle period (auto_delete_on_idle) and the store's queue listing.

Knob: POSTBOX_IDLE_SECONDS (the idle period of the deletion test, default 2).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta, timezone

import pytest

import postbox

from conftest import wait_for

IDLE = float(os.environ.get("POSTBOX_IDLE_SECONDS", "2"))


def test_the_option_is_stored_and_read_back(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", auto_delete_on_idle=90)
    assert q.options["auto_delete_on_idle"] == timedelta(seconds=90)
    tmp_store.queue("q", auto_delete_on_idle=timedelta(minutes=5))
    assert q.options["auto_delete_on_idle"] == timedelta(minutes=5)
    tmp_store.queue("q", max_deliveries=4)
    assert q.options["auto_delete_on_idle"] == timedelta(minutes=5), "kept when not given"
    tmp_store.queue("q", auto_delete_on_idle=None)
    assert q.options["auto_delete_on_idle"] is None
    with pytest.raises(ValueError):
        tmp_store.queue("q", auto_delete_on_idle=-1)
    with pytest.raises(TypeError):
        tmp_store.queue("q", auto_delete_on_idle="soon")  # type: ignore[arg-type]


def test_queue_infos_list_options_and_activity(tmp_store: postbox.Store) -> None:
    tmp_store.queue("receipts")  # receipts_to names an existing queue
    q = tmp_store.queue("work", auto_delete_on_idle=600, receipts_to="receipts", max_deliveries=4)
    t = tmp_store.temporary_queue()
    before = time.time()
    q.send(b"x")
    infos = {i.name: i for i in tmp_store.queue_infos()}
    assert set(infos) == set(tmp_store.queues())
    work = infos["work"]
    assert work.options == q.options
    assert work.options["max_deliveries"] == 4
    assert work.options["auto_delete_on_idle"] == timedelta(minutes=10)
    assert not work.temporary and infos[t.name].temporary
    assert work.last_activity is not None and work.last_activity.tzinfo == timezone.utc
    assert work.last_activity.timestamp() >= before - 1, "recorded to the second"
    assert repr(infos[t.name]) == f"<postbox.QueueInfo {t.name!r} temporary>".replace("'", '"')


def test_an_idle_queue_is_deleted_and_a_busy_one_is_not(tmp_store: postbox.Store) -> None:
    idle = tmp_store.queue("idle", auto_delete_on_idle=IDLE)
    busy = tmp_store.queue("busy", auto_delete_on_idle=IDLE)
    held = tmp_store.queue("held", auto_delete_on_idle=IDLE, lock_duration=60)
    temp = tmp_store.temporary_queue(auto_delete_on_idle=IDLE)
    plain = tmp_store.queue("plain")
    idle.send(b"left alone")
    temp.send(b"left alone")
    held.send(b"held")
    m = held.receive(timeout=1)  # a queue holding locked messages is never idle
    stop = threading.Event()

    def keep_busy() -> None:
        while not stop.is_set():
            busy.send(b"x")
            busy.receive(timeout=1).complete()
            stop.wait(IDLE / 5)

    t = threading.Thread(target=keep_busy)
    t.start()
    started = time.monotonic()
    try:
        wait_for(lambda: "idle" not in tmp_store.queues(), timeout=IDLE + 10)
        assert time.monotonic() - started >= IDLE - 0.5, "not before its idle period"
        wait_for(lambda: temp.name not in tmp_store.queues(), timeout=5)
    finally:
        stop.set()
        t.join()
    names = tmp_store.queues()
    assert "busy" in names and "held" in names and "plain" in names
    with pytest.raises(postbox.QueueNotFoundError):
        idle.send(b"again")
    with pytest.raises(postbox.QueueNotFoundError):
        tmp_store.open_queue("idle")
    m.complete()
    # Opening it again creates a new, empty queue.
    assert len(tmp_store.queue("idle")) == 0


def test_a_busy_queue_with_a_short_idle_period_survives(tmp_store: postbox.Store) -> None:
    # The first queue with the option starts the store's once-a-second idle check: half a
    # second later, the busy queue's activity is recorded half a second out of its phase.
    tmp_store.queue("starts the check", auto_delete_on_idle=3600)
    time.sleep(0.5)
    q = tmp_store.queue("busy", auto_delete_on_idle=0.4)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        q.send(b"x")  # raises QueueNotFoundError once deleted
        q.receive(timeout=1).complete()
        time.sleep(0.05)


def test_an_idle_queue_goes_within_a_second_after_its_idle_period(
    tmp_store: postbox.Store,
) -> None:
    # The documented bound for auto_delete_on_idle=1.0: deleted 1.0 to 2.0 s after the last
    # activity (it used to take 2.0 to 3.05 s), and a send in between starts it again.
    q = tmp_store.queue("idle", auto_delete_on_idle=1.0)
    sent = time.monotonic()
    q.send(b"a")
    time.sleep(0.5)
    again = time.monotonic()
    q.send(b"b")  # restarts the period
    answered = time.monotonic()
    wait_for(lambda: "idle" not in tmp_store.queues(), timeout=10)
    gone = time.monotonic()
    assert gone - again >= 1.0, f"deleted {gone - sent:.3f} s after the first send"
    assert gone - answered < 2.0, f"deleted {gone - answered:.3f} s after the last activity"
