"""Application tables: rows written on their own, or in the same commit as messages (outbox).

Knob: POSTBOX_OUTBOX_ROUNDS (processes killed at a random moment, default 3).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import postbox

ROUNDS = int(os.environ.get("POSTBOX_OUTBOX_ROUNDS", "3"))


def test_a_store_table_reads_and_writes_rows(tmp_store: postbox.Store) -> None:
    t = tmp_store.table("orders")
    assert t.name == "orders"
    assert t.get(b"42") is None and t.get(b"42", b"none") == b"none"
    t.put(b"42", b"paid")
    t.put("43", "new")  # str keys and values are stored as UTF-8
    t.put(bytearray(b"41"), memoryview(b"shipped"))
    assert t.get(b"43") == b"new" and t.get("41") == b"shipped"
    assert t.range() == [(b"41", b"shipped"), (b"42", b"paid"), (b"43", b"new")]
    assert t.range(b"42") == [(b"42", b"paid"), (b"43", b"new")]
    assert t.range(b"41", b"43") == [(b"41", b"shipped"), (b"42", b"paid")]
    assert t.range(limit=1) == [(b"41", b"shipped")]
    assert t.range(b"5") == [] and t.range(limit=0) == []
    t.put(b"42", b"refunded")
    assert t.get(b"42") == b"refunded"
    t.delete(b"42")
    t.delete(b"never there")  # not an error
    assert t.get(b"42") is None
    # Mapping sugar.
    t[b"k"] = b"v"
    assert t[b"k"] == b"v" and b"k" in t and b"missing" not in t
    del t[b"k"]
    with pytest.raises(KeyError):
        t[b"k"]
    with pytest.raises(KeyError):
        del t[b"k"]
    # Tables are separate; rows stay when the store is reopened (below, through a new handle).
    assert tmp_store.table("other").range() == []
    assert tmp_store.table("orders").range() == [(b"41", b"shipped"), (b"43", b"new")]


def test_rows_are_durable(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        store.table("t").put(b"k", b"v")
    with postbox.Store(store_path) as store:
        assert store.table("t")[b"k"] == b"v"


def test_bad_names_keys_and_values(tmp_store: postbox.Store) -> None:
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.table("")
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.table("n" * 1025)
    t = tmp_store.table("t")
    t.put(b"k" * 1024, b"v" * (1 << 20))  # the limits themselves
    with pytest.raises(postbox.InvalidArgumentError):
        t.put(b"k" * 1025, b"v")
    with pytest.raises(postbox.InvalidArgumentError):
        t.put(b"k", b"v" * ((1 << 20) + 1))
    with pytest.raises(postbox.InvalidArgumentError):
        t.get(b"k" * 1025)
    for wrong in (42, None, ["k"]):
        with pytest.raises(TypeError):
            t.put(wrong, b"v")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            t.put(b"k", wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        t[1]  # type: ignore[index]
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.transaction().table("")


def test_a_str_utf8_cannot_hold_is_a_unicode_error(tmp_store: postbox.Store) -> None:
    # Lone surrogates: UnicodeEncodeError, as for a queue name or a body, never a TypeError
    # that says "str, not str". Nothing is written.
    bad = "k\udc80"
    with pytest.raises(UnicodeEncodeError):
        tmp_store.queue(bad)
    with pytest.raises(UnicodeEncodeError):
        tmp_store.queue("q").send(bad)
    with pytest.raises(UnicodeEncodeError):
        tmp_store.table(bad)
    t = tmp_store.table("t")
    with tmp_store.transaction() as tx:
        tt = tx.table("t")
        for table in (t, tt):
            with pytest.raises(UnicodeEncodeError):
                table.put(bad, b"v")
            with pytest.raises(UnicodeEncodeError):
                table.put(b"k", bad)
            with pytest.raises(UnicodeEncodeError):
                table.get(bad)
            with pytest.raises(UnicodeEncodeError):
                table[bad]
            with pytest.raises(UnicodeEncodeError):
                bad in table
            with pytest.raises(UnicodeEncodeError):
                table.delete(bad)
            with pytest.raises(UnicodeEncodeError):
                table.range(bad)
    assert t.range() == []


def test_an_aborted_outbox_transaction_leaves_neither_row_nor_message(
    tmp_store: postbox.Store,
) -> None:
    shipping = tmp_store.queue("shipping")
    orders = tmp_store.table("orders")
    with pytest.raises(RuntimeError):
        with tmp_store.transaction() as tx:
            t = tx.table("orders")
            t[b"42"] = b"paid"
            assert t[b"42"] == b"paid" and t.get(b"42") == b"paid", "reads see own writes"
            assert orders.get(b"42") is None, "others see nothing before the commit"
            tx.send(shipping, b"ship 42")
            raise RuntimeError("payment service down")
    assert orders.get(b"42") is None and len(shipping) == 0
    tx = tmp_store.transaction()
    tx.table("orders").put(b"42", b"paid")
    tx.send(shipping, b"ship 42")
    tx.abort()
    assert orders.get(b"42") is None and len(shipping) == 0
    # Committed: both, the row holding the id the send reserved.
    with tmp_store.transaction() as tx:
        mid = tx.send(shipping, b"ship 42")
        tx.table("orders")[b"42"] = str(mid)
    assert orders[b"42"] == str(mid).encode()
    peeked = shipping.peek()
    assert peeked is not None and peeked.id == mid


def test_the_inbox_records_a_message_with_its_completion(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("notifications")
    q.send(b"user 42")
    with tmp_store.transaction() as tx:
        m = tx.receive(q, timeout=1)
        seen = tx.table("inbox")
        assert f"seen-{m.id}" not in seen
        seen[f"seen-{m.id}"] = b""
    assert tmp_store.table("inbox").range() == [(f"seen-{m.id}".encode(), b"")]
    assert len(q) == 0 and q.stats().locked == 0


def test_a_transaction_table_merges_its_writes_over_the_store(tmp_store: postbox.Store) -> None:
    t = tmp_store.table("t")
    for k in (b"a", b"b", b"c", b"d"):
        t.put(k, b"stored")
    with tmp_store.transaction() as tx:
        tt = tx.table("t")
        assert tt.name == "t"
        tt.delete(b"b")
        del tt[b"c"]
        tt[b"bb"] = b"new"
        tt[b"d"] = b"changed"
        with pytest.raises(KeyError):
            del tt[b"c"]  # gone as this transaction sees it
        tt.delete(b"c")  # still no error
        assert tt.range() == [(b"a", b"stored"), (b"bb", b"new"), (b"d", b"changed")]
        assert tt.range(limit=2) == [(b"a", b"stored"), (b"bb", b"new")]
        assert tt.range(b"b", b"d") == [(b"bb", b"new")]
        assert tt.get(b"c", b"default") == b"default"
        assert t.range(limit=10) == [(k, b"stored") for k in (b"a", b"b", b"c", b"d")]
        # Two views of one table in one transaction see each other's writes.
        assert tx.table("t")[b"bb"] == b"new"
    assert t.range() == [(b"a", b"stored"), (b"bb", b"new"), (b"d", b"changed")]
    assert tx.state == "committed"
    with pytest.raises(postbox.InvalidArgumentError):
        tt.get(b"a")
    with pytest.raises(postbox.InvalidArgumentError):
        tx.table("t")


def test_a_dropped_transaction_takes_its_rows_with_it(tmp_store: postbox.Store) -> None:
    tx = tmp_store.transaction()
    tt = tx.table("t")
    tt.put(b"k", b"v")
    del tx  # dropping an uncommitted transaction aborts it
    with pytest.raises(postbox.InvalidArgumentError):
        tt.put(b"k", b"v")
    assert tmp_store.table("t").get(b"k") is None


KILLED_INSIDE = textwrap.dedent(
    """
    import os, signal, sys, postbox
    path, point = sys.argv[1], sys.argv[2]
    store = postbox.Store(path, multi_process=True)
    shipping = store.queue("shipping")
    def die(here):
        if here == point:
            os.kill(os.getpid(), signal.SIGKILL)
    with store.transaction() as tx:
        tx.table("orders").put(b"42", b"paid")
        die("after row")
        tx.send(shipping, b"ship 42")
        die("after send")
        tx.commit()
        die("after commit")
    """
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("point", ["after row", "after send", "after commit"])
def test_a_process_killed_inside_the_transaction(store_path: Path, point: str) -> None:
    with postbox.Store(store_path, multi_process=True) as store:
        store.queue("shipping")
    child = subprocess.run([sys.executable, "-c", KILLED_INSIDE, str(store_path), point])
    assert child.returncode == -signal.SIGKILL
    with postbox.Store(store_path) as store:
        row = store.table("orders").get(b"42")
        messages = len(store.queue("shipping"))
        if point == "after commit":
            assert (row, messages) == (b"paid", 1)
        else:
            assert (row, messages) == (None, 0)


OUTBOX_LOOP = textwrap.dedent(
    """
    import sys, postbox
    store = postbox.Store(sys.argv[1], multi_process=True)
    shipping = store.queue("shipping")
    i = 0
    while True:
        order = f"{sys.argv[2]}-{i}"
        with store.transaction() as tx:
            mid = tx.send(shipping, order)
            tx.table("orders").put(order, str(mid))
        if i == 0:
            print("started", flush=True)
        i += 1
    """
)


@pytest.mark.timeout(120)
def test_a_process_killed_at_any_moment_leaves_both_or_neither(store_path: Path) -> None:
    rng = random.Random()
    with postbox.Store(store_path, multi_process=True) as store:
        store.queue("shipping")
    for r in range(ROUNDS):
        child = subprocess.Popen(
            [sys.executable, "-c", OUTBOX_LOOP, str(store_path), str(r)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "started"
            time.sleep(rng.uniform(0.05, 0.3))  # a random moment, most likely mid-commit
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    with postbox.Store(store_path) as store:
        rows = {k.decode(): int(v) for k, v in store.table("orders").range()}
        messages = {m.text: m.id for m in store.queue("shipping").browse()}
        assert len(rows) >= ROUNDS, "every child committed orders"
        # Every order row holds the id of its message, and every message has its row.
        assert rows == messages
