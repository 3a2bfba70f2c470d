//! Peek-lock: receive, complete, abandon, dead-letter, resubmit, renew, lost locks.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use common::{SEC, TestStore, counts, ms};
use postbox::{Error, ErrorKind, Message, PropertyValue, QueueOptions};

#[test]
fn receive_locks_and_complete_removes() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    assert!(q.try_receive().unwrap().is_none());
    let id = q.send("work").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(
        (m.id(), m.delivery_count(), m.body()),
        (id, 1, &b"work"[..])
    );
    assert_eq!(m.locked_until(), t.now() + 30 * SEC);
    assert_eq!(counts(&q), (0, 1, 0, 0, 4));
    // Nobody else gets it while it is locked.
    assert!(q.try_receive().unwrap().is_none());
    let token = m.lock_token();
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
    assert!(q.try_receive().unwrap().is_none());
    assert_eq!(q.get(id).unwrap(), None);
    // Completed means gone, even after the lock would have expired and after a reopen.
    t.clock.advance(3600 * SEC);
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
    // Lock tokens are unique per delivery.
    q.send("again").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    assert_ne!(m.lock_token(), token);
}

#[test]
fn abandon_returns_the_message_to_its_place_with_its_delivery_count() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let a = q.send("a").unwrap();
    let b = q.send("b").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), a);
    m.abandon().unwrap();
    assert_eq!(counts(&q), (2, 0, 0, 0, 2));
    // It is delivered again before the later message (send order within a priority).
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (a, 2));
    let n = q.try_receive().unwrap().unwrap();
    assert_eq!((n.id(), n.delivery_count()), (b, 1));
    assert_eq!(counts(&q), (0, 2, 0, 0, 2));
    // Dropping an unsettled message abandons it too.
    drop(m);
    assert_eq!(counts(&q), (1, 1, 0, 0, 2));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (a, 3));
}

#[test]
fn abandon_after_delays_redelivery() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let id = q.send("retry me").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    m.abandon_after(10 * SEC).unwrap();
    assert_eq!(counts(&q), (0, 0, 1, 0, 8));
    assert!(q.try_receive().unwrap().is_none());
    assert_eq!(q.peek().unwrap(), None);
    t.clock.advance(10 * SEC - ms(1));
    assert!(q.try_receive().unwrap().is_none());
    assert_eq!(counts(&q), (0, 0, 1, 0, 8));
    t.clock.advance(ms(1));
    assert_eq!(counts(&q), (1, 0, 0, 0, 8));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (id, 2));
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn dead_letter_moves_to_the_dead_letter_queue_with_reason_and_description() {
    let t = TestStore::new();
    let q = t.store().queue("orders").unwrap();
    let dlq = q.dead_letters().unwrap();
    let id = q
        .send(Message::new("poison").label("l").property("k", "v"))
        .unwrap();
    q.send("fine").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    m.dead_letter("ValidationFailed", "field x is missing")
        .unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 1, 4));
    assert_eq!(counts(&dlq), (1, 0, 0, 0, 9));
    let p = dlq.peek().unwrap().unwrap();
    assert_eq!(p.id(), id);
    let info = p.dead_letter_info().unwrap();
    assert_eq!(info.reason, "ValidationFailed");
    assert_eq!(info.description, "field x is missing");
    assert_eq!(info.source_queue, "orders");
    assert_eq!(info.at, t.now());
    assert_eq!(p.label(), Some("l"));
    assert_eq!(p.property("k"), Some(&PropertyValue::from("v")));
    assert_eq!(p.delivery_count(), 1);
    assert_eq!(p.queue(), "orders/$deadletterqueue");

    // The dead-letter queue is receivable like any queue; a dead letter cannot die twice.
    let d = dlq.try_receive().unwrap().unwrap();
    assert_eq!((d.id(), d.delivery_count()), (id, 2));
    assert_eq!(counts(&dlq), (0, 1, 0, 0, 9));
    assert_eq!(counts(&q), (1, 0, 0, 1, 4));
    d.complete().unwrap();
    assert_eq!(counts(&dlq), (0, 0, 0, 0, 0));
    assert_eq!(counts(&q), (1, 0, 0, 0, 4));
}

