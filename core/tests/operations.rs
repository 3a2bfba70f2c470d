//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries, TTLs
//! and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use common::{TestStore, counts};
use postbox::{
    DEFAULT_PRIORITY, Error, ErrorKind, Message, MessageId, PropertyValue, QueueOptions,
    REASON_MAX_DELIVERIES, REASON_TTL_EXPIRED, Store,
};

const SEC: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---- store ------------------------------------------------------------------------------

#[test]
fn store_create_then_reopen_keeps_queues_messages_and_counts() {
    let mut t = TestStore::new();
    let q = t.store().queue("orders").unwrap();
    let other = t.store().queue("audit").unwrap();
    let a = q.send(Message::new("a").priority(5)).unwrap();
    let b = q.send("bb").unwrap();
    other.send("ccc").unwrap();
    let locked = q.try_receive().unwrap().unwrap();
    assert_eq!(locked.id(), a);
    locked.dead_letter("Bad", "bad input").unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 1, 2));
    drop((q, other));
    t.reopen();

    assert_eq!(t.store().queues().unwrap(), vec!["audit", "orders"]);
    let q = t.store().queue("orders").unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 1, 2));
    assert_eq!(counts(&t.store().queue("audit").unwrap()), (1, 0, 0, 0, 3));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.body()), (b, &b"bb"[..]));
    m.complete().unwrap();
    let dl = q.dead_letters().unwrap().try_receive().unwrap().unwrap();
    assert_eq!(dl.id(), a);
    assert_eq!(dl.dead_letter_info().unwrap().reason, "Bad");
    // New ids continue after the old ones: never reused across a reopen.
    let c = q.send("d").unwrap();
    assert!(c > b);
}

#[test]
fn store_close_releases_locks_with_delivery_count_kept() {
    let mut t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let id = q.send("x").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(counts(&q), (0, 1, 0, 0, 1));
    // The store closes while the message is held: its lock is released, its delivery counted.
    t.store().clone().close().unwrap();
    drop((m, q));
    t.reopen();
    let q = t.store().queue("q").unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 0, 1));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (id, 2));
}

#[cfg(unix)]
#[test]
fn store_file_is_created_with_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let t = TestStore::new();
    let mode = std::fs::metadata(&t.path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(t.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("test.postbox")]);
}

#[test]
fn store_accessors_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let clock = postbox::ManualClock::new();
    let store = common::open_with(&path, &clock);
    assert_eq!(store.path(), path.as_path());
    assert!(!store.is_multi_process());
    assert_eq!(store.durability(), postbox::Durability::Immediate);
    let q = store.queue("q").unwrap();
    q.send("x").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    store.clone().close().unwrap();
    assert!(matches!(q.send("y"), Err(Error::Closed)));
    assert!(matches!(q.try_receive(), Err(Error::Closed)));
    assert!(matches!(q.stats(), Err(Error::Closed)));
    assert!(matches!(store.queues(), Err(Error::Closed)));
    assert!(matches!(store.queue("q"), Err(Error::Closed)));
    assert!(matches!(
        m.complete().map_err(Error::from),
        Err(Error::Closed)
    ));
    store.clone().close().unwrap(); // closing twice is harmless
    // Closing released the file and the lock, although handles to the closed store live on:
    // the message is receivable again after reopening.
    let again = common::open_with(&path, &clock);
    let q2 = again.queue("q").unwrap();
    assert_eq!(counts(&q2), (1, 0, 0, 0, 1));
    assert_eq!(q2.try_receive().unwrap().unwrap().delivery_count(), 2);
    drop((q, store));
}

// ---- queues -----------------------------------------------------------------------------

