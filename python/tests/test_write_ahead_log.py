"""The write-ahead log from Python: on by default, off with ``write_ahead_log=False``; a process
killed with SIGKILL right after its sends returned loses none of them, and the next open says
how many log records it replayed (``Store.stats()["replayed_records"]``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import postbox

SENDS = 50

SENDER = textwrap.dedent(
    """
    import sys, time, postbox
    store = postbox.Store(sys.argv[1])
    q = store.queue("jobs")
    ids = [q.send(f"m{i}".encode()) for i in range(int(sys.argv[2]))]
    # The last send must be only in the log when the kill comes: one more while the last was a
    # checkpoint (a durable commit of the store file, due at most every 250 ms).
    while True:
        before = store.stats()["checkpoints"]
        ids.append(q.send(f"m{len(ids)}".encode()))
        if store.stats()["checkpoints"] == before:
            break
    print(*ids, flush=True)
    time.sleep(60)
    """
)

STAT_KEYS = {
    "commits": int,
    "operations": int,
    "replayed_records": int,
    "log_records": int,
    "log_bytes": int,
    "checkpoints": int,
    "log_run_seconds": float,
    "log_apply_seconds": float,
    "log_write_seconds": float,
    "log_sync_seconds": float,
}


def log_of(path: Path) -> Path:
    return path.with_name(path.name + "-log")


def test_the_log_is_on_by_default_and_gone_after_close(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        store.queue("jobs").send(b"x")
        assert log_of(store_path).exists()
        stats = store.stats()
        assert {k: type(v) for k, v in stats.items()} == STAT_KEYS
        assert stats["log_records"] >= 1 and stats["log_bytes"] > 0
        assert stats["replayed_records"] == 0 and stats["log_sync_seconds"] > 0
    # A clean close leaves the store file alone, complete: copying it is a backup.
    assert not log_of(store_path).exists()
    # The closed handle keeps its final counters.
    assert store.stats()["log_records"] == stats["log_records"]
    with postbox.Store(store_path) as store:
        assert [m.body for m in store.queue("jobs").browse()] == [b"x"]


def test_write_ahead_log_false_commits_the_store_file(store_path: Path) -> None:
    with postbox.Store(store_path, write_ahead_log=False) as store:
        store.queue("jobs").send(b"x")
        assert not log_of(store_path).exists()
        stats = store.stats()
        assert stats["log_records"] == 0 and stats["log_bytes"] == 0
        assert stats["commits"] >= 1


def test_multi_process_stores_write_no_log(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        store.queue("jobs").send(b"x")
        assert not log_of(store_path).exists()
        assert store.stats()["log_records"] == 0


@pytest.mark.timeout(120)
def test_sigkill_after_logged_sends_loses_nothing(store_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", SENDER, str(store_path), str(SENDS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    ids = [int(x) for x in child.stdout.readline().split()]
    assert len(ids) > SENDS
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    assert log_of(store_path).exists()

    with postbox.Store(store_path) as store:
        replayed = store.stats()["replayed_records"]
        # One record per commit: the queue's creation and each send.
        assert 1 <= replayed <= 1 + len(ids)
        q = store.queue("jobs")
        assert [m.id for m in q.browse()] == ids
        assert [m.body for m in q.browse()] == [f"m{i}".encode() for i in range(len(ids))]
    # The replay reached the store file: nothing is left to replay.
    with postbox.Store(store_path) as store:
        assert store.stats()["replayed_records"] == 0
        assert len(store.queue("jobs")) == len(ids)


def _crash_with_records(store_path: Path) -> list[int]:
    child = subprocess.Popen(
        [sys.executable, "-c", SENDER, str(store_path), str(SENDS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    ids = [int(x) for x in child.stdout.readline().split()]
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert log_of(store_path).exists()
    return ids


@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", ["deleted", "truncated", "zeroed", "other store"])
def test_a_crashed_store_refuses_a_missing_or_damaged_log(
    store_path: Path, tmp_path: Path, damage: str
) -> None:
    ids = _crash_with_records(store_path)
    log = log_of(store_path)
    if damage == "deleted":
        log.unlink()
    elif damage == "truncated":
        with open(log, "r+b") as f:
            f.truncate(4096)
    elif damage == "zeroed":
        log.write_bytes(bytes(log.stat().st_size))
    else:
        other = tmp_path / "other.postbox"
        _crash_with_records(other)
        log.write_bytes(log_of(other).read_bytes())
    with pytest.raises(postbox.StoreCorruptedError) as refused:
        postbox.Store(store_path)
    assert "-log" in str(refused.value) and "accept_log_loss" in str(refused.value)
    # Refused again: the failed open changed nothing.
    with pytest.raises(postbox.StoreCorruptedError):
        postbox.Store(store_path)
    with postbox.Store(store_path, accept_log_loss=True) as store:
        assert store.log_loss is not None and "-log" in store.log_loss
        q = store.queue("jobs")
        assert all(m.id in ids for m in q.browse())
        q.send(b"after")
    with postbox.Store(store_path) as store:
        assert store.log_loss is None
        assert store.queue("jobs").peek() is not None


def test_log_loss_is_none_after_a_clean_open(store_path: Path) -> None:
    with postbox.Store(store_path, accept_log_loss=True) as store:
        assert store.log_loss is None
