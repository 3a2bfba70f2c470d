"""The exception hierarchy, and each class raised where the engine reports it."""

from __future__ import annotations

import gc
import os
import queue as stdlib_queue
import subprocess
import sys
from pathlib import Path

import pytest

import postbox
from postbox import _errors

LEAVES = {
    "Empty": 1,
    "LockLostError": 2,
    "QueueFullError": 3,
    "MessageTooLargeError": 4,
    "NotFoundError": 5,
    "InvalidArgumentError": 6,
    "StoreCorruptedError": 7,
    "IoError": 8,
    "ClosedError": 9,
    "InternalError": 10,
    "NotAStoreError": 11,
    "IncompatibleVersionError": 12,
    "AlreadyOpenError": 13,
    "OutcomeUnknownError": 14,
    "ConfigError": 15,
    "StorageFullError": 16,
    "CodecError": 17,
    "QueueNotFoundError": 18,
    "ForkedError": 19,
    "ConflictError": 20,
    "InUseError": 21,
    "UnsupportedError": 22,
}


@pytest.mark.parametrize("name, code", sorted(LEAVES.items()))
def test_one_class_per_kind(name: str, code: int) -> None:
    cls = getattr(postbox, name)
    assert issubclass(cls, postbox.PostboxError)
    assert cls.code == code
    assert name in postbox.__all__


def test_every_engine_kind_has_its_own_class() -> None:
    # Derived from the engine's list of kinds, so a kind added there cannot be missed here.
    from postbox import _postbox

    kinds = _postbox._error_kinds()
    assert sorted(code for code, _ in kinds) == sorted(LEAVES.values())
    for code, name in kinds:
        assert name != "PostboxError", f"kind {code} has no exception class"
        assert getattr(postbox, name).code == code


def test_hierarchy_and_builtin_bases() -> None:
    assert issubclass(postbox.Empty, stdlib_queue.Empty)
    assert issubclass(postbox.InvalidArgumentError, ValueError)
    assert issubclass(postbox.ConfigError, postbox.InvalidArgumentError)
    assert issubclass(postbox.MessageTooLargeError, ValueError)
    assert issubclass(postbox.QueueNotFoundError, postbox.NotFoundError)
    assert issubclass(postbox.MessageNotFoundError, postbox.NotFoundError)
    assert issubclass(postbox.NotFoundError, LookupError)
    for name in ("StoreCorruptedError", "NotAStoreError", "IncompatibleVersionError",
                 "AlreadyOpenError", "ClosedError", "IoError"):
        assert issubclass(getattr(postbox, name), postbox.StoreError)
    assert issubclass(postbox.IoError, OSError)
    assert issubclass(postbox.StorageFullError, postbox.IoError)
    assert issubclass(postbox.ForkedError, postbox.ClosedError)
    assert issubclass(postbox.UnsupportedError, NotImplementedError)
    assert postbox.MessageNotFoundError.code == postbox.NotFoundError.code == 5
    assert set(_errors.__all__) <= set(postbox.__all__)


