//! Auto-forwarding (`forward_to`, `forward_dead_letters_to`) and journals.

mod common;

use std::time::Duration;

use common::TestStore;
use postbox::{ErrorKind, Message, QueueOptions};

const NOW: Duration = Duration::ZERO;

#[test]
fn sends_follow_forward_to_chains_in_one_commit() {
    let t = TestStore::new();
    let end = t.store().queue("end").unwrap();
    let mid = t
        .store()
        .queue_with("mid", QueueOptions::default().forward_to("end"))
        .unwrap();
    let front = t
        .store()
        .queue_with("front", QueueOptions::default().forward_to("mid"))
        .unwrap();
    let id = front.send("hello").unwrap();
    assert_eq!((front.len().unwrap(), mid.len().unwrap()), (0, 0));
    assert_eq!(end.get(id).unwrap().unwrap().body(), b"hello");
    // In a transaction too.
    let mut tx = t.store().begin();
    tx.send(&front, "in a tx").unwrap();
    tx.commit().unwrap();
    assert_eq!(end.len().unwrap(), 2);
    // Loops and missing targets are refused when the option is set.
    for (name, target) in [("end", "front"), ("end", "end"), ("front", "nowhere")] {
        let e = t
            .store()
            .queue_with(name, QueueOptions::default().forward_to(target))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{name} -> {target}");
    }
    // Cleared, a queue keeps its own messages again.
    t.store()
        .queue_with("front", QueueOptions::default().no_forward_to())
        .unwrap();
    front.send("mine").unwrap();
    assert_eq!(front.len().unwrap(), 1);
}

#[test]
fn dead_letters_of_many_queues_collect_in_one_place() {
    let t = TestStore::new();
    let all_dead = t.store().queue("all-dead").unwrap();
    let o = QueueOptions::default()
        .max_deliveries(1)
        .forward_dead_letters_to("all-dead");
    let a = t.store().queue_with("a", o.clone()).unwrap();
    let b = t.store().queue_with("b", o).unwrap();
    a.send("from a").unwrap();
    b.send(Message::new("from b")).unwrap();
    a.try_receive().unwrap().unwrap().abandon().unwrap();
    b.try_receive()
        .unwrap()
        .unwrap()
        .dead_letter("Bad", "refused")
        .unwrap();
    assert_eq!(a.stats().unwrap().dead_lettered, 0);
    let got: Vec<(String, String, String)> = std::iter::from_fn(|| all_dead.try_receive().unwrap())
        .map(|m| {
            let info = m.dead_letter_info().unwrap().clone();
            let body = String::from_utf8(m.body().to_vec()).unwrap();
            m.complete().unwrap();
            (body, info.reason, info.source_queue)
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "from a".into(),
                postbox::REASON_MAX_DELIVERIES.into(),
                "a".into()
            ),
            ("from b".into(), "Bad".into(), "b".into()),
        ]
    );
}

#[test]
fn a_journal_keeps_completed_messages_up_to_its_quota() {
    let mut t = TestStore::new();
    {
        let q = t
            .store()
            .queue_with("orders", QueueOptions::default().journal(2))
            .unwrap();
        for n in 1..=3 {
            q.send(Message::new(format!("o{n}")).priority(n as u8))
                .unwrap();
        }
        for _ in 0..3 {
            q.try_receive().unwrap().unwrap().complete().unwrap();
        }
        let s = q.stats().unwrap();
        assert_eq!((s.active, s.bytes), (0, 0));
        let journal = q.journal().unwrap();
        // The oldest (o1) was dropped to keep the quota.
        let kept: Vec<String> = journal
            .browse()
            .map(|m| String::from_utf8(m.unwrap().body().to_vec()).unwrap())
            .collect();
        assert_eq!(kept, ["o3", "o2"]);
        assert_eq!(journal.stats().unwrap().active, 2);
    }
    t.reopen();
    let q = t.store().queue("orders").unwrap();
    let journal = q.journal().unwrap();
    assert_eq!(journal.purge().unwrap(), 2);
    assert_eq!(
        t.store()
            .queue("plain")
            .unwrap()
            .journal()
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    // Turned off, completions remove again; turned on later, the journal exists then.
    t.store()
        .queue_with("orders", QueueOptions::default().no_journal())
        .unwrap();
    q.send("gone").unwrap();
    q.receive(NOW).unwrap().unwrap().complete().unwrap();
    assert_eq!(journal.len().unwrap(), 0);
    assert!(t.store().delete_queue("orders").unwrap());
    assert_eq!(journal.len().unwrap_err().kind(), ErrorKind::QueueNotFound);
}
