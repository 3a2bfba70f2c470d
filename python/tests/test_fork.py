"""Invariant 11: a handle belongs to the process that opened it.

In a forked child every call on an inherited store, queue, message, transaction or processor
raises ``ForkedError`` and writes nothing (but a processor's ``join`` and ``shutdown``, which
report ``forked=True`` at once); closing, leaving ``with`` blocks, garbage collection
and interpreter exit there neither hang nor touch the file; the parent carries on unaffected;
the child opens the store itself.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import postbox

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CHILD_TIMEOUT = 20.0
"""A child that has not exited by then is hung: killed, and the test fails."""


def wait_child(pid: int, timeout: float = CHILD_TIMEOUT) -> int:
    """Waits for `pid` without blocking forever; returns its exit code (kills it if hung)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"forked child {pid} hung for {timeout} s")
        time.sleep(0.005)


def in_child(fn: Callable[[], Any], timeout: float = CHILD_TIMEOUT) -> tuple[int, Any]:
    """Runs `fn` in a forked child; returns (exit code, what fn returned, through JSON).

    The child leaves with os._exit so that it never runs pytest's code after the fork.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(r)
            data = json.dumps(fn()).encode()
            with os.fdopen(w, "wb") as f:
                f.write(data)
        except BaseException:
            traceback.print_exc()
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    try:
        code = wait_child(pid, timeout)
        with os.fdopen(r, "rb") as f:
            data = f.read()
    except BaseException:
        os.close(r)
        raise
    return code, (json.loads(data) if data else None)


def outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except postbox.PostboxError as e:
        return type(e).__name__
    except Exception as e:  # reported, so the assertion shows what went wrong
        return f"{type(e).__name__}: {e}"
    return "returned"


def file_digest(directory: Path) -> dict[str, str]:
    """Contents of every file of the store's directory (the store and any log beside it)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


