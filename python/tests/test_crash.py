"""A process killed with SIGKILL while holding messages: they come back, completed ones don't."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import postbox

HOLDER = textwrap.dedent(
    """
    import sys, time, postbox
    store = postbox.Store(sys.argv[1], multi_process=True)
    q = store.queue("jobs")
    completed, held = [], []
    for _ in range(10):
        m = q.receive(timeout=5)
        m.complete()
        completed.append(m.id)
    for _ in range(5):
        held.append(q.receive(timeout=5))
    print("completed", *completed, flush=True)
    print("held", *[m.id for m in held], flush=True)
    time.sleep(60)
    """
)


@pytest.mark.timeout(60)
def test_sigkill_while_holding(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        q = store.queue("jobs", lock_duration=600)  # far longer than the test: no expiry
        ids = q.send_batch([str(i) for i in range(20)])
        child = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(store_path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        completed = [int(x) for x in child.stdout.readline().split()[1:]]
        held = [int(x) for x in child.stdout.readline().split()[1:]]
        assert len(completed) == 10 and len(held) == 5
        assert q.stats().locked == 5
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        # The dead holder's locks are released (not after lock_duration): all the rest comes back.
        back = []
        for m in q.consume(timeout=5):
            back.append(m.id)
            if m.id in held:
                assert m.delivery_count == 2
            m.complete()
            if len(back) == 10:
                break
        assert sorted(back) == sorted(set(ids) - set(completed))
        assert not set(back) & set(completed)
        with pytest.raises(postbox.Empty):
            q.receive(timeout=0.2)


SESSION_HOLDER = textwrap.dedent(
    """
    import sys, time, postbox
    store = postbox.Store(sys.argv[1], multi_process=sys.argv[2] == "multi")
    q = store.queue("sessions")
    s = q.accept_session(timeout=5, group="a")
    m = s.receive(timeout=5)
    print("held", m.id, flush=True)
    time.sleep(60)
    """
)


@pytest.mark.parametrize("mode", ["single", "multi"])
@pytest.mark.timeout(60)
def test_sigkill_while_holding_a_session(store_path: Path, mode: str) -> None:
    # The session lock (600 s, far longer than the test) goes with the dead process, as its
    # message lock does: at once, not when it expires.
    with postbox.Store(store_path) as store:
        q = store.queue("sessions", requires_session=True, lock_duration=600)
        q.send_batch([{"body": f"a-{i}", "group": "a"} for i in range(2)])
    child = subprocess.Popen(
        [sys.executable, "-c", SESSION_HOLDER, str(store_path), mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    held = int(child.stdout.readline().split()[1])
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    # Single-process: the reopen releases it; multi-process: the open reaps the dead owner.
    with postbox.Store(store_path, multi_process=mode == "multi") as store:
        q = store.queue("sessions")
        with q.accept_session(timeout=0, group="a") as s:
            m = s.receive(timeout=0)
            assert (m.id, m.delivery_count) == (held, 2)
            m.complete()
