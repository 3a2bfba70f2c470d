"""Every public class has an informative repr, and the API documents itself in help()."""

from __future__ import annotations

import inspect
import pydoc
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import postbox

DEFAULT_REPR = re.compile(r"^<[\w.]+ object at 0x[0-9a-fA-F]+>$")

# Classes of the optional parts, and the feature a module needs to make one (postbox.FEATURES).
OPTIONAL = {"AdminServer": "admin", "Bridge": "bridge"}


def public_classes() -> list[str]:
    """The classes of postbox.__all__ that a user gets instances of (not exceptions, which have
    Python's repr, nor the Codec protocol)."""
    names = []
    for name in postbox.__all__:
        obj = getattr(postbox, name)
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        if obj is postbox.Codec:
            continue
        if name in OPTIONAL and OPTIONAL[name] not in postbox.FEATURES:
            continue
        names.append(name)
    return names


@pytest.fixture
def instances(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """One live instance of every public class, from a store in tmp_path."""
    with postbox.Store(tmp_path / "repr.postbox") as store:
        jobs = store.queue("jobs", requires_session=False)
        jobs.send(b"payload", label="x")
        sessions = store.queue("orders", requires_session=True)
        sessions.send(b"o", group="order-7")
        dest = store.queue("ordered")
        collator = store.collator("ordered-in", dest)
        collated = collator.send(b"s:2", group="s", sequence=2)
        [gap] = collator.incomplete()
        topic = store.topic("events")
        job = store.create_job()
        job.send(jobs, b"piece")
        typed = postbox.TypedQueue(store.queue("typed"))
        typed.send({"a": 1})
        processor = postbox.Processor(store.queue("idle"), lambda m: None, workers=1)
        report = postbox.Processor(store.queue("idle2"), lambda m: None, workers=1).shutdown(5)
        tx = store.transaction()
        out: dict[str, Any] = {
            "Store": store,
            "Queue": jobs,
            "QueueStats": jobs.stats(),
            "QueueInfo": store.queue_infos()[0],
            "Browse": jobs.browse(),
            "Consumer": jobs.consume(timeout=0.1),
            "Message": jobs.receive(timeout=5),
            "Sent": jobs.send_checked(b"s"),
            "Session": sessions.accept_session(timeout=5),
            "Transaction": tx,
            "TransactionTable": tx.table("rows"),
            "Table": store.table("rows"),
            "Topic": topic,
            "TopicStats": topic.stats(),
            "Collator": collator,
            "Collated": collated,
            "SeriesGap": gap,
            "Job": job,
            "JobProgress": job.progress(),
            "JobPiece": job.pieces()[0],
            "Processor": processor,
            "ShutdownReport": report,
            "JsonCodec": postbox.JsonCodec(),
            "PickleCodec": postbox.PickleCodec(),
            "TypedQueue": typed,
            "TypedMessage": typed.receive(timeout=5),
        }
        if "admin" in postbox.FEATURES:
            out["AdminServer"] = store.serve_admin("127.0.0.1:0")
        if "bridge" in postbox.FEATURES:
            # Nothing listens on port 1: the bridge runs, its link waits to connect.
            out["Bridge"] = store.bridge(
                'broker = "amqp://guest:guest@127.0.0.1:1/%2f"\n'
                '[[link]]\ndirection = "outgoing"\nlocal = "bridged"\nqueue = "bridged"\n'
            )
        try:
            yield out
        finally:
            if "AdminServer" in out:
                out["AdminServer"].stop()
            if "Bridge" in out:
                out["Bridge"].stop()
            processor.shutdown(5)
            tx.abort()
            out["Session"].release()


def test_every_public_class_has_its_own_repr(instances: dict[str, Any]) -> None:
    assert sorted(instances) == sorted(public_classes()), "a public class without an instance here"
    for name, obj in instances.items():
        assert type(obj) is getattr(postbox, name), name
        text = repr(obj)
        assert not DEFAULT_REPR.match(text), f"{name} has the default repr: {text}"
        assert type(obj).__repr__ is not object.__repr__, name


def test_reprs_say_what_the_object_is(instances: dict[str, Any]) -> None:
    assert "jobs" in repr(instances["Queue"])
    message = repr(instances["Message"])
    for part in ("id=", '"jobs"', 'label="x"', "state=locked", "delivery_count=1"):
        assert part in message, message
    assert '"jobs"' in repr(instances["Browse"])
    assert repr(instances["Consumer"]) == '<postbox.Consumer of queue "jobs" timeout=0.1>'
    assert str(instances["Store"].path) in repr(instances["Store"])
    assert f"<postbox.Job {instances['Job'].id}>" == repr(instances["Job"])
    assert repr(instances["Transaction"]) == "<postbox.Transaction open>"


MAIN_CLASSES = [
    postbox.Store,
    postbox.Queue,
    postbox.Message,
    postbox.Transaction,
    postbox.TransactionTable,
    postbox.Processor,
    postbox.Topic,
    postbox.Collator,
    postbox.Job,
    postbox.Session,
    postbox.Table,
    postbox.AdminServer,
    postbox.Bridge,
    postbox.TypedQueue,
    postbox.TypedMessage,
]


def public_members(cls: type) -> Iterator[tuple[str, Any]]:
    """The methods and properties a user calls: defined on the class, not starting with _."""
    for name, member in vars(cls).items():
        if not name.startswith("_"):
            yield name, member


@pytest.mark.parametrize("cls", MAIN_CLASSES, ids=lambda c: c.__name__)
def test_classes_and_their_methods_have_docstrings(cls: type) -> None:
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
    undocumented = [
        name
        for name, member in public_members(cls)
        if not (getattr(member, "__doc__", None) or "").strip()
    ]
    assert undocumented == [], f"{cls.__name__}: no docstring on {undocumented}"


def test_help_shows_the_docs() -> None:
    text = pydoc.render_doc(postbox.Store, renderer=pydoc.plaintext)
    assert "queue(" in text and "Opens queue" in text, text[:2000]
    assert (postbox.__doc__ or "").strip()
    assert (postbox.Store.__doc__ or "").strip()
    assert (postbox.Store.queue.__doc__ or "").strip()
