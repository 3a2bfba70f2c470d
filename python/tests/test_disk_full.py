"""A full disk (items 2 and 4): a failed commit is all or nothing and says which, the same handle
works again once space is freed, reads keep working meanwhile.

Both kinds of store are tried: without the write-ahead log (``write_ahead_log=False``) and
with it (the default). The log's file is allocated ahead in 1 MiB steps, so logged batches that
fit in what it holds succeed on a full disk (the last test counts them); the sweep's log mode
uses batches of 2 MB, which a store with the log commits to the store file directly (a
checkpoint, like any batch over 256 KiB), with the log beside it.

Runs only as root where a small tmpfs can be mounted (`mount -t tmpfs -o size=8m`, 32m for
the log mode); skipped elsewhere. POSTBOX_DISKFULL_STEPS sets how many free-space amounts are
tried (default 8).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import postbox

STEPS = int(os.environ.get("POSTBOX_DISKFULL_STEPS", "8"))
BODY = 50_000
BATCH = 5


class Filler:
    """A file that takes up all the free space of its file system but `free` bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self, free: int) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for chunk in (1 << 20, 64 << 10, 4 << 10, 512):
                block = b"\0" * chunk
                while True:
                    try:
                        os.write(fd, block)
                    except OSError as e:
                        assert e.errno == errno.ENOSPC
                        break
        finally:
            os.close(fd)
        size = self.path.stat().st_size
        os.truncate(self.path, max(0, size - free))

    def release(self) -> None:
        self.path.unlink(missing_ok=True)


def present(q: postbox.Queue, tag: bytes) -> int:
    return sum(1 for m in q.browse() if m.body.startswith(tag))


def free_amounts(top: int) -> list[int]:
    """0, then amounts up to `top`, past what the batch needs."""
    if STEPS <= 1:
        return [0]
    return [0] + [int(top * (i / (STEPS - 1)) ** 2) for i in range(1, STEPS)]


def outcome(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except postbox.StorageFullError:
        return "full"
    except postbox.OutcomeUnknownError:
        return "unknown"
    return "ok"


# (tmpfs size, write_ahead_log, body size, largest free amount): without the log a batch of
# 5 x 50 KB needs about 250 KB of new pages; with it, a batch of 5 x 400 KB is a checkpoint,
# and the largest amount leaves room for the log and the store file.
MODES = [("8m", False, BODY, 1 << 20), ("32m", True, 400_000, 8 << 20)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("small_fs", "log", "body", "top"), MODES, ids=["direct", "log"], indirect=["small_fs"]
)
@pytest.mark.parametrize("reopen", [True, False], ids=["reopen-each-round", "one-handle"])
def test_disk_full_commits_are_all_or_nothing(
    small_fs: Path, log: bool, body: int, top: int, reopen: bool
) -> None:
    path = small_fs / "s.postbox"
    filler = Filler(small_fs / "filler")
    seen: dict[str, set[str]] = {"batch": set(), "tx": set()}
    retried_settles = 0
    store = postbox.Store(path, write_ahead_log=log)
    for round_no, free in enumerate(free_amounts(top)):
        for how in ("batch", "tx"):
            if store.closed:
                store = postbox.Store(path, write_ahead_log=log)
            q = store.queue("jobs")
            hq = store.queue("held")
            q.purge()
            q.send(b"before")
            hq.send(b"held")
            held = hq.receive(timeout=5)
            tag = f"{how}-{round_no}:".encode()
            bodies = [tag + bytes([65 + i]) * body for i in range(BATCH)]
            filler.fill(free)
            try:
                if how == "batch":
                    got = outcome(lambda: q.send_batch(bodies))
                else:

                    def in_tx() -> None:
                        tx = store.transaction()
                        for b in bodies:
                            tx.send(q, b)
                        tx.commit()

                    got = outcome(in_tx)
                # Reads keep working on a full disk.
                head = q.peek()
                assert head is not None and head.body == b"before"
                assert len(q) >= 1
                q.stats()
                # A settle refused for want of space keeps the message held.
                settled = outcome(held.complete)
                assert settled in ("ok", "full"), settled
                if settled == "full":
                    assert held.state == "locked"
                # Small sends fail with StorageFullError, if they fail.
                assert outcome(lambda: q.send(b"small")) in ("ok", "full")
            finally:
                filler.release()
            seen[how].add(got)
            # The same handle works again, without reopening.
            if held.state == "locked":
                held.complete()
                retried_settles += 1
            q.send(b"after")
            n = present(q, tag)
            if got == "ok":
                assert n == BATCH, (free, how, n)
            elif got == "full":
                assert n == 0, (free, how, n)
            else:
                assert n in (0, BATCH), (free, how, n)
            assert len(hq) == 0 and hq.stats().locked == 0
            if reopen:
                store.close()
                # What the handle saw is what the file holds.
                with postbox.Store(path, write_ahead_log=log) as again:
                    assert present(again.queue("jobs"), tag) == n, (free, how)
    store.close()
    # The rounds crossed the edge: some commits were refused, the last ones fitted.
    if STEPS >= 3:
        assert "full" in seen["batch"] | seen["tx"] and "ok" in seen["batch"] & seen["tx"], seen
    print(f"outcomes {seen}; settles retried after a full disk: {retried_settles}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("log", [False, True], ids=["direct", "log"])
def test_full_disk_errors_are_storage_full_and_close_works(small_fs: Path, log: bool) -> None:
    path = small_fs / "s.postbox"
    filler = Filler(small_fs / "filler")
    store = postbox.Store(path, write_ahead_log=log)
    q = store.queue("jobs")
    q.send(b"first")
    filler.fill(0)
    failures: list[BaseException] = []
    # With the log, batches (250 KB: logged) that fit in the log's allocated space succeed,
    # durably.
    stored = 0
    try:
        for _ in range(20):
            try:
                q.send_batch([b"x" * BODY] * BATCH)
                stored += 1
            except postbox.PostboxError as e:
                failures.append(e)
        with pytest.raises(postbox.StorageFullError) as info:
            q.send_batch([b"y" * BODY] * BATCH)
        assert info.value.code == 16
        assert isinstance(info.value, postbox.IoError) and isinstance(info.value, OSError)
        assert [m.body for m in q.browse()][:1] == [b"first"]
    finally:
        filler.release()
    assert failures and all(isinstance(e, postbox.StorageFullError) for e in failures), failures
    q.send(b"second")
    store.close()
    with postbox.Store(path, write_ahead_log=log) as again:
        bodies = [m.body for m in again.queue("jobs").browse()]
    assert bodies == [b"first"] + [b"x" * BODY] * (stored * BATCH) + [b"second"]
