"""Sessions: each group of a queue that requires sessions goes, in send order and one message at
a time, to the one receiver holding its session; the session's state survives its locks and
commits with transactions; a session processor keeps every group in order."""

from __future__ import annotations

import os
import threading
import time
import traceback
from datetime import datetime, timezone

import pytest

import postbox
from conftest import wait_for


def session_queue(store: postbox.Store, name: str = "orders", **options: object) -> postbox.Queue:
    return store.queue(name, requires_session=True, **options)  # type: ignore[arg-type]


def test_a_group_in_order_one_message_at_a_time(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store)
    assert q.options["requires_session"] is True
    for step in ["1", "2", "3"]:
        q.send(step, group="order-7")
    with q.accept_session(timeout=0) as s:
        assert s.group == "order-7" and s.queue.name == "orders" and not s.released
        assert isinstance(s.locked_until, datetime)
        assert repr(s) == '<postbox.Session "order-7" of queue "orders">'
        first = s.receive(timeout=0)
        assert first.body == b"1" and first.group == "order-7"
        with pytest.raises(postbox.Empty):
            s.receive(timeout=0)  # one at a time
        with pytest.raises(postbox.Empty):
            s.receive(timeout=0.05)
        first.abandon()
        again = s.receive(timeout=0)
        assert (again.body, again.delivery_count) == (b"1", 2)
        again.complete()
        with s.receive(timeout=0) as second:  # completed on leaving the block
            assert second.body == b"2"
        third = s.receive(timeout=1)
        assert third.body == b"3"
        third.complete()
        before = s.locked_until
        assert before is not None and s.renew_lock() >= before
        with pytest.raises(postbox.Empty):
            s.receive(timeout=0)
    assert s.released and s.locked_until is None
    assert repr(s).endswith("released>")
    with pytest.raises(postbox.InvalidArgumentError, match="released"):
        s.receive(timeout=0)
    with pytest.raises(postbox.InvalidArgumentError):
        s.set_state(b"x")
    with pytest.raises(postbox.InvalidArgumentError):
        with s:
            pass
    s.release()  # again: harmless
    assert q.stats().active == 0


def test_refusals(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store)
    plain = tmp_store.queue("plain")
    assert plain.options["requires_session"] is False
    with pytest.raises(postbox.InvalidArgumentError):
        q.send(b"no group")
    q.send(b"x", group="g")
    with pytest.raises(postbox.InvalidArgumentError):
        q.receive(timeout=0)
    with pytest.raises(postbox.InvalidArgumentError):
        plain.accept_session(timeout=0)
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("orders", requires_session=False)  # fixed at creation
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("plain", requires_session=True)
    with pytest.raises(TypeError, match="bool"):
        tmp_store.queue("other", requires_session=1)  # type: ignore[arg-type]
    with pytest.raises(postbox.InvalidArgumentError):
        q.accept_session(timeout=0, group="")
    # Reopened without the option (or with the same value), it stays a session queue.
    assert tmp_store.queue("orders").options["requires_session"] is True
    assert session_queue(tmp_store).options["requires_session"] is True


def test_a_held_session_is_not_bypassed_by_id_or_correlation_id(tmp_store: postbox.Store) -> None:
    """Invariant 7: while receiver A works on group g's first message in its thread, another
    receiver cannot take g's second message by id or by correlation id, alone or in a
    transaction; A takes it when its turn comes."""
    q = session_queue(tmp_store)
    q.send(b"1", group="g", correlation_id="c-1")
    second = q.send(b"2", group="g", correlation_id="c-2")
    holding = threading.Event()
    done = threading.Event()
    got: list[bytes] = []
    errors: list[BaseException] = []

    def holder() -> None:
        try:
            with q.accept_session(timeout=5, group="g") as s:
                first = s.receive(timeout=5)
                holding.set()
                assert done.wait(10)
                with pytest.raises(postbox.Empty):
                    s.receive_by_id(second, timeout=0)  # one at a time
                first.complete()
                with s.receive_by_id(second, timeout=5) as m:
                    got.append(m.body)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=holder)
    t.start()
    assert holding.wait(10)
    with pytest.raises(postbox.InvalidArgumentError, match="requires sessions"):
        q.receive_by_id(second, timeout=1)
    with pytest.raises(postbox.InvalidArgumentError, match="accept a session"):
        q.receive_by_correlation_id("c-2", timeout=1)
    with tmp_store.transaction() as tx:
        with pytest.raises(postbox.InvalidArgumentError):
            tx.receive_by_id(q, second, timeout=0)
        with pytest.raises(postbox.InvalidArgumentError):
            tx.receive_by_correlation_id(q, "c-2", timeout=0)
    assert (q.stats().active, q.stats().locked) == (1, 1)
    done.set()
    t.join(10)
    assert not errors, errors
    assert got == [b"2"]
    assert len(q) == 0


