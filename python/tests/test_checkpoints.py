"""Checkpoints inside a message: progress keys survive a redelivery, so work is not redone.

Knob: POSTBOX_CHECKPOINT_KEYS (keys of the long message, default 1000).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import postbox

KEYS = int(os.environ.get("POSTBOX_CHECKPOINT_KEYS", "1000"))
ALL = [f"user-{i:05}" for i in range(KEYS)]


def finish(m: postbox.Message, notified: list[str]) -> None:
    """The long message's handler: notifies every user not yet done, checkpointing each chunk."""
    done = m.done_keys()
    todo = [k for k in ALL if k not in done]
    for start in range(0, len(todo), 100):
        chunk = todo[start : start + 100]
        notified.extend(chunk)
        m.mark_done(chunk)
    m.complete()


def test_an_abandoned_message_resumes_where_it_stopped(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("fanout")
    q.send(b"notify every user")
    m = q.receive(timeout=1)
    assert m.done_keys() == set()
    notified: list[str] = []
    for start in range(0, KEYS // 2, 100):
        chunk = ALL[start : min(KEYS // 2, start + 100)]
        notified.extend(chunk)
        m.mark_done(chunk)
    m.abandon()
    m = q.receive(timeout=1)
    assert m.delivery_count == 2
    assert m.done_keys() == set(ALL[: KEYS // 2]), "the redelivery sees the done keys"
    finish(m, notified)
    assert sorted(notified) == ALL, "each user notified exactly once"
    assert q.get(m.id) is None and len(q) == 0


WORKER = textwrap.dedent(
    """
    import sys, time, postbox
    path, keys = sys.argv[1], int(sys.argv[2])
    all_keys = [f"user-{i:05}" for i in range(keys)]
    with postbox.Store(path, multi_process=True) as store:
        m = store.queue("fanout").receive(timeout=10)
        for start in range(0, keys // 2, 100):
            chunk = all_keys[start : min(keys // 2, start + 100)]
            m.mark_done(chunk)
            print(*chunk, flush=True)
        print("half", flush=True)
        time.sleep(60)
    """
)


@pytest.mark.timeout(60)
def test_a_killed_worker_leaves_its_checkpoints(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        q = store.queue("fanout", lock_duration=60)  # the death, not an expiry, releases it
        q.send(b"notify every user")
        child = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(store_path), str(KEYS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            notified: list[str] = []
            for line in child.stdout:
                if line.strip() == "half":
                    break
                notified.extend(line.split())
            assert len(notified) == KEYS // 2
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        m = q.receive(timeout=10)
        assert m.delivery_count == 2
        assert m.done_keys() == set(notified)
        finish(m, notified)
        assert sorted(notified) == ALL, "each user notified exactly once"


def test_mark_done_renews_the_lock(tmp_store: postbox.Store) -> None:
    # A lock of 1 s renewed every 0.25 s: a slow CI machine may stall a step by a few hundred
    # milliseconds without the lock running out, and the whole loop outlives the first lock.
    q = tmp_store.queue("q", lock_duration=1.0)
    q.send(b"slow")
    m = q.receive(timeout=1)
    first = m.locked_until
    assert first is not None
    for i in range(8):  # 2 s in all: twice the lock duration
        time.sleep(0.25)
        until = m.mark_done(f"step {i}")
        assert until == m.locked_until and until > first
    m.complete()
    assert len(q) == 0


def test_keys_are_checked(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=60)
    q.send(b"x")
    m = q.receive(timeout=1)
    m.mark_done("one key")  # a str is one key, not its characters
    m.mark_done(iter(["a", "b"]))
    m.mark_done(("a", "b"))  # again: harmless
    m.mark_done([])
    assert m.done_keys() == {"one key", "a", "b"}
    keys = m.done_keys()
    keys.add("mine")
    assert "mine" not in m.done_keys(), "a new set each time"
    for bad in ([""], ["x" * 1025]):
        with pytest.raises(postbox.InvalidArgumentError):
            m.mark_done(bad)
    m.mark_done(["é" * 512])  # 1024 bytes
    for wrong in ([b"bytes"], [1], 5):
        with pytest.raises(TypeError):
            m.mark_done(wrong)  # type: ignore[arg-type]
    assert m.state == "locked", "refused keys leave the lock"
    m.complete()
    with pytest.raises(postbox.InvalidArgumentError):
        m.mark_done("late")
    with pytest.raises(postbox.InvalidArgumentError):
        m.done_keys()


def test_only_a_held_message_takes_checkpoints(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", lock_duration=0.1)
    q.send(b"x")
    peeked = q.peek()
    assert peeked is not None
    with pytest.raises(postbox.InvalidArgumentError):
        peeked.mark_done("k")
    with pytest.raises(postbox.InvalidArgumentError):
        peeked.done_keys()
    m = q.receive(timeout=1)
    time.sleep(0.2)
    with pytest.raises(postbox.LockLostError):
        m.mark_done("k")
    assert m.state == "lock lost"
    again = q.receive(timeout=1)
    assert again.done_keys() == set(), "a refused checkpoint records nothing"
    again.complete()


def test_a_message_received_in_a_transaction_checkpoints_through_it(
    tmp_store: postbox.Store,
) -> None:
    """Issue 27 item 2: `mark_done` on a message received in a transaction records under the
    transaction's lock, at once: the keys survive its abort (they record work done outside
    it), and its commit removes them with the message."""
    q = tmp_store.queue("q", lock_duration=60)
    q.send(b"notify 3 users")
    tx = tmp_store.transaction()
    in_tx = tx.receive(q, timeout=1)
    assert in_tx.done_keys() == set()
    before = in_tx.locked_until
    assert before is not None
    time.sleep(0.01)
    until = in_tx.mark_done(["user-1", "user-2"])
    assert until > before and in_tx.locked_until == until
    assert in_tx.done_keys() == {"user-1", "user-2"}
    assert in_tx.state == "transaction", "the transaction still settles it"
    tx.abort()
    with pytest.raises(postbox.InvalidArgumentError, match="aborted"):
        in_tx.mark_done("late")
    with tmp_store.transaction() as tx2:
        again = tx2.receive(q, timeout=1)
        assert again.delivery_count == 2
        assert again.done_keys() == {"user-1", "user-2"}, "the abort kept them"
        again.mark_done("user-3")
    assert len(q) == 0 and q.stats().locked == 0
