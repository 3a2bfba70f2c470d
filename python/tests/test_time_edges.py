"""Times and durations at the edges of a float: refused with ValueError, never a panic."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

import postbox


class Stamped(datetime):
    """A datetime whose timestamp() says whatever the test wants."""

    stamp = 0.0

    def timestamp(self) -> float:
        return self.stamp


def stamped(value: float) -> Stamped:
    d = Stamped(2030, 1, 1, tzinfo=timezone.utc)
    d.stamp = value
    return d


WEIRD = [math.inf, -math.inf, math.nan, 1e300, -1e300, 2.0**64, -(2.0**64)]


@pytest.mark.parametrize("value", WEIRD, ids=repr)
@pytest.mark.parametrize("field", ["visible_at", "expires_at"])
def test_weird_timestamps_are_value_errors(queue: postbox.Queue, field: str, value: float) -> None:
    with pytest.raises(ValueError) as info:
        queue.send(b"x", **{field: stamped(value)})
    assert isinstance(info.value, postbox.InvalidArgumentError)
    assert field in str(info.value)
    assert len(queue) == 0 and queue.stats().scheduled == 0


@pytest.mark.parametrize("value", WEIRD, ids=repr)
def test_weird_timestamps_in_batches_and_transactions(
    tmp_store: postbox.Store, value: float
) -> None:
    q = tmp_store.queue("q")
    with pytest.raises(ValueError):
        q.send_batch([{"body": b"x", "visible_at": stamped(value)}])
    with tmp_store.transaction() as tx:
        with pytest.raises(ValueError):
            tx.send(q, b"x", expires_at=stamped(value))
    assert len(q) == 0


def test_timestamp_that_is_not_a_float(queue: postbox.Queue) -> None:
    class Odd(datetime):
        def timestamp(self) -> float:
            return "soon"  # type: ignore[return-value]

    with pytest.raises(TypeError):
        queue.send(b"x", visible_at=Odd(2030, 1, 1, tzinfo=timezone.utc))


def test_ordinary_edges_still_work(queue: postbox.Queue) -> None:
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    queue.send(b"past", visible_at=epoch - timedelta(days=1))
    far = datetime(9999, 12, 31, tzinfo=timezone.utc)
    queue.send(b"far", expires_at=far)
    m = queue.receive(timeout=1)
    assert m.body == b"past"
    m.complete()
    m = queue.receive(timeout=1)
    assert m.expires_at == far
    m.complete()


@pytest.mark.parametrize("value", [math.inf, 1e300, timedelta.max])
def test_huge_durations_are_as_good_as_forever(tmp_store: postbox.Store, value: object) -> None:
    q = tmp_store.queue("q")
    q.send(b"x")
    assert q.receive(timeout=value).body == b"x"  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [math.inf, 1e300, timedelta.max])
def test_huge_queue_durations_read_back(tmp_store: postbox.Store, value: object) -> None:
    q = tmp_store.queue("q", default_ttl=value, lock_duration=value)  # type: ignore[arg-type]
    o = q.options
    assert o["default_ttl"] >= timedelta(days=10_000)
    assert o["lock_duration"] >= timedelta(days=10_000)
    q.send(b"x")
    m = q.receive(timeout=1)
    # Past what a datetime holds: read as datetime.max, not an error.
    assert m.locked_until is not None and m.locked_until.year == 9999
    assert m.expires_at is not None and m.expires_at.year == 9999
    m.complete()


@pytest.mark.parametrize("value", [math.nan, -math.inf, -1.0])
def test_nan_and_negative_durations(queue: postbox.Queue, value: float) -> None:
    with pytest.raises(ValueError):
        queue.send(b"x", delay=value)
    with pytest.raises(ValueError):
        queue.receive(timeout=value)
