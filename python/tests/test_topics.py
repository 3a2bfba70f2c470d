"""Topics: filtered subscriptions, publishes in transactions, subscriptions that come and go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import postbox


def bodies(q: postbox.Queue) -> list[str]:
    """Receives and completes every receivable message of `q`; their bodies in order."""
    out: list[str] = []
    while True:
        try:
            m = q.receive(timeout=0)
        except postbox.Empty:
            return out
        out.append(m.text)
        m.complete()


def test_each_subscription_gets_exactly_its_matching_messages(tmp_store: postbox.Store) -> None:
    orders = tmp_store.topic("orders")
    assert orders.name == "orders" and repr(orders) == "<postbox.Topic \"orders\">"
    everything = orders.subscribe("all")
    refunds = orders.subscribe("refunds", label="refund")
    eu_vip = orders.subscribe(
        "eu-vip", properties={"region": "eu", "tier": "vip"}, max_deliveries=3
    )
    assert eu_vip.name == "orders/$subscriptions/eu-vip"
    assert eu_vip.options["max_deliveries"] == 3  # each subscription has its own options
    assert orders.subscriptions() == ["all", "eu-vip", "refunds"]

    assert orders.publish("1", label="order", properties={"region": "eu"}) == 1
    assert orders.publish("2", label="refund", properties={"region": "us"}) == 2
    assert orders.publish("3", label="order", properties={"region": "eu", "tier": "vip"}) == 2
    assert orders.publish("4", label="refund", properties={"region": "eu", "tier": "vip"}) == 3
    assert bodies(everything) == ["1", "2", "3", "4"]
    assert bodies(refunds) == ["2", "4"]
    assert bodies(eu_vip) == ["3", "4"]

    # A message no subscription takes is delivered nowhere and counted; so is a property of
    # another kind (bytes where the filter has text).
    assert orders.unsubscribe("all") is True
    assert orders.publish("5", label="order") == 0
    assert orders.publish("6", properties={"region": b"eu", "tier": "vip"}) == 0
    stats = orders.stats()
    assert (stats.published, stats.unmatched, stats.subscriptions) == (6, 2, 2)
    assert stats._asdict() == {"published": 6, "unmatched": 2, "subscriptions": 2}
    assert repr(stats) == "TopicStats(published=6, unmatched=2, subscriptions=2)"
    assert stats == orders.stats()
    with pytest.raises(postbox.QueueNotFoundError):
        everything.receive(timeout=0)


def test_filters_on_every_field(tmp_store: postbox.Store) -> None:
    t = tmp_store.topic("t")
    subs = {
        "cid": t.subscribe("cid", correlation_id="c-1"),
        "ctype": t.subscribe("ctype", content_type="application/json"),
        "reply": t.subscribe("reply", reply_to="answers"),
        "group": t.subscribe("group", group="g", label="x"),
    }
    assert t.publish("a", correlation_id="c-1", content_type="application/json") == 2
    assert t.publish("b", reply_to="answers", group="g") == 1
    assert t.publish("c", group="g", label="x") == 1
    assert t.publish("d", label="x") == 0
    assert {k: bodies(q) for k, q in subs.items()} == {
        "cid": ["a"],
        "ctype": ["a"],
        "reply": ["b"],
        "group": ["c"],
    }


def test_a_publish_in_a_transaction_reaches_subscribers_only_on_commit(
    tmp_store: postbox.Store,
) -> None:
    events = tmp_store.topic("events")
    subs = [events.subscribe(n) for n in ("a", "b", "c")]
    jobs = tmp_store.queue("jobs")
    jobs.send("job")

    tx = tmp_store.transaction()
    tx.receive(jobs, timeout=0)
    tx.publish(events, "done")
    tx.abort()
    assert [len(s) for s in subs] == [0, 0, 0]
    assert events.stats().published == 0
    assert len(jobs) == 1

    with tmp_store.transaction() as tx:
        tx.receive(jobs, timeout=0)
        tx.publish(events, "done", label="result")
    for s in subs:
        m = s.receive(timeout=0)
        assert (m.text, m.label) == ("done", "result")
        m.complete()
    assert (events.stats().published, len(jobs)) == (1, 0)


def test_a_full_subscription_refuses_the_whole_publish(tmp_store: postbox.Store) -> None:
    t = tmp_store.topic("t")
    roomy = t.subscribe("roomy")
    tight = t.subscribe("tight", max_messages=1)
    assert t.publish("1") == 2
    with pytest.raises(postbox.QueueFullError):
        t.publish("2")
    assert (len(roomy), len(tight), t.stats().published) == (1, 1, 1)
    with pytest.raises(TypeError, match="subscribe\\(\\) got an unexpected keyword"):
        t.subscribe("x", lable="typo")  # type: ignore[call-arg]


def test_an_ungrouped_message_skips_a_session_subscription(tmp_store: postbox.Store) -> None:
    orders = tmp_store.topic("orders")
    audit = orders.subscribe("audit")
    by_customer = orders.subscribe("by-customer", requires_session=True)
    # It used to fail for every subscription: the session one refuses ungrouped messages.
    assert orders.publish(b"no group") == 1
    assert orders.publish(b"grouped", group="c-1") == 2
    assert len(audit) == 2 and by_customer.stats().active == 1
    with by_customer.accept_session(timeout=0) as s:
        assert s.group == "c-1" and s.receive(timeout=0).body == b"grouped"
    only = tmp_store.topic("only-sessions")
    only.subscribe("s", requires_session=True)
    assert only.publish(b"x") == 0 and only.stats().unmatched == 1


def test_subscriptions_listing_and_deleted_topics(tmp_store: postbox.Store) -> None:
    news = tmp_store.topic("news")
    sports = news.subscribe("sports", label="sports")
    weather = news.subscribe("weather", label="weather")
    tmp_store.queue("plain")
    assert tmp_store.topics() == ["news"]
    assert "news" not in tmp_store.queues() and "plain" in tmp_store.queues()
    assert news.publish("goal", label="sports") == 1
    assert len(news.subscription("sports")) == 1
    with pytest.raises(postbox.QueueNotFoundError):
        news.subscription("none")
    assert news.unsubscribe("weather") is True
    assert news.unsubscribe("weather") is False
    with pytest.raises(postbox.QueueNotFoundError):
        len(weather)
    assert news.subscriptions() == ["sports"]

    # Subscribing again replaces the filter (none: everything) and keeps the messages.
    again = news.subscribe("sports")
    assert news.publish("rain", label="weather") == 1
    assert bodies(again) == ["goal", "rain"]

    # Names: a topic is no queue, a queue no topic; bad subscription names are refused.
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("news")
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.topic("plain")
    with pytest.raises(postbox.InvalidArgumentError):
        news.subscribe("a/b")
    with pytest.raises(postbox.QueueNotFoundError):
        tmp_store.open_topic("plain")
    assert tmp_store.open_topic("news").subscriptions() == ["sports"]

    # Deleting the topic deletes its subscriptions.
    assert tmp_store.delete_queue("news") is True
    assert tmp_store.topics() == []
    assert tmp_store.queues() == ["plain"]
    with pytest.raises(postbox.QueueNotFoundError):
        news.publish("late")
    with pytest.raises(postbox.QueueNotFoundError):
        news.stats()
    with pytest.raises(postbox.QueueNotFoundError):
        sports.receive(timeout=0)
    with pytest.raises(postbox.QueueNotFoundError):
        tmp_store.open_topic("news")
    with tmp_store.transaction() as tx:
        tx.publish(news, "late")
        with pytest.raises(postbox.QueueNotFoundError):
            tx.commit()  # checked at commit


def test_topics_survive_a_restart(store_path: Path) -> None:
    with postbox.Store(store_path) as store:
        store.topic("news").subscribe("sports", label="sports")
    with postbox.Store(store_path) as store:
        news = store.open_topic("news")
        assert news.publish("goal", label="sports") == 1
        assert news.publish("rain", label="weather") == 0
        assert bodies(news.subscription("sports")) == ["goal"]


def test_a_forked_child_gets_forked_errors(tmp_store: postbox.Store) -> None:
    topic = tmp_store.topic("t")
    topic.subscribe("s")
    c = tmp_store.collator("c", tmp_store.queue("d"))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        for call in (
            lambda: topic.publish("x"),
            lambda: topic.subscribe("s2"),
            lambda: topic.subscription("s"),
            topic.subscriptions,
            topic.stats,
            lambda: topic.unsubscribe("s"),
            lambda: tmp_store.topic("t"),
            tmp_store.topics,
            lambda: c.send("x", group="g", sequence=1),
            c.held,
            c.incomplete,
        ):
            try:
                call()
                code = 1
            except postbox.ForkedError:
                pass
            except BaseException:
                code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert topic.stats().published == 0 and c.held() == 0


def test_a_subscription_queue_name_is_at_most_255_bytes(tmp_store: postbox.Store) -> None:
    news = tmp_store.topic("news")
    room = 255 - len("news/$subscriptions/")
    q = news.subscribe("s" * room)
    assert len(q.name) == 255
    for bad in ("s" * (room + 1), "x" * (1 << 20), "tab\there"):
        with pytest.raises(postbox.InvalidArgumentError, match=f"at most {room} bytes"):
            news.subscribe(bad)
    # Nothing else was created; every listed queue opens and deletes by its name.
    assert tmp_store.queues() == [q.name]
    assert [i.name for i in tmp_store.queue_infos()] == [q.name]
    assert news.publish(b"m") == 1
    assert len(tmp_store.open_queue(q.name)) == 1
    assert tmp_store.delete_queue(q.name)
