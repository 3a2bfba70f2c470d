//! On-disk format: `fixtures/v1.postbox` to `fixtures/v5.postbox` were written by postbox in
//! store formats 1 to 5 by the same scenario, and must stay readable, property for property, by
//! every later version. Opening one for writing upgrades it to the current format (6), which the
//! tests check as well. `fixtures/v5-crashed.postbox` and its `-log` are a format-5 store whose
//! process died with work in its log (log format 1): written by the last postbox of format 5,
//! which sent `crashed 0` … `crashed 39` to a queue `orders` with checkpoints held off and
//! copied both files while the store was open (what a `kill -9` leaves).
//!
//! The committed fixtures are never regenerated. The scenario that wrote them is kept as
//! `regenerate_fixture`, which now writes `fixtures/v6.postbox` (not committed), for a fixture
//! of the current format: `cargo test -p postbox --test format -- --ignored regenerate_fixture`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{FixedClock, counts};
use postbox::{Message, MessageId, PropertyValue, QueueOptions, Store};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

/// The instant the fixture was written (2023-11-14T22:13:20Z).
const T0: u64 = 1_700_000_000_000;
const SEC: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(86_400);

/// The committed fixture of store format `version`.
fn fixture_path(version: u64) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/v{version}.postbox"))
}

/// The committed fixtures.
const FIXTURES: [u64; 5] = [1, 2, 3, 4, 5];
/// The format this version writes.
const CURRENT: u64 = 6;

/// Where `regenerate_fixture` writes: a fixture of the current format, never over a committed
/// one.
fn current_fixture_path() -> PathBuf {
    fixture_path(CURRENT)
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
#[ignore = "writes tests/fixtures/v6.postbox; run only for a deliberate format change"]
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
    let to = current_fixture_path();
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(&path, &to).unwrap();
    eprintln!(
        "wrote {} ({} bytes)",
        to.display(),
        std::fs::metadata(&to).unwrap().len()
    );
}

/// A format-5 store that crashed with work in its log (log format 1) is replayed in full by
/// this version, then upgraded.
#[test]
fn a_crashed_format_5_store_replays_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let from = fixture_path(5).with_file_name("v5-crashed.postbox");
    std::fs::copy(&from, &path).unwrap();
    let mut from_log = from.as_os_str().to_owned();
    from_log.push("-log");
    let mut log = path.as_os_str().to_owned();
    log.push("-log");
    std::fs::copy(&from_log, &log).unwrap();
    let store = Store::open(&path).unwrap();
    assert!(store.stats().replayed_records >= 40);
    let orders = store.queue("orders").unwrap();
    let bodies: Vec<String> = orders
        .browse()
        .map(|m| String::from_utf8(m.unwrap().body().to_vec()).unwrap())
        .collect();
    let want: Vec<String> = (0..40).map(|i| format!("crashed {i}")).collect();
    assert_eq!(bodies, want);
    store.close().unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.stats().replayed_records, 0);
    assert_eq!(store.queue("orders").unwrap().stats().unwrap().active, 40);
    store.close().unwrap();
}

/// A private copy of the fixture of format `version`, opened at T0 + 10 s.
fn open_copy(version: u64) -> (tempfile::TempDir, Arc<FixedClock>, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.postbox");
    std::fs::copy(fixture_path(version), &path).expect("the fixture is committed");
    let clock = FixedClock::at(T0 + 10_000);
    let store = Store::builder().clock(clock.clone()).open(&path).unwrap();
    (dir, clock, store)
}

/// Everything the fixture of format `version` holds, property for property.
fn assert_fixture_contents(store: &Store, version: u64) {
    assert_eq!(store.queues().unwrap(), vec!["audit", "orders"]);
    let orders = store.queue("orders").unwrap();
    let audit = store.queue("audit").unwrap();
    assert_eq!(orders.options().unwrap(), orders_options());
    assert_eq!(audit.options().unwrap(), audit_options());
    let dlq = orders.dead_letters().unwrap();
    assert_eq!(dlq.options().unwrap().lock_duration, 45 * SEC);
    assert_eq!(dlq.options().unwrap().max_message_size, 65_536);

    // Format 1 counted body bytes; since format 2 a message's bytes are its body and its
    // properties. An upgrade keeps the counts it finds.
    let full = FULL_BODY.len() as u64;
    let (orders_bytes, dlq_bytes, audit_bytes) = match version {
        1 => (full + 5, 6, 11),
        _ => (118, 6 + 3, 11 + 2 + 7),
    };
    assert_eq!(counts(&orders), (2, 0, 1, 1, orders_bytes));
    assert_eq!(counts(&dlq), (1, 0, 0, 0, dlq_bytes));
    assert_eq!(counts(&audit), (1, 0, 0, 0, audit_bytes));
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
}

#[test]
fn fixtures_read_back_exactly() {
    for version in FIXTURES {
        let committed = std::fs::read(fixture_path(version)).unwrap();
        let (_dir, _clock, store) = open_copy(version);
        assert_fixture_contents(&store, version);
        store.close().unwrap();
        assert!(
            std::fs::read(fixture_path(version)).unwrap() == committed,
            "the committed fixture v{version} must never be modified"
        );
    }
}

