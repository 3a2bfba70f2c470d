//! Transactions: receive and send together, commit, abort, lost locks, enlisting.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use common::{SEC, TestStore, counts};
use postbox::{Error, ErrorKind, Message, QueueOptions};

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