def test_a_session_takes_its_deferred_messages_by_id_and_correlation_id(
    tmp_store: postbox.Store,
) -> None:
    q = session_queue(tmp_store)
    ids = [q.send(c.encode(), group="g", correlation_id=c) for c in "abc"]
    q.send(b"h", group="h", correlation_id="a")
    with q.accept_session(timeout=0, group="g") as s:
        s.receive(timeout=0).defer()
        b = s.receive(timeout=0)
        assert b.id == ids[1]
        with pytest.raises(postbox.Empty, match="not receivable"):
            s.receive_by_id(ids[2], timeout=0)  # c waits for b
        with pytest.raises(postbox.Empty):
            s.receive_by_correlation_id("c", timeout=0.02)
        a = s.receive_by_id(ids[0], timeout=0)  # deferred: while b is in hand
        assert (a.body, a.delivery_count) == (b"a", 2)
        a.abandon()  # stays deferred
        assert q.stats().deferred == 1
        a = s.receive_by_correlation_id("a", timeout=0)  # its own group's a, not h's
        assert a.id == ids[0]
        b.complete()
        c = s.receive(timeout=0)  # the deferred a in hand holds nothing up
        assert c.id == ids[2]
        a.complete()
        c.complete()
    with pytest.raises(postbox.InvalidArgumentError, match="released"):
        s.receive_by_id(ids[0], timeout=0)
    with pytest.raises(postbox.InvalidArgumentError, match="released"):
        s.receive_by_correlation_id("a", timeout=0)
    with q.accept_session(timeout=0) as other:
        assert other.group == "h"
        with pytest.raises(postbox.Empty):
            other.receive_by_id(ids[0], timeout=0)
        assert other.receive_by_correlation_id("a", timeout=0).body == b"h"


def test_a_group_on_a_plain_queue_is_just_a_property(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("plain")
    ids = [q.send(str(n), group="g", correlation_id=f"c{n}") for n in range(4)]
    m0, m1 = q.receive(timeout=0), q.receive(timeout=0)  # two of one group at once
    assert [m0.id, m1.id] == ids[:2]
    m3 = q.receive_by_id(ids[3], timeout=0)
    m2 = q.receive_by_correlation_id("c2", timeout=0)
    assert (m2.id, m3.group) == (ids[2], "g")
    for m in (m3, m1, m0, m2):
        m.complete()


def test_two_groups_go_to_two_receivers_in_threads(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store)
    for n in range(10):
        for g in ["a", "b"]:
            q.send(f"{g}{n}", group=g)
    both_accepted = threading.Barrier(2, timeout=10)
    got: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def receiver() -> None:
        try:
            with q.accept_session(timeout=5) as s:
                both_accepted.wait()  # neither releases before the other holds a session
                bodies = got.setdefault(s.group, [])
                while True:
                    try:
                        m = s.receive(timeout=0.2)
                    except postbox.Empty:
                        break
                    bodies.append(m.text)
                    m.complete()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=receiver) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert got == {g: [f"{g}{n}" for n in range(10)] for g in ["a", "b"]}


def test_a_held_session_is_not_handed_out_twice(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store)
    q.send(b"x", group="g")
    s = q.accept_session(timeout=0)
    with pytest.raises(postbox.Empty, match="held"):
        q.accept_session(timeout=0.05, group="g")
    with pytest.raises(postbox.Empty):
        q.accept_session(timeout=0)
    s.release()
    # A named session without messages can be accepted too.
    with q.accept_session(timeout=0, group="empty") as e:
        assert e.state is None
        with pytest.raises(postbox.Empty):
            e.receive(timeout=0)


