//! Blocking receives: timeouts and wake-ups.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use std::time::{Duration, Instant};

use common::{TestStore, counts, ms};
use postbox::{Message, MessageId, Store};

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
