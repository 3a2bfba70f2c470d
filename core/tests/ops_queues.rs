//! Queue operations: create, open, list, delete, purge, names.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use common::{SEC, TestStore, counts, ms};
use postbox::{Error, ErrorKind, Message, QueueOptions};

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