def test_queue_not_found_has_its_own_code(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("gone")
    q.send(b"x")
    assert tmp_store.delete_queue("gone")
    for call in (lambda: q.send(b"y"), q.peek, lambda: next(q.browse()), lambda: q.options):
        with pytest.raises(postbox.QueueNotFoundError) as info:
            call()
        assert info.value.code == 18 and info.value.queue == "gone"
        assert isinstance(info.value, postbox.NotFoundError)
        assert not isinstance(info.value, postbox.MessageNotFoundError)


def test_empty_is_a_stdlib_queue_empty(queue: postbox.Queue) -> None:
    with pytest.raises(stdlib_queue.Empty):
        queue.receive(timeout=0)
    with pytest.raises(postbox.Empty) as info:
        queue.receive_nowait()
    assert info.value.code == 1 and "jobs" in str(info.value)


def test_queue_full(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("quota", max_messages=2)
    q.send(b"1")
    q.send(b"2")
    with pytest.raises(postbox.QueueFullError) as info:
        q.send(b"3")
    assert info.value.queue == "quota" and "max_messages" in info.value.limit
    b = tmp_store.queue("bytes", max_bytes=10)
    b.send(b"0123456789")
    with pytest.raises(postbox.QueueFullError):
        b.send(b"x")


def test_message_too_large(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("small", max_message_size=10)
    q.send(b"0123456789")
    with pytest.raises(postbox.MessageTooLargeError) as info:
        q.send(b"0123456789!")
    assert (info.value.size, info.value.max_size) == (11, 10)


def test_invalid_arguments(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    for bad in (8, -1, 1000):
        with pytest.raises(postbox.InvalidArgumentError, match="priority"):
            q.send(b"x", priority=bad)
    for name in ("", "x" * 256, "bad\nname"):
        with pytest.raises(postbox.InvalidArgumentError):
            tmp_store.queue(name)
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("q", max_deliveries=0)
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("q", lock_duration=0)
    with pytest.raises(postbox.InvalidArgumentError):
        q.dead_letters.send(b"x")  # a dead-letter queue takes no sends


def test_config_error(store_path: Path) -> None:
    with pytest.raises(postbox.ConfigError):
        postbox.Store(store_path, durability="none", multi_process=True)
    with pytest.raises(postbox.ConfigError):
        postbox.Store(store_path, poll_interval=(0.5, 0.1))


def test_io_error(tmp_path: Path) -> None:
    with pytest.raises(postbox.IoError) as info:
        postbox.Store(tmp_path / "missing-dir" / "x.postbox")
    assert isinstance(info.value, OSError) and info.value.errno == 2


def test_not_a_store(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("these are not the bytes you are looking for\n" * 100)
    with pytest.raises(postbox.NotAStoreError):
        postbox.Store(p)


def _corrupt(store_path: Path, tmp_path: Path) -> Path:
    with postbox.Store(store_path) as store:
        q = store.queue("q")
        q.send_batch([os.urandom(3000) for _ in range(100)])
    gc.collect()
    data = bytearray(store_path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 8192] = b"\xff" * 8192
    bad = tmp_path / "corrupt.postbox"
    bad.write_bytes(bytes(data))
    return bad


def test_corrupted_store(store_path: Path, tmp_path: Path) -> None:
    with pytest.raises(postbox.StoreCorruptedError):
        postbox.Store(_corrupt(store_path, tmp_path))


def test_truncated_store(store_path: Path, tmp_path: Path) -> None:
    with postbox.Store(store_path) as store:
        store.queue("q").send_batch([os.urandom(3000) for _ in range(100)])
    data = store_path.read_bytes()
    cut = tmp_path / "cut.postbox"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(postbox.StoreError):
        postbox.Store(cut)


def test_already_open(store_path: Path) -> None:
    with postbox.Store(store_path):
        with pytest.raises(postbox.AlreadyOpenError) as e:
            postbox.Store(store_path)
        # Advice in Python's terms.
        assert "this process" in str(e.value) and "postbox.Store object" in str(e.value)


def test_already_open_in_another_process_advises_in_python_terms(store_path: Path) -> None:
    postbox.Store(store_path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(store_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"open\n"
        with pytest.raises(postbox.AlreadyOpenError) as e:
            postbox.Store(store_path)
        assert "multi_process=True" in str(e.value), str(e.value)
        assert "multi_process(true)" not in str(e.value), str(e.value)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


HOLD = """
import sys, postbox
with postbox.Store(sys.argv[1]):
    print("open", flush=True)
    sys.stdin.read()
"""


def test_closed(store_path: Path) -> None:
    store = postbox.Store(store_path)
    q = store.queue("q")
    q.send(b"x")
    m = q.receive(timeout=1)
    tx = store.transaction()
    store.close()
    for call in (lambda: q.send(b"y"), lambda: q.receive(timeout=0), lambda: len(q), q.peek,
                 q.stats, m.complete, store.queues, lambda: store.queue("q"),
                 lambda: tx.receive(q, timeout=0)):
        with pytest.raises(postbox.ClosedError):
            call()
    # Closing releases the file although handles are still alive.
    with postbox.Store(store_path) as again:
        assert len(again.queue("q")) == 1


def test_message_not_found_class_exists() -> None:
    err = postbox.MessageNotFoundError("message 3 does not exist")
    assert isinstance(err, LookupError) and isinstance(err, postbox.PostboxError)