def test_state_across_reaccept_and_transactions(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store)
    for n in ["1", "2"]:
        q.send(n, group="g")
    with q.accept_session(timeout=0) as s:
        assert s.state is None
        s.set_state(b"started")
        assert s.state == b"started"
    with q.accept_session(timeout=0, group="g") as s:
        assert s.state == b"started"
        # Committed with the completion ...
        m = s.receive(timeout=0)
        with tmp_store.transaction() as tx:
            tx.complete(m)
            tx.set_session_state(s, b"first")
            tx.set_session_state(s, bytearray(b"after 1"))  # the later call wins
            assert s.state == b"started"  # not before the commit
        assert s.state == b"after 1"
        # ... an abort leaves the state, and the message comes again.
        m = s.receive(timeout=0)
        tx = tmp_store.transaction()
        tx.complete(m)
        tx.set_session_state(s, None)
        tx.abort()
        assert s.state == b"after 1"
        m = s.receive(timeout=0)
        assert (m.body, m.delivery_count) == (b"2", 2)
        m.complete()
        s.set_state("text")
        assert s.state == b"text"
        s.set_state(b"")
        assert s.state == b""
        s.set_state(None)
        assert s.state is None
        with pytest.raises(postbox.InvalidArgumentError):
            s.set_state(b"x" * (65 * 1024))
    with tmp_store.transaction() as tx:
        with pytest.raises(postbox.InvalidArgumentError, match="released"):
            tx.set_session_state(s, b"late")


def test_a_lost_session_lock(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store, "fast", lock_duration=0.1)
    q.send(b"m", group="g")
    s1 = q.accept_session(timeout=0)
    time.sleep(0.25)
    # Locks taken from now on are long: the new holder keeps its lock on a slow machine.
    tmp_store.queue("fast", lock_duration=30)
    s2 = q.accept_session(timeout=1, group="g")
    with pytest.raises(postbox.LockLostError) as e:
        s1.receive(timeout=0)
    assert e.value.group == "g" and e.value.code == 2
    with pytest.raises(postbox.LockLostError):
        s1.renew_lock()
    with pytest.raises(postbox.LockLostError):
        s1.release()
    s1.release()  # the handle is spent: harmless
    m = s2.receive(timeout=0)
    assert m.delivery_count == 1
    m.complete()
    s2.release()
    # A transaction that sets the state of a lost session fails at commit.
    tmp_store.queue("fast", lock_duration=0.1)
    s3 = q.accept_session(timeout=0, group="other")
    time.sleep(0.25)
    tmp_store.queue("fast", lock_duration=30)
    s4 = q.accept_session(timeout=1, group="other")
    with pytest.raises(postbox.LockLostError):
        with tmp_store.transaction() as tx:
            tx.set_session_state(s3, b"x")
    assert s4.state is None
    s4.release()


def test_session_processor_keeps_every_group_in_order(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store, "work")
    groups, per_group = 20, 10
    for n in range(per_group):
        for g in range(groups):
            q.send(f"{g}:{n}", group=f"g{g}")
    lock = threading.Lock()
    seen: dict[int, list[int]] = {g: [] for g in range(groups)}
    active: dict[int, int] = {g: 0 for g in range(groups)}
    overlaps: list[int] = []
    busy = 0
    most_busy = 0

    def handler(msg: postbox.Message) -> None:
        nonlocal busy, most_busy
        g, n = (int(x) for x in msg.text.split(":"))
        assert msg.group == f"g{g}"
        with lock:
            active[g] += 1
            busy += 1
            most_busy = max(most_busy, busy)
            if active[g] > 1:
                overlaps.append(g)
            seen[g].append(n)
        time.sleep(0.002)
        with lock:
            active[g] -= 1
            busy -= 1

    with postbox.Processor(q, handler, workers=4, sessions=True) as p:
        wait_for(lambda: p.stats()["processed"] == groups * per_group, timeout=60)
        report = p.shutdown()
    assert report.finished and report.failed == 0
    assert overlaps == []
    assert seen == {g: list(range(per_group)) for g in range(groups)}
    assert 1 <= most_busy <= 4
    s = q.stats()
    assert (s.active, s.locked, s.dead_lettered) == (0, 0, 0)


