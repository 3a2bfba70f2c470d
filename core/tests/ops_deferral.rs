//! Deferral: a received message set aside, receivable by id only, counted exactly, and treated
//! like any other message by TTL, max deliveries, purge and delete.

mod common;

use std::time::Duration;

use common::{SEC, TestStore};
use postbox::{ErrorKind, Message, QueueOptions};

const NOW: Duration = Duration::ZERO;

#[test]
fn a_deferred_message_is_set_aside_until_received_by_id_even_after_a_restart() {
    let mut t = TestStore::new();
    let id = {
        let q = t.store().queue("orders").unwrap();
        let id = q.send("order 7").unwrap();
        q.send("order 8").unwrap();
        let m = q.try_receive().unwrap().unwrap();
        assert_eq!(m.id(), id);
        m.defer().unwrap();
        let s = q.stats().unwrap();
        assert_eq!((s.active, s.locked, s.deferred), (1, 0, 1));
        // Invisible to every normal read of the queue.
        let next = q.try_receive().unwrap().unwrap();
        assert_ne!(next.id(), id);
        next.complete().unwrap();
        assert!(q.try_receive().unwrap().is_none());
        assert!(q.peek().unwrap().is_none());
        assert_eq!(q.browse().count(), 0);
        assert!(q.get(id).unwrap().is_some(), "still there, by id");
        id
    };
    t.reopen();
    let q = t.store().queue("orders").unwrap();
    assert_eq!(q.stats().unwrap().deferred, 1);
    let m = q.receive_by_id(id, NOW).unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (id, 2));
    let s = q.stats().unwrap();
    assert_eq!((s.deferred, s.locked), (0, 1));
    m.complete().unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.deferred, s.bytes), (0, 0, 0, 0));
}

#[test]
fn a_lock_on_a_deferred_message_ends_in_the_deferred_state() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let id = q.send("x").unwrap();
    q.try_receive().unwrap().unwrap().defer().unwrap();

    // Abandoned (even with a delay): deferred again, never receivable by a normal receive.
    q.receive_by_id(id, NOW)
        .unwrap()
        .unwrap()
        .abandon_after(SEC)
        .unwrap();
    assert_eq!(q.stats().unwrap().deferred, 1);
    t.clock.advance(SEC * 2);
    assert!(q.try_receive().unwrap().is_none());

    // Its lock expired: deferred again too.
    let held = q.receive_by_id(id, NOW).unwrap().unwrap();
    t.clock.advance(SEC * 31);
    assert_eq!(q.stats().unwrap().deferred, 1);
    assert!(q.try_receive().unwrap().is_none());
    assert!(
        q.peek().unwrap().is_none(),
        "an expired lock does not make it receivable"
    );
    assert_eq!(held.complete().unwrap_err().kind(), ErrorKind::LockLost);

    // Deferring it again is allowed; it keeps its delivery count.
    let m = q.receive_by_id(id, NOW).unwrap().unwrap();
    assert_eq!(m.delivery_count(), 4);
    m.defer().unwrap();
    assert_eq!(q.stats().unwrap().deferred, 1);
}

#[test]
fn deferred_messages_keep_their_ttl_and_delivery_limit() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_deliveries(2))
        .unwrap();
    let short = q.send(Message::new("short").ttl(SEC * 10)).unwrap();
    let tired = q.send("tired").unwrap();
    q.try_receive().unwrap().unwrap().defer().unwrap();
    q.try_receive().unwrap().unwrap().defer().unwrap();
    assert_eq!(q.stats().unwrap().deferred, 2);

    // Its time to live runs out while deferred: dead-lettered as expired.
    t.clock.advance(SEC * 11);
    let s = q.stats().unwrap();
    assert_eq!((s.deferred, s.dead_lettered), (1, 1));
    let dlq = q.dead_letters().unwrap();
    let dead = dlq.receive_by_id(short, NOW).unwrap().unwrap();
    assert_eq!(
        dead.dead_letter_info().unwrap().reason,
        postbox::REASON_TTL_EXPIRED
    );
    dead.complete().unwrap();

    // Its second delivery, abandoned: the limit applies as to any message.
    q.receive_by_id(tired, NOW)
        .unwrap()
        .unwrap()
        .abandon()
        .unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.deferred, s.dead_lettered), (0, 1));
    let dead = dlq.try_receive().unwrap().unwrap();
    assert_eq!(dead.id(), tired);
    assert_eq!(
        dead.dead_letter_info().unwrap().reason,
        postbox::REASON_MAX_DELIVERIES
    );
    // Resubmitted, it is an ordinary message again.
    dead.resubmit().unwrap();
    assert_eq!(q.try_receive().unwrap().unwrap().id(), tired);
}

#[test]
fn purge_delete_and_quotas_count_deferred_messages() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_messages(2))
        .unwrap();
    q.send("a").unwrap();
    q.send("b").unwrap();
    q.try_receive().unwrap().unwrap().defer().unwrap();
    assert_eq!(q.send("c").unwrap_err().kind(), ErrorKind::QueueFull);
    assert_eq!(q.purge().unwrap(), 2);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.deferred, s.bytes), (0, 0, 0));

    let id = q.send("d").unwrap();
    q.try_receive().unwrap().unwrap().defer().unwrap();
    assert!(t.store().delete_queue("q").unwrap());
    let q = t.store().queue("q").unwrap();
    assert_eq!(q.stats().unwrap().deferred, 0);
    assert!(q.receive_by_id(id, NOW).unwrap().is_none());
}