#[test]
fn queue_create_open_list() {
    let t = TestStore::new();
    assert!(t.store().queues().unwrap().is_empty());
    let q = t.store().queue("b").unwrap();
    assert_eq!(q.name(), "b");
    assert!(!q.is_dead_letter_queue());
    assert_eq!(q.options().unwrap(), QueueOptions::default());
    q.send("kept").unwrap();
    t.store()
        .queue_with("a", QueueOptions::default().max_deliveries(2))
        .unwrap();
    t.store().queue("c/with spaces/ünïcode").unwrap();
    // Listed by name, without dead-letter queues.
    assert_eq!(
        t.store().queues().unwrap(),
        vec!["a", "b", "c/with spaces/ünïcode"]
    );
    // Opening again keeps messages and options.
    let again = t.store().queue("b").unwrap();
    assert_eq!(counts(&again), (1, 0, 0, 0, 4));
    let a = t.store().queue("a").unwrap();
    assert_eq!(a.options().unwrap().max_deliveries, 2);
    // queue_with on an existing queue takes the new options and keeps the messages.
    let b2 = t
        .store()
        .queue_with("b", QueueOptions::default().lock_duration(ms(500)))
        .unwrap();
    assert_eq!(b2.options().unwrap().lock_duration, ms(500));
    assert_eq!(counts(&b2), (1, 0, 0, 0, 4));
    assert_eq!(
        t.store()
            .queue("b")
            .unwrap()
            .options()
            .unwrap()
            .lock_duration,
        ms(500)
    );
    // The dead-letter queue is reached through its source and also by its name.
    let dlq = q.dead_letters().unwrap();
    assert!(dlq.is_dead_letter_queue());
    assert_eq!(dlq.source_name(), Some("b"));
    assert_eq!(dlq.name(), "b/$deadletterqueue");
    let by_name = t.store().queue("b/$deadletterqueue").unwrap();
    assert!(by_name.is_dead_letter_queue());
    assert_eq!(q.source_name(), None);
}

#[test]
fn queue_delete_removes_messages_and_dead_letters() {
    let t = TestStore::new();
    let q = t.store().queue("doomed").unwrap();
    let keep = t.store().queue("keep").unwrap();
    keep.send("stay").unwrap();
    let ids = q.send_batch(["1", "2", "3", "4"]).unwrap();
    q.send(Message::new("later").delay(60 * SEC)).unwrap();
    let dl = q.try_receive().unwrap().unwrap();
    dl.dead_letter("r", "d").unwrap();
    let held = q.try_receive().unwrap().unwrap();
    let dlq = q.dead_letters().unwrap();
    assert_eq!(counts(&q), (2, 1, 1, 1, 8));

    assert!(t.store().delete_queue("doomed").unwrap());
    assert_eq!(t.store().queues().unwrap(), vec!["keep"]);
    for id in &ids {
        assert!(keep.get(*id).unwrap().is_none());
    }
    // Every handle of the deleted queue reports QueueNotFound.
    assert!(matches!(q.send("x"), Err(Error::QueueNotFound(n)) if n == "doomed"));
    assert!(matches!(q.send_batch(["x"]), Err(Error::QueueNotFound(_))));
    assert!(matches!(q.try_receive(), Err(Error::QueueNotFound(_))));
    assert!(matches!(q.stats(), Err(Error::QueueNotFound(_))));
    assert!(matches!(q.purge(), Err(Error::QueueNotFound(_))));
    assert!(matches!(q.dead_letters(), Err(Error::QueueNotFound(_))));
    assert!(matches!(dlq.try_receive(), Err(Error::QueueNotFound(_))));
    assert!(matches!(dlq.stats(), Err(Error::QueueNotFound(_))));
    assert_eq!(q.get(ids[1]).unwrap(), None);
    assert!(matches!(q.peek(), Err(Error::QueueNotFound(_))));
    // The holder of a lock on a deleted message lost it.
    assert!(matches!(
        held.complete().map_err(Error::from),
        Err(Error::LockLost(_))
    ));
    // Deleting again reports that nothing existed; the other queue is untouched.
    assert!(!t.store().delete_queue("doomed").unwrap());
    assert_eq!(counts(&keep), (1, 0, 0, 0, 4));

    // The name can be reused for a fresh, empty queue; the old handle stays dead.
    let fresh = t.store().queue("doomed").unwrap();
    assert_eq!(counts(&fresh), (0, 0, 0, 0, 0));
    assert_eq!(counts(&fresh.dead_letters().unwrap()), (0, 0, 0, 0, 0));
    assert!(matches!(q.send("x"), Err(Error::QueueNotFound(_))));
    // The scheduled message of the old queue never shows up in the new one.
    t.clock.advance(120 * SEC);
    assert_eq!(counts(&fresh), (0, 0, 0, 0, 0));
    assert!(fresh.try_receive().unwrap().is_none());
}

