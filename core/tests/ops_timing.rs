//! Time: priority order, scheduled delivery, time to live, dead letters.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use common::{SEC, TestStore, counts, ms};
use postbox::{ErrorKind, Message, QueueOptions, REASON_MAX_DELIVERIES, REASON_TTL_EXPIRED};

#[test]
fn priority_higher_first_fifo_within_priority() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let mut sent = Vec::new();
    for round in 0..3 {
        for p in [0u8, 7, 3, 5, 1, 6, 2, 4] {
            let id = q
                .send(Message::new(format!("{p}-{round}")).priority(p))
                .unwrap();
            sent.push((std::cmp::Reverse(p), id));
        }
    }
    sent.sort();
    for (std::cmp::Reverse(p), id) in sent {
        let m = q.try_receive().unwrap().unwrap();
        assert_eq!((m.priority(), m.id()), (p, id));
        m.complete().unwrap();
    }
    for bad in [8u8, 9, 255] {
        let e = q.send(Message::new("x").priority(bad)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}");
    }
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn scheduled_delivery_with_delay_and_visible_at() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let delayed = q.send(Message::new("d").delay(10 * SEC)).unwrap();
    let at = t.now() + 20 * SEC;
    let later = q
        .send(Message::new("v").visible_at(at).priority(7))
        .unwrap();
    let past = q
        .send(Message::new("p").visible_at(t.now() - 20 * SEC))
        .unwrap();
    assert_eq!(counts(&q), (1, 0, 2, 0, 3));
    assert_eq!(q.peek().unwrap().unwrap().id(), past);
    q.try_receive().unwrap().unwrap().complete().unwrap();
    assert!(q.try_receive().unwrap().is_none());
    assert_eq!(
        q.get(delayed).unwrap().unwrap().visible_at(),
        Some(t.now() + 10 * SEC)
    );

    t.clock.advance(10 * SEC - ms(1));
    assert_eq!(counts(&q), (0, 0, 2, 0, 2));
    assert!(q.try_receive().unwrap().is_none());
    t.clock.advance(ms(1));
    assert_eq!(counts(&q), (1, 0, 1, 0, 2));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (delayed, 1));
    m.complete().unwrap();
    t.clock.advance(10 * SEC);
    assert_eq!(counts(&q), (1, 0, 0, 0, 1));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), later);
    assert_eq!(m.visible_at(), Some(at));
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn scheduled_message_survives_reopen() {
    let mut t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let id = q.send(Message::new("later").delay(30 * SEC)).unwrap();
    drop(q);
    t.reopen();
    let q = t.store().queue("q").unwrap();
    assert_eq!(counts(&q), (0, 0, 1, 0, 5));
    t.clock.advance(30 * SEC);
    assert_eq!(q.try_receive().unwrap().unwrap().id(), id);
}

#[test]
fn ttl_expiry_moves_to_the_dead_letter_queue() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let dlq = q.dead_letters().unwrap();
    let short = q.send(Message::new("short").ttl(5 * SEC)).unwrap();
    let abs = q
        .send(Message::new("abs").expires_at(t.now() + 7 * SEC))
        .unwrap();
    let forever = q.send("forever").unwrap();
    let e = q.get(short).unwrap().unwrap();
    assert_eq!(e.expires_at(), Some(t.now() + 5 * SEC));
    assert_eq!(counts(&q), (3, 0, 0, 0, 5 + 3 + 7));

    t.clock.advance(5 * SEC - ms(1));
    assert_eq!(counts(&q), (3, 0, 0, 0, 15));
    t.clock.advance(ms(1));
    assert_eq!(counts(&q), (2, 0, 0, 1, 10));
    t.clock.advance(2 * SEC);
    assert_eq!(counts(&q), (1, 0, 0, 2, 7));
    assert_eq!(counts(&dlq), (2, 0, 0, 0, 8));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), forever);
    m.complete().unwrap();

    for expected in [short, abs] {
        let d = dlq.try_receive().unwrap().unwrap();
        assert_eq!(d.id(), expected);
        let info = d.dead_letter_info().unwrap();
        assert_eq!(info.reason, REASON_TTL_EXPIRED);
        assert_eq!(info.reason, "TTLExpired");
        assert_eq!(info.source_queue, "q");
        assert_eq!(d.delivery_count(), 1);
        assert_eq!(d.expires_at(), None, "dead letters do not expire");
        d.complete().unwrap();
    }
    assert_eq!(counts(&dlq), (0, 0, 0, 0, 0));
}