#[test]
fn resubmit_moves_a_dead_letter_back_to_its_source() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let dlq = q.dead_letters().unwrap();
    let id = q.send(Message::new("again").priority(2)).unwrap();
    let m = q.try_receive().unwrap().unwrap();
    m.dead_letter("Oops", "handler failed").unwrap();
    let d = dlq.try_receive().unwrap().unwrap();
    d.resubmit().unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 0, 5));
    assert_eq!(counts(&dlq), (0, 0, 0, 0, 0));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), id);
    assert_eq!(m.delivery_count(), 1, "resubmit resets the delivery count");
    assert_eq!(m.priority(), 2);
    assert_eq!(m.queue(), "q");
    assert!(m.dead_letter_info().is_none());
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn renew_lock_extends_the_lock() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().lock_duration(10 * SEC))
        .unwrap();
    q.send("long job").unwrap();
    let mut m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.locked_until(), t.now() + 10 * SEC);
    t.clock.advance(8 * SEC);
    let until = m.renew_lock().unwrap();
    assert_eq!(until, t.now() + 10 * SEC);
    assert_eq!(m.locked_until(), until);
    t.clock.advance(8 * SEC); // past the first expiry, inside the renewed one
    assert_eq!(counts(&q), (0, 1, 0, 0, 8));
    assert!(q.try_receive().unwrap().is_none());
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn settling_after_the_lock_expired_is_lock_lost_and_changes_nothing() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().lock_duration(5 * SEC))
        .unwrap();
    let id = q.send("x").unwrap();
    type Settle = fn(postbox::Received) -> postbox::Result<()>;
    let settles: [(&str, Settle); 4] = [
        ("complete", |m| m.complete().map_err(Error::from)),
        ("abandon", |m| m.abandon().map_err(Error::from)),
        ("abandon_after", |m| {
            m.abandon_after(SEC).map_err(Error::from)
        }),
        ("dead_letter", |m| {
            m.dead_letter("r", "d").map_err(Error::from)
        }),
    ];
    let mut deliveries = 0;
    for (what, settle) in settles {
        let mut m = q.try_receive().unwrap().unwrap();
        deliveries += 1;
        assert_eq!(m.delivery_count(), deliveries);
        t.clock.advance(5 * SEC); // exactly at expiry: the lock is gone
        let before = counts(&q);
        assert_eq!(before, (1, 0, 0, 0, 1), "{what}");
        assert!(matches!(m.renew_lock(), Err(Error::LockLost(x)) if x == id));
        let e = settle(m).unwrap_err();
        assert!(e.is_lock_lost(), "{what}: {e}");
        assert_eq!(e.kind(), ErrorKind::LockLost);
        assert_eq!(counts(&q), before, "{what}");
        assert_eq!(q.peek().unwrap().unwrap().delivery_count(), deliveries);
    }

    // Lock taken over by another receiver after expiry: the old holder gets LockLost, the new
    // holder keeps its lock.
    let old = q.try_receive().unwrap().unwrap();
    t.clock.advance(6 * SEC);
    let new = q.try_receive().unwrap().unwrap();
    assert_eq!(new.id(), id);
    assert!(old.complete().unwrap_err().is_lock_lost());
    assert_eq!(counts(&q), (0, 1, 0, 0, 1));
    new.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

/// `release` gives a message back to the head of its queue without counting the delivery,
/// for a forwarder that never handed it on; a second release is `LockLost`.
#[test]
fn release_returns_a_message_uncounted() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_deliveries(2))
        .unwrap();
    let first = q.send("first").unwrap();
    q.send("second").unwrap();
    for _ in 0..5 {
        let m = q.try_receive().unwrap().unwrap();
        assert_eq!(m.id(), first, "released messages go back to the head");
        assert_eq!(m.delivery_count(), 1);
        m.release().unwrap();
    }
    assert_eq!(q.stats().unwrap().dead_lettered, 0);
    let m = q.try_receive().unwrap().unwrap();
    let token = m.lock_token();
    m.abandon().unwrap();
    let again = q.try_receive().unwrap().unwrap();
    assert_eq!(
        again.delivery_count(),
        2,
        "abandon counts, release does not"
    );
    assert_ne!(again.lock_token(), token);
    again.complete().unwrap();
}

/// A message that arrives with deliveries behind it (`prior_deliveries`) starts with that
/// delivery count, and `max_deliveries` counts them.
#[test]
fn prior_deliveries_count_against_max_deliveries() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_deliveries(3))
        .unwrap();
    q.send(Message::new("tried twice elsewhere").prior_deliveries(2))
        .unwrap();
    assert_eq!(q.peek().unwrap().unwrap().delivery_count(), 2);
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.delivery_count(), 3);
    m.abandon().unwrap();
    assert_eq!(
        q.stats().unwrap().dead_lettered,
        1,
        "the third delivery was its last"
    );
}
