"""Oversize fields are refused before they reach the file; long descriptions are cut."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import postbox

BIG = 5_000_000
TOO_LARGE = (postbox.MessageTooLargeError, postbox.InvalidArgumentError)
GROWTH = 256 * 1024
"""How much the file may grow while every oversize send is refused (page allocation noise)."""


def oversize_sends(q: postbox.Queue, tx: postbox.Transaction) -> dict[str, object]:
    s = "x" * BIG
    return {
        "body": lambda: q.send(b"x" * BIG),
        "label": lambda: q.send(b"x", label=s),
        "content_type": lambda: q.send(b"x", content_type=s),
        "correlation_id": lambda: q.send(b"x", correlation_id=s),
        "reply_to": lambda: q.send(b"x", reply_to=s),
        "message_key": lambda: q.send(b"x", message_key=s),
        "group": lambda: q.send(b"x", group=s),
        "property key": lambda: q.send(b"x", properties={s: "v"}),
        "property str": lambda: q.send(b"x", properties={"k": s}),
        "property bytes": lambda: q.send(b"x", properties={"k": s.encode()}),
        "batch label": lambda: q.send_batch([b"ok", {"body": b"x", "label": s}]),
        "batch property": lambda: q.send_batch([b"ok", {"body": b"x", "properties": {"k": s}}]),
        "tx label": lambda: tx.send(q, b"x", label=s),
        "tx correlation_id": lambda: tx.send(q, b"x", correlation_id=s),
        "tx property": lambda: tx.send(q, b"x", properties={"k": s.encode()}),
    }


def test_oversize_fields_are_refused_and_the_file_stays_small(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        q = store.queue("small", max_message_size=100, max_bytes=1000)
        q.send(b"fits", label="a label")
        size_before = store_path.stat().st_size
        with store.transaction() as tx:
            for name, call in oversize_sends(q, tx).items():
                with pytest.raises(TOO_LARGE):
                    call()  # type: ignore[operator]
            tx.send(q, b"fits too")
        assert len(q) == 2
        assert q.stats().bytes < 1000
        for _ in range(3):  # a few more commits: nothing oversize got in between
            q.receive(timeout=1).abandon()
    gc.collect()
    assert store_path.stat().st_size <= size_before + GROWTH
    with postbox.Store(store_path) as again:
        assert sorted(m.body for m in again.queue("small").browse()) == [b"fits", b"fits too"]


def test_the_whole_message_counts_against_max_message_size(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("small", max_message_size=100)
    with pytest.raises(postbox.MessageTooLargeError) as info:
        q.send(b"x" * 50, label="l" * 60)
    assert info.value.size > 100 and info.value.max_size == 100
    with pytest.raises(postbox.MessageTooLargeError):
        q.send(b"x", properties={"k" * 50: "v" * 60})
    q.send(b"x" * 50, label="l" * 20)


def test_max_bytes_counts_whole_messages(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("quota", max_bytes=1000)
    with pytest.raises(postbox.QueueFullError):
        for _ in range(100):
            q.send(b"x", label="l" * 200)
    assert len(q) < 5


def test_bounds_of_text_properties(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    q.send(b"x", label="l" * 1024, properties={"k" * 256: "v" * 1024})
    with pytest.raises(TOO_LARGE):
        q.send(b"x", label="l" * 1025)
    with pytest.raises(TOO_LARGE):
        q.send(b"x", properties={"k" * 257: "v"})
    # User property values are bounded by the message size only.
    q.send(b"x", properties={"k": "v" * 5000})
    assert len(q) == 2


@pytest.mark.parametrize("char", ["d", "é", "😀"])
def test_a_huge_dead_letter_description_is_cut(tmp_store: postbox.Store, char: str) -> None:
    q = tmp_store.queue("q", max_message_size=100, max_bytes=1000)
    q.send(b"poison")
    description = char * (20_000_000 // len(char.encode()))
    q.receive(timeout=1).dead_letter("BadInput", description)
    dead = q.dead_letters.receive(timeout=1)
    cut = dead.dead_letter_description
    assert cut is not None
    assert 4096 - 4 < len(cut.encode()) <= 4096
    assert description.startswith(cut)
    dead.complete()


def test_a_processor_dead_letter_description_is_cut(queue: postbox.Queue) -> None:
    queue.send(b"poison")
    description = "d" * 20_000_000
    with postbox.Processor(queue, lambda m: m.dead_letter("BadInput", description), workers=1):
        dead = queue.dead_letters.receive(timeout=10)
    assert dead.dead_letter_description == "d" * 4096
    dead.complete()
