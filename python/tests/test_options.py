"""Queue options are the store's: only the options given change, None clears or resets one, and
every handle reads what is stored now (invariant 12)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

import postbox

DEFAULTS = {
    "lock_duration": timedelta(seconds=30),
    "max_deliveries": 10,
    "default_ttl": None,
    "max_message_size": 4 << 20,
    "max_messages": None,
    "max_bytes": None,
    "dedup_window": None,
    "requires_session": False,
    "forward_to": None,
    "forward_dead_letters_to": None,
    "journal": None,
    "auto_delete_on_idle": None,
    "receipts_to": None,
    "default_priority": 3,
}

SET = {
    "lock_duration": 5,
    "max_deliveries": 3,
    "default_ttl": 3600,
    "max_message_size": 1000,
    "max_messages": 50,
    "max_bytes": 10_000,
    "dedup_window": 60,
    "auto_delete_on_idle": 86_400,
    "default_priority": 6,
}

AS_READ = {
    "lock_duration": timedelta(seconds=5),
    "max_deliveries": 3,
    "default_ttl": timedelta(hours=1),
    "max_message_size": 1000,
    "max_messages": 50,
    "max_bytes": 10_000,
    "dedup_window": timedelta(minutes=1),
    "auto_delete_on_idle": timedelta(days=1),
    "default_priority": 6,
    # Not in SET: their own tests are in test_forwarding.py, test_sessions.py and
    # test_receipts.py.
    "requires_session": False,
    "forward_to": None,
    "forward_dead_letters_to": None,
    "journal": None,
    "receipts_to": None,
}


def test_new_queue_has_the_defaults(tmp_store: postbox.Store) -> None:
    assert tmp_store.queue("q").options == DEFAULTS


def test_reopening_with_one_option_keeps_the_others(tmp_store: postbox.Store) -> None:
    tmp_store.queue("q", max_deliveries=3)
    q = tmp_store.queue("q", lock_duration=7)
    assert q.options["max_deliveries"] == 3
    assert q.options["lock_duration"] == timedelta(seconds=7)


def test_options_not_given_keep_their_stored_values(tmp_store: postbox.Store) -> None:
    tmp_store.queue("q", **SET)
    for name in SET:
        # Reopen with every other option given its value again: `name` is left out.
        tmp_store.queue("q", **{k: v for k, v in SET.items() if k != name})
        assert tmp_store.queue("q").options == AS_READ
    assert tmp_store.queue("q").options == AS_READ


@pytest.mark.parametrize("name", sorted(SET))
def test_none_clears_or_resets_one_option(tmp_store: postbox.Store, name: str) -> None:
    tmp_store.queue("q", **SET)
    q = tmp_store.queue("q", **{name: None})
    expected = dict(AS_READ)
    expected[name] = DEFAULTS[name]  # None for the optional ones, the default for the others
    assert q.options == expected


def test_none_for_a_new_queue_means_the_default(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("fresh", **{name: None for name in SET})
    assert q.options == DEFAULTS


def test_another_handles_change_is_visible(store_path: Path) -> None:
    with postbox.Store(store_path, multi_process=True) as a, postbox.Store(
        store_path, multi_process=True
    ) as b:
        qa = a.queue("q", max_deliveries=3)
        qb = b.queue("q")
        assert qb.options["max_deliveries"] == 3
        b.queue("q", max_deliveries=5, default_ttl=60)
        assert qa.options["max_deliveries"] == 5
        assert qa.options["default_ttl"] == timedelta(minutes=1)
        a.queue("q", default_ttl=None)
        assert qb.options["default_ttl"] is None


def test_stored_options_govern_sends_of_older_handles(tmp_store: postbox.Store) -> None:
    old = tmp_store.queue("q")
    old.send(b"x" * 100)
    tmp_store.queue("q", max_message_size=50)
    with pytest.raises(postbox.MessageTooLargeError):
        old.send(b"x" * 100)
    tmp_store.queue("q", max_message_size=None)
    old.send(b"x" * 100)


def test_stored_options_govern_transactions(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q")
    tmp_store.queue("q", max_message_size=10)
    with tmp_store.transaction() as tx:
        with pytest.raises(postbox.MessageTooLargeError):
            tx.send(q, b"x" * 11)
        tx.send(q, b"x" * 10)
    assert len(q) == 1


def test_reopen_keeps_options_across_processes(store_path: Path) -> None:
    with postbox.Store(store_path) as s:
        s.queue("q", max_deliveries=3, dedup_window=30)
    with postbox.Store(store_path) as s:
        q = s.queue("q", lock_duration=2)
        assert q.options["max_deliveries"] == 3
        assert q.options["dedup_window"] == timedelta(seconds=30)
        assert q.options["lock_duration"] == timedelta(seconds=2)


def test_bad_option_values(tmp_store: postbox.Store) -> None:
    with pytest.raises(TypeError, match="unexpected keyword"):
        tmp_store.queue("q", max_delivery=3)
    with pytest.raises(TypeError):
        tmp_store.queue("q", max_deliveries=True)
    with pytest.raises(TypeError):
        tmp_store.queue("q", max_deliveries="3")
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("q", max_deliveries=2**32)
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("q", max_bytes=-1)
    with pytest.raises(ValueError):
        tmp_store.queue("q", default_ttl=-5)
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("q", default_ttl=0)
    # A refused call changes nothing.
    assert tmp_store.queue("q").options == DEFAULTS
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.queue("q", default_priority=postbox.MAX_PRIORITY + 1)
    with pytest.raises(TypeError):
        tmp_store.queue("q", default_priority=True)
    assert tmp_store.queue("q").options == DEFAULTS


def test_default_priority_applies_to_sends_without_one(tmp_store: postbox.Store) -> None:
    q = tmp_store.queue("q", default_priority=6)
    q.send(b"explicit", priority=2)
    q.send(b"plain")
    with tmp_store.transaction() as tx:
        tx.send(q, b"in a tx")
    got = []
    for _ in range(3):
        m = q.receive_nowait()
        got.append((m.priority, m.body))
        m.complete()
    assert got == [(6, b"plain"), (6, b"in a tx"), (2, b"explicit")]


def _stubs() -> str:
    here = Path(__file__).resolve().parent.parent / "postbox" / "_postbox.pyi"
    path = here if here.exists() else Path(postbox.__file__).parent / "_postbox.pyi"
    return path.read_text(encoding="utf-8")


def test_every_option_is_in_the_stubs(tmp_store: postbox.Store) -> None:
    # `Queue.options` lists every option the library has (its option table), so an option
    # added there without its keyword in the stubs fails here.
    names = set(tmp_store.queue("q").options)
    stubs = _stubs()
    queue_sig = re.search(r"def queue\(\s*self,\s*name: str,\s*\*,(.*?)\) -> Queue:", stubs, re.S)
    typed = re.search(r"class _QueueOptions\(TypedDict.*?\n\n(.*?)\n\n", stubs, re.S)
    assert queue_sig is not None and typed is not None
    for name in names:
        assert re.search(rf"\b{name}:", queue_sig.group(1)), f"Store.queue lacks {name}"
        assert re.search(rf"\b{name}:", typed.group(1)), f"_QueueOptions lacks {name}"
