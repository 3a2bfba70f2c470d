//! Issue 27 item 2, across a SIGKILL: a processor handler notifies 300 users, recording each
//! with `Delivery::mark_done` under the processor's lock; its process is killed after 120. The
//! redelivery — a processor in this process — skips exactly those 120 and notifies the other
//! 180, nobody twice; for a plain and a transactional handler.

use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use postbox::{Delivery, Processor, QueueOptions, Store};
use postbox_tests::{Proc, arg};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-processor");
const USERS: usize = 300;
const KILL_AFTER: usize = 120;

fn key(u: usize) -> String {
    format!("user-{u:03}")
}

fn killed_after_120(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.postbox");
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    // A long lock: the death of its holder, not an expiry, must free the message.
    let q = store
        .queue_with(
            "notify",
            QueueOptions::default().lock_duration(Duration::from_secs(120)),
        )
        .unwrap();
    let id = q.send("notify 300 users").unwrap();

    let mut child = Proc::spawn(
        CHILD,
        &format!("worker ({mode})"),
        &[arg(&path), "notify", "300", "120", mode],
    );
    child.expect("READY");
    let mut first = Vec::new();
    child.expect_with("HALF", |w| {
        assert_ne!(w.first(), Some(&"ERR"), "{w:?}");
        if w.first() == Some(&"MARKED") {
            first.push(w[1].to_owned());
        }
    });
    child.kill9_alive();
    assert_eq!(first, (0..KILL_AFTER).map(key).collect::<Vec<_>>());

    // The redelivery: the next writer notices the dead holder and releases its lock.
    let notified = Arc::new(Mutex::new(Vec::new()));
    let (seen_tx, seen_rx) = mpsc::channel();
    let run = {
        let notified = notified.clone();
        move |d: &Delivery| -> postbox::Result<()> {
            let done = d.done_keys()?;
            let _ = seen_tx.send((d.id(), d.delivery_count(), done.len()));
            for u in 0..USERS {
                if !done.contains(&key(u)) {
                    notified.lock().unwrap().push(key(u));
                    d.mark_done([key(u)])?;
                }
            }
            Ok(())
        }
    };
    let b = Processor::builder(&q).workers(2);
    let p = if mode == "transactional" {
        b.start_transactional(move |d, _tx| run(d)).unwrap()
    } else {
        b.start(run).unwrap()
    };
    let (got, delivery_count, skipped) = seen_rx.recv_timeout(Duration::from_secs(120)).unwrap();
    let report = p.shutdown(Duration::from_secs(60));
    assert!(report.finished, "{report:?}");
    assert_eq!((report.processed, report.failed), (1, 0), "{report:?}");
    assert_eq!((got, delivery_count), (id, 2));
    assert_eq!(
        skipped, KILL_AFTER,
        "the redelivery skips exactly the 120 recorded"
    );
    let second = notified.lock().unwrap().clone();
    assert_eq!(second, (KILL_AFTER..USERS).map(key).collect::<Vec<_>>());
    let mut all = first;
    all.extend(second);
    all.sort();
    assert_eq!(all, (0..USERS).map(key).collect::<Vec<_>>(), "nobody twice");
    assert!(q.get(id).unwrap().is_none(), "completed");
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.dead_lettered), (0, 0, 0));
}

#[test]
fn a_killed_handler_leaves_its_checkpoints() {
    killed_after_120("plain");
}

#[test]
fn a_killed_transactional_handler_leaves_its_checkpoints() {
    killed_after_120("transactional");
}
