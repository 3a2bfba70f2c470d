//! Several processes on one store (`multi_process(true)`): concurrent send/receive with
//! exactly-once completion, cross-process wake-ups, the Durability::None configuration error,
//! and redb's integrity check on open while another process works on the file.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use postbox::{Durability, ErrorKind, Message, QueueOptions, Store};
use postbox_tests::{Proc, arg, num, stress};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");

fn open_multi(path: &std::path::Path) -> Store {
    Store::builder().multi_process(true).open(path).unwrap()
}

/// Three (or more) processes each send N messages and receive/complete with two threads, all on
/// one queue. Every sent message is completed exactly once (by whichever process got it), with
/// its body intact, and the exact counts end at zero.
#[test]
fn processes_send_and_receive_concurrently_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mp.postbox");
    let children = 3 + (stress() as usize - 1).min(5);
    let per_child = 150 * stress();
    {
        let store = open_multi(&path);
        store.queue("work").unwrap();
        store.close().unwrap();
    }

    // One reader thread per child forwards its parsed lines here, so the parent sees progress
    // of all children at once.
    let (tx, rx) = mpsc::channel::<(usize, String, Vec<String>)>();
    let mut procs: Vec<Proc> = Vec::new();
    for c in 0..children {
        let tag = format!("c{c}");
        let count = per_child.to_string();
        let p = Proc::spawn(
            CHILD,
            &tag,
            &["mixed", arg(&path), "work", &tag, &count, "2"],
        );
        procs.push(p);
    }
    for (c, p) in procs.iter_mut().enumerate() {
        let (tx, lines) = (tx.clone(), p.take_lines());
        thread::spawn(move || {
            for line in lines {
                let mut w = line.split_whitespace().map(str::to_owned);
                let tag = w.next().unwrap_or_default();
                let _ = tx.send((c, tag, w.collect()));
            }
        });
    }
    drop(tx);

    let total = children as u64 * per_child;
    let mut sent: BTreeMap<u64, String> = BTreeMap::new();
    let mut done: BTreeMap<u64, (usize, String)> = BTreeMap::new();
    let mut senders_finished = 0;
    while (done.len() as u64) < total || senders_finished < children {
        let (c, tag, w) = rx
            .recv_timeout(postbox_tests::LINE_GUARD)
            .unwrap_or_else(|_| {
                panic!(
                    "stalled: {} sent, {} done of {total}",
                    sent.len(),
                    done.len()
                )
            });
        match tag.as_str() {
            "SENT" => {
                assert!(sent.insert(num(&w[0]), w[1].clone()).is_none(), "id reused");
            }
            "DONE" => {
                let id = num(&w[0]);
                if let Some(prev) = done.insert(id, (c, w[1].clone())) {
                    panic!("message {id} completed twice: by c{} and c{c}", prev.0);
                }
            }
            "SENT-ALL" => senders_finished += 1,
            "ERR" => panic!("child c{c} reported {w:?}"),
            _ => {}
        }
    }
    // Every message is done: let the children finish.
    for p in &mut procs {
        p.close_stdin();
    }
    for p in &mut procs {
        let status = p.wait();
        assert!(status.success(), "{} exited with {status:?}", p.name);
    }
    // Lines printed after the parent's count was reached: no further completion may appear.
    while let Ok((c, tag, w)) = rx.recv_timeout(postbox_tests::LINE_GUARD) {
        assert_ne!(tag, "DONE", "extra completion from c{c}: {w:?}");
    }

    assert_eq!(sent.len() as u64, total);
    let sent_ids: BTreeSet<u64> = sent.keys().copied().collect();
    let done_ids: BTreeSet<u64> = done.keys().copied().collect();
    assert_eq!(sent_ids, done_ids, "completed set differs from sent set");
    for (id, (_, body)) in &done {
        assert_eq!(&sent[id], body, "body of {id} changed");
    }
    // Every process really took part on both sides.
    let completers: BTreeSet<usize> = done.values().map(|(c, _)| *c).collect();
    assert!(
        completers.len() >= 2,
        "only {completers:?} completed anything"
    );

    let store = open_multi(&path);
    let q = store.queue("work").unwrap();
    let s = q.stats().unwrap();
    assert_eq!(
        (s.active, s.locked, s.scheduled, s.dead_lettered, s.bytes),
        (0, 0, 0, 0, 0)
    );
    assert!(q.try_receive().unwrap().is_none());
}