@pytest.mark.parametrize("multi_process", [False, True], ids=["single", "multi"])
def test_every_inherited_handle_raises_forked_error(store_path: Path, multi_process: bool) -> None:
    with postbox.Store(store_path, multi_process=multi_process) as store:
        q = store.queue("jobs", lock_duration=60)
        work = store.queue("work")
        ids = q.send_batch([f"m{i}" for i in range(6)])
        held = q.receive(timeout=1)
        held2 = q.receive(timeout=1)
        peeked = q.peek()
        assert peeked is not None
        tx = store.transaction()
        tx_msg = tx.receive(q, timeout=1)
        browse = q.browse()
        consumer = q.consume(timeout=0)
        seen: list[int] = []
        processor = postbox.Processor(work, lambda m: seen.append(m.id), workers=2)
        before = q.stats()
        digest = file_digest(store_path.parent)

        def child() -> dict[str, str]:
            calls: dict[str, Callable[[], object]] = {
                "store.queue": lambda: store.queue("jobs"),
                "store.queue(new)": lambda: store.queue("new", max_deliveries=3),
                "store.queues": store.queues,
                "store.delete_queue": lambda: store.delete_queue("jobs"),
                "store.transaction": store.transaction,
                "store.stats": store.stats,
                "q.send": lambda: q.send(b"from the child"),
                "q.send_batch": lambda: q.send_batch([b"a", b"b"]),
                "q.peek": q.peek,
                "q.browse": q.browse,
                "q.get": lambda: q.get(ids[0]),
                "q.receive(0)": lambda: q.receive(timeout=0),
                "q.receive(1)": lambda: q.receive(timeout=1),
                "q.receive_nowait": q.receive_nowait,
                "q.receive_batch": lambda: q.receive_batch(2, timeout=0),
                "q.complete_batch": lambda: q.complete_batch([held2]),
                "q.complete_batch_and_receive": lambda: q.complete_batch_and_receive([], 1, 0),
                "q.stats": q.stats,
                "len(q)": lambda: len(q),
                "q.purge": q.purge,
                "q.dead_letters": lambda: q.dead_letters,
                "q.options": lambda: q.options,
                "q.consume": lambda: q.consume(timeout=0),
                "next(browse)": lambda: next(browse),
                "next(consumer)": lambda: next(consumer),
                "held.renew_lock": held.renew_lock,
                "held.complete": held.complete,
                "held.abandon": held.abandon,
                "held.dead_letter": lambda: held.dead_letter("reason"),
                "held.resubmit": held.resubmit,
                "peeked.complete": peeked.complete,
                "tx.receive": lambda: tx.receive(q, timeout=0),
                "tx.send": lambda: tx.send(q, b"from the child"),
                "tx.complete": lambda: tx.complete(held2),
                "tx.state": lambda: tx.state,
                "tx_msg.renew_lock": tx_msg.renew_lock,
                "tx.commit": tx.commit,
                "tx.abort": tx.abort,
                "tx.__enter__": lambda: tx.__enter__(),
                "processor.stats": processor.stats,
                "processor.in_flight": lambda: processor.in_flight,
                "processor.workers": lambda: processor.workers,
                "processor.is_stopped": lambda: processor.is_stopped,
                "processor.stop": processor.stop,
                "Processor(q)": lambda: postbox.Processor(q, lambda m: None),
            }
            out = {name: outcome(call) for name, call in calls.items()}
            # What a handle already holds in memory is still readable.
            out["data"] = repr((held.body, held.id == ids[0], peeked.text, tx_msg.body))
            out["errors"] = repr(
                [(e.code, e.opened_by != e.current) for e in _catch(lambda: q.send(b"x"))]
            )
            # Leaving context managers in the child: a clean exit of a message or transaction
            # cannot commit here (ForkedError); an exception just lets go.
            out["held.__exit__(exc)"] = outcome(lambda: held.__exit__(ValueError, None, None))
            out["held.__exit__"] = outcome(lambda: held.__exit__(None, None, None))
            out["tx.__exit__(exc)"] = outcome(lambda: tx.__exit__(ValueError, None, None))
            out["tx.__exit__"] = outcome(lambda: tx.__exit__(None, None, None))
            out["processor.__exit__"] = outcome(lambda: processor.__exit__(None, None, None))
            # join and shutdown report at once: the workers are the parent's.
            for name, call in [
                ("processor.join", lambda: processor.join(None)),
                ("processor.shutdown", lambda: processor.shutdown(None)),
            ]:
                r = call()
                out[name] = "forked" if (r.forked, r.finished) == (True, False) else repr(r)
            out["store.close"] = outcome(store.close)
            out["store.close again"] = outcome(store.close)
            out["after close"] = outcome(lambda: q.send(b"x"))
            return out

        code, out = in_child(child)
        assert code == 0
        data, errors = out.pop("data"), out.pop("errors")
        assert data == repr((b"m0", True, "m2", b"m2"))
        assert errors == repr([(19, True)])
        expect_returned = {
            "processor.join",
            "processor.shutdown",
            "held.__exit__(exc)",
            "tx.__exit__(exc)",
            "processor.__exit__",
            "store.close",
            "store.close again",
        }
        forked_reports = {"processor.join", "processor.shutdown"}
        wrong = {
            name: got
            for name, got in out.items()
            if got
            != (
                "forked"
                if name in forked_reports
                else "returned" if name in expect_returned else "ForkedError"
            )
        }
        assert wrong == {}
        # The child wrote nothing: the parent has not written since the digest either.
        assert file_digest(store_path.parent) == digest

        # The parent is unaffected: every handle works as before the fork.
        assert q.stats() == before
        assert held.state == "locked" and tx.state == "open"
        assert held.renew_lock() is not None
        held.complete()
        q.complete_batch([held2])
        tx.commit()
        new_id = q.send(b"after the fork")
        assert new_id > max(ids)
        work.send(b"for the processor")
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        report = processor.shutdown(10)
        assert report.finished and report.processed == 1
        assert q.stats().active == 4 and q.stats().locked == 0
        assert not store.closed

    with postbox.Store(store_path) as again:
        bodies = sorted(m.body for m in again.queue("jobs").browse())
        assert bodies == [b"after the fork", b"m3", b"m4", b"m5"]


