//! Batch receive and settle.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use std::time::Duration;

use common::{SEC, TestStore, counts};
use postbox::{Error, ErrorKind, Message, MessageId, QueueOptions};

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