/// A receiver blocked in one process gets a message another process sends, and the other way
/// round. No timing assertion: only that it arrives (latency is measured by the benchmarks).
#[test]
fn blocked_receiver_is_woken_by_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wake.postbox");
    let store = open_multi(&path);
    let q = store.queue("wake").unwrap();

    // Child waits, parent sends — several rounds, so later rounds find the child already
    // blocked in receive.
    let rounds = 3;
    let mut child = Proc::spawn(
        CHILD,
        "observer",
        &["observe", arg(&path), "wake", &rounds.to_string(), "60000"],
    );
    child.expect("READY");
    for r in 0..rounds {
        child.expect("WAITING");
        let id = q.send(Message::new(format!("ping-{r}"))).unwrap();
        let got = child.expect("GOT");
        assert_eq!(num(&got[0]), id.get());
        assert_eq!(got[2], format!("ping-{r}"));
        child.expect("DONE");
    }
    child.finish();

    // Parent waits, child sends.
    let waiter = {
        let q = q.clone();
        thread::spawn(move || q.receive(Duration::from_secs(60)).unwrap())
    };
    let mut sender = Proc::spawn(CHILD, "sender", &["send", arg(&path), "wake", "pong"]);
    let sent = sender.expect("SENT");
    let m = waiter
        .join()
        .unwrap()
        .expect("the message from the other process");
    assert_eq!(m.id().get(), num(&sent[0]));
    assert_eq!(m.body(), b"pong");
    m.complete().unwrap();
    sender.finish();
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (0, 0));
}

/// redb's multi-writer mode commits durably only, so the combination is refused up front — and
/// refusing it creates no file.
#[test]
fn multi_process_with_durability_none_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cfg.postbox");
    let err = Store::builder()
        .multi_process(true)
        .durability(Durability::None)
        .open(&path)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(!path.exists(), "a refused open must not create the store");

    // Also for an existing store.
    Store::open(&path).unwrap().close().unwrap();
    let err = Store::builder()
        .durability(Durability::None)
        .multi_process(true)
        .open(&path)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    // Single-process with Durability::None is fine.
    Store::builder()
        .durability(Durability::None)
        .open(&path)
        .unwrap()
        .close()
        .unwrap();
}

/// The open question of issue 3: `verify_on_open(true)` (the default) runs redb's integrity
/// check, which takes the writer lock and commits, while another process has the file open and
/// is committing. Reopen repeatedly during another process's traffic and check that neither
/// side fails and nothing is lost.
#[test]
fn verify_on_open_while_another_process_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("verify.postbox");
    {
        let store = open_multi(&path);
        store
            .queue_with(
                "churn",
                QueueOptions::default().lock_duration(Duration::from_secs(60)),
            )
            .unwrap();
        store.queue("mine").unwrap();
        store.close().unwrap();
    }
    let count = 50 * stress();
    let mut child = Proc::spawn(
        CHILD,
        "churn",
        &["churn", arg(&path), "churn", &count.to_string()],
    );
    child.expect("READY");
    let mut mine = Vec::new();
    let mut sent = BTreeSet::new();
    let mut done = BTreeSet::new();
    let mut child_finished = false;
    let mut reopen = 0;
    // Reopen with the integrity check for as long as the child is working (and at least 5
    // times), each time sending and checking our own messages.
    let guard = postbox_tests::Guard::new(postbox_tests::LINE_GUARD, "the churning child");
    while !child_finished || reopen < 5 {
        guard.check();
        let store = Store::builder()
            .multi_process(true)
            .verify_on_open(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("reopen {reopen} with verify_on_open failed: {e}"));
        let q = store.queue("mine").unwrap();
        let id = q.send(Message::new(format!("mine-{reopen}"))).unwrap();
        mine.push(id);
        let ids: Vec<_> = q.browse().map(|e| e.unwrap().id()).collect();
        assert_eq!(ids, mine, "reopen {reopen}: our messages");
        store.close().unwrap();
        reopen += 1;
        // Note what the child reported meanwhile, without waiting for it.
        while let Some(line) = child.try_line() {
            assert!(!line.starts_with("ERR"), "child failed: {line}");
            child_finished |= line == "SENT-ALL";
        }
    }
    child.close_stdin();
    for line in child.log.clone().iter().chain(child.rest().iter()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.first() {
            Some(&"SENT") => {
                sent.insert(num(w[1]));
            }
            Some(&"DONE") => {
                done.insert(num(w[1]));
            }
            Some(&"ERR") => panic!("child failed: {line}"),
            _ => {}
        }
    }
    let status = child.wait();
    assert!(status.success(), "child exited with {status:?}");
    assert_eq!(sent.len() as u64, count);
    eprintln!("verify_on_open: {reopen} verified reopens during {count} sends of another process");

    let store = open_multi(&path);
    let q = store.queue("churn").unwrap();
    let left: BTreeSet<u64> = q.browse().map(|e| e.unwrap().id().get()).collect();
    let expected: BTreeSet<u64> = sent.difference(&done).copied().collect();
    assert_eq!(
        left, expected,
        "messages sent and not completed by the child"
    );
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (expected.len() as u64, 0));
    let s = store.queue("mine").unwrap().stats().unwrap();
    assert_eq!(s.active, reopen);
}