def test_a_forked_child_sees_the_shutdown_report_of_the_fork(store_path: Path) -> None:
    """Issue 27 item 6: `ShutdownReport.forked` is observable. In a child, `join` and `shutdown`
    (even without a timeout) return at once a report with `forked=True` and the counters as
    they were at the fork; they stop nothing, and the parent's processor runs on."""
    with postbox.Store(store_path, multi_process=True) as store:
        work = store.queue("work")
        handled = threading.Semaphore(0)
        processor = postbox.Processor(work, lambda m: handled.release(), workers=2)
        work.send_batch([b"a", b"b", b"c"])
        for _ in range(3):
            assert handled.acquire(timeout=10)
        # Each completion is counted once its commit returned: read until settled.
        deadline = time.monotonic() + 10
        while (processor.stats()["processed"], processor.in_flight) != (3, 0):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        digest = file_digest(store_path.parent)

        def child() -> list[object]:
            joined = processor.join()
            shut = processor.shutdown()
            again = processor.shutdown(0)
            return [
                [r.forked, r.finished, r.still_running, r.processed, r.failed, r.unsettled]
                for r in (joined, shut, again)
            ] + [repr(shut), outcome(processor.stop), outcome(processor.stats)]

        code, got = in_child(child)
        assert code == 0
        *reports, text, stop, stats = got
        assert reports == [[True, False, 0, 3, 0, 0]] * 3
        assert "forked=True" in text
        assert (stop, stats) == ("ForkedError", "ForkedError")
        assert file_digest(store_path.parent) == digest, "the child wrote nothing"
        # The parent's processor was not stopped.
        assert not processor.is_stopped
        work.send(b"d")
        assert handled.acquire(timeout=10)
        report = processor.shutdown(10)
        assert (report.finished, report.forked, report.processed) == (True, False, 4)
        assert "forked" not in repr(report)


def _catch(call: Callable[[], object]) -> list[Any]:
    try:
        call()
    except postbox.ForkedError as e:
        return [e]
    return []


def test_forked_error_is_a_closed_error(store_path: Path) -> None:
    assert issubclass(postbox.ForkedError, postbox.ClosedError)
    assert postbox.ForkedError.code == 19
    with postbox.Store(store_path) as store:
        q = store.queue("jobs")

        def child() -> list[object]:
            try:
                q.send(b"x")
            except postbox.ClosedError as e:  # a generic "store unusable" handler sees it
                return [type(e).__name__, e.code, e.opened_by, e.current, os.getpid(), str(e)]
            return ["no error"]

        code, got = in_child(child)
        assert code == 0
        name, err_code, opened_by, current, child_pid, text = got
        assert (name, err_code, opened_by, current) == ("ForkedError", 19, os.getpid(), child_pid)
        assert str(os.getpid()) in text and str(child_pid) in text