#[test]
fn queue_purge_removes_active_scheduled_and_locked_but_not_dead_letters() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    q.send_batch(["a", "b", "c", "d"]).unwrap();
    q.send(Message::new("sched").delay(10 * SEC)).unwrap();
    q.try_receive()
        .unwrap()
        .unwrap()
        .dead_letter("r", "")
        .unwrap();
    let held = q.try_receive().unwrap().unwrap();
    assert_eq!(counts(&q), (2, 1, 1, 1, 2 + 1 + 5));
    assert_eq!(q.purge().unwrap(), 4);
    assert_eq!(counts(&q), (0, 0, 0, 1, 0));
    assert!(matches!(
        held.complete().map_err(Error::from),
        Err(Error::LockLost(_))
    ));
    t.clock.advance(20 * SEC);
    assert_eq!(counts(&q), (0, 0, 0, 1, 0));
    assert!(q.try_receive().unwrap().is_none());
    assert_eq!(q.purge().unwrap(), 0);
    // The queue stays usable.
    q.send("new").unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 1, 3));
}

#[test]
fn queue_names_are_1_to_255_bytes_of_utf8_without_control_characters() {
    let t = TestStore::new();
    let ok = [
        "a".to_string(),
        "x".repeat(255),
        "é".repeat(127), // 254 bytes
        "orders/eu-west 1".to_string(),
        "日本語のキュー".to_string(),
    ];
    for name in &ok {
        let q = t.store().queue(name).unwrap();
        q.send("x").unwrap();
        assert_eq!(q.name(), name);
    }
    let bad = [
        String::new(),
        "x".repeat(256),
        "é".repeat(128), // 256 bytes
        "tab\there".to_string(),
        "new\nline".to_string(),
        "nul\0".to_string(),
        "del\u{7f}".to_string(),
        "c1\u{85}".to_string(),
        "orders/$deadletterqueue".to_string(), // reserved suffix
    ];
    for name in &bad {
        let e = t.store().queue(name).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{name:?}: {e}");
        let e = t
            .store()
            .queue_with(name, QueueOptions::default())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{name:?}: {e}");
        if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
            let e = t.store().delete_queue(name).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{name:?}: {e}");
        }
    }
    let mut listed = t.store().queues().unwrap();
    let mut expected = ok.to_vec();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
}

// ---- messages ---------------------------------------------------------------------------

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

// ---- peek-lock --------------------------------------------------------------------------

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

// ---- transactions -----------------------------------------------------------------------

#[test]
fn tx_receive_locks_and_tx_send_is_invisible_until_commit() {
    let t = TestStore::new();
    let orders = t.store().queue("orders").unwrap();
    let invoices = t.store().queue("invoices").unwrap();
    let audit = t.store().queue("audit").unwrap();
    let order = orders.send("order 7").unwrap();
    let mut tx = t.store().begin();
    assert!(tx.is_empty());
    let got = tx.receive(&orders, SEC).unwrap().unwrap();
    assert_eq!((got.id(), got.delivery_count()), (order, 1));
    assert_eq!(counts(&orders), (0, 1, 0, 0, 7));
    assert!(orders.try_receive().unwrap().is_none());
    tx.send(&invoices, "invoice 7").unwrap();
    tx.send(&audit, Message::new("audit 7").label("a")).unwrap();
    tx.send(&invoices, "invoice 7b").unwrap();
    assert_eq!(tx.len(), (1, 3));
    assert!(!tx.is_empty());
    assert_eq!(counts(&invoices), (0, 0, 0, 0, 0));
    assert_eq!(invoices.peek().unwrap(), None);
    assert!(invoices.try_receive().unwrap().is_none());
    assert_eq!(audit.browse().count(), 0);
    tx.commit().unwrap();
    assert_eq!(counts(&orders), (0, 0, 0, 0, 0));
    assert_eq!(counts(&invoices), (2, 0, 0, 0, 19));
    assert_eq!(counts(&audit), (1, 0, 0, 0, 8));
    let bodies: Vec<Vec<u8>> = invoices.browse().map(|e| e.unwrap().into_body()).collect();
    assert_eq!(bodies, vec![b"invoice 7".to_vec(), b"invoice 7b".to_vec()]);
    assert_eq!(audit.peek().unwrap().unwrap().label(), Some("a"));
}

