"""Bit flips in a populated store (invariant 9, item 3): with verify_on_open=False, every message
read back is byte-identical to what was sent, or the read raises StoreCorruptedError. Never a
wrong byte, never a crash or a hang.

redb checks its pages only when verify_on_open is on; what catches a flip with it off is the
checksum postbox keeps in every record (envelope and body, state, queue record), bound to the
key the record is stored under.

Those checksums cover redb's values, not its keys: a flipped key bit can make a message
unreachable (``get`` returns ``None``, browse skips it). That loses no byte of another message
and is counted as unreachable, not as a wrong answer (the Rust sweep, core/tests/bitflip.rs,
counts it the same way).

Each damaged copy is read in a child process, so that a crash or hang is seen as one.
Knobs: POSTBOX_BITFLIP_TRIALS (default 24 per test), POSTBOX_BITFLIP_SEED (default 1).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import postbox

TRIALS = int(os.environ.get("POSTBOX_BITFLIP_TRIALS", "24"))
SEED = int(os.environ.get("POSTBOX_BITFLIP_SEED", "1"))
MESSAGES = 120

def body_of(i: int) -> bytes:
    """Deterministic, incompressible bodies of varied sizes (a few span pages)."""
    size = 6000 if i % 20 == 0 else 64 + (i * 37) % 900
    out = b""
    n = 0
    while len(out) < size:
        out += hashlib.sha256(f"{i}/{n}".encode()).digest()
        n += 1
    return out[:size]


def expected() -> dict[str, dict[str, object]]:
    return {
        str(i): {
            "body": body_of(i).hex(),
            "label": f"label-{i}",
            "properties": {"n": str(i), "blob": body_of(i)[:16].hex()},
        }
        for i in range(MESSAGES)
    }


@pytest.fixture(scope="module")
def base_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, dict[str, int]]:
    """The bytes of a closed, populated store and the id of each message index."""
    path = tmp_path_factory.mktemp("bitflip") / "base.postbox"
    ids: dict[str, int] = {}
    with postbox.Store(path) as store:
        q = store.queue("data")
        for i in range(MESSAGES):
            ids[str(i)] = q.send(
                body_of(i),
                label=f"label-{i}",
                properties={"n": str(i), "blob": body_of(i)[:16]},
            )
    return path.read_bytes(), ids


READER = textwrap.dedent(
    """
    import json, sys, postbox

    path, ids = sys.argv[1], json.loads(sys.argv[2])
    out = {"open": None, "messages": {}, "browse": None}
    try:
        store = postbox.Store(path, verify_on_open=False)
    except postbox.PostboxError as e:
        out["open"] = type(e).__name__
        print(json.dumps(out))
        sys.exit(0)

    def describe(m):
        props = m.properties
        return {
            "body": m.body.hex(),
            "label": m.label,
            "properties": {k: (v.hex() if isinstance(v, bytes) else v) for k, v in props.items()},
        }

    try:
        q = store.queue("data")
    except postbox.PostboxError as e:
        out["open"] = type(e).__name__
        print(json.dumps(out))
        sys.exit(0)
    for name, id in ids.items():
        try:
            m = q.get(id)
            out["messages"][name] = None if m is None else describe(m)
        except postbox.PostboxError as e:
            out["messages"][name] = type(e).__name__
    try:
        out["browse"] = [describe(m) for m in q.browse()]
    except postbox.PostboxError as e:
        out["browse"] = type(e).__name__
    print(json.dumps(out))
    """
)

OPEN_REFUSALS = {"StoreCorruptedError", "NotAStoreError", "IncompatibleVersionError"}


def read_damaged(path: Path, ids: dict[str, int]) -> dict[str, object]:
    run = subprocess.run(
        [sys.executable, "-c", READER, str(path), json.dumps(ids)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, f"reader died ({run.returncode}): {run.stderr[-1500:]}"
    return json.loads(run.stdout)


def wrong_answers(got: dict[str, object]) -> list[str]:
    """Everything that is neither the exact message, nor unreachable (None), nor
    StoreCorruptedError."""
    if got["open"] is not None:
        return [] if got["open"] in OPEN_REFUSALS else [f"open raised {got['open']}"]
    want = expected()
    wrong = []
    messages = got["messages"]
    assert isinstance(messages, dict)
    for name, m in messages.items():
        if m is not None and m != want[name] and m != "StoreCorruptedError":
            wrong.append(f"message {name}: {'a different message' if isinstance(m, dict) else m}")
    browse = got["browse"]
    if isinstance(browse, list):
        bodies = {w["body"]: w for w in want.values()}
        for m in browse:
            if m.get("body") not in bodies or bodies[m["body"]] != m:
                wrong.append("browse returned a message that was never sent")
    elif browse != "StoreCorruptedError":
        wrong.append(f"browse raised {browse}")
    return wrong


def flip(data: bytes, offset: int, bit: int) -> bytes:
    damaged = bytearray(data)
    damaged[offset] ^= 1 << bit
    return bytes(damaged)


@pytest.mark.timeout(600)
def test_undamaged_copy_reads_back_exactly(
    base_store: tuple[bytes, dict[str, int]], tmp_path: Path
) -> None:
    data, ids = base_store
    copy = tmp_path / "copy.postbox"
    copy.write_bytes(data)
    got = read_damaged(copy, ids)
    assert got["open"] is None
    assert got["messages"] == expected()
    assert wrong_answers(got) == []


@pytest.mark.timeout(600)
def test_random_bit_flips_never_read_back_wrong(
    base_store: tuple[bytes, dict[str, int]], tmp_path: Path
) -> None:
    data, ids = base_store
    rng = random.Random(SEED)
    failures = []
    for trial in range(TRIALS):
        offset, bit = rng.randrange(len(data)), rng.randrange(8)
        copy = tmp_path / f"flip-{trial}.postbox"
        copy.write_bytes(flip(data, offset, bit))
        wrong = wrong_answers(read_damaged(copy, ids))
        if wrong:
            failures.append(f"flip of bit {bit} at {offset}: {wrong[:3]}")
        copy.unlink()
    assert failures == []


@pytest.mark.timeout(600)
def test_bit_flips_in_message_bodies_are_detected(
    base_store: tuple[bytes, dict[str, int]], tmp_path: Path
) -> None:
    """Flips aimed at the stored bytes of bodies: the case a page-level check misses."""
    data, ids = base_store
    rng = random.Random(SEED + 1)
    failures = []
    for trial in range(TRIALS):
        i = rng.randrange(MESSAGES)
        body = body_of(i)
        places = []
        at = data.find(body[:32])
        while at != -1:
            places.append(at)
            at = data.find(body[:32], at + 1)
        assert places, f"body {i} is not stored verbatim"
        offset = rng.choice(places) + rng.randrange(32)
        copy = tmp_path / f"body-{trial}.postbox"
        copy.write_bytes(flip(data, offset, rng.randrange(8)))
        wrong = wrong_answers(read_damaged(copy, ids))
        if wrong:
            failures.append(f"flip in body {i} at {offset}: {wrong[:3]}")
        copy.unlink()
    assert failures == []
