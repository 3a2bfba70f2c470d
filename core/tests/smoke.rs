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