#[test]
fn fixture_v3_is_upgraded_to_the_current_format_on_open() {
    let (dir, clock, store) = open_copy(3);
    store.close().unwrap();
    let path = dir.path().join("copy.postbox");
    let (version, states, _, _) = raw_formats(&path);
    assert_eq!(version, Some(CURRENT), "the upgrade ran");
    // Format 4 changed no row: it added tables (jobs, checkpoints, application rows).
    assert!(states.iter().all(|b| b & 0x18 == 0), "{states:?}");
    let db = redb::Database::builder().open_read_only(&path).unwrap();
    let txn = db.begin_read().unwrap();
    assert!(
        txn.open_table(JOBS)
            .unwrap()
            .iter()
            .unwrap()
            .next()
            .is_none()
    );
    drop((txn, db));
    let store = Store::builder().clock(clock).open(&path).unwrap();
    assert_fixture_contents(&store, 3);
    // The upgraded store takes the new features.
    let q = store.queue("orders").unwrap();
    let job = store.create_job(Default::default()).unwrap();
    job.send(&q, "piece").unwrap();
    assert_eq!(job.progress().unwrap().total, 1);
}

#[test]
fn fixture_v2_is_upgraded_to_the_current_format_on_open() {
    let (dir, clock, store) = open_copy(2);
    store.close().unwrap();
    let path = dir.path().join("copy.postbox");
    let (version, states, queues, data) = raw_formats(&path);
    assert_eq!(version, Some(CURRENT), "the upgrade ran");
    // Formats 3 and 4 changed no row: they added tables.
    assert!(states.iter().all(|b| b & 0x80 != 0), "{states:?}");
    assert!(queues.iter().all(|&b| b == 0xFE), "{queues:?}");
    assert!(data.iter().all(|&b| b == 0xFE), "{data:?}");
    let db = redb::Database::builder().open_read_only(&path).unwrap();
    let txn = db.begin_read().unwrap();
    assert!(
        txn.open_table(DEFERRED)
            .unwrap()
            .iter()
            .unwrap()
            .next()
            .is_none()
    );
    drop((txn, db));
    let store = Store::builder().clock(clock).open(&path).unwrap();
    assert_fixture_contents(&store, 2);
}

// The engine's table names and layouts (core/src/engine/tables.rs and codec.rs), repeated here
// to look at the raw records of the upgraded copy.
const META: TableDefinition<&str, u64> = TableDefinition::new("postbox.meta");
const QUEUES: TableDefinition<&str, &[u8]> = TableDefinition::new("postbox.queues");
const STATE: TableDefinition<u64, [u8; 64]> = TableDefinition::new("postbox.state");
const DATA: TableDefinition<u64, &[u8]> = TableDefinition::new("postbox.data");
const DEFERRED: TableDefinition<(u32, u64), ()> = TableDefinition::new("postbox.deferred");
const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("postbox.jobs");

/// What a closed store holds on disk: (format version, byte 5 of every state row, first byte
/// of every queue record, first byte of every envelope). Opens read-only: a writable open of a
/// redb file writes to it.
fn raw_formats(path: &Path) -> (Option<u64>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let db = redb::Database::builder().open_read_only(path).unwrap();
    let txn = db.begin_read().unwrap();
    let version = txn
        .open_table(META)
        .unwrap()
        .get("format_version")
        .unwrap()
        .map(|g| g.value());
    let states = txn.open_table(STATE).unwrap();
    let states = states.iter().unwrap().map(|e| e.unwrap().1.value()[5]);
    let queues = txn.open_table(QUEUES).unwrap();
    let queues = queues.iter().unwrap().map(|e| e.unwrap().1.value()[0]);
    let data = txn.open_table(DATA).unwrap();
    let data = data.iter().unwrap().map(|e| e.unwrap().1.value()[0]);
    (version, states.collect(), queues.collect(), data.collect())
}

#[test]
fn fixture_v1_is_upgraded_to_the_current_format_on_open() {
    let committed = std::fs::read(fixture_path(1)).unwrap();
    let (dir, clock, store) = open_copy(1);
    store.close().unwrap();

    let pristine = dir.path().join("pristine.postbox");
    std::fs::write(&pristine, &committed).unwrap();
    let (version, states, queues, data) = raw_formats(&pristine);
    assert_eq!(version, Some(1));
    assert!(states.iter().all(|b| b & 0x80 == 0), "{states:?}");
    assert!(queues.iter().all(|&b| b == 1), "{queues:?}");
    assert!(data.iter().all(|&b| b == 1), "{data:?}");

    let path = dir.path().join("copy.postbox");
    let (version, states, queues, data) = raw_formats(&path);
    assert_eq!(version, Some(CURRENT), "the upgrade ran");
    assert_eq!(states.len(), 5);
    assert!(
        states.iter().all(|b| b & 0x80 != 0),
        "every state row is checksummed: {states:?}"
    );
    assert_eq!(queues.len(), 4);
    assert!(
        queues.iter().all(|&b| b == 0xFE),
        "every queue record is in format 2: {queues:?}"
    );
    assert_eq!(data.len(), 5);
    assert!(
        data.iter().all(|&b| b == 1),
        "envelopes are not rewritten: {data:?}"
    );

    // The upgraded store reads exactly as the fixture did, with and without the page check.
    for verify in [true, false] {
        let store = Store::builder()
            .clock(clock.clone())
            .verify_on_open(verify)
            .open(&path)
            .unwrap();
        assert_fixture_contents(&store, 1);
        store.close().unwrap();
        assert_eq!(raw_formats(&path).0, Some(CURRENT));
    }
    assert!(
        std::fs::read(fixture_path(1)).unwrap() == committed,
        "the committed fixture must never be modified"
    );
}

#[test]
fn fixtures_keep_working_after_opening() {
    for version in FIXTURES {
        fixture_keeps_working(version);
    }
}

fn fixture_keeps_working(version: u64) {
    let (_dir, clock, store) = open_copy(version);
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
