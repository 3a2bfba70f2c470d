"""Jobs: work split into pieces, done exactly when the last piece settles, continued once.

Knobs: POSTBOX_JOB_PIECES (pieces per job, default 100), POSTBOX_JOB_SEED (the workers' random
choices; printed, default from the clock).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

import postbox

PIECES = int(os.environ.get("POSTBOX_JOB_PIECES", "100"))
SEED = int(os.environ.get("POSTBOX_JOB_SEED", str(time.time_ns() % 2**32)))
LOCK = 0.2
"""Lock duration of the work queues: short, so that lock expiries happen within the test."""


def test_a_job_tracks_its_pieces_and_continues_once(tmp_store: postbox.Store) -> None:
    tiles = tmp_store.queue("tiles")
    stitch = tmp_store.queue("stitch")
    job = tmp_store.create_job(
        continuation=(stitch, {"body": b"stitch image 7", "label": "stitch", "priority": 6})
    )
    assert isinstance(job.id, int)
    ids = [job.send(tiles, f"tile {i}", label="tile") for i in range(3)]
    ids += job.send_batch(tiles, [b"tile 3", {"body": b"tile 4", "label": "tile"}])
    p = job.progress()
    assert (p.total, p.completed, p.dead_lettered, p.pending, p.sealed, p.done) == (
        5, 0, 0, 5, False, False,
    )
    assert job.pending() == ids
    assert [(x.id, x.state, x.ended_at) for x in job.pieces()] == [(i, "pending", None) for i in ids]

    before = datetime.now(timezone.utc)
    tiles.receive(timeout=1).complete()
    tiles.receive(timeout=1).dead_letter("Unreadable", "tile 1 is corrupt")
    p = job.progress()
    assert (p.completed, p.dead_lettered, p.pending, p.done) == (1, 1, 3, False)
    pieces = {x.id: x for x in job.pieces()}
    assert pieces[ids[0]].state == "completed"
    assert pieces[ids[1]].state == "dead-lettered"
    for x in (pieces[ids[0]], pieces[ids[1]]):
        assert x.ended_at is not None and x.ended_at.tzinfo is not None
        assert x.ended_at.timestamp() >= before.timestamp() - 1
    assert job.pending() == ids[2:]

    sealed = job.seal()
    assert sealed.sealed and not sealed.done
    with pytest.raises(postbox.InvalidArgumentError):
        job.send(tiles, b"late")
    assert job.progress().total == 5, "a refused piece is not counted"
    for _ in range(3):
        with tiles.receive(timeout=1):
            pass
    assert stitch.peek() is not None
    p = job.wait(timeout=0)
    assert p.done and p.pending == 0 and (p.completed, p.dead_lettered) == (4, 1)
    assert job.pending() == []
    cont = stitch.receive(timeout=0)
    assert (cont.body, cont.label, cont.priority) == (b"stitch image 7", "stitch", 6)
    cont.complete()
    assert job.seal().done
    assert len(stitch) == 0, "sealing again sends no second continuation"


def test_progress_is_a_small_immutable_value(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    job = tmp_store.create_job()
    job.send(q, b"a")
    p = job.progress()
    assert p == job.progress() and hash(p) == hash(job.progress())
    assert p._asdict() == {
        "total": 1, "completed": 0, "dead_lettered": 0, "pending": 1, "sealed": False,
        "done": False,
    }
    assert repr(p).startswith("JobProgress(total=1, completed=0")
    with pytest.raises(AttributeError):
        p.total = 3  # type: ignore[misc]
    piece = job.pieces()[0]
    assert repr(piece) == f"JobPiece(id={piece.id}, state='pending')"
    assert tmp_store.job(job.id) == job and hash(tmp_store.job(job.id)) == hash(job)


def test_sealing_a_finished_job_sends_the_continuation_then(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    tmp_store.queue("next")
    job = tmp_store.create_job(continuation=("next", "go"))  # a queue name, a str body
    with tmp_store.transaction() as tx:
        piece = tx.send_piece(job, q, b"a", label="piece")
    m = q.receive(timeout=1)
    assert m.id == piece, "the id send_piece returns is the message's"
    assert m.label == "piece"
    m.complete()
    assert not job.progress().done
    nxt = tmp_store.open_queue("next")
    assert len(nxt) == 0
    assert job.seal().done
    assert [x.body for x in nxt.browse()] == [b"go"]
    job.seal()
    assert len(nxt) == 1


def test_an_aborted_piece_is_no_piece(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    job = tmp_store.create_job()
    with pytest.raises(RuntimeError):
        with tmp_store.transaction() as tx:
            tx.send_piece(job, q, b"a")
            raise RuntimeError("abort")
    assert job.progress().total == 0 and len(q) == 0
    tx = tmp_store.transaction()
    tx.send_piece(job, q, b"b")
    job.seal()
    with pytest.raises(postbox.InvalidArgumentError):
        tx.commit()  # a sealed job takes no pieces, not even at commit
    assert len(q) == 0 and job.progress().done


def test_a_job_is_opened_by_id_and_deleted(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    job = tmp_store.create_job()
    job.send(q, b"a")
    again = tmp_store.job(job.id)
    assert again.progress().total == 1
    assert again.delete() is True
    assert job.delete() is False
    with pytest.raises(postbox.NotFoundError) as e:
        tmp_store.job(job.id)
    assert e.value.job_id == job.id  # type: ignore[attr-defined]
    assert not isinstance(e.value, postbox.QueueNotFoundError)
    for call in (job.progress, job.pending, job.pieces, job.seal, lambda: job.send(q, b"x")):
        with pytest.raises(postbox.NotFoundError):
            call()
    assert len(q) == 1, "a deleted job's pending piece stays as a plain message"
    q.receive(timeout=1).complete()


def test_bad_continuations_and_arguments(tmp_store: postbox.Store, tmp_path: Path) -> None:
    q = tmp_store.queue("q")
    with pytest.raises(TypeError):
        tmp_store.create_job(continuation=q)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tmp_store.create_job(continuation=(q, 42))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tmp_store.create_job(continuation=(q, {"body": b"x", "colour": "red"}))
    with pytest.raises(postbox.QueueNotFoundError):
        tmp_store.create_job(continuation=("missing", b"x"))
    assert "missing" not in tmp_store.queues()
    with pytest.raises(postbox.MessageTooLargeError):
        tmp_store.create_job(continuation=(q, b"x" * (5 << 20)))
    job = tmp_store.create_job()
    with pytest.raises(TypeError):
        job.send(q, b"x", colour="red")  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        job.wait(timeout=-1)
    with postbox.Store(tmp_path / "other.postbox") as other:
        with pytest.raises(postbox.InvalidArgumentError):
            job.send(other.queue("q"), b"x")


def test_wait_honours_its_timeout_and_releases_the_gil(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    job = tmp_store.create_job()
    job.send(q, b"a")
    job.seal()
    started = time.monotonic()
    # Not done in time: Empty, as every wait (the progress says how far it got).
    with pytest.raises(postbox.Empty, match="1 of 1 pieces pending"):
        job.wait(timeout=0.3)
    assert job.progress().pending == 1
    assert 0.25 <= time.monotonic() - started < 3
    # A Python thread completes the piece while the main thread waits: the wait releases the
    # GIL and is woken by the completing commit.
    received = threading.Event()

    def worker() -> None:
        m = q.receive(timeout=5)
        received.set()
        m.complete()

    t = threading.Thread(target=worker)
    t.start()
    p = job.wait(timeout=10)
    t.join()
    assert received.is_set() and p.done


def _check_snapshot(stitch: postbox.Queue, job: postbox.Job) -> postbox.JobProgress:
    """Reads the continuation queue, then the job: a continuation implies done (one commit)."""
    sent = stitch.stats()
    p = job.progress()
    assert sent.active + sent.locked <= 1
    if sent.active + sent.locked:
        assert p.done, p
    assert p.pending == p.total - p.completed - p.dead_lettered
    assert p.done == (p.sealed and p.pending == 0), p
    return p


def test_eight_threads_with_abandons_dead_letters_and_expiries(tmp_store: postbox.Store) -> None:
    print(f"POSTBOX_JOB_SEED={SEED}")
    tiles = tmp_store.queue("tiles", lock_duration=LOCK, max_deliveries=3)
    stitch = tmp_store.queue("stitch")
    job = tmp_store.create_job(continuation=(stitch, b"stitch"))
    for start in range(0, PIECES, 50):
        job.send_batch(tiles, [f"tile {i}" for i in range(start, min(PIECES, start + 50))])
    job.seal()
    done = threading.Event()
    lock = threading.Lock()
    completed: set[int] = set()
    dead: set[int] = set()
    expired = 0
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        nonlocal expired
        rng = random.Random(SEED ^ w)
        try:
            while not done.is_set():
                try:
                    m = tiles.receive(timeout=0.1)
                except postbox.Empty:
                    continue
                roll = rng.randrange(10)
                if roll == 0:
                    m.abandon()
                elif roll == 1:
                    time.sleep(LOCK * 1.5)  # the lock expires: the piece comes back
                    with pytest.raises(postbox.LockLostError):
                        m.complete()
                    with lock:
                        expired += 1
                elif roll == 2:
                    m.dead_letter("Bad", "tile cannot be read")
                    with lock:
                        dead.add(m.id)
                else:
                    m.renew_lock()
                    m.complete()
                    with lock:
                        completed.add(m.id)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            done.set()

    def monitor() -> None:
        try:
            while not done.is_set():
                _check_snapshot(stitch, job)
                time.sleep(0.01)
        except BaseException as e:
            errors.append(e)
            done.set()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    threads.append(threading.Thread(target=monitor))
    for t in threads:
        t.start()
    try:
        p = job.wait(timeout=60)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert p.done, p
    assert expired and dead, "the random choices included lock expiries and dead letters"
    p = _check_snapshot(stitch, job)
    assert p.total == PIECES and p.pending == 0
    pieces = job.pieces()
    assert len(pieces) == PIECES
    by_state: dict[str, set[int]] = {"completed": set(), "dead-lettered": set(), "pending": set()}
    for x in pieces:
        by_state[x.state].add(x.id)
    assert by_state["completed"] == completed, "exactly the successful completions count"
    assert len(completed) == p.completed
    in_dlq = {m.id for m in tiles.dead_letters.browse()}
    assert by_state["dead-lettered"] == in_dlq and len(in_dlq) == p.dead_lettered
    assert dead <= in_dlq, "explicit dead letters, plus pieces out of deliveries"
    assert not by_state["pending"] and job.pending() == []
    assert [m.body for m in stitch.browse()] == [b"stitch"], "the continuation, exactly once"
    assert len(tiles) == 0 and tiles.stats().locked == 0


WORKER = textwrap.dedent(
    """
    import json, random, sys, time, postbox
    path, job_id, seed, hold_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    def say(kind, id):
        print(json.dumps([kind, id]), flush=True)
    with postbox.Store(path, multi_process=True) as store:
        tiles = store.queue("tiles")
        job = store.job(job_id)
        settled = 0
        while True:
            try:
                m = tiles.receive(timeout=0.2)
            except postbox.Empty:
                if job.progress().done:
                    break
                continue
            if hold_after and settled >= hold_after:
                say("hold", m.id)   # killed while holding it: it must come back
                time.sleep(60)
            roll = rng.randrange(10)
            if roll == 0:
                m.abandon()
            elif roll == 1:
                time.sleep(%(expiry)r)
                try:
                    m.complete()
                    raise SystemExit("completed after the lock expired")
                except postbox.LockLostError:
                    pass
            elif roll == 2:
                m.dead_letter("Bad", "tile cannot be read")
                say("dead", m.id)
                settled += 1
            else:
                m.complete()
                say("completed", m.id)
                settled += 1
    """
) % {"expiry": LOCK * 1.5}


@pytest.mark.timeout(120)
def test_three_processes_one_killed(store_path: Path) -> None:
    print(f"POSTBOX_JOB_SEED={SEED}")
    with postbox.Store(store_path, multi_process=True) as store:
        tiles = store.queue("tiles", lock_duration=LOCK, max_deliveries=3)
        stitch = store.queue("stitch")
        job = store.create_job(continuation=(stitch, b"stitch"))
        job.send_batch(tiles, [f"tile {i}" for i in range(PIECES)])
        job.seal()
        hold_after = max(1, PIECES // 20)
        workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(store_path), str(job.id), str(SEED + w),
                 str(hold_after if w == 0 else 0)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for w in range(3)
        ]
        try:
            victim = workers[0]
            assert victim.stdout is not None
            lines = []
            for line in victim.stdout:
                lines.append(json.loads(line))
                if lines[-1][0] == "hold":
                    break
            assert lines and lines[-1][0] == "hold", "the victim settled pieces, then held one"
            held = lines[-1][1]
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait()
            p = job.wait(timeout=60)
            assert p.done, p
            outputs = [lines] + [
                [json.loads(x) for x in w.communicate(timeout=30)[0].splitlines()]
                for w in workers[1:]
            ]
            assert all(w.returncode == 0 for w in workers[1:])
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.wait()
        completed = {i for out in outputs for kind, i in out if kind == "completed"}
        dead = {i for out in outputs for kind, i in out if kind == "dead"}
        assert sum(1 for out in outputs for kind, _ in out if kind == "completed") == len(
            completed
        ), "no piece was completed twice"
        states = {x.id: x.state for x in job.pieces()}
        assert len(states) == PIECES
        assert {i for i, s in states.items() if s == "completed"} == completed
        in_dlq = {m.id for m in tiles.dead_letters.browse()}
        assert {i for i, s in states.items() if s == "dead-lettered"} == in_dlq
        assert dead <= in_dlq
        assert states[held] != "pending", "the killed worker's piece came back and ended"
        assert (p.completed, p.dead_lettered) == (len(completed), len(in_dlq))
        assert [m.body for m in stitch.browse()] == [b"stitch"], "the continuation, exactly once"
        assert len(tiles) == 0 and tiles.stats().locked == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_new_handles_refuse_a_forked_child(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        q = store.queue("q", lock_duration=60)
        job = store.create_job()
        job.send(q, b"piece")
        q.send(b"plain", reply_to="q")
        held = q.receive(timeout=1)
        table = store.table("t")
        tx = store.transaction()
        tx_table = tx.table("t")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            outcomes = {}
            calls = {
                "job.send": lambda: job.send(q, b"x"),
                "job.progress": job.progress,
                "job.pieces": job.pieces,
                "job.wait": lambda: job.wait(0),
                "job.seal": job.seal,
                "job.delete": job.delete,
                "store.create_job": store.create_job,
                "store.job": lambda: store.job(job.id),
                "store.table": lambda: store.table("t"),
                "store.temporary_queue": store.temporary_queue,
                "store.queue_infos": store.queue_infos,
                "table.put": lambda: table.put(b"k", b"v"),
                "table.get": lambda: table.get(b"k"),
                "tx.table": lambda: tx.table("t"),
                "tx_table.put": lambda: tx_table.put(b"k", b"v"),
                "tx.send_checked": lambda: tx.send_checked(q, b"x"),
                "tx.send_piece": lambda: tx.send_piece(job, q, b"x"),
                "q.send_checked": lambda: q.send_checked(b"x"),
                "q.request": lambda: q.request(b"x", timeout=0),
                "held.reply": lambda: held.reply(b"x"),
                "held.mark_done": lambda: held.mark_done("k"),
                "held.done_keys": held.done_keys,
            }
            for name, call in calls.items():
                try:
                    call()
                    outcomes[name] = "returned"
                except postbox.ForkedError:
                    outcomes[name] = "ForkedError"
                except BaseException as e:
                    outcomes[name] = repr(e)
            os.write(w, json.dumps(outcomes).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            outcomes = json.loads(f.read())
        os.waitpid(pid, 0)
        assert outcomes and set(outcomes.values()) == {"ForkedError"}, outcomes
        # The parent is unaffected.
        assert job.progress().total == 1 and table.get(b"k") is None
        held.mark_done("parent")
        assert held.done_keys() == {"parent"}
        tx.abort()
