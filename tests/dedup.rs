//! Duplicate detection (`dedup_window` + `message_key`): inside the window a resend returns the
//! first id and stores nothing; outside it a new message is stored; the memory survives a reopen
//! and is shared by processes.

use std::collections::BTreeMap;
use std::time::Duration;

use postbox::{ManualClock, Message, QueueOptions, Store};
use postbox_tests::{Proc, arg, num};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn window() -> QueueOptions {
    QueueOptions::default().dedup_window(Duration::from_secs(60))
}

#[test]
fn inside_and_outside_the_window_and_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup.postbox");
    let clock = ManualClock::new();
    let open = || Store::builder().clock(clock.clone()).open(&path).unwrap();
    let store = open();
    let q = store.queue_with("orders", window()).unwrap();

    let first = q.send(Message::new("v1").message_key("order-1")).unwrap();
    // Inside the window: accepted, discarded, the first id comes back.
    clock.advance(Duration::from_secs(30));
    let again = q.send(Message::new("v2").message_key("order-1")).unwrap();
    assert_eq!(again, first);
    assert_eq!(q.stats().unwrap().active, 1);
    assert_eq!(
        q.peek().unwrap().unwrap().body(),
        b"v1",
        "the duplicate stored nothing"
    );
    // Another key, and no key at all, are independent messages.
    let other = q.send(Message::new("x").message_key("order-2")).unwrap();
    assert_ne!(other, first);
    let plain1 = q.send("plain").unwrap();
    let plain2 = q.send("plain").unwrap();
    assert_ne!(plain1, plain2);
    assert_eq!(q.stats().unwrap().active, 4);
    // A batch with a key twice stores it once.
    let ids = q
        .send_batch([
            Message::new("b").message_key("order-3"),
            Message::new("b").message_key("order-3"),
        ])
        .unwrap();
    assert_eq!(ids[0], ids[1]);
    assert_eq!(q.stats().unwrap().active, 5);

    // Completing the message does not forget the key: a retry is still a duplicate.
    let m = q.receive(Duration::from_secs(1)).unwrap().unwrap();
    assert_eq!(m.id(), first);
    m.complete().unwrap();
    assert_eq!(
        q.send(Message::new("v3").message_key("order-1")).unwrap(),
        first
    );
    assert_eq!(q.stats().unwrap().active, 4);

    // Across a reopen, still inside the window.
    drop(q);
    store.close().unwrap();
    let store = open();
    let q = store.queue("orders").unwrap();
    assert_eq!(
        q.send(Message::new("v4").message_key("order-2")).unwrap(),
        other
    );
    assert_eq!(q.stats().unwrap().active, 4);

    // Outside the window (measured from the first send): a new message.
    clock.advance(Duration::from_secs(31));
    let later = q.send(Message::new("v5").message_key("order-1")).unwrap();
    assert!(later > first, "a key past its window is a new message");
    assert_eq!(q.stats().unwrap().active, 5);
    // ...which opens a new window of its own.
    assert_eq!(
        q.send(Message::new("v6").message_key("order-1")).unwrap(),
        later
    );
    assert_eq!(q.stats().unwrap().active, 5);

    // Outside the window across a reopen too.
    drop(q);
    store.close().unwrap();
    clock.advance(Duration::from_secs(61));
    let store = open();
    let q = store.queue("orders").unwrap();
    let fresh = q.send(Message::new("v7").message_key("order-2")).unwrap();
    assert!(fresh > later);
    assert_eq!(q.stats().unwrap().active, 6);
}

/// Two processes send the same keys at the same time: each key is stored once and both get the
/// same id for it; a third process resending later gets those ids too.
#[test]
fn duplicates_from_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup-mp.postbox");
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let args_of = |mode: &'static str| {
        let mut a = vec![
            mode.to_owned(),
            arg(&path).to_owned(),
            "dq".into(),
            "60000".into(),
        ];
        a.extend(keys.iter().cloned());
        a
    };
    let a_args = args_of("send-keys");
    let b_args = args_of("send-keys");
    let child = env!("CARGO_BIN_EXE_pbx-child");
    let mut a = Proc::spawn(child, "a", &refs(&a_args));
    let mut b = Proc::spawn(child, "b", &refs(&b_args));
    let collect = |p: &mut Proc| -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for _ in 0..keys.len() {
            let w = p.expect("SENT");
            out.insert(w[1].clone(), num(&w[0]));
        }
        out
    };
    let ids_a = collect(&mut a);
    let ids_b = collect(&mut b);
    a.finish();
    b.finish();
    assert_eq!(
        ids_a, ids_b,
        "both processes must get the first id of every key"
    );

    let mut c = Proc::spawn(CHILD, "c", &refs(&args_of("send-keys")));
    let ids_c = collect(&mut c);
    c.finish();
    assert_eq!(ids_c, ids_a);

    let store = Store::builder().multi_process(true).open(&path).unwrap();
    let q = store.queue("dq").unwrap();
    assert_eq!(q.stats().unwrap().active, keys.len() as u64);
    // And the parent, in its own process, is told the same ids.
    for (k, id) in &ids_a {
        assert_eq!(
            q.send(Message::new("again").message_key(k)).unwrap().get(),
            *id
        );
    }
    assert_eq!(q.stats().unwrap().active, keys.len() as u64);
}
