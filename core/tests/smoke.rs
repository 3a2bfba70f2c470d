use std::time::Duration;

use postbox::{Message, Store};

#[test]
fn send_receive_complete_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.postbox")).unwrap();
    let q = store.queue("jobs").unwrap();
    let id = q
        .send(Message::new("hello").label("greet").property("k", "v"))
        .unwrap();
    assert_eq!(q.len().unwrap(), 1);
    let m = q.receive(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(m.id(), id);
    assert_eq!(m.body(), b"hello");
    assert_eq!(m.label(), Some("greet"));
    assert_eq!(m.delivery_count(), 1);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (0, 1));
    m.complete().unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.bytes), (0, 0, 0));
    assert!(q.try_receive().unwrap().is_none());
    drop(q);
    store.close().unwrap();
    let store = Store::open(dir.path().join("s.postbox")).unwrap();
    assert_eq!(store.queues().unwrap(), vec!["jobs".to_string()]);
}

#[test]
fn a_refused_settle_returns_the_message_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.postbox")).unwrap();
    let q = store.queue("jobs").unwrap();
    q.send("x").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    // Only dead letters can be resubmitted: refused, and the lock is not left to expire.
    let e = m.resubmit().unwrap_err();
    assert_eq!(e.kind(), postbox::ErrorKind::InvalidArgument);
    // The error gives the message back, still locked; dropping it abandons it at once.
    assert_eq!(q.stats().unwrap().locked, 1);
    drop(e);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (1, 0));
    assert_eq!(q.try_receive().unwrap().unwrap().delivery_count(), 2);
}

#[test]
fn a_transaction_refuses_queues_and_messages_of_another_store() {
    let dir = tempfile::tempdir().unwrap();
    let a = Store::open(dir.path().join("a.postbox")).unwrap();
    let b = Store::open(dir.path().join("b.postbox")).unwrap();
    let qa = a.queue("q").unwrap();
    let qb = b.queue("q").unwrap();
    qb.send("from b").unwrap();
    let mut tx = a.begin();
    assert_eq!(
        tx.send(&qb, "x").unwrap_err().kind(),
        postbox::ErrorKind::InvalidArgument
    );
    assert_eq!(
        tx.receive(&qb, Duration::ZERO).unwrap_err().kind(),
        postbox::ErrorKind::InvalidArgument
    );
    let m = qb.try_receive().unwrap().unwrap();
    assert_eq!(
        tx.complete(m).unwrap_err().kind(),
        postbox::ErrorKind::InvalidArgument
    );
    tx.commit().unwrap();
    assert_eq!(qa.len().unwrap(), 0);
    assert_eq!(
        qb.len().unwrap(),
        1,
        "the refused message went back to its queue"
    );
}

#[test]
fn a_receiver_waiting_on_a_deleted_queue_gets_queue_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.postbox")).unwrap();
    let q = store.queue("doomed").unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let waiter = {
        let q = q.clone();
        std::thread::spawn(move || {
            ready_tx.send(()).unwrap();
            q.receive_blocking()
        })
    };
    ready_rx.recv().unwrap();
    assert!(store.delete_queue("doomed").unwrap());
    let e = waiter.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), postbox::ErrorKind::QueueNotFound, "{e}");
}
