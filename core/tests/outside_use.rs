//! Defects found by programs written from the docs alone, each pinned by the test that would
//! have caught it: stale browses, peeks blind to expired locks, options that replaced instead
//! of merging, sizes that ignored properties, transactions that could not renew, and
//! ambiguous "already open" errors.

mod common;

use std::time::Duration;

use common::{TestStore, counts};
use postbox::{Error, ErrorKind, Message, QueueOptions, Store};

const SEC: Duration = Duration::from_secs(1);

#[test]
fn browse_never_returns_a_message_that_is_gone() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    q.send_batch((0..200).map(|i| format!("m{i}"))).unwrap();
    let mut b = q.browse();
    assert_eq!(b.next().unwrap().unwrap().body(), b"m0");
    // Complete the next ten and purge: the browser must not hand out what no longer exists.
    let taken = q.receive_batch(10, Duration::ZERO).unwrap();
    q.complete_batch(taken).unwrap();
    assert_eq!(b.next().unwrap().unwrap().body(), b"m10");
    q.purge().unwrap();
    assert!(b.next().is_none());
}

#[test]
fn peek_and_browse_see_what_receive_would_take() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with(
            "q",
            QueueOptions::default()
                .lock_duration(10 * SEC)
                .max_deliveries(2),
        )
        .unwrap();
    let spent = q.send("spent").unwrap();
    let later = q.send(Message::new("later").delay(5 * SEC)).unwrap();
    let mut first = q.try_receive().unwrap().unwrap();
    assert_eq!(first.id(), spent);
    first.renew_lock().unwrap();
    drop(first.abandon());
    let second = q.try_receive().unwrap().unwrap(); // delivery 2 of 2: spent once its lock expires
    std::mem::forget(second);
    let held = q.send("held").unwrap();
    let lock = q.try_receive().unwrap().unwrap();
    assert_eq!(lock.id(), held);
    std::mem::forget(lock);
    let expiring = q.send(Message::new("expiring").ttl(7 * SEC)).unwrap();
    assert_eq!(q.peek().unwrap().unwrap().id(), expiring);

    // Nothing writes while time passes: the lock on `held` expires (it comes back), `spent`
    // used up its deliveries (dead-lettered, not shown), `later` falls due, `expiring` expires.
    t.clock.advance(11 * SEC);
    let browsed: Vec<_> = q.browse().map(|e| e.unwrap().id()).collect();
    assert_eq!(browsed, vec![later, held]);
    assert_eq!(q.peek().unwrap().unwrap().id(), later);
    // Receive agrees.
    let r = q.try_receive().unwrap().unwrap();
    assert_eq!(r.id(), later);
    let h = q.try_receive().unwrap().unwrap();
    assert_eq!(h.id(), held);
    assert_eq!(q.stats().unwrap().dead_lettered, 2);
}

#[test]
fn options_not_mentioned_keep_their_stored_values() {
    let t = TestStore::new();
    let s = t.store();
    s.queue_with(
        "q",
        QueueOptions::default()
            .max_deliveries(3)
            .default_ttl(60 * SEC)
            .max_messages(100),
    )
    .unwrap();
    // Another handle changes one option; the rest stay.
    let other = s
        .queue_with("q", QueueOptions::default().lock_duration(5 * SEC))
        .unwrap();
    let o = other.options().unwrap();
    assert_eq!(
        (
            o.lock_duration,
            o.max_deliveries,
            o.default_ttl,
            o.max_messages
        ),
        (5 * SEC, 3, Some(60 * SEC), Some(100))
    );
    // Each option can be cleared or put back to its default explicitly.
    let q = s
        .queue_with(
            "q",
            QueueOptions::default()
                .no_default_ttl()
                .no_max_messages()
                .max_deliveries(10),
        )
        .unwrap();
    let o = q.options().unwrap();
    assert_eq!(
        (o.default_ttl, o.max_messages, o.max_deliveries),
        (None, None, 10)
    );
    assert_eq!(o.lock_duration, 5 * SEC);
    // A handle reads the options as stored now, not as they were when it was opened.
    s.queue_with("q", QueueOptions::default().max_bytes(1 << 20))
        .unwrap();
    assert_eq!(other.options().unwrap().max_bytes, Some(1 << 20));
    // A field set directly to a non-default value counts as mentioned.
    let mut direct = QueueOptions::default();
    direct.max_deliveries = 7;
    s.queue_with("q", direct).unwrap();
    assert_eq!(q.options().unwrap().max_deliveries, 7);
    assert_eq!(q.options().unwrap().lock_duration, 5 * SEC);
}

#[test]
fn sends_follow_the_stored_size_limit_not_the_handles() {
    let t = TestStore::new();
    let s = t.store();
    let small = s
        .queue_with("q", QueueOptions::default().max_message_size(100))
        .unwrap();
    assert_eq!(
        small.send(vec![0u8; 200]).unwrap_err().kind(),
        ErrorKind::TooLarge
    );
    s.queue_with("q", QueueOptions::default().max_message_size(1000))
        .unwrap();
    small.send(vec![0u8; 200]).unwrap();
    let mut tx = s.begin();
    tx.send(&small, vec![0u8; 900]).unwrap();
    tx.commit().unwrap();
}