#[test]
fn tx_commit_failure_applies_nothing() {
    let t = TestStore::new();
    let src = t.store().queue("src").unwrap();
    let a = t.store().queue("a").unwrap();
    let full = t
        .store()
        .queue_with("full", QueueOptions::default().max_messages(1))
        .unwrap();
    full.send("occupant").unwrap();
    let id = src.send("m").unwrap();
    let mut tx = t.store().begin();
    tx.receive(&src, SEC).unwrap().unwrap();
    tx.send(&a, "to a").unwrap();
    tx.send(&full, "one too many").unwrap();
    let e = tx.commit().unwrap_err();
    assert!(
        matches!(e, Error::QueueFull { ref queue, .. } if queue == "full"),
        "{e}"
    );
    assert_eq!(counts(&a), (0, 0, 0, 0, 0));
    assert_eq!(counts(&full), (1, 0, 0, 0, 8));
    // The received message went back with its delivery counted.
    assert_eq!(counts(&src), (1, 0, 0, 0, 1));
    let m = src.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (id, 2));
}

#[test]
fn tx_abort_and_drop_return_received_messages_and_discard_sends() {
    let t = TestStore::new();
    let src = t.store().queue("src").unwrap();
    let dst = t.store().queue("dst").unwrap();
    let a = src.send("a").unwrap();
    let b = src.send("b").unwrap();

    let mut tx = t.store().begin();
    assert_eq!(tx.try_receive(&src).unwrap().unwrap().id(), a);
    assert_eq!(tx.try_receive(&src).unwrap().unwrap().id(), b);
    assert!(tx.try_receive(&src).unwrap().is_none());
    tx.send(&dst, "never").unwrap();
    assert_eq!(counts(&src), (0, 2, 0, 0, 2));
    tx.abort().unwrap();
    assert_eq!(counts(&src), (2, 0, 0, 0, 2));
    assert_eq!(counts(&dst), (0, 0, 0, 0, 0));

    {
        let mut tx = t.store().begin();
        let e = tx.receive(&src, SEC).unwrap().unwrap();
        assert_eq!((e.id(), e.delivery_count()), (a, 2));
        tx.send(&dst, "never either").unwrap();
        assert_eq!(counts(&src), (1, 1, 0, 0, 2));
    } // dropped: aborted
    assert_eq!(counts(&src), (2, 0, 0, 0, 2));
    assert_eq!(counts(&dst), (0, 0, 0, 0, 0));
    let m = src.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (a, 3));
    let n = src.try_receive().unwrap().unwrap();
    assert_eq!((n.id(), n.delivery_count()), (b, 2));
}

#[test]
fn tx_commit_after_lock_expiry_is_lock_lost_and_applies_nothing() {
    let t = TestStore::new();
    let src = t
        .store()
        .queue_with("src", QueueOptions::default().lock_duration(5 * SEC))
        .unwrap();
    let other = t
        .store()
        .queue_with("other", QueueOptions::default().lock_duration(60 * SEC))
        .unwrap();
    let dst = t.store().queue("dst").unwrap();
    let a = src.send("a").unwrap();
    other.send("o").unwrap();
    let mut tx = t.store().begin();
    tx.receive(&src, SEC).unwrap().unwrap();
    tx.receive(&other, SEC).unwrap().unwrap();
    tx.send(&dst, "result").unwrap();
    t.clock.advance(5 * SEC);
    let e = tx.commit().unwrap_err();
    assert!(matches!(e, Error::LockLost(id) if id == a), "{e}");
    assert_eq!(counts(&dst), (0, 0, 0, 0, 0));
    assert_eq!(counts(&src), (1, 0, 0, 0, 1));
    // The other received message was not completed either: it is back.
    assert_eq!(counts(&other), (1, 0, 0, 0, 1));
    assert_eq!(src.peek().unwrap().unwrap().delivery_count(), 1);
    assert_eq!(other.peek().unwrap().unwrap().delivery_count(), 1);
}

#[test]
fn tx_complete_enlists_a_message_received_outside() {
    let t = TestStore::new();
    let src = t.store().queue("src").unwrap();
    let dst = t.store().queue("dst").unwrap();
    src.send("a").unwrap();
    src.send("b").unwrap();
    let m = src.try_receive().unwrap().unwrap();
    let mut tx = t.store().begin();
    tx.complete(m).unwrap();
    tx.send(&dst, "done a").unwrap();
    tx.commit().unwrap();
    assert_eq!(counts(&src), (1, 0, 0, 0, 1));
    assert_eq!(counts(&dst), (1, 0, 0, 0, 6));
    // Aborting returns an enlisted message.
    let m = src.try_receive().unwrap().unwrap();
    let mut tx = t.store().begin();
    tx.complete(m).unwrap();
    tx.abort().unwrap();
    assert_eq!(counts(&src), (1, 0, 0, 0, 1));
    // An empty transaction commits trivially.
    t.store().begin().commit().unwrap();
    // A message of another store cannot be enlisted; it goes back to its own queue.
    let other = TestStore::new();
    let oq = other.store().queue("elsewhere").unwrap();
    oq.send("foreign").unwrap();
    let foreign = oq.try_receive().unwrap().unwrap();
    let mut tx = t.store().begin();
    let e = tx.complete(foreign).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    tx.commit().unwrap();
    assert_eq!(counts(&oq), (1, 0, 0, 0, 7));
    assert_eq!(counts(&src), (1, 0, 0, 0, 1));
}

