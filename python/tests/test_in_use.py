"""Queues in use: a queue that another queue's forward_to, forward_dead_letters_to or
receipts_to names, that a collator releases into, or that a pending job's continuation goes to,
is not deleted (InUseError names the user), and receipts_to a missing queue is refused like
forward_to."""

from __future__ import annotations

import pytest

import postbox


def refused(store: postbox.Store, name: str, user: str) -> None:
    with pytest.raises(postbox.InUseError) as e:
        store.delete_queue(name)
    assert e.value.code == 21
    assert e.value.queue == name
    assert user in e.value.used_by
    assert user in str(e.value)
    assert name in store.queues()


def test_named_queues_are_not_deleted(tmp_store: postbox.Store) -> None:
    audit = tmp_store.queue("audit")
    tmp_store.queue("fwd")
    tmp_store.queue("work", receipts_to="audit", forward_dead_letters_to="fwd")
    audit.send(b"kept")
    refused(tmp_store, "audit", 'the receipts_to of queue "work"')
    refused(tmp_store, "fwd", 'the forward_dead_letters_to of queue "work"')
    assert len(audit) == 1

    tiles = tmp_store.queue("tiles")
    tmp_store.collator("tiles-in", tiles)
    refused(tmp_store, "tiles", 'the destination of collator "tiles-in"')

    stitch = tmp_store.queue("stitch")
    pieces = tmp_store.queue("pieces")
    job = tmp_store.create_job(continuation=(stitch, b"stitch it"))
    job.send(pieces, b"p1")
    job.seal()
    refused(tmp_store, "stitch", f"job {job.id}'s continuation")
    pieces.receive(timeout=1).complete()
    assert job.progress().done
    assert stitch.receive(timeout=1).body == b"stitch it"
    assert tmp_store.delete_queue("stitch")

    # Without the use, the queues go.
    tmp_store.queue("work", receipts_to=None, forward_dead_letters_to=None)
    assert tmp_store.delete_queue("audit") and tmp_store.delete_queue("fwd")
    assert tmp_store.delete_queue("tiles-in") and tmp_store.delete_queue("tiles")


def test_receipts_to_a_missing_or_temporary_queue_is_refused(tmp_store: postbox.Store) -> None:
    for option in ("receipts_to", "forward_to", "forward_dead_letters_to"):
        with pytest.raises(postbox.InvalidArgumentError, match='"audti": no such queue'):
            tmp_store.queue("work", **{option: "audti"})
    assert "work" not in tmp_store.queues()
    temp = tmp_store.temporary_queue()
    with pytest.raises(postbox.InvalidArgumentError, match="temporary"):
        tmp_store.queue("work", receipts_to=temp)
    with pytest.raises(postbox.InvalidArgumentError, match="temporary"):
        tmp_store.create_job(continuation=(temp, b"x"))
    with pytest.raises(postbox.InvalidArgumentError, match="temporary"):
        tmp_store.collator("c", temp)
