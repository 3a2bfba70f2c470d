//! Concurrency: many receivers on one queue (invariant 2, one holder at a time; invariant 4,
//! completed exactly once). `POSTBOX_STRESS` sets the number of messages: the default of 2,000
//! keeps a debug build on two busy cores within seconds; `POSTBOX_STRESS=10000` is the full run.
//! Durability is not the point here, so the stores use `Durability::None` on a RAM disk when
//! there is one.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use postbox::{Durability, Message, Store};

const THREADS: usize = 8;

fn messages() -> usize {
    common::knob("POSTBOX_STRESS", 2_000)
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::builder()
        .durability(Durability::None)
        .open(dir.path().join("threads.postbox"))
        .unwrap()
}

/// Shared bookkeeping of who holds what.
#[derive(Default)]
struct Ledger {
    /// Message ids currently held by some receiver.
    held: Mutex<HashSet<u64>>,
    /// Every lock token ever handed out.
    tokens: Mutex<HashSet<u64>>,
}

impl Ledger {
    fn take(&self, id: u64, token: u64) {
        assert!(
            self.held.lock().insert(id),
            "message {id} handed to two receivers at once"
        );
        assert!(
            self.tokens.lock().insert(token),
            "lock token {token} reused"
        );
    }
    fn release(&self, id: u64) {
        assert!(self.held.lock().remove(&id));
    }
}

