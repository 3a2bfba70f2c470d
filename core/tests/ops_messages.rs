//! Messages: every property, defaults, ids, batches, peek, browse, get.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use common::{SEC, TestStore, counts};
use postbox::{
    DEFAULT_PRIORITY, Error, ErrorKind, Message, MessageId, PropertyValue, QueueOptions,
};

fn full_message(t: &TestStore) -> Message {
    Message::new(b"\x00binary\xffbody".to_vec())
        .label("resize")
        .content_type("application/octet-stream")
        .correlation_id("req-42")
        .reply_to("replies")
        .message_key("key-1")
        .group("customer-7")
        .sequence(9)
        .priority(6)
        .ttl(3600 * SEC)
        .property("tenant", "acme")
        .property("empty", "")
        .property("ünï", "cödé")
        .property("raw", vec![0u8, 1, 2, 255])
        .property("raw-empty", Vec::<u8>::new())
        .visible_at(t.now() - SEC)
}

fn assert_full_properties(e: &postbox::Envelope, enqueued: SystemTime) {
    assert_eq!(e.body(), b"\x00binary\xffbody");
    assert_eq!(e.label(), Some("resize"));
    assert_eq!(e.content_type(), Some("application/octet-stream"));
    assert_eq!(e.correlation_id(), Some("req-42"));
    assert_eq!(e.reply_to(), Some("replies"));
    assert_eq!(e.message_key(), Some("key-1"));
    assert_eq!(e.group(), Some("customer-7"));
    assert_eq!(e.sequence(), Some(9));
    assert_eq!(e.priority(), 6);
    assert_eq!(e.enqueued_at(), enqueued);
    assert_eq!(e.expires_at(), Some(enqueued + 3600 * SEC));
    assert_eq!(e.visible_at(), Some(enqueued - SEC));
    let mut expected = BTreeMap::new();
    expected.insert("tenant".to_string(), PropertyValue::from("acme"));
    expected.insert("empty".to_string(), PropertyValue::from(""));
    expected.insert("ünï".to_string(), PropertyValue::from("cödé"));
    expected.insert("raw".to_string(), PropertyValue::Bytes(vec![0, 1, 2, 255]));
    expected.insert("raw-empty".to_string(), PropertyValue::Bytes(vec![]));
    assert_eq!(e.properties(), &expected);
    assert_eq!(
        e.property("raw"),
        Some(&PropertyValue::Bytes(vec![0, 1, 2, 255]))
    );
    assert_eq!(e.property("missing"), None);
    assert!(e.dead_letter_info().is_none());
}

