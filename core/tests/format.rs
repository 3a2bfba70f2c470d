//! On-disk format: `fixtures/v1.postbox` was written by this version of postbox (format 1) and
//! must stay readable, property for property, by every later version.
//!
//! Regenerate it only for a deliberate format change, and say so in the commit:
//! `cargo test -p postbox --test format -- --ignored regenerate_fixture`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{FixedClock, counts};
use postbox::{Message, MessageId, PropertyValue, QueueOptions, Store};

/// The instant the fixture was written (2023-11-14T22:13:20Z).
const T0: u64 = 1_700_000_000_000;
const SEC: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(86_400);

fn fixture_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1.postbox")
}

fn at(offset: Duration) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(T0) + offset
}

fn orders_options() -> QueueOptions {
    QueueOptions::default()
        .lock_duration(45 * SEC)
        .max_deliveries(5)
        .max_message_size(65_536)
        .max_messages(1_000)
        .max_bytes(1 << 20)
        .dedup_window(3_600 * SEC)
}

fn audit_options() -> QueueOptions {
    QueueOptions::default().default_ttl(7 * DAY)
}

const FULL_BODY: &[u8] = b"{\"order\": 1}\x00\xff";

fn full_properties() -> BTreeMap<String, PropertyValue> {
    let mut p = BTreeMap::new();
    p.insert("tenant".into(), PropertyValue::String("acme".into()));
    p.insert("blob".into(), PropertyValue::Bytes(vec![0, 1, 2, 3, 255]));
    p.insert("empty".into(), PropertyValue::String(String::new()));
    p.insert("ünïcode".into(), PropertyValue::String("välue ✓".into()));
    p
}

/// Writes the fixture. Ids 1–5: 1 every property, 2 empty body, 3 scheduled, 4 dead-lettered,
/// 5 (queue `audit`) delivered once and abandoned.
#[test]
#[ignore = "regenerates tests/fixtures/v1.postbox; run only for a deliberate format change"]
fn regenerate_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.postbox");
    let clock = FixedClock::at(T0);
    {
        let store = Store::builder().clock(clock.clone()).open(&path).unwrap();
        let orders = store.queue_with("orders", orders_options()).unwrap();
        let audit = store.queue_with("audit", audit_options()).unwrap();
        let mut m = Message::new(FULL_BODY.to_vec())
            .label("new-order")
            .content_type("application/json")
            .correlation_id("corr-1")
            .reply_to("replies")
            .message_key("order-1")
            .group("customer-42")
            .sequence(1)
            .priority(6)
            .ttl(30 * DAY);
        for (k, v) in full_properties() {
            m = m.property(k, v);
        }
        assert_eq!(orders.send(m).unwrap(), MessageId(1));
        assert_eq!(orders.send(Vec::new()).unwrap(), MessageId(2));
        assert_eq!(
            orders
                .send(Message::new("later").delay(2 * DAY).priority(0))
                .unwrap(),
            MessageId(3)
        );
        assert_eq!(
            orders
                .send(Message::new("poison").label("bad").priority(7))
                .unwrap(),
            MessageId(4)
        );
        assert_eq!(
            audit
                .send(Message::new("audit entry").property("by", "fixture"))
                .unwrap(),
            MessageId(5)
        );
        clock.advance(SEC);
        let poison = orders.try_receive().unwrap().unwrap();
        assert_eq!(poison.id(), MessageId(4));
        poison
            .dead_letter("ValidationFailed", "missing field: sku")
            .unwrap();
        let entry = audit.try_receive().unwrap().unwrap();
        assert_eq!(entry.id(), MessageId(5));
        entry.abandon().unwrap();
        drop((orders, audit));
        store.close().unwrap();
    }
    // Drop redb's free space: the fixture stays small.
    redb::Database::open(&path).unwrap().compact().unwrap();
    std::fs::create_dir_all(fixture_path().parent().unwrap()).unwrap();
    std::fs::copy(&path, fixture_path()).unwrap();
    eprintln!(
        "wrote {} ({} bytes)",
        fixture_path().display(),
        std::fs::metadata(fixture_path()).unwrap().len()
    );
}

/// A private copy of the fixture, opened at T0 + 10 s.
fn open_copy() -> (tempfile::TempDir, Arc<FixedClock>, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.postbox");
    std::fs::copy(fixture_path(), &path).expect("tests/fixtures/v1.postbox is committed");
    let clock = FixedClock::at(T0 + 10_000);
    let store = Store::builder().clock(clock.clone()).open(&path).unwrap();
    (dir, clock, store)
}

