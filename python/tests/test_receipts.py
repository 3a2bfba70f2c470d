"""Replies, request/response, automatic receipts and temporary queues.

Knob: POSTBOX_REQUESTS (requests per requester thread, default 25).
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

REQUESTS = int(os.environ.get("POSTBOX_REQUESTS", "25"))


def test_reply_goes_to_reply_to_with_the_correlation_id(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    answers = tmp_store.queue("answers")
    q.send(b"ask", reply_to="answers", correlation_id="c-1")
    m = q.receive(timeout=1)
    rid = m.reply(b"answer", label="answer", properties={"status": "ok"})
    assert m.state == "completed"
    assert q.stats().active + q.stats().locked == 0, "the reply completed the request"
    r = answers.receive(timeout=1)
    assert (r.id, r.body, r.correlation_id, r.label) == (rid, b"answer", "c-1", "answer")
    assert r.properties == {"status": "ok"}
    r.complete()
    # Without a correlation id, the request's id (in decimal) is the reply's.
    ask = q.send(b"ask", reply_to="answers")
    q.receive(timeout=1).reply("plain text")
    r = answers.receive(timeout=1)
    assert (r.correlation_id, r.text) == (str(ask), "plain text")
    r.complete()
    # The reply's correlation id is the engine's: one given to reply() is overridden.
    q.send(b"ask", reply_to="answers", correlation_id="c-2")
    q.receive(timeout=1).reply(b"x", correlation_id="mine")
    assert answers.receive(timeout=1).correlation_id == "c-2"


def test_a_refused_reply_leaves_the_message_locked(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=60)
    q.send(b"no reply_to")
    m = q.receive(timeout=1)
    with pytest.raises(postbox.InvalidArgumentError):
        m.reply(b"x")
    assert m.state == "locked"
    m.abandon()
    q.receive(timeout=1).complete()
    gone = tmp_store.queue("gone")
    q.send(b"ask", reply_to="gone")
    tmp_store.delete_queue("gone")
    m = q.receive(timeout=1)
    with pytest.raises(postbox.QueueNotFoundError):
        m.reply(b"x")
    assert m.state == "locked" and "gone" not in tmp_store.queues()
    m.complete()
    with pytest.raises(postbox.QueueNotFoundError):
        gone.send(b"x")
    # Peeked and processor messages hold no lock of their own.
    q.send(b"ask", reply_to="q")
    peeked = q.peek()
    assert peeked is not None
    with pytest.raises(postbox.InvalidArgumentError):
        peeked.reply(b"x")
    with pytest.raises(TypeError):
        q.receive(timeout=1).reply(b"x", colour="red")  # type: ignore[call-arg]


def test_a_reply_after_the_lock_expired_sends_nothing(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=0.1)
    answers = tmp_store.queue("answers")
    q.send(b"ask", reply_to="answers")
    m = q.receive(timeout=1)
    time.sleep(0.2)
    with pytest.raises(postbox.LockLostError):
        m.reply(b"late")
    assert m.state == "lock lost"
    assert len(answers) == 0
    assert q.receive(timeout=1).delivery_count == 2


def test_request_returns_the_reply_or_raises_empty(tmp_store: postbox.Store) -> None:
    service = tmp_store.queue("service")
    got: list[postbox.Message] = []

    def responder() -> None:
        m = service.receive(timeout=5)
        got.append(m)
        m.reply(b"re: " + m.body, label="answer")

    t = threading.Thread(target=responder)
    t.start()
    reply = service.request(b"hello", timeout=10, label="question")
    t.join()
    assert (reply.body, reply.label, reply.state) == (b"re: hello", "answer", "completed")
    req = got[0]
    assert req.label == "question"
    assert req.reply_to is not None and req.reply_to.startswith("$temporary/")
    assert reply.queue == req.reply_to and reply.correlation_id == req.correlation_id
    assert len(tmp_store.open_queue(req.reply_to)) == 0, "the reply was completed"
    with pytest.raises(postbox.InvalidArgumentError):
        reply.complete()  # read-only: nothing to settle
    started = time.monotonic()
    with pytest.raises(postbox.Empty) as e:
        service.request(b"nobody answers", timeout=0.3, correlation_id="mine")
    assert time.monotonic() - started >= 0.29
    assert "mine" in str(e.value)
    late = service.receive(timeout=1)
    assert late.correlation_id == "mine", "a given correlation id is kept"
    with pytest.raises(ValueError):
        service.request(b"x", timeout=-1)


def test_four_requesters_each_get_only_their_own_replies(tmp_store: postbox.Store) -> None:
    service = tmp_store.queue("service")
    errors: list[BaseException] = []
    answered: list[int] = []

    def responder() -> None:
        try:
            for _ in range(2 * REQUESTS):
                m = service.receive(timeout=30)
                m.reply(b"re: " + m.body)
                answered.append(m.id)
        except BaseException as e:
            errors.append(e)

    def requester(r: int) -> None:
        try:
            for i in range(REQUESTS):
                ask = f"requester {r} question {i}".encode()
                reply = service.request(ask, timeout=30)
                assert reply.body == b"re: " + ask, (ask, reply.body)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=responder) for _ in range(2)]
    threads += [threading.Thread(target=requester, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(answered) == 4 * REQUESTS
    assert len(service) == 0


def test_late_replies_are_dropped_not_piled_up(tmp_store: postbox.Store) -> None:
    service = tmp_store.queue("service")
    with pytest.raises(postbox.Empty):
        service.request(b"anyone?", timeout=0.02)
    late = service.receive(timeout=1)
    assert late.reply_to is not None
    replies = tmp_store.open_queue(late.reply_to)
    late.reply(b"too late")
    n = int(os.environ.get("POSTBOX_LATE_REPLIES", "20000"))
    replies.send_batch([{"body": b"late", "correlation_id": f"gone-{i}"} for i in range(n)])
    assert len(replies) == n + 1

    def respond(count: int) -> None:
        for _ in range(count):
            service.receive(timeout=10).reply(b"answer")

    t = threading.Thread(target=respond, args=(6,))
    t.start()
    try:
        assert service.request(b"now", timeout=10).body == b"answer"
        assert len(replies) == 0, "the late replies were dropped"
        for _ in range(5):
            assert replies.stats().active == 0  # nothing for the next request to read through
            assert service.request(b"again", timeout=10).body == b"answer"
    finally:
        t.join()


def test_receipts_are_posted_in_the_settling_commit(tmp_store: postbox.Store) -> None:
    receipts = tmp_store.queue("receipts")
    q = tmp_store.queue("work", receipts_to=receipts)  # a Queue or a name
    assert q.options["receipts_to"] == "receipts"
    a = q.send(b"a")
    b = q.send(b"b")
    q.receive(timeout=1).complete()
    q.receive(timeout=1).dead_letter("Poison", "bad input")
    r1 = receipts.receive_by_correlation_id(str(a), timeout=1)
    assert (r1.label, r1.body) == (postbox.RECEIPT_LABEL, b"")
    props = r1.properties
    assert props[postbox.RECEIPT_OUTCOME] == "completed"
    assert props[postbox.RECEIPT_MESSAGE_ID] == str(a)
    assert props[postbox.RECEIPT_QUEUE] == "work"
    assert abs(int(props[postbox.RECEIPT_AT]) / 1000 - time.time()) < 60
    assert postbox.RECEIPT_REASON not in props
    r2 = receipts.receive_by_correlation_id(str(b), timeout=1)
    assert r2.properties[postbox.RECEIPT_OUTCOME] == "dead-lettered"
    assert r2.properties[postbox.RECEIPT_REASON] == "Poison"
    # An abandon is no outcome; an aborted transaction posts nothing.
    q.send(b"c")
    q.receive(timeout=1).abandon()
    with tmp_store.transaction() as tx:
        tx.receive(q, timeout=1)
        tx.abort()
    assert len(receipts) == 0
    with tmp_store.transaction() as tx:
        tx.receive(q, timeout=1)
    with receipts.receive(timeout=1) as r3:
        assert r3.properties[postbox.RECEIPT_OUTCOME] == "completed"
    tmp_store.queue("work", receipts_to=None)
    assert q.options["receipts_to"] is None
    q.send(b"d")
    q.receive(timeout=1).complete()
    assert len(receipts) == 0
    assert (postbox.RECEIPT_OUTCOME, postbox.RECEIPT_REASON) == ("outcome", "reason")


def test_temporary_queues_go_with_their_store(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        t = store.temporary_queue(lock_duration=5)
        assert t.name.startswith("$temporary/")
        assert t.options["lock_duration"].total_seconds() == 5
        t2 = store.temporary_queue()
        assert t2.name != t.name
        t.send(b"x")
        info = {i.name: i for i in store.queue_infos()}[t.name]
        assert info.temporary and info.last_activity is not None
        with pytest.raises(postbox.InvalidArgumentError):
            store.queue("$temporary/999/1")
        assert len(store.open_queue(t.name)) == 1, "a responder opens it by name"
        with pytest.raises(postbox.InvalidArgumentError):
            store.temporary_queue(requires_session=True)
        with pytest.raises(TypeError):
            store.temporary_queue(colour="red")  # type: ignore[call-arg]
        name = t.name
    with postbox.Store(store_path) as store:
        assert name not in store.queues()
        with pytest.raises(postbox.QueueNotFoundError):
            store.open_queue(name)


HOLDER = textwrap.dedent(
    """
    import sys, time, postbox
    store = postbox.Store(sys.argv[1], multi_process=True)
    t = store.temporary_queue()
    t.send(b"x")
    print(t.name, flush=True)
    time.sleep(60)
    """
)


@pytest.mark.timeout(60)
def test_a_temporary_queue_goes_with_a_killed_process(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        store.queue("keep")
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        name = child.stdout.readline().strip()
        assert name.startswith("$temporary/")
        with postbox.Store(store_path, multi_process=True) as store:
            assert name in store.queues(), "alive: its queue stays"
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with postbox.Store(store_path) as store:
        assert name not in store.queues()
        assert "keep" in store.queues()