#[test]
fn every_message_property_round_trips() {
    let mut t = TestStore::new();
    let q = t.store().queue_with("q", QueueOptions::default()).unwrap();
    let enqueued = t.now();
    let id = q.send(full_message(&t)).unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 0, 112));

    let peeked = q.peek().unwrap().unwrap();
    assert_eq!(peeked.id(), id);
    assert_eq!(peeked.queue(), "q");
    assert_eq!(peeked.delivery_count(), 0);
    assert_full_properties(&peeked, enqueued);
    assert_eq!(q.get(id).unwrap().unwrap(), peeked);
    let browsed: Vec<_> = q.browse().map(Result::unwrap).collect();
    assert_eq!(browsed, vec![peeked.clone()]);

    drop(q);
    t.reopen();
    let q = t.store().queue("q").unwrap();
    assert_eq!(q.peek().unwrap().unwrap(), peeked);
    let m = q.try_receive().unwrap().unwrap();
    assert_full_properties(&m, enqueued);
    assert_eq!(m.delivery_count(), 1);
    assert_eq!(m.message_id(), id);
    assert_eq!(m.envelope().id(), id);
    // to_message forwards body and properties.
    let fwd = m.to_message();
    let other = t.store().queue("forwarded").unwrap();
    let fid = other.send(fwd).unwrap();
    let copy = other.get(fid).unwrap().unwrap();
    assert_eq!(copy.body(), m.body());
    assert_eq!(copy.properties(), m.properties());
    assert_eq!(copy.label(), Some("resize"));
    assert_eq!(copy.expires_at(), m.expires_at());
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn plain_message_has_defaults() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let id = q.send(Message::new(Vec::new())).unwrap();
    let e = q.get(id).unwrap().unwrap();
    assert_eq!(e.body(), b"");
    assert_eq!(e.priority(), DEFAULT_PRIORITY);
    assert_eq!(e.label(), None);
    assert_eq!(e.content_type(), None);
    assert_eq!(e.correlation_id(), None);
    assert_eq!(e.reply_to(), None);
    assert_eq!(e.message_key(), None);
    assert_eq!(e.group(), None);
    assert_eq!(e.sequence(), None);
    assert_eq!(e.visible_at(), None);
    assert_eq!(e.expires_at(), None);
    assert_eq!(e.enqueued_at(), t.now());
    assert!(e.properties().is_empty());
    assert_eq!(counts(&q), (1, 0, 0, 0, 0));
    // A large body round trips byte for byte.
    let big: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect();
    let id = q.send(big.clone()).unwrap();
    assert_eq!(q.get(id).unwrap().unwrap().body(), &big[..]);
    assert_eq!(counts(&q), (2, 0, 0, 0, 1 << 20));
}

#[test]
fn send_assigns_increasing_ids_across_queues() {
    let t = TestStore::new();
    let a = t.store().queue("a").unwrap();
    let b = t.store().queue("b").unwrap();
    let mut last = MessageId(0);
    for i in 0..20 {
        let q = if i % 3 == 0 { &a } else { &b };
        let id = q.send(format!("m{i}").as_str()).unwrap();
        assert!(id > last, "{id} after {last}");
        assert_eq!(id.get(), id.0);
        last = id;
    }
    assert_eq!(counts(&a), (7, 0, 0, 0, 4 * 2 + 3 * 3)); // m0 m3 m6 m9 m12 m15 m18
    assert_eq!(counts(&b).0, 13);
}

#[test]
fn send_batch_is_atomic() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_message_size(8))
        .unwrap();
    let ids = q.send_batch(["a", "bb", "ccc"]).unwrap();
    assert_eq!(ids.len(), 3);
    assert!(ids[0] < ids[1] && ids[1] < ids[2]);
    assert_eq!(counts(&q), (3, 0, 0, 0, 6));
    // One oversize message: none is stored.
    let e = q.send_batch(["ok", "123456789", "fine"]).unwrap_err();
    assert!(
        matches!(e, Error::MessageTooLarge { size: 9, max: 8 }),
        "{e}"
    );
    // One bad priority: none is stored.
    let e = q
        .send_batch(vec![Message::new("ok"), Message::new("p").priority(8)])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(counts(&q), (3, 0, 0, 0, 6));
    let got: Vec<_> = q.browse().map(|e| e.unwrap().id()).collect();
    assert_eq!(got, ids);
    // An empty batch is a no-op.
    assert!(q.send_batch(Vec::<Message>::new()).unwrap().is_empty());
    assert_eq!(counts(&q), (3, 0, 0, 0, 6));
}

#[test]
fn send_batch_over_quota_stores_nothing() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_messages(4))
        .unwrap();
    q.send("1").unwrap();
    let e = q.send_batch(["2", "3", "4", "5"]).unwrap_err();
    assert!(matches!(e, Error::QueueFull { .. }), "{e}");
    assert_eq!(counts(&q), (1, 0, 0, 0, 1));
    q.send_batch(["2", "3", "4"]).unwrap();
    assert_eq!(counts(&q), (4, 0, 0, 0, 4));
}

