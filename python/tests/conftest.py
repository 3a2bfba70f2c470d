"""Shared fixtures: a fresh store per test in pytest's temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import postbox


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "test.postbox"


@pytest.fixture
def tmp_store(store_path: Path) -> Iterator[postbox.Store]:
    """A durable single-process store, closed after the test."""
    with postbox.Store(store_path) as store:
        yield store


@pytest.fixture
def queue(tmp_store: postbox.Store) -> postbox.Queue:
    return tmp_store.queue("jobs")


PYTHON = sys.executable


def wait_for(predicate: object, timeout: float = 10.0) -> None:
    """Polls `predicate` until true; the timeout is a failure guard, not a way to order events."""
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


@pytest.fixture
def small_fs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A small tmpfs mounted for the test (size by indirect parametrization, default 8m);
    skipped without root."""
    size = getattr(request, "param", "8m")
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
