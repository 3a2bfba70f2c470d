"""Store.bridge: the RabbitMQ bridge started from a Python application.

Without a broker (always): bad configurations raise ConfigError; a bridge to a port where
nothing listens starts, reports its links as not connected, stops promptly and leaves the
messages sent meanwhile in their local queue. With a broker (POSTBOX_TEST_AMQP set to its URI,
as .ci/bridge.sh does): messages go to a quorum queue and come back, in order, with their label
and properties.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import postbox

NOWHERE = "amqp://guest:guest@127.0.0.1:1/%2f"
AMQP = os.environ.get("POSTBOX_TEST_AMQP")

LINK_KEYS = {
    "direction",
    "local",
    "remote",
    "connected",
    "forwarded",
    "in_flight",
    "reconnects",
    "republished",
    "nacked",
    "dead_lettered",
    "rejected",
    "local_retries",
    "last_error",
}


def two_links(broker: str, out: str, remote: str, into: str) -> str:
    return f"""
store = "ignored.postbox"
broker = "{broker}"
[retry]
initial_ms = 50
max_ms = 500
[[link]]
direction = "outgoing"
local = "{out}"
queue = "{remote}"
[[link]]
direction = "incoming"
queue = "{remote}"
local = "{into}"
"""


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ("this is not toml", ""),
        (f'broker = "{NOWHERE}"\n', "link"),
        ('broker = "nope://x"\n[[link]]\ndirection="incoming"\nlocal="a"\nqueue="b"\n', "broker"),
        (f'broker = "{NOWHERE}"\n[[link]]\ndirection = "sideways"\nlocal = "a"\n', "sideways"),
        (f'broker = "{NOWHERE}"\nlinks = 1\n', "links"),
    ],
)
def test_bad_configurations_raise_config_error(
    tmp_store: postbox.Store, config: str, says: str
) -> None:
    with pytest.raises(postbox.ConfigError) as e:
        tmp_store.bridge(config)
    assert says in str(e.value)


def test_without_a_broker_messages_wait_locally(tmp_store: postbox.Store) -> None:
    bridge = tmp_store.bridge(two_links(NOWHERE, "out", "remote", "in"))
    out = tmp_store.queue("out")
    for i in range(5):
        out.send(f"m{i}")
    assert bridge.wait_connected(0.3) is False
    stats = bridge.stats()
    assert [s["direction"] for s in stats] == ["outgoing", "incoming"]
    assert [(s["local"], s["remote"]) for s in stats] == [("out", "remote"), ("in", "remote")]
    for s in stats:
        assert set(s) == LINK_KEYS
        assert s["connected"] is False
        assert s["forwarded"] == 0
        assert s["last_error"] is None or isinstance(s["last_error"], str)
    assert bridge.forwarded == 0
    assert bridge.connected is False
    assert "DOWN" in bridge.status_line()
    assert (
        'postbox_bridge_connected{direction="outgoing",local="out",remote="remote"} 0'
        in bridge.metrics()
    )
    assert "running" in repr(bridge) and "links=2" in repr(bridge)

    started = time.monotonic()
    final = bridge.stop()
    assert time.monotonic() - started < 10
    assert [s["local"] for s in final] == ["out", "in"]
    assert bridge.stop() == final  # idempotent
    assert bridge.stats() == final
    assert bridge.wait_connected(0) is False
    assert "stopped" in repr(bridge)

    assert out.stats().active == 5
    assert [(m.body, m.delivery_count) for m in out.browse()] == [
        (f"m{i}".encode(), 0) for i in range(5)
    ]


def test_a_bridge_is_a_context_manager(tmp_store: postbox.Store) -> None:
    with tmp_store.bridge(two_links(NOWHERE, "out", "remote", "in")) as bridge:
        assert isinstance(bridge, postbox.Bridge)
        assert len(bridge.stats()) == 2
    assert "stopped" in repr(bridge)
    assert bridge.connected is False
    # The store is still open.
    tmp_store.queue("out").send(b"after")


def test_wait_connected_checks_its_timeout(tmp_store: postbox.Store) -> None:
    with tmp_store.bridge(two_links(NOWHERE, "out", "remote", "in")) as bridge:
        with pytest.raises(ValueError):
            bridge.wait_connected(-1)
        with pytest.raises(TypeError):
            bridge.wait_connected("soon")  # type: ignore[arg-type]


@pytest.mark.skipif(
    not AMQP, reason="POSTBOX_TEST_AMQP unset: broker part skipped (run by .ci/bridge.sh)"
)
def test_through_a_broker_and_back(tmp_store: postbox.Store) -> None:
    assert AMQP is not None
    remote = f"py-{os.getpid()}-{time.monotonic_ns()}"
    n = 200
    with tmp_store.bridge(two_links(AMQP, "py-out", remote, "py-in")) as bridge:
        assert bridge.wait_connected(30), bridge.stats()
        out = tmp_store.queue("py-out")
        into = tmp_store.queue("py-in")
        for i in range(n):
            out.send(f"order {i}", label="order", properties={"tenant": "acme"})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if into.stats().active >= n and bridge.forwarded >= 2 * n:
                break
            time.sleep(0.05)
        assert into.stats().active == n, bridge.stats()
        assert bridge.forwarded >= 2 * n
        assert "postbox_bridge_forwarded_total" in bridge.metrics()
        got = []
        for _ in range(n):
            m = into.receive(timeout=1)
            got.append((m.body, m.label, m.properties))
            m.complete()
        assert got == [(f"order {i}".encode(), "order", {"tenant": "acme"}) for i in range(n)]
        assert out.stats().active == 0
        stats = bridge.stats()
        assert all(s["connected"] for s in stats)
        assert sum(s["dead_lettered"] + s["rejected"] for s in stats) == 0
    final = bridge.stats()
    assert sum(s["forwarded"] for s in final) >= 2 * n


def test_a_closed_store_starts_no_bridge(store_path: Path) -> None:
    store = postbox.Store(store_path)
    store.close()
    with pytest.raises(postbox.ClosedError):
        store.bridge(two_links(NOWHERE, "out", "remote", "in"))
