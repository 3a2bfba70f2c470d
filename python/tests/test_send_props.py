"""Every method that sends reads `send`'s keywords the same way: one parser behind all of them."""

from datetime import datetime, timedelta, timezone
from typing import Any, Callable

import pytest

import postbox

EXPIRES = datetime(2999, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
PROPS: dict[str, Any] = dict(
    label="order",
    content_type="text/plain",
    priority=6,
    correlation_id="c-1",
    reply_to="answers",
    expires_at=EXPIRES,
    properties={"region": "eu", "blob": b"\x00\x01"},
    message_key="k-1",
)


def seen(m: postbox.Message) -> tuple[object, ...]:
    return (
        m.text,
        m.label,
        m.content_type,
        m.priority,
        m.correlation_id,
        m.reply_to,
        m.expires_at,
        m.properties,
        m.message_key,
    )


EXPECTED = ("x", "order", "text/plain", 6, "c-1", "answers", EXPIRES,
            {"region": "eu", "blob": b"\x00\x01"}, "k-1")


def senders(store: postbox.Store) -> dict[str, tuple[Callable[..., object], postbox.Queue]]:
    """Each sending method, as a function of (body, **props), and the queue it reaches."""
    q = {n: store.queue(n) for n in ("send", "checked", "tx", "publish", "tx-publish", "job")}
    topic = store.topic("t")
    sub = topic.subscribe("s")
    other = store.topic("t2")
    sub2 = other.subscribe("s")
    job = store.create_job()

    def tx_send(body: object, **props: Any) -> object:
        with store.transaction() as tx:
            return tx.send(q["tx"], body, **props)

    def tx_publish(body: object, **props: Any) -> object:
        with store.transaction() as tx:
            return tx.publish(other, body, **props)

    return {
        "Queue.send": (q["send"].send, q["send"]),
        "Queue.send_checked": (q["checked"].send_checked, q["checked"]),
        "Transaction.send": (tx_send, q["tx"]),
        "Topic.publish": (topic.publish, sub),
        "Transaction.publish": (tx_publish, sub2),
        "Job.send": (lambda body, **p: job.send(q["job"], body, **p), q["job"]),
    }


def test_every_sender_stores_the_same_message(tmp_store: postbox.Store) -> None:
    for name, (send, queue) in senders(tmp_store).items():
        send("x", **PROPS)
        m = queue.receive(timeout=5)
        assert seen(m) == EXPECTED, name
        m.complete()


def test_every_sender_refuses_the_same_bad_keywords(tmp_store: postbox.Store) -> None:
    for name, (send, _) in senders(tmp_store).items():
        with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
            send("x", colour="red")
        with pytest.raises(TypeError, match="priority"):
            send("x", priority="high")
        with pytest.raises(TypeError, match="ttl or expires_at"):
            send("x", ttl=timedelta(seconds=5), expires_at=EXPIRES)
        with pytest.raises(postbox.InvalidArgumentError, match="priority"):
            send("x", priority=99)
        # None counts as absent, as in the signature's defaults.
        send("y", label=None, ttl=None, properties=None)


def test_the_collator_takes_the_same_keywords(tmp_store: postbox.Store) -> None:
    dest = tmp_store.queue("dest")
    c = tmp_store.collator("c", dest)
    props = {k: v for k, v in PROPS.items() if k != "message_key"}
    c.send("x", group="g", sequence=1, message_key="k-1", **props)
    m = dest.receive(timeout=5)
    assert seen(m) == EXPECTED
    assert (m.group, m.sequence) == ("g", 1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        c.send("x", group="g", sequence=2, colour="red")
    with pytest.raises(TypeError):
        c.send("x", sequence=2)  # group is required
