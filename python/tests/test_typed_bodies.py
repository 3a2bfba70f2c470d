"""Typed bodies (docs/typed-bodies.md): the envelope, JSON by default, pickle opt-in, user
codecs, DecodeFailed dead letters on the first delivery, and a body a Rust producer wrote."""

from __future__ import annotations

import dataclasses
import datetime
import os
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for

import postbox

# The JSON typed body of the order that core/examples/typed_json_producer.rs sends, byte for
# byte as Rust's typed_json writes it; the Rust and C tests hold the same bytes.
ORDER_42_JSON = (
    b'\xffPBT\x01\x01{"id":42,"item":"th\xc3\xa9 vert","quantity":3,'
    b'"tags":["loose","organic"],"gift_note":null,"price":4.5}'
)
ORDER_42 = {
    "id": 42,
    "item": "thé vert",
    "quantity": 3,
    "tags": ["loose", "organic"],
    "gift_note": None,
    "price": 4.5,
}


def dead_letters(q: postbox.Queue) -> list[postbox.Message]:
    return list(q.dead_letters.browse())


def test_the_envelope_is_the_documented_one() -> None:
    assert postbox.TYPED_BODY_MAGIC == b"\xffPBT"
    assert (postbox.TYPED_BODY_VERSION, postbox.TYPED_BODY_HEADER_LEN) == (1, 6)
    assert (postbox.CODEC_JSON, postbox.CODEC_BINCODE, postbox.CODEC_PICKLE) == (1, 2, 3)
    assert postbox.FIRST_USER_CODEC == 128
    assert postbox.REASON_DECODE_FAILED == "DecodeFailed"
    # The same value gives the same bytes as in Rust: key order, separators, UTF-8, floats.
    assert postbox.JsonCodec().encode(ORDER_42) == ORDER_42_JSON[6:]
    assert postbox.wrap_typed_body(1, ORDER_42_JSON[6:]) == ORDER_42_JSON
    assert postbox.parse_typed_body(ORDER_42_JSON) == (1, ORDER_42_JSON[6:])
    for codec in (1, 2, 3, 128, 200, 255):
        for payload in (b"", b"x", bytearray(b"ab"), memoryview(b"cd")):
            body = postbox.wrap_typed_body(codec, payload)
            assert body[:6] == b"\xffPBT\x01" + bytes([codec])
            assert postbox.parse_typed_body(body) == (codec, bytes(payload))


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "not a typed body"),
        (b"{}", "not a typed body"),
        (b"\xffPB", "not a typed body"),
        (b"\xffPBX\x01\x01{}", "not a typed body"),
        (b"\xffPBT", "truncated"),
        (b"\xffPBT\x01", "truncated"),
        (b"\xffPBT\x02\x01{}", "version 2"),
        (b"\xffPBT\x00\x01{}", "version 0"),
        (b"\xffPBT\x01\x09{}", "reserved"),
        (b"\xffPBT\x01\x7f{}", "reserved"),
    ],
)
def test_bad_envelopes_are_codec_errors(body: bytes, why: str) -> None:
    with pytest.raises(postbox.CodecError, match=why):
        postbox.parse_typed_body(body)


