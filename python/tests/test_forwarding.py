"""Auto-forwarding (``forward_to``), dead-letter forwarding (``forward_dead_letters_to``) and
journals: options set, read back and cleared like the others."""

from __future__ import annotations

from pathlib import Path

import pytest

import postbox


def bodies(q: postbox.Queue) -> list[bytes]:
    return [m.body for m in q.browse()]


def test_sends_follow_a_forward_to_chain(tmp_store: postbox.Store) -> None:
    end = tmp_store.queue("end")
    mid = tmp_store.queue("mid", forward_to="end")
    front = tmp_store.queue("front", forward_to=mid)  # a Queue names itself
    assert front.options["forward_to"] == "mid" and mid.options["forward_to"] == "end"
    id_ = front.send(b"hello")
    assert (len(front), len(mid)) == (0, 0)
    got = end.get(id_)
    assert got is not None and got.body == b"hello"
    with tmp_store.transaction() as tx:
        tx.send(front, b"in a tx")
    assert bodies(end) == [b"hello", b"in a tx"]
    # Loops, a queue forwarding to itself and missing targets are refused; nothing changes.
    for name, target in [("end", "front"), ("end", "end"), ("front", "nowhere")]:
        with pytest.raises(postbox.InvalidArgumentError):
            tmp_store.queue(name, forward_to=target)
    assert end.options["forward_to"] is None and front.options["forward_to"] == "mid"
    with pytest.raises(TypeError, match="forward_to"):
        tmp_store.queue("front", forward_to=5)  # type: ignore[arg-type]
    # Cleared, a queue keeps its own messages again.
    tmp_store.queue("front", forward_to=None)
    assert front.options["forward_to"] is None
    front.send(b"mine")
    assert bodies(front) == [b"mine"]


def test_dead_letters_of_many_queues_collect_in_one_place(tmp_store: postbox.Store) -> None:
    all_dead = tmp_store.queue("all-dead")
    a = tmp_store.queue("a", max_deliveries=1, forward_dead_letters_to="all-dead")
    b = tmp_store.queue("b", max_deliveries=1, forward_dead_letters_to=all_dead)
    assert a.options["forward_dead_letters_to"] == "all-dead"
    assert b.options["forward_dead_letters_to"] == "all-dead"
    a.send(b"from a")
    b.send(b"from b")
    a.receive(timeout=0).abandon()
    b.receive(timeout=0).dead_letter("Bad", "refused")
    assert a.stats().dead_lettered == 0 and b.stats().dead_lettered == 0
    got = []
    for m in all_dead.consume(timeout=0):
        got.append((m.body, m.dead_letter_reason, m.dead_letter_source))
        m.complete()
    assert got == [
        (b"from a", postbox.REASON_MAX_DELIVERIES, "a"),
        (b"from b", "Bad", "b"),
    ]
    tmp_store.queue("a", forward_dead_letters_to=None)
    assert a.options["forward_dead_letters_to"] is None
    a.send(b"again")
    a.receive(timeout=0).dead_letter("Own")
    assert a.stats().dead_lettered == 1 and len(all_dead) == 0


def test_a_journal_keeps_completed_messages_up_to_its_quota(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        q = store.queue("orders", journal=2)
        assert q.options["journal"] == 2
        for n in range(1, 4):
            q.send(f"o{n}")
        for m in q.consume(timeout=0):
            m.complete()
        s = q.stats()
        assert (s.active, s.bytes) == (0, 0)
        journal = q.journal
        assert journal.name != "orders"
        assert bodies(journal) == [b"o2", b"o3"]  # the oldest was dropped to keep the quota
        assert journal.stats().active == 2
    with postbox.Store(store_path) as store:
        q = store.queue("orders")
        journal = q.journal
        assert len(journal) == 2
        with pytest.raises(postbox.InvalidArgumentError):
            store.queue("plain").journal
        # Turned off, completions remove again; what the journal holds stays until purged.
        store.queue("orders", journal=None)
        assert q.options["journal"] is None
        q.send(b"gone")
        q.receive(timeout=0).complete()
        assert journal.purge() == 2 and len(journal) == 0
        with pytest.raises(postbox.InvalidArgumentError):
            store.queue("orders", journal=-1)
        with pytest.raises(TypeError):
            store.queue("orders", journal="2")  # type: ignore[arg-type]
        assert store.delete_queue("orders")
        with pytest.raises(postbox.QueueNotFoundError):
            len(journal)


def test_options_round_trip(tmp_store: postbox.Store) -> None:
    tmp_store.queue("target")
    q = tmp_store.queue(
        "q",
        requires_session=True,
        forward_dead_letters_to="target",
        journal=100,
        max_deliveries=3,
    )
    o = q.options
    assert o["requires_session"] is True
    assert o["forward_to"] is None
    assert o["forward_dead_letters_to"] == "target"
    assert o["journal"] == 100
    assert o["max_deliveries"] == 3
    # Opening with what was read back changes nothing, and neither does opening without options.
    back = {k: v for k, v in o.items()}
    assert tmp_store.queue("q", **back).options == o
    assert tmp_store.queue("q").options == o
    # One option changes, the others stay.
    assert tmp_store.queue("q", journal=5).options == {**o, "journal": 5}
    # A subscription takes the same options.
    sub = tmp_store.topic("t").subscribe("s", journal=3, forward_dead_letters_to="target")
    assert (sub.options["journal"], sub.options["forward_dead_letters_to"]) == (3, "target")