#[test]
fn eight_receivers_complete_every_message_exactly_once() {
    let n = messages();
    let dir = common::fast_tempdir();
    let store = open(&dir);
    let q = store.queue("work").unwrap();
    let mut ids = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let batch: Vec<Message> = chunk
            .iter()
            .map(|i| Message::new((*i as u64).to_le_bytes().to_vec()).priority((*i % 8) as u8))
            .collect();
        ids.extend(q.send_batch(batch).unwrap());
    }
    let first = ids[0].get();
    assert_eq!(q.stats().unwrap().active, n as u64);

    let ledger = Arc::new(Ledger::default());
    let completions: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let abandons = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..THREADS)
        .map(|w| {
            let (q, ledger, completions, done, abandons) = (
                q.clone(),
                ledger.clone(),
                completions.clone(),
                done.clone(),
                abandons.clone(),
            );
            std::thread::spawn(move || {
                let mut mine = 0usize;
                while done.load(Ordering::SeqCst) < n {
                    // Receivers that find the queue momentarily empty wait for a wake-up (an
                    // abandon by another thread), bounded so the loop notices the end.
                    let Some(m) = q.receive(Duration::from_millis(100)).unwrap() else {
                        continue;
                    };
                    let id = m.id().get();
                    ledger.take(id, m.lock_token());
                    let index = usize::from_le_bytes(m.body().try_into().unwrap());
                    assert_eq!(index as u64, id - first, "body matches id");
                    // Some first deliveries are handed back, to exercise re-locking.
                    if m.delivery_count() == 1 && (id + w as u64).is_multiple_of(13) {
                        ledger.release(id);
                        m.abandon().unwrap();
                        abandons.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    m.complete().unwrap();
                    // Released only after the commit: no one may get it meanwhile either.
                    ledger.release(id);
                    completions[index].fetch_add(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    mine += 1;
                }
                mine
            })
        })
        .collect();
    let per_thread: Vec<usize> = workers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(per_thread.iter().sum::<usize>(), n);
    for (i, c) in completions.iter().enumerate() {
        assert_eq!(c.load(Ordering::SeqCst), 1, "message #{i} completions");
    }
    assert!(ledger.held.lock().is_empty());
    assert_eq!(
        ledger.tokens.lock().len(),
        n + abandons.load(Ordering::SeqCst)
    );
    let s = q.stats().unwrap();
    assert_eq!(
        (s.active, s.locked, s.scheduled, s.dead_lettered, s.bytes),
        (0, 0, 0, 0, 0)
    );
    assert!(q.try_receive().unwrap().is_none());
    eprintln!(
        "{n} messages, {} abandoned once, per thread {per_thread:?}, {:?}",
        abandons.load(Ordering::SeqCst),
        store.stats()
    );
}

#[test]
fn concurrent_senders_and_receivers_lose_nothing() {
    let n = messages() / 4;
    let dir = common::fast_tempdir();
    let store = open(&dir);
    let q = store.queue("pipe").unwrap();
    let senders = THREADS / 2;
    let per_sender = n / senders;
    let total = per_sender * senders;
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let received = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for s in 0..senders {
        let q = q.clone();
        handles.push(std::thread::spawn(move || {
            for i in 0..per_sender {
                q.send(format!("{s}:{i}").as_str()).unwrap();
            }
        }));
    }
    for _ in 0..THREADS - senders {
        let (q, seen, received) = (q.clone(), seen.clone(), received.clone());
        handles.push(std::thread::spawn(move || {
            while received.load(Ordering::SeqCst) < total {
                if let Some(m) = q.receive(Duration::from_millis(100)).unwrap() {
                    let body = String::from_utf8(m.body().to_vec()).unwrap();
                    m.complete().unwrap();
                    assert!(seen.lock().insert(body), "delivered twice");
                    received.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(seen.lock().len(), total);
    eprintln!("{total} messages, {:?}", store.stats());
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.bytes), (0, 0, 0));
}

#[test]
fn concurrent_transactions_move_each_message_once() {
    // Four threads move messages from `inbox` to `outbox` in transactions (receive + send +
    // commit), some aborting; every message ends up in the outbox exactly once.
    let n = (messages() / 10).max(40);
    let dir = common::fast_tempdir();
    let store = open(&dir);
    let inbox = store.queue("inbox").unwrap();
    let outbox = store.queue("outbox").unwrap();
    let bodies: Vec<Message> = (0..n).map(|i| Message::new(i.to_string())).collect();
    inbox.send_batch(bodies).unwrap();
    let moved = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (store, inbox, outbox, moved) =
                (store.clone(), inbox.clone(), outbox.clone(), moved.clone());
            std::thread::spawn(move || {
                let mut k = 0usize;
                while moved.load(Ordering::SeqCst) < n {
                    let mut tx = store.begin();
                    let Some(e) = tx.receive(&inbox, Duration::from_millis(100)).unwrap() else {
                        continue;
                    };
                    tx.send(&outbox, e.body()).unwrap();
                    k += 1;
                    if (k + w).is_multiple_of(5) {
                        tx.abort().unwrap();
                    } else {
                        tx.commit().unwrap();
                        moved.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for h in workers {
        h.join().unwrap();
    }
    let s = inbox.stats().unwrap();
    assert_eq!((s.active, s.locked), (0, 0));
    let mut out: Vec<usize> = outbox
        .browse()
        .map(|e| {
            String::from_utf8(e.unwrap().into_body())
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    out.sort_unstable();
    assert_eq!(out, (0..n).collect::<Vec<_>>());
    assert_eq!(outbox.stats().unwrap().active, n as u64);
}

/// Runs `f` on a thread and returns its result, failing the test if it takes more than a
/// minute: a wait that never ends is the bug these tests look for.
fn finishes<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the call never returned")
}

/// Sends to queue `busy` from a thread until told to stop: some thread always commits, so the
/// timers of waiting receives must fire while others lead the pipeline.
fn keep_sending(
    store: &Store,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<u64>,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = store.queue("busy").unwrap();
    let flag = stop.clone();
    let handle = std::thread::spawn(move || {
        let mut sent = 0;
        while !flag.load(Ordering::Acquire) {
            busy.send("x").unwrap();
            sent += 1;
        }
        sent
    });
    (stop, handle)
}

#[test]
fn a_waiting_receive_times_out_while_other_threads_keep_writing() {
    let dir = common::fast_tempdir();
    let store = open(&dir);
    let idle = store.queue("idle").unwrap();
    let (stop, sender) = keep_sending(&store);
    for _ in 0..5 {
        let q = idle.clone();
        let got = finishes(move || q.receive(Duration::from_millis(30)).unwrap());
        assert!(got.is_none(), "nothing was sent to this queue");
    }
    stop.store(true, Ordering::Release);
    assert!(sender.join().unwrap() > 0);
}

#[test]
fn a_due_message_reaches_a_waiting_receiver_while_other_threads_keep_writing() {
    let dir = common::fast_tempdir();
    let store = open(&dir);
    let later = store.queue("later").unwrap();
    let (stop, sender) = keep_sending(&store);
    let id = later
        .send(Message::new("due soon").delay(Duration::from_millis(50)))
        .unwrap();
    let q = later.clone();
    let got = finishes(move || {
        q.receive(Duration::from_secs(30))
            .unwrap()
            .map(|m| (m.id(), m.complete()))
    });
    let (got_id, completed) = got.expect("the scheduled message arrives before the deadline");
    assert_eq!(got_id, id);
    completed.unwrap();
    stop.store(true, Ordering::Release);
    sender.join().unwrap();
}

#[test]
fn closing_a_store_answers_every_caller_and_keeps_what_was_acknowledged() {
    let dir = common::fast_tempdir();
    let path = dir.path().join("threads.postbox");
    let store = Store::builder()
        .durability(Durability::None)
        .open(&path)
        .unwrap();
    let q = store.queue("q").unwrap();
    let first = Arc::new(std::sync::Barrier::new(5));
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let (q, first) = (q.clone(), first.clone());
            std::thread::spawn(move || {
                let mut ok = 0u64;
                q.send("x").unwrap();
                ok += 1;
                first.wait();
                loop {
                    match q.send("x") {
                        Ok(_) => ok += 1,
                        Err(postbox::Error::Closed) => return ok,
                        Err(e) => panic!("a send during close failed with {e}"),
                    }
                }
            })
        })
        .collect();
    first.wait();
    // Store is a shared handle: closing one clone closes the store for every holder.
    let closer = store.clone();
    finishes(move || closer.close()).unwrap();
    let acknowledged: u64 = senders.into_iter().map(|h| h.join().unwrap()).sum();
    drop(q);
    drop(store);
    let store = Store::open(&path).unwrap();
    let s = store.queue("q").unwrap().stats().unwrap();
    assert_eq!(
        s.active, acknowledged,
        "every acknowledged send, and only those"
    );
}

#[test]
fn many_multi_process_stores_in_one_process_all_work() {
    // More stores than the kernel's default inotify instances per user (128): the ones that
    // get no file watch fall back to polling, and every store still delivers.
    let dir = common::fast_tempdir();
    let stores: Vec<Store> = (0..150)
        .map(|i| {
            Store::builder()
                .multi_process(true)
                .open(dir.path().join(format!("mp-{i}.postbox")))
                .unwrap()
        })
        .collect();
    for (i, s) in stores.iter().enumerate() {
        let q = s.queue("q").unwrap();
        q.send(format!("{i}").as_str()).unwrap();
        let m = q.receive(Duration::from_secs(30)).unwrap().unwrap();
        assert_eq!(m.body(), format!("{i}").as_bytes());
        m.complete().unwrap();
    }
    for s in stores {
        s.close().unwrap();
    }
}

/// With a watch on the file (Linux), a shared store's waiters never poll: a waiter whose poll
/// interval is an hour is woken by the other handle's send, and by its scheduled send when
/// that falls due (a look at the file sees the earlier due time and wakes it to read it).
#[cfg(target_os = "linux")]
#[test]
fn a_multi_process_waiter_is_woken_by_the_file_watch_not_a_poll() {
    let dir = common::fast_tempdir();
    let path = dir.path().join("mp.postbox");
    let hour = Duration::from_secs(3600);
    let open = || {
        Store::builder()
            .multi_process(true)
            .poll_interval(hour, hour)
            .open(&path)
            .unwrap()
    };
    let (a, b) = (open(), open());
    let qa = a.queue("q").unwrap();
    let qb = b.queue("q").unwrap();
    for body in ["now", "later"] {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let waiter = {
            let qa = qa.clone();
            std::thread::spawn(move || {
                ready_tx.send(()).unwrap();
                let m = qa.receive(Duration::from_secs(60)).unwrap().expect("woken");
                let body = m.body().to_vec();
                m.complete().unwrap();
                body
            })
        };
        ready_rx.recv().unwrap();
        let mut msg = Message::new(body);
        if body == "later" {
            msg = msg.delay(Duration::from_millis(300));
        }
        qb.send(msg).unwrap();
        assert_eq!(waiter.join().unwrap(), body.as_bytes());
    }
    a.close().unwrap();
    b.close().unwrap();
}

#[test]
fn a_multi_process_waiter_wakes_when_another_store_handle_sends() {
    // Two handles on one file in one process behave like two processes: the second's send
    // reaches the first's waiter through the file, not through a shared pipeline.
    let dir = common::fast_tempdir();
    let path = dir.path().join("mp.postbox");
    let open = || Store::builder().multi_process(true).open(&path).unwrap();
    let (a, b) = (open(), open());
    let qa = a.queue("q").unwrap();
    let qb = b.queue("q").unwrap();
    let waiter = std::thread::spawn(move || {
        let m = qa.receive(Duration::from_secs(60)).unwrap();
        m.map(|m| {
            let body = m.body().to_vec();
            m.complete().unwrap();
            body
        })
    });
    // The waiter may or may not be waiting yet; either way it gets the message.
    qb.send("across").unwrap();
    assert_eq!(waiter.join().unwrap().as_deref(), Some(&b"across"[..]));
    a.close().unwrap();
    b.close().unwrap();
}