#[test]
fn the_whole_message_counts_against_size_limits_and_quotas() {
    let t = TestStore::new();
    let s = t.store();
    let q = s
        .queue_with(
            "q",
            QueueOptions::default()
                .max_message_size(100)
                .max_bytes(1000),
        )
        .unwrap();
    let big = "x".repeat(5 << 20);
    let before = std::fs::metadata(&t.path).unwrap().len();
    // Over the per-field bounds: refused before anything is stored.
    for m in [
        Message::new("b").label(big.as_str()),
        Message::new("b").correlation_id(big.as_str()),
        Message::new("b").property("k", big.as_str()),
        Message::new("b").property("k".repeat(300), "v"),
    ] {
        let e = q.send(m).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::TooLarge | ErrorKind::InvalidArgument),
            "{e}"
        );
    }
    // Within the field bounds but over max_message_size once properties count.
    let e = q
        .send(Message::new("b").label("l".repeat(100)))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::MessageTooLarge {
                size: 101,
                max: 100
            }
        ),
        "{e}"
    );
    q.send(Message::new("b").label("l".repeat(99))).unwrap();
    assert_eq!(counts(&q).4, 100);
    // max_bytes counts the same size: 100 + 9 × 99 = 991 bytes held, 10 more do not fit.
    for _ in 0..9 {
        q.send(Message::new("b").property("k", "v".repeat(97)))
            .unwrap();
    }
    assert_eq!(counts(&q).4, 991);
    let e = q.send("x".repeat(10)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QueueFull, "{e}");
    let grew = std::fs::metadata(&t.path).unwrap().len() - before;
    assert!(grew < 1 << 20, "the file grew {grew} bytes");
}

#[test]
fn dead_letter_texts_are_bounded() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    q.send("m").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    let refused = m.dead_letter(&"r".repeat(300), "d").unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidArgument);
    let m = refused.into_message();
    m.dead_letter("Reason", &"é".repeat(10 << 20)).unwrap();
    let d = q.dead_letters().unwrap().peek().unwrap().unwrap();
    let info = d.dead_letter_info().unwrap();
    assert_eq!(info.reason, "Reason");
    assert!(info.description.len() <= postbox::MAX_DESCRIPTION_LEN);
    assert!(info.description.len() > postbox::MAX_DESCRIPTION_LEN - 2);
}

#[test]
fn a_failed_settle_gives_the_message_back_still_locked() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    q.send("m").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    let e = m.resubmit().unwrap_err();
    assert!(!e.is_lock_lost());
    let m = e.into_message();
    assert_eq!(counts(&q).1, 1, "still locked");
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn transactional_receives_can_renew_their_locks() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().lock_duration(10 * SEC))
        .unwrap();
    let out = t.store().queue("out").unwrap();
    q.send("m").unwrap();
    let mut tx = t.store().begin();
    let m = tx.receive(&q, Duration::ZERO).unwrap().unwrap();
    let first = tx.locked_until(m.id()).unwrap();
    assert!(tx.lock_token(m.id()).is_some());
    t.clock.advance(8 * SEC);
    let renewed = tx.renew_lock(m.id()).unwrap();
    assert!(renewed > first);
    assert_eq!(tx.locked_until(m.id()), Some(renewed));
    t.clock.advance(8 * SEC); // past the first expiry, inside the renewed one
    tx.send(&out, "done").unwrap();
    tx.commit().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
    assert_eq!(counts(&out).0, 1);
    let mut tx = t.store().begin();
    assert!(matches!(
        tx.renew_lock(postbox::MessageId(999)),
        Err(Error::MessageNotFound(_))
    ));
}

#[test]
fn a_closed_store_refuses_transactional_work_at_once() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let mut tx = t.store().begin();
    t.store().clone().close().unwrap();
    assert!(t.store().is_closed());
    assert!(matches!(tx.send(&q, "x"), Err(Error::Closed)));
    assert!(matches!(t.store().try_begin(), Err(Error::Closed)));
}

#[test]
fn opening_a_store_twice_in_one_process_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let first = Store::open(&path).unwrap();
    let e = Store::open(&path).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyOpen);
    assert!(e.to_string().contains("this process"), "{e}");
    first.close().unwrap();
    Store::open(&path).unwrap().close().unwrap();
}

#[test]
fn complete_batch_refuses_messages_of_another_queue() {
    let t = TestStore::new();
    let a = t.store().queue("a").unwrap();
    let b = t.store().queue("b").unwrap();
    b.send("of b").unwrap();
    let m = b.try_receive().unwrap().unwrap();
    let e = a.complete_batch(vec![m]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Nothing was completed: the message went back to b.
    assert_eq!(counts(&b), (1, 0, 0, 0, 4));
    let m = b.try_receive().unwrap().unwrap();
    let e = a
        .complete_batch_and_receive(vec![m], 1, Duration::ZERO)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(counts(&b), (1, 0, 0, 0, 4));
}

#[test]
fn zero_quotas_are_refused() {
    let t = TestStore::new();
    for o in [
        QueueOptions::default().max_messages(0),
        QueueOptions::default().max_bytes(0),
    ] {
        let e = t.store().queue_with("q", o).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
}