/// A batch sweeps a bounded number of due entries, but `stats` is exact however many expired
/// at once: messages, locks and scheduled messages alike.
#[test]
fn stats_are_exact_after_a_large_backlog_comes_due() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let n = 2_000;
    q.send_batch((0..n).map(|i| Message::new(format!("e{i}")).ttl(SEC)))
        .unwrap();
    q.send_batch((0..n).map(|i| Message::new(format!("s{i}")).delay(SEC)))
        .unwrap();
    assert_eq!(q.stats().unwrap().active, n);
    assert_eq!(q.stats().unwrap().scheduled, n);
    t.clock.advance(SEC);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.scheduled, s.dead_lettered), (n, 0, n), "{s:?}");
    let held = q
        .receive_batch(n as usize, std::time::Duration::ZERO)
        .unwrap();
    assert_eq!(held.len() as u64, n);
    t.clock.advance(120 * SEC);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (n, 0), "{s:?}");
    drop(held);
}

#[test]
fn expired_message_is_never_delivered_and_queue_default_ttl_applies() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with(
            "q",
            QueueOptions::default()
                .default_ttl(60 * SEC)
                .lock_duration(120 * SEC),
        )
        .unwrap();
    let a = q.send("a").unwrap();
    let b = q.send(Message::new("b").ttl(120 * SEC)).unwrap();
    assert_eq!(
        q.get(a).unwrap().unwrap().expires_at(),
        Some(t.now() + 60 * SEC)
    );
    t.clock.advance(60 * SEC);
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), b);
    assert_eq!(counts(&q), (0, 1, 0, 1, 1));
    // A message does not expire while it is locked; abandoning it after its TTL dead-letters it.
    t.clock.advance(61 * SEC);
    let mut m = m;
    m.renew_lock().unwrap();
    assert_eq!(counts(&q), (0, 1, 0, 1, 1));
    m.abandon().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 2, 0));
    let dlq = q.dead_letters().unwrap();
    let reasons: Vec<String> = dlq
        .browse()
        .map(|e| e.unwrap().dead_letter_info().unwrap().reason.clone())
        .collect();
    assert_eq!(reasons, vec!["TTLExpired", "TTLExpired"]);
}

#[test]
fn max_deliveries_dead_letters_with_reason() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with(
            "q",
            QueueOptions::default()
                .max_deliveries(3)
                .lock_duration(10 * SEC),
        )
        .unwrap();
    let dlq = q.dead_letters().unwrap();
    let id = q.send("poison").unwrap();
    for n in 1..=3 {
        assert_eq!(counts(&q), (1, 0, 0, 0, 6));
        let m = q.try_receive().unwrap().unwrap();
        assert_eq!(m.delivery_count(), n);
        m.abandon().unwrap();
    }
    assert_eq!(counts(&q), (0, 0, 0, 1, 0));
    assert!(q.try_receive().unwrap().is_none());
    let d = dlq.try_receive().unwrap().unwrap();
    assert_eq!(d.id(), id);
    let info = d.dead_letter_info().unwrap();
    assert_eq!(info.reason, REASON_MAX_DELIVERIES);
    assert_eq!(info.reason, "MaxDeliveryCountExceeded");
    d.complete().unwrap();

    // Lock expiries count as deliveries too.
    let id = q.send("sleepy").unwrap();
    let mut lost = Vec::new();
    for n in 1..=3 {
        let m = q.try_receive().unwrap().unwrap();
        assert_eq!(m.delivery_count(), n);
        lost.push(m); // held, never settled: the lock expires
        t.clock.advance(10 * SEC);
    }
    assert_eq!(counts(&q), (0, 0, 0, 1, 0));
    let d = dlq.try_receive().unwrap().unwrap();
    assert_eq!(d.id(), id);
    assert_eq!(d.dead_letter_info().unwrap().reason, REASON_MAX_DELIVERIES);

    // And abandon_after on the last delivery dead-letters instead of scheduling.
    let _ = q.send("delayed poison").unwrap();
    for _ in 0..3 {
        let m = q.try_receive().unwrap().unwrap();
        m.abandon_after(SEC).unwrap();
        t.clock.advance(SEC);
    }
    assert_eq!(counts(&q), (0, 0, 0, 2, 0));
}
