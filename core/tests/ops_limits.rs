//! Quotas and size limits.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use common::{SEC, TestStore, counts};
use postbox::{Error, ErrorKind, Message, QueueOptions};

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

/// A refused send takes no id and commits nothing: the next message gets the next id, and
/// the store file does not change. (Sends are logged as operations whose ids are decided
/// before the batch runs; a batch whose every operation was refused gives them back.)
#[test]
fn a_refused_send_takes_no_id_and_writes_nothing() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with(
            "q",
            QueueOptions::default().max_messages(1).max_message_size(8),
        )
        .unwrap();
    let first = q.send("a").unwrap();
    let path = t.store().path().to_owned();
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        q.send("too long for the queue").unwrap_err().kind(),
        ErrorKind::TooLarge
    );
    assert_eq!(q.send("b").unwrap_err().kind(), ErrorKind::QueueFull);
    assert_eq!(
        q.send_batch(["c", "d"]).unwrap_err().kind(),
        ErrorKind::QueueFull
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    q.try_receive().unwrap().unwrap().complete().unwrap();
    assert_eq!(q.send("e").unwrap().0, first.0 + 1);
}
