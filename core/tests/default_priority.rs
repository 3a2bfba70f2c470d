//! `default_priority`: the priority of a message sent without one, per queue; and the option
//! table's access by name.

mod common;

use std::time::Duration;

use common::TestStore;
use postbox::{DEFAULT_PRIORITY, ErrorKind, Message, OptionKind, OptionValue, QueueOptions};

const NOW: Duration = Duration::ZERO;

#[test]
fn a_message_without_a_priority_gets_the_queue_default() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().default_priority(6))
        .unwrap();
    q.send("plain").unwrap();
    let mut tx = t.store().begin();
    tx.send(&q, Message::new("in a tx")).unwrap();
    tx.commit().unwrap();
    q.send(Message::new("explicit").priority(2)).unwrap();
    // The explicit default priority is explicit too: the queue default does not replace it.
    q.send(Message::new("explicit 3").priority(DEFAULT_PRIORITY))
        .unwrap();
    let mut got = Vec::new();
    while let Some(r) = q.receive(NOW).unwrap() {
        got.push((r.priority(), r.body().to_vec()));
        r.complete().unwrap();
    }
    assert_eq!(
        got,
        vec![
            (6, b"plain".to_vec()),
            (6, b"in a tx".to_vec()),
            (3, b"explicit 3".to_vec()),
            (2, b"explicit".to_vec()),
        ]
    );
}

#[test]
fn the_default_is_the_old_one_and_is_stored() {
    let mut t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    assert_eq!(q.options().unwrap().default_priority, DEFAULT_PRIORITY);
    q.send("a").unwrap();
    assert_eq!(q.peek().unwrap().unwrap().priority(), DEFAULT_PRIORITY);
    t.store()
        .queue_with("q", QueueOptions::default().default_priority(0))
        .unwrap();
    t.reopen();
    let q = t
        .store()
        .queue_with("q", QueueOptions::default().max_deliveries(4))
        .unwrap();
    let o = q.options().unwrap();
    assert_eq!((o.default_priority, o.max_deliveries), (0, 4));
    q.send("b").unwrap();
    let a = q.receive(NOW).unwrap().unwrap();
    assert_eq!(a.body(), b"a");
    a.complete().unwrap();
    assert_eq!(q.receive(NOW).unwrap().unwrap().priority(), 0);
}

#[test]
fn a_default_priority_out_of_range_is_refused() {
    let t = TestStore::new();
    let err = t
        .store()
        .queue_with("q", QueueOptions::default().default_priority(8))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn options_are_listed_and_set_by_name() {
    let names: Vec<_> = QueueOptions::FIELDS.iter().map(|f| f.name).collect();
    assert!(names.contains(&"default_priority") && names.contains(&"receipts_to"));
    let f = QueueOptions::FIELDS
        .iter()
        .find(|f| f.name == "default_ttl")
        .unwrap();
    assert_eq!((f.kind, f.optional), (OptionKind::Duration, true));
    assert_eq!(f.default_value(), OptionValue::Unset);

    let mut o = QueueOptions::default();
    o.set("default_priority", OptionValue::Number(5)).unwrap();
    o.set("forward_to", OptionValue::Text("end".into()))
        .unwrap();
    assert_eq!(
        o,
        QueueOptions::default()
            .default_priority(5)
            .forward_to("end")
    );
    assert_eq!(o.get("default_priority"), Some(OptionValue::Number(5)));
    assert_eq!(o.get("nope"), None);
    let bad = [
        ("nope", OptionValue::Flag(true)),
        ("default_priority", OptionValue::Number(300)),
        ("lock_duration", OptionValue::Unset),
        ("forward_to", OptionValue::Number(1)),
    ];
    for (name, v) in bad {
        let err = o.clone().set(name, v).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{name}");
    }
    assert_eq!(o.values().count(), QueueOptions::FIELDS.len());

    // A value set by name is mentioned: it replaces the stored one even when it is the default.
    let t = TestStore::new();
    t.store()
        .queue_with("q", QueueOptions::default().default_priority(1))
        .unwrap();
    let mut back = QueueOptions::default();
    back.set("default_priority", OptionValue::Number(3))
        .unwrap();
    let q = t.store().queue_with("q", back).unwrap();
    assert_eq!(q.options().unwrap().default_priority, 3);
}