def test_reserved_codec_ids_cannot_be_written() -> None:
    for codec in (0, 4, 64, 127):
        with pytest.raises(postbox.InvalidArgumentError, match="reserved"):
            postbox.wrap_typed_body(codec, b"{}")
    for codec in (-1, 256):
        with pytest.raises(ValueError, match="not a codec id"):
            postbox.wrap_typed_body(codec, b"")
    with pytest.raises(TypeError):
        postbox.wrap_typed_body("1", b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        postbox.wrap_typed_body(True, b"")


def test_json_round_trip(tmp_store: postbox.Store, queue: postbox.Queue) -> None:
    orders = postbox.TypedQueue(queue)
    assert isinstance(orders.codec, postbox.JsonCodec) and orders.queue is queue
    values: list[Any] = [ORDER_42, [1, 2.5, "x"], "text", 7, None, True, {"nested": {"a": []}}]
    ids = [orders.send(v, label="typed", priority=6) for v in values]
    assert queue.get(ids[0]).body == ORDER_42_JSON  # type: ignore[union-attr]
    for want, id_ in zip(values, ids):
        with orders.receive(timeout=1) as msg:
            assert (msg.id, msg.value, msg.label, msg.delivery_count) == (id_, want, "typed", 1)
            assert msg.message.body[:6] == b"\xffPBT\x01\x01"
    assert len(queue) == 0 and queue.stats().locked == 0

    # Batches, transactions, peek, and the nowait receive.
    orders.send_batch([{"n": 1}, {"n": 2}])
    with tmp_store.transaction() as tx:
        orders.send_in(tx, {"n": 3}, correlation_id="c-3")
    peeked = orders.peek()
    assert peeked is not None and peeked.value == {"n": 1}
    got = [orders.receive_nowait() for _ in range(3)]
    assert [m.value["n"] for m in got] == [1, 2, 3]
    assert got[2].correlation_id == "c-3"
    for m in got:
        m.complete()
    with pytest.raises(postbox.Empty):
        orders.receive(timeout=0.05)
    assert orders.peek() is None


def test_json_refuses_what_other_languages_cannot_read(queue: postbox.Queue) -> None:
    orders = postbox.TypedQueue(queue, codec="json")
    for bad in ({1, 2}, float("nan"), {"t": datetime.date(2024, 1, 2)}, object()):
        with pytest.raises(postbox.CodecError, match="JSON encoding failed"):
            orders.send(bad)
    with pytest.raises(postbox.CodecError):
        orders.send_batch([{"ok": 1}, {"bad": {1}}])
    assert len(queue) == 0
    # A codec with hooks converts what JSON cannot hold, both ways.
    dates = postbox.TypedQueue(
        queue,
        postbox.JsonCodec(
            default=lambda o: {"$date": o.isoformat()},
            object_hook=lambda d: datetime.date.fromisoformat(d["$date"]) if "$date" in d else d,
        ),
    )
    dates.send({"due": datetime.date(2024, 1, 2)})
    with dates.receive(timeout=1) as msg:
        assert msg.value == {"due": datetime.date(2024, 1, 2)}


@dataclasses.dataclass
class Tile:
    image: str
    x: int
    y: int
    seen: frozenset[str]


def test_pickle_is_opt_in(queue: postbox.Queue) -> None:
    tiles = postbox.TypedQueue(queue, codec="pickle")
    tile = Tile("a.png", 3, 4, frozenset({"red"}))
    when = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc)
    tiles.send(tile)
    tiles.send({"when": when, "ids": {1, 2}})
    with tiles.receive(timeout=1) as msg:
        assert msg.value == tile
        assert msg.message.body[:6] == b"\xffPBT\x01\x03"
    # The JSON view (the default) never unpickles: a pickle body is dead-lettered.
    with pytest.raises(postbox.CodecError, match=r"codec 3 \(pickle\), not with codec 1"):
        postbox.TypedQueue(queue).receive(timeout=1)
    [dead] = dead_letters(queue)
    assert dead.dead_letter_reason == postbox.REASON_DECODE_FAILED
    assert tiles.decode(dead.body) == {"when": when, "ids": {1, 2}}
    assert isinstance(postbox.TypedQueue(queue, postbox.PickleCodec(protocol=2)).codec, postbox.PickleCodec)


class Point3:
    """A user codec: three little-endian int32 as 12 bytes."""

    id = 200

    def encode(self, obj: tuple[int, int, int]) -> bytes:
        return struct.pack("<3i", *obj)

    def decode(self, data: bytes) -> tuple[int, int, int]:
        x, y, z = struct.unpack("<3i", data)
        return (x, y, z)


def test_user_codec(queue: postbox.Queue) -> None:
    points = postbox.TypedQueue(queue, Point3())
    points.send((1, -2, 3))
    with points.receive(timeout=1) as msg:
        assert msg.value == (1, -2, 3)
        assert msg.message.body == b"\xffPBT\x01\xc8" + struct.pack("<3i", 1, -2, 3)
    with pytest.raises(postbox.CodecError, match="user codec encoding failed"):
        points.send((1, 2))  # type: ignore[arg-type]
    # A payload the codec refuses, and a body of another user codec: dead-lettered.
    queue.send(postbox.wrap_typed_body(200, b"short"))
    queue.send(postbox.wrap_typed_body(201, struct.pack("<3i", 1, 2, 3)))
    for why in ("user codec decoding failed", "codec 201"):
        with pytest.raises(postbox.CodecError, match=why):
            points.receive(timeout=1)
    assert [d.dead_letter_reason for d in dead_letters(queue)] == ["DecodeFailed"] * 2

    class Reserved(Point3):
        id = 5

    class NotAnInt(Point3):
        id = "200"  # type: ignore[assignment]

    class NoDecode:
        id = 130

        def encode(self, obj: object) -> bytes:
            return b""

    class BadEncode(Point3):
        def encode(self, obj: tuple[int, int, int]) -> bytes:
            return "text"  # type: ignore[return-value]

    with pytest.raises(postbox.InvalidArgumentError, match="128 to 255"):
        postbox.TypedQueue(queue, Reserved())
    with pytest.raises(postbox.InvalidArgumentError, match="128 to 255"):
        postbox.TypedQueue(queue, type("Json", (Point3,), {"id": 1})())
    with pytest.raises(TypeError):
        postbox.TypedQueue(queue, NotAnInt())  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="decode"):
        postbox.TypedQueue(queue, NoDecode())  # type: ignore[call-overload]
    with pytest.raises(postbox.InvalidArgumentError, match="codec must be"):
        postbox.TypedQueue(queue, "yaml")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="postbox.Queue"):
        postbox.TypedQueue("jobs")  # type: ignore[call-overload]
    with pytest.raises(postbox.CodecError, match="not bytes"):
        postbox.TypedQueue(queue, BadEncode()).send((1, 2, 3))