#[test]
fn fixture_v1_reads_back_exactly() {
    let committed = std::fs::read(fixture_path()).unwrap();
    let (_dir, _clock, store) = open_copy();
    assert_eq!(store.queues().unwrap(), vec!["audit", "orders"]);
    let orders = store.queue("orders").unwrap();
    let audit = store.queue("audit").unwrap();
    assert_eq!(orders.options().unwrap(), orders_options());
    assert_eq!(audit.options().unwrap(), audit_options());
    let dlq = orders.dead_letters().unwrap();
    assert_eq!(dlq.options().unwrap().lock_duration, 45 * SEC);
    assert_eq!(dlq.options().unwrap().max_message_size, 65_536);

    let full = FULL_BODY.len() as u64;
    assert_eq!(counts(&orders), (2, 0, 1, 1, full + 5));
    assert_eq!(counts(&dlq), (1, 0, 0, 0, 6));
    assert_eq!(counts(&audit), (1, 0, 0, 0, 11));
    assert_eq!(counts(&audit.dead_letters().unwrap()), (0, 0, 0, 0, 0));

    // Message 1: every property.
    let m1 = orders.get(MessageId(1)).unwrap().unwrap();
    assert_eq!(m1.id(), MessageId(1));
    assert_eq!(m1.queue(), "orders");
    assert_eq!(m1.body(), FULL_BODY);
    assert_eq!(m1.label(), Some("new-order"));
    assert_eq!(m1.content_type(), Some("application/json"));
    assert_eq!(m1.correlation_id(), Some("corr-1"));
    assert_eq!(m1.reply_to(), Some("replies"));
    assert_eq!(m1.message_key(), Some("order-1"));
    assert_eq!(m1.group(), Some("customer-42"));
    assert_eq!(m1.sequence(), Some(1));
    assert_eq!(m1.priority(), 6);
    assert_eq!(m1.enqueued_at(), at(Duration::ZERO));
    assert_eq!(m1.visible_at(), None);
    assert_eq!(m1.expires_at(), Some(at(30 * DAY)));
    assert_eq!(m1.delivery_count(), 0);
    assert_eq!(m1.properties(), &full_properties());
    assert!(m1.dead_letter_info().is_none());

    // Message 2: nothing but an empty body.
    let m2 = orders.get(MessageId(2)).unwrap().unwrap();
    assert_eq!(m2.body(), b"");
    assert_eq!(m2.priority(), 3);
    assert_eq!(
        (
            m2.label(),
            m2.content_type(),
            m2.correlation_id(),
            m2.reply_to(),
            m2.message_key(),
            m2.group(),
            m2.sequence(),
        ),
        (None, None, None, None, None, None, None)
    );
    assert_eq!(m2.enqueued_at(), at(Duration::ZERO));
    assert_eq!((m2.visible_at(), m2.expires_at()), (None, None));
    assert!(m2.properties().is_empty());

    // Message 3: scheduled.
    let m3 = orders.get(MessageId(3)).unwrap().unwrap();
    assert_eq!((m3.body(), m3.priority()), (&b"later"[..], 0));
    assert_eq!(m3.visible_at(), Some(at(2 * DAY)));
    assert_eq!(m3.expires_at(), None);

    // Message 4: dead-lettered.
    let m4 = dlq.get(MessageId(4)).unwrap().unwrap();
    assert_eq!(orders.get(MessageId(4)).unwrap(), None);
    assert_eq!(m4.queue(), "orders/$deadletterqueue");
    assert_eq!((m4.body(), m4.label()), (&b"poison"[..], Some("bad")));
    assert_eq!((m4.priority(), m4.delivery_count()), (7, 1));
    let info = m4.dead_letter_info().unwrap();
    assert_eq!(info.reason, "ValidationFailed");
    assert_eq!(info.description, "missing field: sku");
    assert_eq!(info.source_queue, "orders");
    assert_eq!(info.at, at(SEC));

    // Message 5: delivered once, abandoned, with the queue's default TTL.
    let m5 = audit.get(MessageId(5)).unwrap().unwrap();
    assert_eq!(m5.body(), b"audit entry");
    assert_eq!(m5.delivery_count(), 1);
    assert_eq!(m5.expires_at(), Some(at(7 * DAY)));
    assert_eq!(
        m5.property("by"),
        Some(&PropertyValue::String("fixture".into()))
    );

    // Delivery order and browse.
    let order: Vec<MessageId> = orders.browse().map(|e| e.unwrap().id()).collect();
    assert_eq!(order, vec![MessageId(1), MessageId(2)]);
    assert_eq!(orders.peek().unwrap().unwrap(), m1);

    drop((orders, audit, dlq));
    store.close().unwrap();
    assert!(
        std::fs::read(fixture_path()).unwrap() == committed,
        "the committed fixture must never be modified"
    );
}

#[test]
fn fixture_v1_keeps_working_after_opening() {
    let (_dir, clock, store) = open_copy();
    let orders = store.queue("orders").unwrap();
    let audit = store.queue("audit").unwrap();
    let dlq = orders.dead_letters().unwrap();

    // The dedup entry of message 1 is still inside its window.
    assert_eq!(
        orders
            .send(Message::new("again").message_key("order-1"))
            .unwrap(),
        MessageId(1)
    );
    // Id and lock-token sequences continue.
    let id = orders.send("new").unwrap();
    assert_eq!(id, MessageId(6));

    let m = orders.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (MessageId(1), 1));
    m.complete().unwrap();
    let m = audit.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (MessageId(5), 2));
    m.complete().unwrap();
    let d = dlq.try_receive().unwrap().unwrap();
    assert_eq!((d.id(), d.delivery_count()), (MessageId(4), 2));
    d.resubmit().unwrap();
    let m = orders.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (MessageId(4), 1));
    assert!(m.dead_letter_info().is_none());
    m.complete().unwrap();
    for expected in [2, 6] {
        let m = orders.try_receive().unwrap().unwrap();
        assert_eq!(m.id(), MessageId(expected));
        m.complete().unwrap();
    }
    assert!(orders.try_receive().unwrap().is_none());
    clock.advance(2 * DAY);
    let m = orders.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.body()), (MessageId(3), &b"later"[..]));
    m.complete().unwrap();
    assert_eq!(counts(&orders), (0, 0, 0, 0, 0));
    assert_eq!(counts(&audit), (0, 0, 0, 0, 0));
}
