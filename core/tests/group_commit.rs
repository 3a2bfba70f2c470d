//! Group commit: concurrent callers share redb commits (and fsyncs), and an invalid operation in
//! a shared batch fails alone while every other caller gets its own success.
//!
//! These stores use the default durability on the build disk: the fsync is what makes callers
//! pile up behind a commit.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use postbox::{Error, ErrorKind, ManualClock, MessageId, QueueOptions, Store};

#[test]
fn concurrent_single_sends_share_commits() {
    const THREADS: usize = 8;
    let per_thread = common::knob("POSTBOX_STRESS", 2_000).clamp(200, 10_000) / 80;
    // On the build disk rather than a RAM /tmp: the fsync is what makes callers pile up.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = Store::open(dir.path().join("gc.postbox")).unwrap();
    let q = store.queue("q").unwrap();
    let before = store.stats();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (q, barrier) = (q.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut ids = Vec::new();
                for i in 0..per_thread {
                    ids.push(q.send(format!("{t}/{i}").as_str()).unwrap());
                }
                ids
            })
        })
        .collect();
    let mut all: Vec<MessageId> = Vec::new();
    for h in handles {
        let ids = h.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "one thread's ids increase"
        );
        all.extend(ids);
    }
    let after = store.stats();
    let sends = (THREADS * per_thread) as u64;
    let (commits, ops) = (
        after.commits - before.commits,
        after.operations - before.operations,
    );
    eprintln!("{sends} sends from {THREADS} threads: {commits} commits for {ops} operations");
    assert_eq!(ops, sends);
    // Far fewer commits than messages: on average at least 2 sends shared each commit (with 8
    // threads blocked behind an fsync it is usually close to 8).
    assert!(
        commits * 2 <= sends,
        "{commits} commits for {sends} concurrent sends: no group commit"
    );
    all.sort();
    all.dedup();
    assert_eq!(all.len() as u64, sends, "every send got its own id");
    let s = q.stats().unwrap();
    assert_eq!(s.active, sends);
}

#[test]
fn a_failing_operation_in_a_shared_batch_fails_alone() {
    const ROUNDS: usize = 12;
    const SENDERS: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let store = common::open_with(&dir.path().join("mixed.postbox"), &clock);
    let q = store.queue("q").unwrap();
    // A handle that still believes in a 1 MiB limit; the queue's real limit becomes 16 bytes,
    // so its oversize send passes the handle's check and fails inside the batch.
    let stale = store
        .queue_with("strict", QueueOptions::default().max_message_size(1 << 20))
        .unwrap();
    let strict = store
        .queue_with("strict", QueueOptions::default().max_message_size(16))
        .unwrap();
    let full = store
        .queue_with("full", QueueOptions::default().max_messages(1))
        .unwrap();
    full.send("occupant").unwrap();
    let short = QueueOptions::default().lock_duration(Duration::from_secs(1));
    let locks = store.queue_with("locks", short.clone()).unwrap();
    let tx_src = store.queue_with("tx-src", short).unwrap();
    let tx_dst = store.queue("tx-dst").unwrap();
    let ok_ids = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let before = store.stats();

    for round in 0..ROUNDS {
        // Prepare a settle and a transaction whose locks will have expired.
        locks.send(format!("lock {round}").as_str()).unwrap();
        let expired = locks.try_receive().unwrap().unwrap();
        tx_src.send(format!("tx {round}").as_str()).unwrap();
        let mut tx = store.begin();
        tx.receive(&tx_src, Duration::ZERO).unwrap().unwrap();
        tx.send(&tx_dst, "must not appear").unwrap();
        clock.advance(Duration::from_secs(2));

        let barrier = Arc::new(Barrier::new(SENDERS + 4));
        let mut handles: Vec<std::thread::JoinHandle<()>> = Vec::new();
        for s in 0..SENDERS {
            let (q, barrier, ok_ids) = (q.clone(), barrier.clone(), ok_ids.clone());
            handles.push(std::thread::spawn(move || {
                let body = format!("{round}/{s}");
                barrier.wait();
                let id = q.send(body.as_str()).expect("a valid send succeeds");
                ok_ids.lock().push((id, body));
            }));
        }
        {
            let (stale, barrier) = (stale.clone(), barrier.clone());
            handles.push(std::thread::spawn(move || {
                barrier.wait();
                let e = stale.send(vec![0u8; 17]).unwrap_err();
                assert!(
                    matches!(e, Error::MessageTooLarge { size: 17, max: 16 }),
                    "{e}"
                );
            }));
        }
        {
            let (full, barrier) = (full.clone(), barrier.clone());
            handles.push(std::thread::spawn(move || {
                barrier.wait();
                let e = full.send("overflow").unwrap_err();
                assert_eq!(e.kind(), ErrorKind::QueueFull, "{e}");
            }));
        }
        {
            let barrier = barrier.clone();
            handles.push(std::thread::spawn(move || {
                barrier.wait();
                let e = expired.complete().unwrap_err();
                assert!(e.is_lock_lost(), "{e}");
            }));
        }
        {
            let barrier = barrier.clone();
            handles.push(std::thread::spawn(move || {
                barrier.wait();
                let e = tx.commit().unwrap_err();
                assert!(e.is_lock_lost(), "{e}");
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        // The failed settle and the failed commit changed nothing: their messages are back,
        // delivered once; the transaction's send was not applied.
        for src in [&locks, &tx_src] {
            let s = src.stats().unwrap();
            assert_eq!((s.active, s.locked), (1, 0), "round {round}");
            assert_eq!(src.peek().unwrap().unwrap().delivery_count(), 1);
            assert_eq!(src.purge().unwrap(), 1);
        }
        assert_eq!(tx_dst.stats().unwrap().active, 0);
    }

    let after = store.stats();
    let commits = after.commits - before.commits;
    eprintln!(
        "{ROUNDS} rounds of {} concurrent calls: {commits} commits",
        SENDERS + 4
    );
    // Every valid send is stored with its own body; nothing else is.
    let ok = ok_ids.lock();
    assert_eq!(ok.len(), ROUNDS * SENDERS);
    for (id, body) in ok.iter() {
        assert_eq!(q.get(*id).unwrap().unwrap().body(), body.as_bytes());
    }
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), ((ROUNDS * SENDERS) as u64, 0));
    assert_eq!(strict.stats().unwrap().active, 0);
    assert_eq!(full.stats().unwrap().active, 1);
    assert_eq!(tx_dst.stats().unwrap().active, 0);
}
