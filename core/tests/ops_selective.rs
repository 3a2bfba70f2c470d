//! Selective receives (by id, by correlation id), the blocking peek, and opening a queue that
//! must exist.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{SEC, TestStore, counts};
use postbox::{ErrorKind, Message, MessageId, Store};

const LONG: Duration = Duration::from_secs(60);

#[test]
fn receive_by_id_takes_that_message_and_leaves_the_others() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    let other = t.store().queue("other").unwrap();
    let first = q.send("first").unwrap();
    let second = q.send("second").unwrap();
    let elsewhere = other.send("elsewhere").unwrap();

    let m = q.receive_by_id(second, Duration::ZERO).unwrap().unwrap();
    assert_eq!((m.id(), m.body()), (second, &b"second"[..]));
    assert_eq!(m.delivery_count(), 1);
    // Locked now: not receivable by id again, nor by a normal receive.
    assert!(q.receive_by_id(second, Duration::ZERO).unwrap().is_none());
    // A message of another queue, or one that does not exist, is never receivable here.
    assert!(
        q.receive_by_id(elsewhere, Duration::ZERO)
            .unwrap()
            .is_none()
    );
    assert!(
        q.receive_by_id(MessageId(999), Duration::ZERO)
            .unwrap()
            .is_none()
    );
    assert_eq!(counts(&q), (1, 1, 0, 0, counts(&q).4));
    m.complete().unwrap();
    let head = q.try_receive().unwrap().unwrap();
    assert_eq!(head.id(), first);
}

#[test]
fn receive_by_id_waits_for_the_message_to_become_receivable() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    let id = q.send(Message::new("later").delay(SEC * 10)).unwrap();
    assert!(q.receive_by_id(id, Duration::ZERO).unwrap().is_none());
    t.clock.advance(SEC * 11);
    let held = q.receive_by_id(id, Duration::ZERO).unwrap().unwrap();
    assert_eq!(held.id(), id);
    let again = q.receive_by_id(id, Duration::ZERO);
    assert!(
        again.unwrap().is_none(),
        "still locked by the first receive"
    );
    // Once its lock expires, it is receivable by id again.
    t.clock.advance(SEC * 31);
    let m = q.receive_by_id(id, Duration::ZERO).unwrap().unwrap();
    assert_eq!(m.delivery_count(), 2);
    drop(held);
}

#[test]
fn a_waiting_receive_by_id_wakes_when_the_message_is_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("jobs").unwrap();
    let id = q.send("x").unwrap();
    let held = q.try_receive().unwrap().unwrap();
    let started = Arc::new(Barrier::new(2));
    let waiter = {
        let (q, started) = (q.clone(), started.clone());
        std::thread::spawn(move || {
            started.wait();
            q.receive_by_id(id, LONG).unwrap()
        })
    };
    started.wait();
    held.abandon().unwrap();
    let got = waiter.join().unwrap().expect("woken by the abandon");
    assert_eq!((got.id(), got.delivery_count()), (id, 2));
}

#[test]
fn requesters_on_a_shared_reply_queue_each_get_only_their_replies() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let replies = store.queue("replies").unwrap();
    const REQUESTERS: usize = 3;
    const EACH: usize = 20;
    let go = Arc::new(Barrier::new(REQUESTERS + 1));
    let requesters: Vec<_> = (0..REQUESTERS)
        .map(|r| {
            let (replies, go) = (replies.clone(), go.clone());
            std::thread::spawn(move || {
                go.wait();
                let me = format!("requester-{r}");
                let mut got = Vec::new();
                for _ in 0..EACH {
                    let m = replies
                        .receive_by_correlation_id(&me, LONG)
                        .unwrap()
                        .expect("a reply before the timeout");
                    assert_eq!(m.correlation_id(), Some(me.as_str()));
                    got.push(String::from_utf8(m.body().to_vec()).unwrap());
                    m.complete().unwrap();
                }
                got
            })
        })
        .collect();
    go.wait();
    // The responder interleaves the requesters' replies.
    for i in 0..EACH {
        for r in 0..REQUESTERS {
            let reply = Message::new(format!("{r}:{i}")).correlation_id(format!("requester-{r}"));
            replies.send(reply).unwrap();
        }
    }
    for (r, h) in requesters.into_iter().enumerate() {
        let got = h.join().unwrap();
        let expected: Vec<String> = (0..EACH).map(|i| format!("{r}:{i}")).collect();
        assert_eq!(got, expected, "requester {r} got its replies, in order");
    }
    assert_eq!(replies.len().unwrap(), 0);
}