#[test]
fn peek_shows_the_head_without_locking() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    assert_eq!(q.peek().unwrap(), None);
    let first = q.send("first").unwrap();
    let second = q.send("second").unwrap();
    q.send(Message::new("scheduled").delay(SEC).priority(7))
        .unwrap();
    for _ in 0..3 {
        let p = q.peek().unwrap().unwrap();
        assert_eq!((p.id(), p.delivery_count()), (first, 0));
    }
    assert_eq!(counts(&q), (2, 0, 1, 0, 5 + 6 + 9));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), first);
    // A locked message is not the head any more.
    assert_eq!(q.peek().unwrap().unwrap().id(), second);
    assert_eq!(counts(&q), (1, 1, 1, 0, 20));
}

#[test]
fn browse_lists_receivable_messages_in_delivery_order() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let mut expected = Vec::new();
    // Enough messages to cross several browse pages.
    let msgs: Vec<Message> = (0..150u32)
        .map(|i| Message::new(i.to_le_bytes().to_vec()).priority(((i * 7) % 8) as u8))
        .collect();
    let ids = q.send_batch(msgs).unwrap();
    for (i, id) in ids.into_iter().enumerate() {
        expected.push((std::cmp::Reverse(((i * 7) % 8) as u8), id));
    }
    q.send(Message::new("later").delay(SEC)).unwrap();
    expected.sort();
    let expected: Vec<MessageId> = expected.into_iter().map(|(_, id)| id).collect();
    let got: Vec<MessageId> = q.browse().map(|e| e.unwrap().id()).collect();
    assert_eq!(got, expected);
    // Locked messages are not listed; browsing never locks.
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), expected[0]);
    let got: Vec<MessageId> = q.browse().map(|e| e.unwrap().id()).collect();
    assert_eq!(got, expected[1..]);
    assert_eq!(counts(&q), (149, 1, 1, 0, 150 * 4 + 5));
    // Receive order equals browse order.
    m.complete().unwrap();
    for chunk in expected[1..].chunks(40) {
        let got = q.receive_batch(chunk.len(), Duration::ZERO).unwrap();
        let got_ids: Vec<MessageId> = got.iter().map(|m| m.id()).collect();
        assert_eq!(got_ids, chunk);
        q.complete_batch(got).unwrap();
    }
    assert_eq!(q.browse().count(), 0);
    assert_eq!(counts(&q), (0, 0, 1, 0, 5));
}

#[test]
fn get_finds_a_message_in_any_status_of_its_queue_only() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let other = t.store().queue("other").unwrap();
    let ready = q.send("ready").unwrap();
    let locked = q.send("locked").unwrap();
    let sched = q.send(Message::new("sched").delay(5 * SEC)).unwrap();
    let m1 = q.try_receive().unwrap().unwrap();
    assert_eq!(m1.id(), ready);
    let m2 = q.try_receive().unwrap().unwrap();
    assert_eq!(m2.id(), locked);
    m1.abandon().unwrap();
    let e = q.get(ready).unwrap().unwrap();
    assert_eq!((e.body(), e.delivery_count()), (&b"ready"[..], 1));
    let e = q.get(locked).unwrap().unwrap();
    assert_eq!((e.body(), e.delivery_count()), (&b"locked"[..], 1));
    let e = q.get(sched).unwrap().unwrap();
    assert_eq!(e.visible_at(), Some(t.now() + 5 * SEC));
    assert_eq!(other.get(ready).unwrap(), None);
    assert_eq!(q.get(MessageId(9_999)).unwrap(), None);
    m2.dead_letter("r", "d").unwrap();
    assert_eq!(q.get(locked).unwrap(), None);
    let dl = q.dead_letters().unwrap().get(locked).unwrap().unwrap();
    assert_eq!(dl.queue(), "q/$deadletterqueue");
    assert_eq!(dl.dead_letter_info().unwrap().source_queue, "q");
    let m = q.try_receive().unwrap().unwrap();
    m.complete().unwrap();
    assert_eq!(q.get(ready).unwrap(), None);
}
