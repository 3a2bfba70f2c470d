"""File systems that refuse postbox, beside a full one (test_disk_full.py): permission denied
and a read-only file system. Each refusal raises ``postbox.IoError`` (an ``OSError``) whose
``errno`` says which (EACCES, EROFS) and whose message names the file; the refused open
changes nothing, and once the refusal is lifted everything acknowledged is there.

Permission checks do not apply to root, so as root the opener is a forked child that becomes
user nobody; otherwise this user opens files it made unreadable or unwritable. The read-only
file system is a tmpfs remounted read-only (root only; skipped elsewhere).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import postbox

NOBODY = 65534
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def seed(path: Path) -> list[bytes]:
    """Sends 10 messages and completes 3; returns the bodies left."""
    with postbox.Store(path) as store:
        q = store.queue("q")
        for i in range(10):
            q.send(f"m{i}".encode())
        for _ in range(3):
            q.receive(timeout=1).complete()
    return [f"m{i}".encode() for i in range(3, 10)]


def bodies(path: Path) -> list[bytes]:
    with postbox.Store(path) as store:
        return [m.body for m in store.queue("q").browse()]


def open_as_opener(path: Path, write_ahead_log: bool = True) -> tuple[int, str]:
    """Opens the store and sends one message as the opener (nobody when root); returns
    (0, "") on success or (errno, message) of the IoError raised."""

    def attempt() -> tuple[int, str]:
        try:
            with postbox.Store(path, write_ahead_log=write_ahead_log) as store:
                store.queue("q").send(b"from the opener")
        except postbox.IoError as e:
            return (e.errno or -1, str(e))
        return (0, "")

    if not ROOT:
        return attempt()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, try, report through the pipe
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            err, text = attempt()
            os.write(write, f"{err} {text}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, answer
    err, _, text = answer.partition(" ")
    return (int(err), text)


@pytest.fixture
def locked_dir() -> Iterator[Path]:
    """A directory the opener will be able to enter (right under the system's temporary
    directory: pytest's own is private to this user) but not write once `lock`ed."""
    d = Path(tempfile.mkdtemp(prefix="postbox-refusals-"))
    yield d
    d.chmod(0o700)
    shutil.rmtree(d, ignore_errors=True)


def lock(d: Path) -> None:
    d.chmod(0o755 if ROOT else 0o555)


@pytest.mark.parametrize("log", [True, False])
def test_a_store_the_opener_may_not_read_or_write_raises_eacces(
    locked_dir: Path, log: bool
) -> None:
    path = locked_dir / "s.postbox"
    left = seed(path)
    size = path.stat().st_size
    lock(locked_dir)
    if not ROOT:
        path.chmod(0o000)  # as root: another user's 0600 file
    err, text = open_as_opener(path, log)
    assert err == errno.EACCES and str(path) in text
    if ROOT:
        os.chown(path, NOBODY, NOBODY)
    path.chmod(0o400)
    err, text = open_as_opener(path, log)
    assert err == errno.EACCES and str(path) in text
    if ROOT:
        os.chown(path, 0, 0)
    path.chmod(0o600)
    locked_dir.chmod(0o700)
    assert path.stat().st_size == size
    assert bodies(path) == left


def test_a_directory_the_opener_may_not_write_refuses_a_new_store_and_the_log(
    locked_dir: Path,
) -> None:
    path = locked_dir / "s.postbox"
    left = seed(path)
    lock(locked_dir)
    err, _ = open_as_opener(locked_dir / "new.postbox")
    assert err == errno.EACCES
    assert not (locked_dir / "new.postbox").exists()
    if ROOT:
        os.chown(path, NOBODY, NOBODY)
    err, text = open_as_opener(path)
    assert err == errno.EACCES and "write-ahead log" in text
    assert open_as_opener(path, write_ahead_log=False) == (0, "")
    locked_dir.chmod(0o700)
    assert bodies(path) == [*left, b"from the opener"]
    assert sorted(p.name for p in locked_dir.iterdir()) == ["s.postbox"]


@pytest.mark.parametrize("small_fs", ["16m"], indirect=True)
def test_a_read_only_file_system_raises_erofs_and_keeps_everything(small_fs: Path) -> None:
    path = small_fs / "s.postbox"
    left = seed(path)
    ro = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True)
    assert ro.returncode == 0, ro.stderr
    try:
        for log in (True, False):
            with pytest.raises(postbox.IoError) as e:
                postbox.Store(path, write_ahead_log=log)
            assert e.value.errno == errno.EROFS
            assert isinstance(e.value, OSError)
    finally:
        rw = subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], capture_output=True)
    assert rw.returncode == 0, rw.stderr
    assert bodies(path) == left
