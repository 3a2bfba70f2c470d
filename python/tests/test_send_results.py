"""Send results: a duplicate says so and returns the original id; a transaction's send
returns the id its message will have."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import postbox


def test_a_duplicate_send_reports_the_original_id(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", dedup_window=60)
    first = q.send_checked(b"a", message_key="k", label="first")
    assert first == postbox.Sent(first.id, False) and not first.duplicate
    again = q.send_checked(b"b", message_key="k")
    assert again.duplicate and again.id == first.id
    assert q.send(b"c", message_key="k") == first.id, "send returns the original id too"
    assert len(q) == 1
    m = q.receive(timeout=1)
    assert (m.id, m.body, m.label) == (first.id, b"a", "first")
    other = q.send_checked(b"d", message_key="other")
    assert not other.duplicate and other.id > first.id
    plain = tmp_store.queue("plain")  # no dedup window: keys are not remembered
    a, b = plain.send_checked(b"a", message_key="k"), plain.send_checked(b"a", message_key="k")
    assert not a.duplicate and not b.duplicate and a.id != b.id


def test_sent_is_a_small_value(tmp_store: postbox.Store) -> None:
    s = postbox.Sent(7, True)
    assert (s.id, s.duplicate) == (7, True)
    assert postbox.Sent(7) == postbox.Sent(7, duplicate=False) != s
    assert hash(postbox.Sent(7, True)) == hash(s) and len({s, postbox.Sent(7, True)}) == 1
    assert repr(s) == "Sent(id=7, duplicate=True)"
    assert s._asdict() == {"id": 7, "duplicate": True}
    with pytest.raises(AttributeError):
        s.id = 8  # type: ignore[misc]
    q = tmp_store.queue("q")
    with pytest.raises(TypeError):
        q.send_checked(b"x", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        q.send_checked(b"x", body=b"y")  # type: ignore[misc]
    sent = q.send_checked(
        "text", label="l", priority=6, properties={"p": b"v"}, correlation_id="c", ttl=60
    )
    m = q.receive(timeout=1)
    assert (m.id, m.text, m.label, m.priority, m.properties, m.correlation_id) == (
        sent.id, "text", "l", 6, {"p": b"v"}, "c",
    )
    assert m.expires_at is not None


def test_a_batch_says_which_messages_were_duplicates(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", dedup_window=60)
    first = q.send(b"a", message_key="k1")
    sent = q.send_batch_checked(
        [{"body": b"x", "message_key": "k1"}, b"no key", {"body": b"y", "message_key": "k2"}]
    )
    assert [s.duplicate for s in sent] == [True, False, False]
    assert sent[0].id == first
    assert len(q) == 3
    with pytest.raises(TypeError):
        q.send_batch_checked([{"body": b"x", "colour": "red"}])


def test_a_transactions_send_returns_the_id_its_message_will_have(
    tmp_store: postbox.Store,
) -> None:
    q = tmp_store.queue("q")
    aborted = tmp_store.transaction()
    lost = aborted.send(q, b"never")
    aborted.abort()
    with tmp_store.transaction() as tx:
        ids = [tx.send(q, f"m{i}") for i in range(3)]
        assert len(q) == 0, "stored only by the commit"
    assert lost not in ids and ids == sorted(ids)
    assert [(m.id, m.body) for m in q.browse()] == [(ids[i], f"m{i}".encode()) for i in range(3)]
    assert q.get(lost) is None
    # A message sent later outside the transaction may still take its place after them.
    tx = tmp_store.transaction()
    reserved = tx.send(q, b"reserved first")
    later = q.send(b"sent later, committed first")
    tx.commit()
    assert reserved < later
    assert [m.id for m in q.browse()][-2:] == [reserved, later], "placed by the reserved id"


def test_duplicates_inside_a_transaction(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", dedup_window=60)
    first = q.send_checked(b"a", message_key="k")
    with tmp_store.transaction() as tx:
        t = tx.send_checked(q, b"a", message_key="k")
        assert t.duplicate and t.id == first.id
        n = tx.send_checked(q, b"b", message_key="k2")
        n2 = tx.send_checked(q, b"b again", message_key="k2")
        assert not n.duplicate and n2.duplicate and n2.id == n.id
        assert tx.send(q, b"b thrice", message_key="k2") == n.id
        with pytest.raises(TypeError):
            tx.send_checked(q, b"x", colour="red")  # type: ignore[call-arg]
    assert len(q) == 2
    got = q.get(n.id)
    assert got is not None and got.body == b"b"
    # An aborted transaction's key is not remembered.
    with tmp_store.transaction() as tx:
        tx.send_checked(q, b"c", message_key="k3")
        tx.abort()
    assert not q.send_checked(b"c", message_key="k3").duplicate


SENDER = textwrap.dedent(
    """
    import sys, postbox
    with postbox.Store(sys.argv[1], multi_process=True) as store:
        s = store.queue("q").send_checked(b"again", message_key="k")
        print(s.id, s.duplicate)
    """
)


@pytest.mark.timeout(60)
def test_another_process_learns_the_original_id(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        q = store.queue("q", dedup_window=60)
        first = q.send(b"first", message_key="k")
        out = subprocess.run(
            [sys.executable, "-c", SENDER, str(store_path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert out == [str(first), "True"]
        assert len(q) == 1