// ---- priority, scheduling, expiry, dead letters ---------------------------------------

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

// ---- quotas and limits ------------------------------------------------------------------

#[test]
fn max_messages_quota_counts_active_locked_and_scheduled() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_messages(3))
        .unwrap();
    q.send("a").unwrap();
    q.send(Message::new("b").delay(SEC)).unwrap();
    q.send("c").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(counts(&q), (1, 1, 1, 0, 3));
    let e = q.send("d").unwrap_err();
    assert!(
        matches!(&e, Error::QueueFull { queue, limit } if queue == "q" && limit.contains("max_messages")),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::QueueFull);
    assert_eq!(counts(&q), (1, 1, 1, 0, 3));
    // Dead letters do not count against the source queue.
    m.dead_letter("r", "").unwrap();
    q.send("d").unwrap();
    assert_eq!(counts(&q), (2, 0, 1, 1, 3));
    assert!(q.send("e").unwrap_err().kind() == ErrorKind::QueueFull);
}

#[test]
fn max_bytes_quota() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_bytes(10))
        .unwrap();
    q.send("123456").unwrap();
    let e = q.send("12345").unwrap_err();
    assert!(
        matches!(&e, Error::QueueFull { limit, .. } if limit.contains("max_bytes")),
        "{e}"
    );
    assert_eq!(counts(&q), (1, 0, 0, 0, 6));
    q.send("1234").unwrap();
    assert_eq!(counts(&q), (2, 0, 0, 0, 10));
    q.send("").unwrap();
    q.try_receive().unwrap().unwrap().complete().unwrap();
    assert_eq!(counts(&q), (2, 0, 0, 0, 4));
    q.send("123456").unwrap();
    assert_eq!(counts(&q), (3, 0, 0, 0, 10));
}

#[test]
fn max_message_size() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_message_size(100))
        .unwrap();
    q.send(vec![7u8; 100]).unwrap();
    let e = q.send(vec![7u8; 101]).unwrap_err();
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
    assert_eq!(e.kind(), ErrorKind::TooLarge);
    let mut tx = t.store().begin();
    let e = tx.send(&q, vec![0u8; 101]).unwrap_err();
    assert!(matches!(e, Error::MessageTooLarge { .. }));
    assert_eq!(counts(&q), (1, 0, 0, 0, 100));
    // The default limit is 4 MiB.
    let d = t.store().queue("default").unwrap();
    assert_eq!(d.options().unwrap().max_message_size, 4 << 20);
    d.send(vec![1u8; 4 << 20]).unwrap();
    assert!(matches!(
        d.send(vec![1u8; (4 << 20) + 1]),
        Err(Error::MessageTooLarge { .. })
    ));
    assert_eq!(counts(&d), (1, 0, 0, 0, 4 << 20));
}

// ---- duplicate detection ----------------------------------------------------------------

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

// ---- batches ----------------------------------------------------------------------------

#[test]
fn receive_batch_and_complete_batch() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    assert!(q.receive_batch(5, Duration::ZERO).unwrap().is_empty());
    assert_eq!(
        q.receive_batch(0, SEC).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let mut ids = Vec::new();
    for i in 0..7u8 {
        ids.push(q.send(Message::new(vec![i]).priority(i % 2)).unwrap());
    }
    let mut order: Vec<(std::cmp::Reverse<u8>, MessageId)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (std::cmp::Reverse((i % 2) as u8), *id))
        .collect();
    order.sort();
    let got = q.receive_batch(5, SEC).unwrap();
    let got_ids: Vec<MessageId> = got.iter().map(|m| m.id()).collect();
    let want: Vec<MessageId> = order.iter().take(5).map(|(_, id)| *id).collect();
    assert_eq!(got_ids, want);
    assert!(got.iter().all(|m| m.delivery_count() == 1));
    let tokens: std::collections::HashSet<u64> = got.iter().map(|m| m.lock_token()).collect();
    assert_eq!(tokens.len(), 5);
    assert_eq!(counts(&q), (2, 5, 0, 0, 7));
    q.complete_batch(got).unwrap();
    assert_eq!(counts(&q), (2, 0, 0, 0, 2));
    let rest = q.receive_batch(10, SEC).unwrap();
    assert_eq!(rest.len(), 2);
    q.complete_batch(rest).unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
    q.complete_batch(Vec::new()).unwrap();
}

