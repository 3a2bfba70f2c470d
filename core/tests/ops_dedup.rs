//! Duplicate detection within a queue's dedup window.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use common::{SEC, TestStore, counts, ms};
use postbox::{Message, QueueOptions};

#[test]
fn dedup_window_with_message_key() {
    let mut t = TestStore::new();
    let opts = QueueOptions::default().dedup_window(60 * SEC);
    let q = t.store().queue_with("q", opts.clone()).unwrap();
    let first = q.send(Message::new("first").message_key("k1")).unwrap();
    let dup = q.send(Message::new("second").message_key("k1")).unwrap();
    assert_eq!(dup, first);
    assert_eq!(counts(&q), (1, 0, 0, 0, 7));
    assert_eq!(q.get(first).unwrap().unwrap().body(), b"first");
    let other = q.send(Message::new("other").message_key("k2")).unwrap();
    assert_ne!(other, first);
    // A batch with a repeated key stores it once.
    let ids = q
        .send_batch(vec![
            Message::new("x").message_key("k3"),
            Message::new("y").message_key("k3"),
            Message::new("z").message_key("k1"),
        ])
        .unwrap();
    assert_eq!(ids[0], ids[1]);
    assert_eq!(ids[2], first);
    assert_eq!(counts(&q), (3, 0, 0, 0, 17));
    // The key is remembered even after the message is completed.
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), first);
    m.complete().unwrap();
    assert_eq!(
        q.send(Message::new("again").message_key("k1")).unwrap(),
        first
    );
    assert_eq!(counts(&q), (2, 0, 0, 0, 10));

    // It survives a reopen.
    drop(q);
    t.reopen();
    let q = t.store().queue("q").unwrap();
    assert_eq!(q.options().unwrap(), opts);
    t.clock.advance(60 * SEC - ms(1));
    assert_eq!(
        q.send(Message::new("again").message_key("k1")).unwrap(),
        first
    );
    assert_eq!(counts(&q), (2, 0, 0, 0, 10));
    // Outside the window it is a new message.
    t.clock.advance(ms(1));
    let new = q.send(Message::new("new").message_key("k1")).unwrap();
    assert!(new > first);
    assert_eq!(counts(&q), (3, 0, 0, 0, 15));
    assert_eq!(q.send(Message::new("dup").message_key("k1")).unwrap(), new);
    assert_eq!(counts(&q), (3, 0, 0, 0, 15));
}

#[test]
fn message_key_without_dedup_window_does_not_deduplicate() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let a = q.send(Message::new("a").message_key("k")).unwrap();
    let b = q.send(Message::new("b").message_key("k")).unwrap();
    assert_ne!(a, b);
    assert_eq!(counts(&q), (2, 0, 0, 0, 4));
}

#[test]
fn dedup_is_per_queue() {
    let t = TestStore::new();
    let opts = QueueOptions::default().dedup_window(60 * SEC);
    let a = t.store().queue_with("a", opts.clone()).unwrap();
    let b = t.store().queue_with("b", opts).unwrap();
    let ia = a.send(Message::new("x").message_key("k")).unwrap();
    let ib = b.send(Message::new("x").message_key("k")).unwrap();
    assert_ne!(ia, ib);
    assert_eq!(counts(&a).0, 1);
    assert_eq!(counts(&b).0, 1);
}
