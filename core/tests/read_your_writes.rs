//! Read-your-writes: a logged store acknowledges a send or a settle once its log record is
//! synced and applies it to the B-tree afterwards, so every read issued after the
//! acknowledgement — on the same thread or on another one told of it — must already see it.
//! `POSTBOX_STRESS` sets the number of operations (default 400; each is a durable sync).

mod common;

use std::sync::mpsc;
use std::time::Duration;

use postbox::{Message, MessageId, Store};

fn operations() -> usize {
    common::knob("POSTBOX_STRESS", 400)
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path().join("ryw.postbox")).unwrap()
}

#[test]
fn a_read_on_the_same_thread_sees_each_acknowledged_send_and_complete() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let q = store.queue("work").unwrap();
    let n = operations();
    for i in 0..n {
        let id = q.send(Message::new(format!("m{i}"))).unwrap();
        assert_eq!(q.len().unwrap(), i as u64 + 1, "send {i} not seen by len");
        assert!(q.get(id).unwrap().is_some(), "send {i} not seen by get");
    }
    for i in 0..n {
        let r = q.try_receive().unwrap().expect("a message");
        let id = r.message_id();
        r.complete().unwrap();
        assert_eq!(
            q.len().unwrap(),
            (n - i - 1) as u64,
            "complete {i} not seen"
        );
        assert!(
            q.get(id).unwrap().is_none(),
            "completed message {i} still there"
        );
    }
    assert!(store.stats().log_records > 0, "the store did not log");
}

#[test]
fn a_read_on_another_thread_sees_a_send_it_was_told_of() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let q = store.queue("work").unwrap();
    let n = operations();
    let (tx, rx) = mpsc::channel::<MessageId>();
    let reader = {
        let q = q.clone();
        std::thread::spawn(move || {
            let mut seen = 0;
            for id in rx {
                assert!(q.get(id).unwrap().is_some(), "message {id:?} not seen");
                seen += 1;
            }
            seen
        })
    };
    for i in 0..n {
        tx.send(q.send(Message::new(format!("m{i}"))).unwrap())
            .unwrap();
    }
    drop(tx);
    assert_eq!(reader.join().unwrap(), n);
}

#[test]
fn a_waiting_receiver_gets_a_message_sent_while_it_waits() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let q = store.queue("work").unwrap();
    let n = operations() / 4;
    let receiver = {
        let q = q.clone();
        std::thread::spawn(move || {
            for i in 0..n {
                let r = q
                    .receive(Duration::from_secs(30))
                    .unwrap()
                    .unwrap_or_else(|| panic!("message {i} never arrived"));
                r.complete().unwrap();
            }
        })
    };
    for i in 0..n {
        q.send(Message::new(format!("m{i}"))).unwrap();
    }
    receiver.join().unwrap();
    assert_eq!(q.len().unwrap(), 0);
}
