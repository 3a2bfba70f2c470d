"""Issue 27: what a processor handler does with its message under the processor's lock —
checkpoints (`mark_done`, `done_keys`) that survive a SIGKILL of the worker process, its own
renewals (`renew_lock`), replies (`reply`) that answer `Queue.request` — in plain and
transactional handlers; and the autoscaler's `reserve`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import postbox

USERS = 300
KILL_AFTER = 120
KEYS = [f"user-{u:03}" for u in range(USERS)]

# The worker process: a processor notifying users, one checkpoint each; after `stop_after` it
# says "half" and waits in the handler to be killed. Each line is printed after the checkpoint
# it reports was committed.
WORKER = textwrap.dedent(
    """
    import sys, threading, postbox
    path, users, stop_after, transactional = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    keys = [f"user-{u:03}" for u in range(users)]
    forever = threading.Event()

    def notify(m, tx=None):
        done = m.done_keys()
        marked = 0
        for key in keys:
            if key in done:
                continue
            m.mark_done(key)                     # the notification happened; recorded at once
            print("marked", key, flush=True)
            marked += 1
            if marked == stop_after:
                print("half", flush=True)
                forever.wait()                   # killed here, holding the message

    store = postbox.Store(path, multi_process=True)
    processor = postbox.Processor(store.queue("notify"), notify, workers=2, transactional=transactional)
    print("ready", flush=True)
    forever.wait()
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_a_killed_processor_leaves_its_checkpoints(store_path: Path, transactional: bool) -> None:
    """Seed 003's workflow: a handler notifies 300 users with `mark_done`, its process is
    SIGKILLed after 120; the redelivery skips exactly those 120 and notifies the other 180,
    nobody twice."""
    with postbox.Store(store_path, multi_process=True) as store:
        q = store.queue("notify", lock_duration=60)  # the death, not an expiry, frees it
        msg_id = q.send(b"notify 300 users")
        child = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(store_path), str(USERS), str(KILL_AFTER),
             "1" if transactional else "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        first: list[str] = []
        try:
            assert child.stdout is not None
            for line in child.stdout:
                words = line.split()
                if words == ["half"]:
                    break
                if words[0] == "marked":
                    first.append(words[1])
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait() == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert first == KEYS[:KILL_AFTER]

        second: list[str] = []
        skipped: list[int] = []
        finished = threading.Event()

        def notify(m: postbox.Message, tx: postbox.Transaction | None = None) -> None:
            done = m.done_keys()
            skipped.append(len(done))
            for key in KEYS:
                if key not in done:
                    second.append(key)
                    m.mark_done(key)
            finished.set()

        # The dead worker's lock is released by the next writer that notices it died.
        p = postbox.Processor(q, notify, workers=2, transactional=transactional)
        assert finished.wait(60)
        report = p.shutdown(30)
        assert (report.finished, report.processed, report.failed) == (True, 1, 0), report
        assert skipped == [KILL_AFTER], "the redelivery skipped exactly the 120"
        assert second == KEYS[KILL_AFTER:], "and notified the other 180"
        assert sorted(first + second) == KEYS, "nobody twice"
        assert q.get(msg_id) is None, "completed"
        s = q.stats()
        assert (s.active, s.locked, s.dead_lettered) == (0, 0, 0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_a_processor_answers_three_times_twenty_requests(
    tmp_store: postbox.Store, transactional: bool
) -> None:
    service = tmp_store.queue("service")
    errors: list[BaseException] = []

    def answer(m: postbox.Message, tx: postbox.Transaction | None = None) -> None:
        m.reply(b"re: " + m.body, label="answer")

    def requester(r: int) -> None:
        try:
            for i in range(20):
                ask = f"{r}-{i}".encode()
                reply = service.request(ask, timeout=30)
                assert (reply.body, reply.label) == (b"re: " + ask, "answer")
        except BaseException as e:
            errors.append(e)

    with postbox.Processor(service, answer, workers=3, transactional=transactional) as p:
        threads = [threading.Thread(target=requester, args=(r,)) for r in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    stats = p.queue.stats()
    assert (stats.active, stats.locked, stats.dead_lettered) == (0, 0, 0)


def test_a_reply_goes_with_the_completion_only(tmp_store: postbox.Store) -> None:
    """A failed run sends no reply (its retry answers); a dead-lettered one none; one reply per
    delivery; refusals are raised in the handler."""
    q = tmp_store.queue("jobs")
    replies = tmp_store.queue("replies")
    gone = tmp_store.queue("gone")
    tmp_store.delete_queue(gone.name)
    q.send(b"retry me", reply_to="replies")
    q.send(b"dead", reply_to="replies")
    q.send(b"nowhere", reply_to="gone")
    q.send(b"no reply_to")
    seen: list[tuple[str, int, str]] = []
    handled = threading.Semaphore(0)

    def handler(m: postbox.Message) -> None:
        try:
            body = m.text
            try:
                m.reply(f"answer {m.delivery_count} to {body}")
            except postbox.PostboxError as e:
                seen.append((body, m.delivery_count, type(e).__name__))
                return
            with pytest.raises(postbox.InvalidArgumentError, match="one reply"):
                m.reply(b"twice")
            seen.append((body, m.delivery_count, "replied"))
            if body == "dead":
                m.dead_letter("Refused")
            elif m.delivery_count == 1:
                raise RuntimeError("not this time")
        finally:
            handled.release()

    with postbox.Processor(q, handler, workers=1, retry_delay=0.001, max_retry_delay=0.001):
        for _ in range(5):
            assert handled.acquire(timeout=10)
    assert sorted(seen) == [
        ("dead", 1, "replied"),
        ("no reply_to", 1, "InvalidArgumentError"),
        ("nowhere", 1, "QueueNotFoundError"),
        ("retry me", 1, "replied"),
        ("retry me", 2, "replied"),
    ]
    assert [m.text for m in replies.browse()] == ["answer 2 to retry me"]


def test_a_handler_renews_the_processors_lock(tmp_store: postbox.Store) -> None:
    """With renewal off, a handler that outlives its lock keeps it with `renew_lock` and
    `mark_done`; after the handler returned, its message refuses every processor call."""
    q = tmp_store.queue("jobs", lock_duration=0.4)
    q.send(b"long work")
    kept: list[postbox.Message] = []
    results: list[object] = []
    returned = threading.Event()

    def handler(m: postbox.Message) -> None:
        for step in range(6):  # 1.2 s of work: three times the lock
            time.sleep(0.2)
            before = m.locked_until
            until = m.renew_lock() if step % 2 == 0 else m.mark_done(f"step {step}")
            assert before is not None and until > before and m.locked_until == until
        results.append((m.delivery_count, m.lock_lost, sorted(m.done_keys())))
        kept.append(m)
        returned.set()

    with postbox.Processor(q, handler, workers=2, max_auto_renew=0) as p:
        assert returned.wait(20)
    assert results == [(1, False, ["step 1", "step 3", "step 5"])]
    report = p.queue.stats()
    assert (report.active, report.locked) == (0, 0)
    m = kept[0]
    assert m.state == "settled by the processor" and m.locked_until is None
    for call in (lambda: m.mark_done("late"), m.done_keys, m.renew_lock,
                 lambda: m.reply(b"late"), lambda: m.dead_letter("late")):
        with pytest.raises(postbox.InvalidArgumentError):
            call()


def test_a_transactional_handler_replies_in_its_transaction(tmp_store: postbox.Store) -> None:
    """The reply is one of the handler's transaction's sends: a raise discards it with the
    rest; a message the handler received through `tx` is answered through `tx` too."""
    service = tmp_store.queue("service")
    side = tmp_store.queue("side")
    replies = tmp_store.queue("replies")
    service.send(b"ask", reply_to="replies")
    side.send(b"side ask", reply_to="replies")
    handled = threading.Semaphore(0)

    def handler(m: postbox.Message, tx: postbox.Transaction) -> None:
        try:
            m.reply(b"main " + str(m.delivery_count).encode())
            extra = tx.receive(side, timeout=1)
            extra.reply(b"side " + str(m.delivery_count).encode())
            extra.mark_done("seen")
            if m.delivery_count == 1:
                raise RuntimeError("abort it all")
        finally:
            handled.release()

    with postbox.Processor(service, handler, workers=1, transactional=True,
                           retry_delay=0.001, max_retry_delay=0.001):
        assert handled.acquire(timeout=10) and handled.acquire(timeout=10)
    assert sorted(m.text for m in replies.browse()) == ["main 2", "side 2"]
    assert len(service) == 0 and len(side) == 0


def test_a_typed_handler_checkpoints_and_replies(tmp_store: postbox.Store) -> None:
    """A typed processor's `TypedMessage` passes the same calls to its message."""
    q = tmp_store.queue("typed")
    replies = tmp_store.queue("replies")
    postbox.TypedQueue(q).send({"users": ["ann", "bob"]}, reply_to="replies")
    runs: list[tuple[int, set[str]]] = []
    handled = threading.Semaphore(0)

    def handler(m: postbox.TypedMessage[dict[str, list[str]]]) -> None:
        try:
            runs.append((m.delivery_count, m.done_keys()))
            for user in m.value["users"]:
                m.mark_done(user)
            m.reply(f"notified {len(m.value['users'])}", label="done")
            if m.delivery_count == 1:
                raise RuntimeError("once more")
        finally:
            handled.release()

    with postbox.Processor(q, handler, workers=1, codec="json",
                           retry_delay=0.001, max_retry_delay=0.001):
        assert handled.acquire(timeout=10) and handled.acquire(timeout=10)
    assert runs == [(1, set()), (2, {"ann", "bob"})]
    assert [(m.text, m.label) for m in replies.browse()] == [("notified 2", "done")]


def test_reserve_keeps_spare_workers(tmp_store: postbox.Store) -> None:
    """Issue 27 item 4: `reserve` workers are kept beyond what the backlog asks for: an idle
    autoscaled processor starting at zero grows to the reserve and stays there."""
    q = tmp_store.queue("jobs")
    counts: list[int] = []
    grown = threading.Event()

    def on_scale(workers: int) -> None:
        counts.append(workers)
        if workers == 2:
            grown.set()

    p = postbox.Processor(q, lambda m: None, workers=0, autoscale=(0, 4), reserve=2,
                          check_interval=0.05, on_scale=on_scale)
    with p:
        assert grown.wait(10), counts
        time.sleep(0.3)  # six more checks of an empty queue
        assert p.workers == 2, "the reserve does not retire"
    assert counts[:2] == [1, 2] and max(counts) == 2
    with pytest.raises(postbox.InvalidArgumentError, match="need autoscale"):
        postbox.Processor(q, lambda m: None, reserve=1)
    with pytest.raises(postbox.InvalidArgumentError, match="reserve"):
        postbox.Processor(q, lambda m: None, autoscale=(0, 4), reserve=1025)
    with pytest.raises(OverflowError):
        postbox.Processor(q, lambda m: None, autoscale=(0, 4), reserve=-1)
