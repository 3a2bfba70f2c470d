//! Typed queues: round trip, undecodable bodies, typed processors.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use postbox::{Error, REASON_DECODE_FAILED, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    customer: String,
    lines: Vec<(String, u32)>,
    notes: Option<String>,
    tags: BTreeMap<String, i64>,
}

fn order(id: u64) -> Order {
    Order {
        id,
        customer: format!("customer {id}"),
        lines: vec![("apple".into(), 3), ("pear".into(), u32::MAX)],
        notes: id.is_multiple_of(2).then(|| "leave at the door".into()),
        tags: [("rush".to_string(), -1)].into_iter().collect(),
    }
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("t.postbox")).unwrap();
    (dir, store)
}

#[test]
fn typed_round_trip() {
    let (_dir, store) = store();
    let q = store.queue("orders").unwrap().typed::<Order>();
    q.send(&order(1)).unwrap();
    q.send_batch(&[order(2), order(3)]).unwrap();
    q.queue()
        .send(q.message(&order(4)).unwrap().priority(7))
        .unwrap();
    let mut got = Vec::new();
    while let Some(m) = q.try_receive().unwrap() {
        got.push(m.value().clone());
        m.complete().unwrap();
    }
    assert_eq!(got, vec![order(4), order(1), order(2), order(3)]);
}

#[test]
fn typed_send_in_a_transaction() {
    let (_dir, store) = store();
    let q = store.queue("orders").unwrap().typed::<Order>();
    let mut tx = store.begin();
    q.send_in(&mut tx, &order(9)).unwrap();
    assert!(q.try_receive().unwrap().is_none());
    tx.commit().unwrap();
    assert_eq!(
        q.receive(Duration::from_secs(1))
            .unwrap()
            .unwrap()
            .value()
            .id,
        9
    );
}

#[test]
fn undecodable_body_is_a_codec_error_and_a_dead_letter() {
    let (_dir, store) = store();
    let raw = store.queue("orders").unwrap();
    let q = raw.typed::<Order>();
    // Garbage, a truncated encoding, a trailing byte, and a huge claimed length.
    let good = raw.typed::<Order>().message(&order(1)).unwrap();
    let mut trailing = good.body().to_vec();
    trailing.push(0);
    let truncated = good.body()[..good.body().len() - 3].to_vec();
    let huge_len = vec![0x01, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F];
    for body in [vec![0xFF; 5], truncated, trailing, huge_len] {
        raw.send(body).unwrap();
        match q.try_receive() {
            Err(Error::Codec(_)) => {}
            other => panic!("expected a codec error, got {other:?}"),
        }
    }
    let s = raw.stats().unwrap();
    assert_eq!((s.active, s.locked, s.dead_lettered), (0, 0, 4));
    for e in raw.dead_letters().unwrap().browse() {
        let e = e.unwrap();
        assert_eq!(e.dead_letter_info().unwrap().reason, REASON_DECODE_FAILED);
    }
    // A wrong type is caught too (a string is not a u64 map).
    raw.send("plain text").unwrap();
    assert!(matches!(
        raw.typed::<BTreeMap<u64, u64>>().try_receive(),
        Err(Error::Codec(_))
    ));
}

#[test]
fn typed_processor_dead_letters_undecodable_bodies() {
    let (_dir, store) = store();
    let raw = store.queue("orders").unwrap();
    let q = raw.typed::<Order>();
    q.send(&order(1)).unwrap();
    raw.send(vec![0xFF, 0xFE]).unwrap();
    q.send(&order(2)).unwrap();
    let (tx, rx) = mpsc::channel();
    let p = q
        .processor()
        .workers(1) // in order: order 2 is received in the commit that settles the bad body
        .start_typed(move |_d, o: Order| -> Result<(), String> {
            let _ = tx.send(o.id);
            Ok(())
        })
        .unwrap();
    let mut ids = vec![
        rx.recv_timeout(Duration::from_secs(20)).unwrap(),
        rx.recv_timeout(Duration::from_secs(20)).unwrap(),
    ];
    ids.sort();
    assert_eq!(ids, vec![1, 2]);
    let report = p.shutdown(Duration::from_secs(20));
    // The bad body never reached the handler; shutdown waited for its dead-lettering.
    assert_eq!(
        (report.processed, report.dead_lettered),
        (2, 1),
        "{report:?}"
    );
    let dead: Vec<_> = raw
        .dead_letters()
        .unwrap()
        .browse()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(dead.len(), 1);
    let info = dead[0].dead_letter_info().unwrap();
    assert_eq!(info.reason, REASON_DECODE_FAILED);
    assert!(!info.description.is_empty());
    assert_eq!(raw.stats().unwrap().active, 0);
}