UNDECODABLE = [
    (b"plain bytes", "not a typed body"),
    (b"\xffPBT\x01\x02\x2a", r"codec 2 \(bincode\)"),
    (b"\xffPBT\x02\x01{}", "version 2"),
    (b"\xffPBT\x01\x09{}", "reserved"),
    (b"\xffPBT\x01", "truncated"),
    (b'\xffPBT\x01\x01{"id":', "JSON decoding failed"),
    (b'\xffPBT\x01\x01"\xff\xfe"', "JSON decoding failed"),
    (b"\xffPBT\x01\x01NaN", "JSON decoding failed"),
]


def test_undecodable_bodies_are_dead_lettered_on_their_first_delivery(
    queue: postbox.Queue,
) -> None:
    orders = postbox.TypedQueue(queue)
    for body, _ in UNDECODABLE:
        queue.send(body)
    # A peek reports the body but moves nothing.
    with pytest.raises(postbox.CodecError, match="not a typed body"):
        orders.peek()
    assert queue.stats().dead_lettered == 0
    for body, why in UNDECODABLE:
        with pytest.raises(postbox.CodecError, match=why):
            orders.receive(timeout=1)
    stats = queue.stats()
    assert (stats.active, stats.locked, stats.dead_lettered) == (0, 0, len(UNDECODABLE))
    dead = dead_letters(queue)
    assert [d.body for d in dead] == [b for b, _ in UNDECODABLE]  # kept as they were
    for d in dead:
        assert d.dead_letter_reason == postbox.REASON_DECODE_FAILED
        assert d.dead_letter_description
        assert d.delivery_count == 1
    # decode() of a message reports without moving anything.
    with pytest.raises(postbox.CodecError):
        orders.decode(dead[0])


def test_processor_dead_letters_undecodable_bodies(queue: postbox.Queue) -> None:
    orders = postbox.TypedQueue(queue)
    for n in range(5):
        orders.send({"n": n})
    for body, _ in UNDECODABLE[:3]:
        queue.send(body)
    seen: list[int] = []
    lock = threading.Lock()
    done = threading.Event()

    def handle(msg: postbox.TypedMessage[Any]) -> None:
        with lock:
            seen.append(msg.value["n"])
            if len(seen) == 5:
                done.set()

    p = orders.processor(handle, workers=2)
    assert done.wait(20)
    wait_for(lambda: p.stats()["dead_lettered"] == 3)
    report = p.shutdown(10)
    assert sorted(seen) == [0, 1, 2, 3, 4]
    assert (report.processed, report.dead_lettered) == (5, 3)
    assert {d.dead_letter_reason for d in dead_letters(queue)} == {"DecodeFailed"}
    assert all(d.delivery_count == 1 for d in dead_letters(queue))


def _producer() -> Path | None:
    env = os.environ.get("POSTBOX_TYPED_PRODUCER")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[2]
    target = Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    exe = target / "debug" / "examples" / "typed_json_producer"
    return exe if exe.exists() else None


def test_a_body_sent_from_rust(store_path: Path) -> None:
    exe = _producer()
    if exe is None:
        pytest.skip(
            "build core/examples/typed_json_producer.rs first "
            "(cargo build -p postbox --example typed_json_producer)"
        )
    subprocess.run([str(exe), str(store_path), "orders"], check=True, capture_output=True)
    with postbox.Store(store_path) as store:
        queue = store.queue("orders")
        orders = postbox.TypedQueue(queue)
        with orders.receive(timeout=1) as msg:
            assert msg.value == ORDER_42
            assert msg.message.body == ORDER_42_JSON
        # The same order in bincode, which only Rust reads: dead-lettered on first delivery.
        with pytest.raises(postbox.CodecError, match="bincode"):
            orders.receive(timeout=1)
        [dead] = dead_letters(queue)
        assert (dead.dead_letter_reason, dead.delivery_count) == ("DecodeFailed", 1)
        assert postbox.parse_typed_body(dead.body)[0] == postbox.CODEC_BINCODE