def test_a_mismatched_processor_is_refused(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store)
    plain = tmp_store.queue("plain")
    with pytest.raises(postbox.InvalidArgumentError, match="session"):
        postbox.Processor(q, lambda m: None)
    with pytest.raises(postbox.InvalidArgumentError, match="session"):
        postbox.Processor(plain, lambda m: None, sessions=True)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_session_in_a_forked_child(tmp_store: postbox.Store) -> None:
    q = session_queue(tmp_store)
    q.send(b"x", group="g")
    s = q.accept_session(timeout=0)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            for call in (lambda: s.receive(timeout=0), s.renew_lock, s.release, lambda: s.state):
                try:
                    call()
                    code = 1
                except postbox.ForkedError:
                    pass
            try:
                with s:
                    code = 3
            except postbox.ForkedError:
                pass
            # Leaving a block (or garbage collection) lets go without touching the session.
            assert s.__exit__(None, None, None) is False
        except BaseException:
            traceback.print_exc()
            code = 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent still holds the session.
    m = s.receive(timeout=0)
    assert m.body == b"x"
    m.complete()
    assert s.locked_until is not None and s.locked_until > datetime.now(timezone.utc)
    s.release()


def test_four_receivers_twenty_groups_with_abandons_and_expiries(tmp_store: postbox.Store) -> None:
    """Receivers take sessions in parallel, abandon at random and now and then stall past the
    lock: every group is processed in send order, each message completed exactly once."""
    import random

    groups = int(os.environ.get("POSTBOX_SESSION_GROUPS", "20"))
    per_group = int(os.environ.get("POSTBOX_SESSION_MESSAGES", "100"))
    q = session_queue(tmp_store, "stress", lock_duration=0.3, max_deliveries=1000)
    ids: dict[tuple[int, int], int] = {}
    for n in range(per_group):
        for g in range(groups):
            ids[(g, n)] = q.send(f"{g}:{n}", group=f"g{g}")
    total = groups * per_group
    lock = threading.Lock()
    completed: list[tuple[int, int]] = []
    errors: list[str] = []
    seed = int(os.environ.get("POSTBOX_SEED", str(time.time_ns())))
    print(f"POSTBOX_SEED={seed}")

    def receiver(r: int) -> None:
        rng = random.Random(seed + r)
        stalls = 0
        try:
            while True:
                with lock:
                    if len(completed) >= total:
                        return
                try:
                    s = q.accept_session(timeout=0.05)
                except postbox.Empty:
                    continue
                try:
                    with s:
                        while True:
                            try:
                                m = s.receive(timeout=0)
                            except (postbox.Empty, postbox.LockLostError):
                                break
                            g, n = (int(x) for x in m.text.split(":"))
                            # In order: everything before it in its group is already gone.
                            if n > 0 and q.get(ids[(g, n - 1)]) is not None:
                                errors.append(f"group {g}: {n} before {n - 1} was completed")
                            roll = rng.randrange(100)
                            if roll < 10:
                                m.abandon()
                                continue
                            if roll == 10 and stalls < 1:
                                stalls += 1
                                time.sleep(0.4)  # the stall itself is the scenario
                                try:
                                    m.complete()
                                    with lock:
                                        completed.append((g, n))
                                except postbox.LockLostError:
                                    pass
                                break
                            try:
                                m.complete()
                            except postbox.LockLostError:
                                break
                            with lock:
                                completed.append((g, n))
                except postbox.LockLostError:
                    pass  # the session lock went while leaving the with block
        except Exception:  # noqa: BLE001 - reported below
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=receiver, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert sorted(completed) == sorted(ids), "each message completed exactly once"
    s = q.stats()
    assert (s.active, s.locked, s.dead_lettered) == (0, 0, 0)
