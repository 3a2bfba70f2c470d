//! Checkpoints and replies of messages held by a transaction (issue 27 item 2): `mark_done`
//! and `done_keys` under the transaction's lock, written at once so that they survive its
//! abort; `Transaction::reply`, a send of the transaction that answers a request.

mod common;

use std::time::Duration;

use common::{SEC, TestStore};
use postbox::{Error, ErrorKind, Message, MessageId};

#[test]
fn keys_recorded_in_a_transaction_survive_its_abort_and_renew_its_lock() {
    let t = TestStore::new();
    let q = t.store().queue("fanout").unwrap();
    let id = q.send("notify 3 users").unwrap();
    let mut tx = t.store().begin();
    let m = tx
        .receive(&q, Duration::ZERO)
        .unwrap()
        .expect("the message");
    assert!(tx.done_keys(m.id()).unwrap().is_empty());
    let first = tx.locked_until(m.id()).unwrap();
    t.clock.advance(SEC * 10);
    let until = tx.mark_done(m.id(), ["user-1", "user-2"]).unwrap();
    assert!(until > first, "the lock is renewed in the same write");
    assert_eq!(tx.locked_until(m.id()), Some(until));
    assert_eq!(
        tx.done_keys(m.id())
            .unwrap()
            .into_iter()
            .collect::<Vec<_>>(),
        ["user-1", "user-2"]
    );
    // Not held by this transaction; a bad key.
    assert!(matches!(
        tx.mark_done(MessageId(id.get() + 100), ["x"]),
        Err(Error::MessageNotFound(_))
    ));
    assert!(matches!(
        tx.done_keys(MessageId(id.get() + 100)),
        Err(Error::MessageNotFound(_))
    ));
    assert_eq!(
        tx.mark_done(m.id(), [""]).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    tx.abort().unwrap();

    // The redelivery, outside a transaction, sees what the aborted transaction recorded.
    let r = q.receive(Duration::ZERO).unwrap().expect("the redelivery");
    assert_eq!((r.id(), r.delivery_count()), (id, 2));
    assert_eq!(r.done_keys().unwrap().len(), 2);
    drop(r);

    // A lock the transaction lost records nothing.
    let mut tx = t.store().begin();
    let m = tx.receive(&q, Duration::ZERO).unwrap().expect("again");
    t.clock.advance(SEC * 31);
    assert_eq!(
        tx.mark_done(m.id(), ["user-3"]).unwrap_err().kind(),
        ErrorKind::LockLost
    );
    drop(tx);
    let r = q.receive(Duration::ZERO).unwrap().expect("once more");
    assert_eq!(r.done_keys().unwrap().len(), 2);
    r.complete().unwrap();
}

#[test]
fn a_transaction_replies_with_its_commit_or_not_at_all() {
    let t = TestStore::new();
    let service = t.store().queue("service").unwrap();
    let replies = t.store().queue("replies").unwrap();
    let id = service
        .send(Message::new("resize").reply_to("replies"))
        .unwrap();
    service
        .send(
            Message::new("with a correlation id")
                .reply_to("replies")
                .correlation_id("c-7"),
        )
        .unwrap();

    // Aborted: nothing is sent.
    let mut tx = t.store().begin();
    let request = tx.receive(&service, Duration::ZERO).unwrap().unwrap();
    tx.reply(&request, "done").unwrap();
    tx.abort().unwrap();
    assert_eq!(replies.len().unwrap(), 0);

    // Committed: the reply and the completion together; the reply's id is reserved at once.
    let mut tx = t.store().begin();
    let request = tx.receive(&service, Duration::ZERO).unwrap().unwrap();
    assert_eq!(request.id(), id);
    let reply_id = tx.reply(&request, "done").unwrap();
    let other = tx.receive(&service, Duration::ZERO).unwrap().unwrap();
    tx.reply(&other, Message::new("done too").correlation_id("replaced"))
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(service.stats().unwrap().active, 0);
    let r = replies.receive(Duration::ZERO).unwrap().unwrap();
    assert_eq!((r.id(), r.body()), (reply_id, &b"done"[..]));
    assert_eq!(r.correlation_id(), Some(id.get().to_string().as_str()));
    let r2 = replies.receive(Duration::ZERO).unwrap().unwrap();
    assert_eq!(r2.correlation_id(), Some("c-7"));

    // Refusals: no reply_to; a reply_to queue that does not exist.
    service.send("no reply_to").unwrap();
    service
        .send(Message::new("to nowhere").reply_to("gone"))
        .unwrap();
    let mut tx = t.store().begin();
    let a = tx.receive(&service, Duration::ZERO).unwrap().unwrap();
    let b = tx.receive(&service, Duration::ZERO).unwrap().unwrap();
    assert_eq!(
        tx.reply(&a, "x").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert!(matches!(tx.reply(&b, "x"), Err(Error::QueueNotFound(_))));
    tx.commit().unwrap();
}

#[test]
fn a_transaction_answers_a_request_made_with_queue_request() {
    let t = TestStore::new();
    let service = t.store().queue("service").unwrap();
    let responder = {
        let store = t.store().clone();
        let service = service.clone();
        std::thread::spawn(move || {
            let mut tx = store.begin();
            let request = tx
                .receive(&service, Duration::from_secs(20))
                .unwrap()
                .expect("the request");
            tx.reply(
                &request,
                format!("re: {}", String::from_utf8_lossy(request.body())).as_str(),
            )
            .unwrap();
            tx.commit().unwrap();
        })
    };
    let reply = service
        .request("ping", Duration::from_secs(20))
        .unwrap()
        .expect("the reply");
    assert_eq!(reply.body(), b"re: ping");
    responder.join().unwrap();
}