#[test]
fn transactions_receive_by_id_and_by_correlation_id() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    let a = q.send(Message::new("a").correlation_id("c-1")).unwrap();
    let b = q.send(Message::new("b").correlation_id("c-2")).unwrap();

    let mut tx = t.store().begin();
    let got = tx
        .receive_by_correlation_id(&q, "c-2", Duration::ZERO)
        .unwrap()
        .unwrap();
    assert_eq!(got.id(), b);
    assert!(tx.lock_token(b).is_some());
    tx.abort().unwrap();
    assert_eq!(counts(&q).0, 2, "the abort returned it");

    let mut tx = t.store().begin();
    assert_eq!(
        tx.receive_by_id(&q, a, Duration::ZERO)
            .unwrap()
            .unwrap()
            .id(),
        a
    );
    assert!(
        tx.receive_by_correlation_id(&q, "none", Duration::ZERO)
            .unwrap()
            .is_none()
    );
    tx.commit().unwrap();
    assert!(q.get(a).unwrap().is_none(), "the commit completed it");
    assert!(q.get(b).unwrap().is_some());
}

#[test]
fn a_spent_message_picked_by_id_goes_to_the_dead_letter_queue() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("jobs", postbox::QueueOptions::default().max_deliveries(1))
        .unwrap();
    let id = q.send("x").unwrap();
    q.try_receive().unwrap().unwrap().abandon().unwrap();
    assert!(q.receive_by_id(id, Duration::ZERO).unwrap().is_none());
    assert_eq!(q.stats().unwrap().dead_lettered, 1);
}

#[test]
fn peek_wait_blocks_until_a_message_arrives_and_leaves_it_unlocked() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("jobs").unwrap();
    assert!(q.peek_wait(Duration::from_millis(20)).unwrap().is_none());
    let started = Arc::new(Barrier::new(2));
    let peeker = {
        let (q, started) = (q.clone(), started.clone());
        std::thread::spawn(move || {
            started.wait();
            q.peek_wait(LONG).unwrap()
        })
    };
    started.wait();
    let id = q.send("hello").unwrap();
    let seen = peeker.join().unwrap().expect("woken by the send");
    assert_eq!(seen.id(), id);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (1, 0), "peeking locks nothing");
}

#[test]
fn open_queue_never_creates() {
    let t = TestStore::new();
    let e = t.store().open_queue("replies-42").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QueueNotFound);
    assert!(
        t.store().queues().unwrap().is_empty(),
        "nothing was created"
    );

    let q = t.store().queue("replies-42").unwrap();
    q.send("x").unwrap();
    let again = t.store().open_queue("replies-42").unwrap();
    assert_eq!(again.len().unwrap(), 1);
    let dlq = t
        .store()
        .open_queue(q.dead_letters().unwrap().name())
        .unwrap();
    assert!(dlq.is_dead_letter_queue());

    // A deleted temporary queue stays deleted: a late reply cannot re-create it.
    assert!(t.store().delete_queue("replies-42").unwrap());
    let e = t.store().open_queue("replies-42").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QueueNotFound);
    assert_eq!(
        again.send("late").unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
    assert!(t.store().queues().unwrap().is_empty());
    assert_eq!(
        t.store().open_queue("").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}
