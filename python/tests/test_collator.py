"""Collators: out-of-order series released in order, duplicates recognised, gaps reported, and
nothing lost or duplicated when the producer is killed with SIGKILL between arrivals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import postbox


def bodies(q: postbox.Queue) -> list[str]:
    out: list[str] = []
    while True:
        try:
            m = q.receive(timeout=0)
        except postbox.Empty:
            return out
        out.append(m.text)
        m.complete()


def part(c: postbox.Collator, series: str, n: int, **kw: object) -> postbox.Collated:
    return c.send(f"{series}:{n}", group=series, sequence=n, **kw)  # type: ignore[arg-type]


def test_out_of_order_arrival_is_released_in_order(tmp_store: postbox.Store) -> None:
    dest = tmp_store.queue("ordered")
    c = tmp_store.collator("ordered-in", dest)
    assert (c.name, c.destination.name) == ("ordered-in", "ordered")
    assert repr(c) == '<postbox.Collator "ordered-in" -> "ordered">'
    released = []
    for n in (1, 2, 3, 5, 6, 4):
        got = part(c, "s", n)
        assert got.duplicate is False
        released.append(len(got.released))
        if n == 3:
            assert len(dest) == 3, "1, 2, 3 are out at once"
        if n == 6:
            assert c.held() == 2
            [gap] = c.incomplete()
            assert (gap.series, gap.next, gap.length, gap.held) == ("s", 4, None, [5, 6])
            assert repr(gap) == 'SeriesGap(series="s", next=4, length=None, held=[5, 6])'
    assert released == [1, 1, 1, 0, 0, 3]
    assert got.released == sorted(got.released), "ids follow the series"
    assert c.held() == 0
    assert bodies(dest) == [f"s:{n}" for n in range(1, 7)]


def test_gaps_are_reported_and_duplicates_recognised(tmp_store: postbox.Store) -> None:
    dest = tmp_store.queue("d")
    c = tmp_store.collator("c", dest)
    part(c, "a", 1, series_length=4)
    part(c, "a", 3)
    held = part(c, "a", 4)
    assert held.released == [] and not held.duplicate
    part(c, "b", 2, last=True)
    gaps = c.incomplete()
    assert [(g.series, g.next, g.length, g.held) for g in gaps] == [
        ("a", 2, 4, [3, 4]),
        ("b", 1, 2, [2]),
    ]
    # Resending what was released or is held stores nothing.
    again = part(c, "a", 1)
    assert again.duplicate and again.released == []
    assert repr(again) == "Collated(released=[], duplicate=True)"
    assert part(c, "a", 4).duplicate
    # Beyond the declared end, zero, a contradicting length: refused.
    for n, kw in ((5, {}), (0, {}), (2, {"series_length": 3})):
        with pytest.raises(postbox.InvalidArgumentError):
            part(c, "a", n, **kw)
    with pytest.raises(TypeError):
        c.send("x", sequence=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        c.send("x", group="g")  # type: ignore[call-arg]
    out = part(c, "a", 2, label="two", properties={"k": "v"})
    assert len(out.released) == 3 and out.released == sorted(out.released)
    first = dest.receive(timeout=0)
    assert first.text == "a:1" and first.properties["postbox.series_length"] == "4"
    first.complete()
    second = dest.receive(timeout=0)
    assert (second.text, second.label, second.group, second.sequence) == ("a:2", "two", "a", 2)
    assert second.properties["k"] == "v"
    second.complete()
    assert bodies(dest) == ["a:3", "a:4"]
    assert [g.series for g in c.incomplete()] == ["b"]
    assert part(c, "a", 3).duplicate, "a completed series remembers what it released"


def test_a_contradicting_resend_is_refused_and_a_finished_series_can_be_forgotten(
    tmp_store: postbox.Store,
) -> None:
    dest = tmp_store.queue("done")
    c = tmp_store.collator("parts", dest)
    part(c, "po-1", 1, series_length=2)
    part(c, "po-1", 2)
    assert bodies(dest) == ["po-1:1", "po-1:2"]
    # The same number with another length is not the same message: refused.
    with pytest.raises(postbox.InvalidArgumentError):
        part(c, "po-1", 1, series_length=3)
    with pytest.raises(postbox.InvalidArgumentError):
        part(c, "po-1", 1, last=True)
    assert part(c, "po-1", 1, series_length=2).duplicate
    # A finished series is remembered: po-1 #1 is a duplicate until the series is forgotten.
    assert part(c, "po-1", 1).duplicate
    assert c.forget("po-1") is True
    assert c.forget("po-1") is False
    again = part(c, "po-1", 1, last=True)
    assert not again.duplicate and len(again.released) == 1
    assert bodies(dest) == ["po-1:1"]
    # Not while it holds messages: they would be lost.
    part(c, "po-2", 2)
    with pytest.raises(postbox.InvalidArgumentError):
        c.forget("po-2")
    assert c.held() == 1


def test_names_restart_and_deletion(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        dest = store.queue("d")
        c = store.collator("c", dest)
        for n in (2, 3):
            assert part(c, "s", n).released == []
        other = store.queue("other")
        with pytest.raises(postbox.InvalidArgumentError, match='into queue "d", not "other"'):
            store.collator("c", other)  # a collator keeps its destination
        with pytest.raises(postbox.InvalidArgumentError, match='"c" is a collator, not a queue'):
            store.queue("c")
        with pytest.raises(postbox.InvalidArgumentError, match='"c" is a collator, not a topic'):
            store.topic("c")
        with pytest.raises(postbox.InvalidArgumentError):
            store.collator("x", dest.dead_letters)
    with postbox.Store(store_path) as store:
        dest = store.queue("d")
        c = store.collator("c", dest)
        assert c.incomplete()[0].held == [2, 3]
        assert len(part(c, "s", 1).released) == 3
        assert bodies(dest) == ["s:1", "s:2", "s:3"]
        part(c, "t", 2)
        assert store.delete_queue("c") is True
        with pytest.raises(postbox.QueueNotFoundError):
            part(c, "t", 1)
        with pytest.raises(postbox.QueueNotFoundError):
            c.held()
        assert dest.stats().bytes == 0


PRODUCER = textwrap.dedent(
    """
    import sys, time, postbox
    store = postbox.Store(sys.argv[1])
    dest = store.queue("ordered")
    c = store.collator("ordered-in", dest)
    released = [len(c.send(f"s:{n}", group="s", sequence=n).released) for n in (1, 2, 3, 5, 6)]
    print("sent", *released, flush=True)
    time.sleep(120)
    """
)


@pytest.mark.timeout(120)
def test_a_sigkill_between_arrivals_changes_nothing(store_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, str(store_path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    try:
        line = child.stdout.readline().split()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert line == ["sent", "1", "1", "1", "0", "0"]
    assert child.returncode == -signal.SIGKILL

    with postbox.Store(store_path) as store:
        dest = store.queue("ordered")
        c = store.collator("ordered-in", dest)
        assert len(dest) == 3
        assert c.held() == 2
        assert c.incomplete()[0].held == [5, 6]
        assert part(c, "s", 5).duplicate, "a producer that retries after the crash"
        assert len(part(c, "s", 4).released) == 3
        assert bodies(dest) == [f"s:{n}" for n in range(1, 7)]
        assert c.held() == 0
