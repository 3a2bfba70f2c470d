"""Wrong argument types raise TypeError, wrong values ValueError, with a clear message."""

from __future__ import annotations

from datetime import timedelta

import pytest

import postbox


@pytest.mark.parametrize("body", [1, 1.5, None, ["x"], {"a": 1}, object()])
def test_bad_body(queue: postbox.Queue, body: object) -> None:
    with pytest.raises(TypeError, match="bytes, bytearray, memoryview or str"):
        queue.send(body)  # type: ignore[arg-type]


def test_bad_string_properties(queue: postbox.Queue) -> None:
    with pytest.raises(TypeError):
        queue.send(b"x", label=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        queue.send(b"x", correlation_id=b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        queue.send(b"x", sequence="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority"):
        queue.send(b"x", priority="high")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority"):
        queue.send(b"x", priority=True)


def test_bad_user_properties(queue: postbox.Queue) -> None:
    with pytest.raises(TypeError, match="dict"):
        queue.send(b"x", properties=[("a", "b")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="names must be str"):
        queue.send(b"x", properties={1: "b"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="str or bytes"):
        queue.send(b"x", properties={"a": 1})  # type: ignore[dict-item]


@pytest.mark.parametrize("value", ["1", [1], True, object()])
def test_bad_duration_types(queue: postbox.Queue, value: object) -> None:
    with pytest.raises(TypeError, match="seconds or a datetime.timedelta"):
        queue.receive(timeout=value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ttl"):
        queue.send(b"x", ttl=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, -0.001, timedelta(seconds=-1), float("nan")])
def test_negative_or_nan_durations(tmp_store: postbox.Store, value: object) -> None:
    q = tmp_store.queue("q")
    with pytest.raises(ValueError, match="timeout"):
        q.receive(timeout=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delay"):
        q.send(b"x", delay=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lock_duration"):
        tmp_store.queue("q", lock_duration=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        list(q.consume(timeout=value))  # type: ignore[arg-type]


def test_durations_accept_int_float_timedelta(queue: postbox.Queue) -> None:
    for t in (0, 0.01, timedelta(milliseconds=10)):
        with pytest.raises(postbox.Empty):
            queue.receive(timeout=t)  # type: ignore[arg-type]


def test_bad_datetimes(queue: postbox.Queue) -> None:
    with pytest.raises(TypeError, match="datetime"):
        queue.send(b"x", visible_at=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="datetime"):
        queue.send(b"x", expires_at="tomorrow")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        queue.send(b"x", ttl=1, expires_at=__import__("datetime").datetime.now())


def test_bad_store_arguments(tmp_path: object) -> None:
    with pytest.raises(ValueError, match="durability"):
        postbox.Store("x.postbox", durability="sometimes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        postbox.Store(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        postbox.Store()  # type: ignore[call-arg]


def test_bad_queue_arguments(tmp_store: postbox.Store) -> None:
    with pytest.raises(TypeError):
        tmp_store.queue(b"bytes-name")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tmp_store.queue("q", nonsense=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        tmp_store.queue("q", max_messages=-1)
    with pytest.raises(TypeError):
        tmp_store.queue("q", max_messages="many")  # type: ignore[arg-type]
    q = tmp_store.queue("q")
    with pytest.raises(TypeError):
        q.get("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        q.send(b"x", "positional label")  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected key"):
        q.send_batch([{"body": b"x", "lable": "typo"}])
    with pytest.raises(TypeError, match="body"):
        q.send_batch([{"label": "no body"}])
    with pytest.raises(TypeError):
        q.send_batch(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tmp_store.transaction().receive("q")  # type: ignore[arg-type]