#[test]
fn complete_batch_is_all_or_nothing() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().lock_duration(10 * SEC))
        .unwrap();
    let a = q.send("a").unwrap();
    q.send("b").unwrap();
    q.send("c").unwrap();
    let first = q.try_receive().unwrap().unwrap();
    t.clock.advance(6 * SEC);
    let mut rest = q.receive_batch(2, SEC).unwrap();
    t.clock.advance(5 * SEC); // a's lock is gone, b's and c's hold
    rest.insert(1, first);
    let e = q.complete_batch(rest).unwrap_err();
    assert!(matches!(e, Error::LockLost(id) if id == a), "{e}");
    // Nothing was completed, and b and c were returned with a instead of staying locked.
    assert_eq!(counts(&q), (3, 0, 0, 0, 3));
}

// ---- waiting ----------------------------------------------------------------------------

#[test]
fn blocked_receiver_wakes_up_when_another_thread_sends() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("q").unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = {
        let q = q.clone();
        std::thread::spawn(move || {
            ready_tx.send(()).unwrap();
            q.receive(Duration::from_secs(60)).unwrap()
        })
    };
    ready_rx.recv().unwrap();
    let id = q.send("wake up").unwrap();
    let m = receiver
        .join()
        .unwrap()
        .expect("the receiver got the message");
    assert_eq!((m.id(), m.body()), (id, &b"wake up"[..]));
    m.complete().unwrap();

    // Many blocked receivers, each woken by its own send; receive_blocking too.
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            std::thread::spawn(move || {
                let m = q.receive_blocking().unwrap();
                let id = m.id();
                m.complete().unwrap();
                id
            })
        })
        .collect();
    let mut sent: Vec<MessageId> = (0..4).map(|i| q.send(vec![i]).unwrap()).collect();
    let mut got: Vec<MessageId> = waiters.into_iter().map(|h| h.join().unwrap()).collect();
    sent.sort();
    got.sort();
    assert_eq!(got, sent);
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn blocked_transaction_receive_wakes_up_on_send() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("q").unwrap();
    let receiver = {
        let (store, q) = (store.clone(), q.clone());
        std::thread::spawn(move || {
            let mut tx = store.begin();
            let e = tx.receive(&q, Duration::from_secs(60)).unwrap();
            tx.commit().unwrap();
            e
        })
    };
    let id = q.send("tx").unwrap();
    let e = receiver.join().unwrap().unwrap();
    assert_eq!(e.id(), id);
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

#[test]
fn receive_times_out_on_an_empty_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("q").unwrap();
    let timeout = ms(50);
    let start = Instant::now();
    assert!(q.receive(timeout).unwrap().is_none());
    assert!(start.elapsed() >= timeout);
    let deadline = Instant::now() + ms(20);
    assert!(q.receive_deadline(deadline).unwrap().is_none());
    assert!(Instant::now() >= deadline);
    // A huge timeout does not overflow.
    q.send("x").unwrap();
    assert!(q.receive(Duration::MAX).unwrap().is_some());
}

#[test]
fn scheduled_message_wakes_a_waiting_receiver_when_due() {
    // With the system clock: the waiter sleeps until the message is due, not until its deadline.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("q").unwrap();
    let id = q.send(Message::new("soon").delay(ms(30))).unwrap();
    let m = q.receive(Duration::from_secs(60)).unwrap().unwrap();
    assert_eq!(m.id(), id);
}

#[test]
fn store_stats_count_commits_and_operations() {
    let t = TestStore::new();
    let before = t.store().stats();
    let q = t.store().queue("q").unwrap();
    q.send("a").unwrap();
    q.send("b").unwrap();
    let after = t.store().stats();
    assert_eq!(after.operations - before.operations, 3);
    assert_eq!(after.commits - before.commits, 3);
    // A read-only operation (stats on an idle queue) commits nothing.
    let s = t.store().stats();
    counts(&q);
    assert_eq!(t.store().stats().commits, s.commits);
}
