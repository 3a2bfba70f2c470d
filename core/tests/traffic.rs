//! `Queue::traffic`: sends and completions counted once their commit succeeds.

use std::time::Duration;

use postbox::{Message, QueueTraffic, Store};

#[test]
fn counts_sends_and_completions_of_each_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.pbx")).unwrap();
    let jobs = store.queue("jobs").unwrap();
    let other = store.queue("other").unwrap();
    assert_eq!(jobs.traffic(), QueueTraffic::default());

    jobs.send_batch((0..5).map(|i| Message::new(vec![i])))
        .unwrap();
    other.send("x").unwrap();
    for _ in 0..2 {
        jobs.receive(Duration::ZERO)
            .unwrap()
            .unwrap()
            .complete()
            .unwrap();
    }
    // An abandon is not a completion; a dead letter leaves without being completed.
    jobs.receive(Duration::ZERO)
        .unwrap()
        .unwrap()
        .abandon()
        .unwrap();
    jobs.receive(Duration::ZERO)
        .unwrap()
        .unwrap()
        .dead_letter("Test", "")
        .unwrap();

    let t = jobs.traffic();
    assert_eq!((t.sent, t.completed), (5, 2));
    let o = other.traffic();
    assert_eq!((o.sent, o.completed), (1, 0));
    let dlq = jobs.dead_letters().unwrap();
    assert_eq!(dlq.traffic().sent, 0);
}

#[test]
fn a_transaction_counts_when_it_commits_and_not_when_it_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.pbx")).unwrap();
    let q = store.queue("q").unwrap();
    let mut tx = store.begin();
    tx.send(&q, "dropped").unwrap();
    tx.abort().unwrap();
    assert_eq!(q.traffic().sent, 0);
    let mut tx = store.begin();
    tx.send(&q, "kept").unwrap();
    tx.commit().unwrap();
    assert_eq!(q.traffic().sent, 1);
}