# A parent that forks inside `with` blocks holding every kind of handle; the child leaves the
# blocks, drops everything and exits normally (atexit, finalization, garbage collection).
EXITING_CHILD = textwrap.dedent(
    """
    import gc, os, sys, threading, time, postbox

    path, mode = sys.argv[1], sys.argv[2]

    def main():
        with postbox.Store(path) as store:
            q = store.queue("jobs", lock_duration=60)
            ids = q.send_batch([b"a", b"b", b"c", b"d"])
            held = q.receive(timeout=1)
            tx = store.transaction()
            tx.receive(q, timeout=1)
            with postbox.Processor(store.queue("work"), lambda m: None, workers=2):
                busy = store.queue("busy")
                stop = threading.Event()
                def sender():  # "busy": another thread commits as the fork happens
                    while not stop.is_set():
                        busy.send(b"x")
                thread = threading.Thread(target=sender)
                if mode == "busy":
                    thread.start()
                    time.sleep(0.05)
                pid = os.fork()
                if pid == 0:
                    if mode == "close":
                        store.close()
                    elif mode == "gc":
                        del held, tx, q
                        gc.collect()
                    return None  # leaves the with blocks in the child
                start = time.monotonic()
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        break
                    if time.monotonic() - start > 20:
                        os.kill(pid, 9)
                        print("child hung", flush=True)
                        return 1
                    time.sleep(0.005)
                took = time.monotonic() - start
                code = os.waitstatus_to_exitcode(status)
                stop.set()
                if mode == "busy":
                    thread.join()
                # The parent is unaffected.
                assert held.state == "locked", held.state
                held.complete()
                tx.commit()
                new = q.send(b"e")
                assert new > max(ids), (new, ids)
            print("child", code, round(took, 2), flush=True)
        with postbox.Store(path) as again:
            print("bodies", *sorted(m.text for m in again.queue("jobs").browse()), flush=True)
        return 0

    sys.exit(main())
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["close", "gc", "exit", "busy"])
def test_child_exit_neither_hangs_nor_writes(store_path: Path, mode: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", EXITING_CHILD, str(store_path), mode],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    child = [line.split() for line in lines if line.startswith("child")]
    assert len(child) == 1 and child[0][1] == "0", run.stdout + run.stderr
    assert float(child[0][2]) < 5.0, "the child took too long to exit"
    assert "bodies c d e" in lines, run.stdout + run.stderr


def test_child_opens_a_shared_store_itself(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        q = store.queue("jobs")
        first = q.send(b"parent 1")

        def child() -> list[object]:
            got: list[object] = [outcome(lambda: q.send(b"inherited"))]
            with postbox.Store(store_path, multi_process=True) as own:
                mine = own.queue("jobs")
                got.append(mine.send(b"child"))
                m = mine.receive(timeout=5)
                got.append(m.text)
                m.abandon()
            return got

        code, got = in_child(child)
        assert code == 0
        assert got[0] == "ForkedError"
        assert got[1] > first and got[2] == "parent 1"
        assert q.send(b"parent 2") > got[1]
        assert sorted(m.text for m in q.browse()) == ["child", "parent 1", "parent 2"]
    with postbox.Store(store_path) as again:
        assert len(again.queue("jobs")) == 3


def test_child_opens_the_store_after_the_parent_closed_it(store_path: Path) -> None:
    store = postbox.Store(store_path)
    q = store.queue("jobs")
    q.send(b"parent")
    store.close()

    def child() -> list[object]:
        got: list[object] = [outcome(lambda: q.send(b"inherited"))]
        with postbox.Store(store_path) as own:
            got.append(own.queue("jobs").send(b"child"))
        return got

    code, got = in_child(child)
    assert code == 0
    # The inherited handle is closed (and forked): ForkedError, a ClosedError, comes first.
    assert got[0] == "ForkedError"
    with postbox.Store(store_path) as again:
        assert sorted(m.text for m in again.queue("jobs").browse()) == ["child", "parent"]


def test_child_cannot_open_a_single_process_store_the_parent_holds(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        store.queue("jobs").send(b"x")

        def child() -> str:
            return outcome(lambda: postbox.Store(store_path))

        code, got = in_child(child)
        assert code == 0
        assert got == "AlreadyOpenError"

        def message() -> str:
            try:
                postbox.Store(store_path)
            except postbox.AlreadyOpenError as e:
                return str(e)
            return "opened"

        # The advice must work in the child: the parent's handle raises ForkedError here, so
        # "share that Store" would not; opening both with multi_process=True does.
        code, text = in_child(message)
        assert code == 0
        assert "forked" in text and "multi_process=True" in text, text
        assert "share" not in text and "multi_process(true)" not in text, text


def test_a_child_opens_a_store_the_parent_holds_as_its_error_advises(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        store.queue("jobs").send(b"parent")

        def child() -> str:
            with postbox.Store(store_path, multi_process=True) as own:
                return own.queue("jobs").peek().text  # type: ignore[union-attr]

        code, got = in_child(child)
        assert code == 0
        assert got == "parent"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("multi_process", [False, True], ids=["single", "multi"])
def test_fork_while_other_threads_commit_wait_and_renew(
    store_path: Path, multi_process: bool
) -> None:
    """Each child of a parent whose other threads were mid-commit, receiving, waiting inside a
    transaction or renewing a lock fails promptly, never hangs on a lock such a thread held at
    fork time."""
    forks = int(os.environ.get("POSTBOX_FORK_ROUNDS", "40"))
    with postbox.Store(store_path, multi_process=multi_process) as store:
        q = store.queue("jobs")
        idle = store.queue("idle")
        q.send(b"held")
        held = q.receive(timeout=1)
        tx = store.transaction()
        stop = threading.Event()
        sent: list[int] = []
        renewed = [0]

        def sender() -> None:
            while not stop.is_set():
                sent.append(q.send(b"from the thread"))

        def waiter() -> None:  # holds the transaction's mutex while it waits
            while not stop.is_set():
                with pytest.raises(postbox.Empty):
                    tx.receive(idle, timeout=0.05)

        def renewer() -> None:  # holds the message's mutex while it renews
            while not stop.is_set():
                held.renew_lock()
                renewed[0] += 1

        def receiver() -> None:  # the store's wake-up signals, in and out of receives
            while not stop.is_set():
                with pytest.raises(postbox.Empty):
                    idle.receive(timeout=0)

        threads = [threading.Thread(target=f) for f in (sender, waiter, renewer, receiver)]
        for t in threads:
            t.start()
        try:
            results = []
            for _ in range(forks):
                while len(sent) < 2 or renewed[0] < 2:
                    time.sleep(0.001)
                start = time.monotonic()

                def child() -> list[str]:
                    return [
                        outcome(lambda: q.send(b"from the child")),
                        outcome(lambda: q.receive(timeout=0)),
                        outcome(lambda: idle.receive(timeout=0)),
                        outcome(lambda: tx.receive(idle, timeout=0)),
                        outcome(lambda: tx.send(q, b"x")),
                        outcome(held.renew_lock),
                        outcome(held.complete),
                        held.state,
                        outcome(store.transaction),
                        outcome(store.close),
                    ]

                code, got = in_child(child, timeout=10)
                results.append((code, got, time.monotonic() - start))
        finally:
            stop.set()
            for t in threads:
                t.join()
        for code, got, took in results:
            assert code == 0
            assert got == ["ForkedError"] * 7 + ["locked", "ForkedError", "returned"]
            assert took < 5.0
        assert len(q) == len(sent) and len(set(sent)) == len(sent)
        tx.commit()
        held.complete()
    with postbox.Store(store_path) as again:
        assert len(again.queue("jobs")) == len(sent)


def _mp_worker(q: postbox.Queue, conn: Any) -> None:
    try:
        q.send(b"from a multiprocessing child")
    except postbox.ForkedError as e:
        conn.send(("ForkedError", e.code))
        sys.exit(3)
    conn.send(("sent", None))
    sys.exit(0)


@pytest.mark.timeout(60)
def test_multiprocessing_fork_child_cannot_send(store_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    with postbox.Store(store_path) as store:
        q = store.queue("jobs")
        q.send(b"parent")
        parent_end, child_end = ctx.Pipe()
        p = ctx.Process(target=_mp_worker, args=(q, child_end))
        p.start()
        p.join(30)
        assert p.exitcode == 3, "the child's send must fail with ForkedError"
        assert parent_end.poll(1) and parent_end.recv() == ("ForkedError", 19)
        assert len(q) == 1
        assert q.send(b"parent again") > 0
    with postbox.Store(store_path) as again:
        assert [m.text for m in again.queue("jobs").browse()] == ["parent", "parent again"]
