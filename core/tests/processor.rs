//! Processor behaviour with real threads. Synchronisation is by channels and condition
//! variables only; the few sleeps are handler *work* that must outlast a lock.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use postbox::{
    Autoscale, Durability, Error, Message, Processor, Queue, QueueOptions, REASON_MAX_DELIVERIES,
    RetryPolicy, Store,
};

const WAIT: Duration = Duration::from_secs(20);

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("p.postbox")).unwrap();
    (dir, store)
}

/// A gate handlers wait at until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

fn body_of(q: &Queue) -> Vec<String> {
    q.browse()
        .map(|e| String::from_utf8(e.unwrap().body().to_vec()).unwrap())
        .collect()
}

#[test]
fn shutdown_waits_for_slow_handlers_and_leaves_nothing_locked() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    let ids = q
        .send_batch((0..10).map(|i| Message::new(format!("m{i}"))))
        .unwrap();

    let gate = Arc::new(Gate::default());
    let started = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let (start_tx, start_rx) = mpsc::channel();
    let p = {
        let (gate, started, finished) = (gate.clone(), started.clone(), finished.clone());
        Processor::builder(&q)
            .workers(3)
            .prefetch(1)
            .start(move |d| -> Result<(), String> {
                started.fetch_add(1, Ordering::SeqCst);
                let _ = start_tx.send(d.id());
                gate.wait();
                finished.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap()
    };
    let p = Arc::new(p);
    let mut in_handlers = HashSet::new();
    for _ in 0..3 {
        in_handlers.insert(start_rx.recv_timeout(WAIT).unwrap());
    }
    assert_eq!(p.in_flight(), 3);

    // Every worker is inside a handler: stop now, then let them finish.
    p.stop();
    let (report_tx, report_rx) = mpsc::channel();
    let joiner = {
        let (p, finished) = (p.clone(), finished.clone());
        std::thread::spawn(move || {
            let report = p.join(WAIT);
            // join returned: every handler must already be done.
            let _ = report_tx.send((report, finished.load(Ordering::SeqCst)));
        })
    };
    gate.open();
    let (report, finished_at_join) = report_rx.recv_timeout(WAIT).unwrap();
    joiner.join().unwrap();

    assert!(report.finished, "{report:?}");
    assert_eq!(report.still_running, 0);
    assert_eq!(finished_at_join, 3);
    assert_eq!(report.processed, 3);
    assert_eq!(report.failed, 0);
    // No handler started after stop.
    assert_eq!(started.load(Ordering::SeqCst), 3);
    assert_eq!(p.in_flight(), 0);
    assert_eq!(p.workers(), 0);

    let s = q.stats().unwrap();
    assert_eq!(s.locked, 0, "{s:?}");
    assert_eq!(s.active, 7, "{s:?}");
    for id in &ids {
        let gone = q.get(*id).unwrap().is_none();
        assert_eq!(gone, in_handlers.contains(id), "message {id}");
    }
}

#[test]
fn long_handler_keeps_its_lock_with_renewal() {
    let (_dir, store) = store();
    let lock = Duration::from_millis(200);
    let q = store
        .queue_with("slow", QueueOptions::default().lock_duration(lock))
        .unwrap();
    q.send("work").unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = mpsc::channel();
    let p = {
        let calls = calls.clone();
        Processor::builder(&q)
            .workers(2)
            .max_auto_renew(Duration::from_secs(30))
            .start(move |d| -> Result<(), String> {
                calls.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(lock * 3); // the work
                let _ = tx.send((d.delivery_count(), d.is_cancelled()));
                Ok(())
            })
            .unwrap()
    };
    let (count, cancelled) = rx.recv_timeout(WAIT).unwrap();
    let report = p.shutdown(WAIT);
    assert!(report.finished);
    assert_eq!((count, cancelled), (1, false));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!((report.processed, report.lock_lost), (1, 0), "{report:?}");
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.scheduled), (0, 0, 0));
}

#[test]
fn long_handler_without_renewal_loses_its_lock_and_is_redelivered() {
    let (_dir, store) = store();
    let lock = Duration::from_millis(200);
    let q = store
        .queue_with("slow", QueueOptions::default().lock_duration(lock))
        .unwrap();
    q.send("work").unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(2)
        .max_auto_renew(Duration::ZERO)
        .start(move |d| -> Result<(), String> {
            if d.delivery_count() == 1 {
                std::thread::sleep(lock * 3); // the work, longer than the lock
            }
            let _ = tx.send((d.delivery_count(), d.lock_lost()));
            Ok(())
        })
        .unwrap();
    let mut seen = vec![
        rx.recv_timeout(WAIT).unwrap(),
        rx.recv_timeout(WAIT).unwrap(),
    ];
    let report = p.shutdown(WAIT);
    seen.sort();
    assert_eq!(seen, vec![(1, true), (2, false)]);
    assert!(report.finished);
    assert_eq!((report.processed, report.lock_lost), (1, 1), "{report:?}");
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.scheduled), (0, 0, 0));
}

#[test]
fn failing_and_panicking_handlers_retry_then_dead_letter_with_the_error_text() {
    let (_dir, store) = store();
    let q = store
        .queue_with("jobs", QueueOptions::default().max_deliveries(3))
        .unwrap();
    q.send("fail").unwrap();
    q.send("panic").unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(1) // the panics must not kill the only worker
        .retry(RetryPolicy::immediate())
        .start(move |d| {
            let body = String::from_utf8_lossy(d.body()).into_owned();
            let _ = tx.send(body.clone());
            match body.as_str() {
                "fail" => Err(format!("boom {}", d.delivery_count())),
                "panic" => panic!("kaboom {}", d.delivery_count()),
                _ => Ok(()),
            }
        })
        .unwrap();
    for _ in 0..6 {
        rx.recv_timeout(WAIT).unwrap();
    }
    // The worker survived: it still processes new work.
    q.send("ok").unwrap();
    loop {
        if rx.recv_timeout(WAIT).unwrap() == "ok" {
            break;
        }
    }
    let report = p.shutdown(WAIT);
    assert!(report.finished);
    assert_eq!(
        (report.processed, report.failed, report.dead_lettered),
        (1, 6, 2),
        "{report:?}"
    );
    let dlq = q.dead_letters().unwrap();
    let mut dead: Vec<(String, String, String)> = dlq
        .browse()
        .map(|e| {
            let e = e.unwrap();
            let info = e.dead_letter_info().unwrap().clone();
            (
                String::from_utf8_lossy(e.body()).into_owned(),
                info.reason,
                info.description,
            )
        })
        .collect();
    dead.sort();
    assert_eq!(
        dead,
        vec![
            (
                "fail".to_string(),
                REASON_MAX_DELIVERIES.to_string(),
                "boom 3".to_string()
            ),
            (
                "panic".to_string(),
                REASON_MAX_DELIVERIES.to_string(),
                "handler panicked: kaboom 3".to_string()
            ),
        ]
    );
    assert_eq!(q.stats().unwrap().active, 0);
}

#[test]
fn retry_delay_grows_and_keeps_the_message_scheduled() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    q.send("x").unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(1)
        .retry(RetryPolicy::exponential(
            Duration::from_secs(60),
            Duration::from_secs(600),
        ))
        .start(move |_| {
            let _ = tx.send(());
            Err("not yet")
        })
        .unwrap();
    rx.recv_timeout(WAIT).unwrap();
    let report = p.shutdown(WAIT);
    assert_eq!(report.failed, 1);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.scheduled), (0, 0, 1));
}

#[test]
fn autoscaling_grows_to_max_under_backlog_and_shrinks_to_min_when_empty() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    q.send_batch((0..20).map(|i| Message::new(format!("m{i}"))))
        .unwrap();
    let gate = Arc::new(Gate::default());
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (start_tx, start_rx) = mpsc::channel();
    let (scale_tx, scale_rx) = mpsc::channel();
    let p = {
        let (gate, running, peak) = (gate.clone(), running.clone(), peak.clone());
        Processor::builder(&q)
            .workers(1)
            .autoscale(
                Autoscale::new(1, 4)
                    .messages_per_worker(1)
                    .check_interval(Duration::from_millis(10)),
            )
            .on_scale(move |n| {
                let _ = scale_tx.send(n);
            })
            .start(move |_| -> Result<(), String> {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                let _ = start_tx.send(());
                gate.wait();
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap()
    };
    // Four handlers blocked at once means four workers.
    for _ in 0..4 {
        start_rx.recv_timeout(WAIT).unwrap();
    }
    assert_eq!(p.workers(), 4);
    gate.open();
    // Every message reaches a handler; then the scale-down reaches the minimum.
    for _ in 4..20 {
        start_rx.recv_timeout(WAIT).unwrap();
    }
    let mut observed = Vec::new();
    loop {
        let n = scale_rx.recv_timeout(WAIT).unwrap();
        observed.push(n);
        if n == 1 && observed.contains(&4) {
            break;
        }
    }
    assert!(
        observed.iter().all(|&n| (1..=4).contains(&n)),
        "{observed:?}"
    );
    assert_eq!(peak.load(Ordering::SeqCst), 4);
    let report = p.shutdown(WAIT);
    assert!(report.finished);
    assert_eq!(report.processed, 20);
    assert_eq!(q.stats().unwrap().active, 0);
}

#[test]
fn transactional_handler_commits_reply_with_completion_or_neither() {
    let (_dir, store) = store();
    let jobs = store.queue("jobs").unwrap();
    let replies = store.queue("replies").unwrap();
    jobs.send("ok").unwrap();
    jobs.send("fail").unwrap();
    let (tx_done, rx_done) = mpsc::channel();
    let p = {
        let replies = replies.clone();
        Processor::builder(&jobs)
            .workers(2)
            .retry(RetryPolicy::exponential(
                Duration::from_secs(60),
                Duration::from_secs(60),
            ))
            .start_transactional(move |d, tx| {
                let body = String::from_utf8_lossy(d.body()).into_owned();
                tx.send(&replies, format!("reply to {body}").as_str())
                    .map_err(|e| e.to_string())?;
                let _ = tx_done.send(());
                if body == "fail" {
                    return Err("failed after replying".to_string());
                }
                Ok(())
            })
            .unwrap()
    };
    rx_done.recv_timeout(WAIT).unwrap();
    rx_done.recv_timeout(WAIT).unwrap();
    let report = p.shutdown(WAIT);
    assert!(report.finished);
    assert_eq!((report.processed, report.failed), (1, 1), "{report:?}");
    assert_eq!(body_of(&replies), vec!["reply to ok".to_string()]);
    let s = jobs.stats().unwrap();
    // "ok" is gone; "fail" waits for its retry, not completed.
    assert_eq!((s.active, s.locked, s.scheduled), (0, 0, 1));
}

#[test]
fn handler_time_limit_cancels_and_abandons() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    q.send("x").unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(1)
        .handler_timeout(Duration::from_millis(50))
        .retry(RetryPolicy::exponential(
            Duration::from_secs(60),
            Duration::from_secs(60),
        ))
        .start(move |d| -> Result<(), String> {
            // Cooperative work: stop when told to.
            let mut slices = 0;
            while !d.is_cancelled() && slices < 1000 {
                std::thread::sleep(Duration::from_millis(5));
                slices += 1;
            }
            let _ = tx.send(d.is_cancelled());
            Ok(())
        })
        .unwrap();
    assert!(rx.recv_timeout(WAIT).unwrap());
    let report = p.shutdown(WAIT);
    assert_eq!((report.processed, report.failed), (0, 1), "{report:?}");
    assert_eq!(q.stats().unwrap().scheduled, 1);
}

#[test]
fn dropping_the_processor_shuts_it_down_and_idle_workers_stop_promptly() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let p = {
        let ran = ran.clone();
        Processor::builder(&q)
            .workers(8)
            .start(move |_| -> Result<(), String> {
                ran.store(true, Ordering::SeqCst);
                Ok(())
            })
            .unwrap()
    };
    assert_eq!(p.workers(), 8);
    let t = std::time::Instant::now();
    let report = p.shutdown(WAIT);
    // Idle workers wait on a wake-up that stop fires; they do not sit out a receive timeout.
    assert!(report.finished);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    drop(p);
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(q.stats().unwrap().locked, 0);
}

#[test]
fn a_handler_may_shut_its_own_processor_down() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    q.send("x").unwrap();
    let slot: Arc<Mutex<Option<Arc<Processor>>>> = Arc::default();
    let (tx, rx) = mpsc::channel();
    let p = {
        let inner_slot = slot.clone();
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        let p = Arc::new(
            Processor::builder(&q)
                .workers(1)
                .start(move |_| -> Result<(), String> {
                    g.wait();
                    let me = inner_slot.lock().unwrap().clone();
                    if let Some(me) = me {
                        let _ = tx.send(me.shutdown(WAIT));
                    }
                    Ok(())
                })
                .unwrap(),
        );
        *slot.lock().unwrap() = Some(p.clone());
        gate.open();
        p
    };
    let inner = rx.recv_timeout(WAIT).unwrap();
    assert!(!inner.finished);
    slot.lock().unwrap().take();
    let report = p.join(WAIT);
    assert!(report.finished);
    assert_eq!(report.processed, 1);
}

#[test]
fn closing_the_store_stops_the_processor() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    let p = Processor::builder(&q)
        .workers(2)
        .start(|_| -> Result<(), String> { Ok(()) })
        .unwrap();
    store.close().unwrap();
    let report = p.join(WAIT);
    assert!(report.finished, "{report:?}");
    assert!(p.is_stopped());
}

#[test]
fn dead_letter_requested_by_the_handler() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    q.send("bad input").unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(1)
        .start(move |d| -> Result<(), String> {
            d.dead_letter("Invalid", "no such customer")
                .map_err(|e| e.to_string())?;
            let _ = tx.send(d.dead_letter("again", "").is_err());
            Ok(())
        })
        .unwrap();
    assert!(rx.recv_timeout(WAIT).unwrap());
    let report = p.shutdown(WAIT);
    assert_eq!((report.processed, report.dead_lettered), (0, 1));
    let dead = q.dead_letters().unwrap().peek().unwrap().unwrap();
    let info = dead.dead_letter_info().unwrap();
    assert_eq!(
        (info.reason.as_str(), info.description.as_str()),
        ("Invalid", "no such customer")
    );
}

/// A store without fsyncs, for tests whose timing depends on commits being quick (lock
/// renewals racing short locks).
fn fast_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder()
        .durability(Durability::None)
        .open(dir.path().join("p.postbox"))
        .unwrap();
    (dir, store)
}

/// Invariant 12: a lock duration lowered by another handle while a handler runs is followed by
/// the renewals, which are scheduled from each lock's actual expiry. Renewing on the schedule
/// of the duration the processor started with (every 500 ms) would let the 300 ms locks lapse,
/// the second worker would get the message again and the completion would be refused.
#[test]
fn lock_duration_lowered_while_running_is_followed_by_renewal() {
    let (_dir, store) = fast_store();
    let q = store
        .queue_with(
            "jobs",
            QueueOptions::default().lock_duration(Duration::from_secs(1)),
        )
        .unwrap();
    q.send("work").unwrap();
    let gate = Arc::new(Gate::default());
    let (started_tx, started_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let p = {
        let gate = gate.clone();
        Processor::builder(&q)
            .workers(2)
            .max_auto_renew(Duration::from_secs(30))
            .start(move |d| -> Result<(), String> {
                let _ = started_tx.send(d.delivery_count());
                gate.wait();
                // The work: longer than the first lock, and four times the lowered one.
                std::thread::sleep(Duration::from_millis(1200));
                let _ = done_tx.send((d.delivery_count(), d.is_cancelled()));
                Ok(())
            })
            .unwrap()
    };
    assert_eq!(started_rx.recv_timeout(WAIT).unwrap(), 1);
    // Another handle on the same queue changes the stored option.
    store
        .queue_with(
            "jobs",
            QueueOptions::default().lock_duration(Duration::from_millis(300)),
        )
        .unwrap();
    assert_eq!(
        q.options().unwrap().lock_duration,
        Duration::from_millis(300)
    );
    gate.open();
    assert_eq!(done_rx.recv_timeout(WAIT).unwrap(), (1, false));
    let report = p.shutdown(WAIT);
    assert!(report.finished, "{report:?}");
    assert_eq!(
        (report.processed, report.lock_lost, report.failed),
        (1, 0, 0),
        "{report:?}"
    );
    // Delivered once: no other worker got it after a lapsed lock.
    assert_eq!(started_rx.try_iter().collect::<Vec<_>>(), Vec::<u32>::new());
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.scheduled), (0, 0, 0), "{s:?}");
}

/// Invariant 12: `max_deliveries` raised by another handle while the processor runs lets a
/// failing message be retried past the old limit.
#[test]
fn max_deliveries_raised_while_running_retries_past_the_old_limit() {
    let (_dir, store) = store();
    let q = store
        .queue_with("jobs", QueueOptions::default().max_deliveries(2))
        .unwrap();
    q.send("x").unwrap();
    let gate = Arc::new(Gate::default());
    let (tx, rx) = mpsc::channel();
    let p = {
        let gate = gate.clone();
        Processor::builder(&q)
            .workers(1)
            .retry(RetryPolicy::immediate())
            .start(move |d| {
                let n = d.delivery_count();
                let _ = tx.send(n);
                if n == 1 {
                    gate.wait();
                }
                if n < 4 {
                    Err(format!("boom {n}"))
                } else {
                    Ok(())
                }
            })
            .unwrap()
    };
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 1);
    store
        .queue_with("jobs", QueueOptions::default().max_deliveries(10))
        .unwrap();
    gate.open();
    for n in 2..=4 {
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), n);
    }
    let report = p.shutdown(WAIT);
    assert!(report.finished, "{report:?}");
    assert_eq!(
        (report.processed, report.failed, report.dead_lettered),
        (1, 3, 0),
        "{report:?}"
    );
    assert_eq!(q.dead_letters().unwrap().stats().unwrap().active, 0);
    assert_eq!(q.stats().unwrap().active, 0);
}

/// The other direction: `max_deliveries` lowered while running dead-letters at the new limit,
/// still with the handler's error text.
#[test]
fn max_deliveries_lowered_while_running_dead_letters_at_the_new_limit() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap(); // max_deliveries 10
    q.send("x").unwrap();
    let gate = Arc::new(Gate::default());
    let (tx, rx) = mpsc::channel();
    let p = {
        let gate = gate.clone();
        Processor::builder(&q)
            .workers(1)
            .retry(RetryPolicy::immediate())
            .start(move |d| -> Result<(), String> {
                let n = d.delivery_count();
                let _ = tx.send(n);
                if n == 1 {
                    gate.wait();
                }
                Err(format!("boom {n}"))
            })
            .unwrap()
    };
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 1);
    store
        .queue_with("jobs", QueueOptions::default().max_deliveries(2))
        .unwrap();
    gate.open();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), 2);
    let report = p.shutdown(WAIT);
    assert!(report.finished, "{report:?}");
    assert_eq!((report.failed, report.dead_lettered), (2, 1), "{report:?}");
    assert_eq!(rx.try_iter().collect::<Vec<_>>(), Vec::<u32>::new());
    let dead = q.dead_letters().unwrap().peek().unwrap().unwrap();
    let info = dead.dead_letter_info().unwrap();
    assert_eq!(
        (info.reason.as_str(), info.description.as_str()),
        (REASON_MAX_DELIVERIES, "boom 2")
    );
}

/// A store closed under a running processor: the message being handled and the prefetched one
/// cannot be settled; the processor stops itself and counts them as unsettled (their locks went
/// with the store, so they are not lost). Also run in a child process by
/// `a_store_closed_under_a_processor_writes_nothing_to_stderr`.
#[test]
fn store_closed_under_a_processor_counts_unsettled_messages() {
    let (_dir, store) = fast_store();
    let q = store.queue("jobs").unwrap();
    q.send_batch(["a", "b", "c"]).unwrap();
    let gate = Arc::new(Gate::default());
    let (tx, rx) = mpsc::channel();
    let p = {
        let gate = gate.clone();
        Processor::builder(&q)
            .workers(1)
            .prefetch(1)
            .start(move |_| -> Result<(), String> {
                let _ = tx.send(());
                gate.wait();
                Ok(())
            })
            .unwrap()
    };
    // One message in the handler, one prefetched (both locked by the first receive).
    rx.recv_timeout(WAIT).unwrap();
    store.close().unwrap();
    gate.open();
    let report = p.join(WAIT);
    assert!(report.finished, "{report:?}");
    assert!(p.is_stopped());
    assert_eq!(
        (report.processed, report.unsettled, report.forked),
        (0, 2, false),
        "{report:?}"
    );
    assert_eq!(p.stats().unsettled, 2);
    assert_eq!(rx.try_iter().count(), 0);
}

/// Library code is silent (errors are returned, everything else is a `tracing` event): the
/// failed settlements above write nothing to stderr. Runs that test in a child process, with
/// the test harness's output capture off.
#[test]
fn a_store_closed_under_a_processor_writes_nothing_to_stderr() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store_closed_under_a_processor_counts_unsettled_messages",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn starting_on_a_closed_store_fails_before_spawning() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    q.send("x").unwrap();
    store.close().unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let peek_lock = Processor::builder(&q).start(move |_| -> Result<(), String> {
        r.store(true, Ordering::SeqCst);
        Ok(())
    });
    assert!(matches!(peek_lock, Err(Error::Closed)), "{peek_lock:?}");
    let r = ran.clone();
    let transactional =
        Processor::builder(&q).start_transactional(move |_, _| -> Result<(), String> {
            r.store(true, Ordering::SeqCst);
            Ok(())
        });
    assert!(
        matches!(transactional, Err(Error::Closed)),
        "{transactional:?}"
    );
    let r = ran.clone();
    let typed = Processor::builder(&q).start_typed(move |_, _: String| -> Result<(), String> {
        r.store(true, Ordering::SeqCst);
        Ok(())
    });
    assert!(matches!(typed, Err(Error::Closed)), "{typed:?}");
    assert!(!ran.load(Ordering::SeqCst));
}

#[test]
fn an_idle_processor_takes_each_message_in_the_sending_commit() {
    // Workers wait parked in the writer, like Queue::receive: a send locks the message for
    // the waiting worker in its own commit, so each message costs two commits (send+lock,
    // complete), not three (send, wake, lock, complete).
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(1)
        .start(move |_m| -> Result<(), String> {
            done_tx.send(()).unwrap();
            Ok(())
        })
        .unwrap();
    // Let the worker park: its first wait has nothing to take.
    q.send("warm-up").unwrap();
    done_rx.recv_timeout(WAIT).unwrap();
    let n = 20u64;
    let before = store.stats().commits;
    for i in 0..n {
        q.send(format!("m{i}")).unwrap();
        done_rx.recv_timeout(WAIT).unwrap();
        // The completion commits after the handler returns; wait for it.
        for _ in 0..1000 {
            if q.stats().unwrap().locked == 0 {
                break;
            }
            std::thread::yield_now();
        }
    }
    let commits = store.stats().commits - before;
    p.shutdown(WAIT);
    // A send that lands while the worker is between its completion and its next park still
    // costs a separate lock commit, so allow some; a worker that does not park pays 3 per
    // message.
    assert!(commits <= 5 * n / 2, "{commits} commits for {n} messages");
}

#[test]
fn the_event_hook_sees_retries_dead_letters_and_scaling() {
    use postbox::ProcessorEvent;
    let (_dir, store) = store();
    let q = store
        .queue_with("jobs", QueueOptions::default().max_deliveries(2))
        .unwrap();
    let id = q.send("poison").unwrap();
    let (tx, rx) = mpsc::channel::<ProcessorEvent>();
    let tx = Mutex::new(tx);
    let p = Processor::builder(&q)
        .workers(1)
        .retry(RetryPolicy::exponential(
            Duration::from_millis(1),
            Duration::from_millis(2),
        ))
        .on_event(move |e| {
            let _ = tx.lock().unwrap().send(e.clone());
        })
        .start(|_m| -> Result<(), String> { Err("boom".into()) })
        .unwrap();
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e| matches!(e, ProcessorEvent::DeadLettered { .. }))
    {
        seen.push(rx.recv_timeout(WAIT).expect("an event"));
    }
    p.shutdown(WAIT);
    seen.extend(rx.try_iter());
    assert!(
        seen.contains(&ProcessorEvent::RetryScheduled {
            id,
            delivery_count: 1,
            delay: Duration::from_millis(1),
            error: "boom".into(),
        }),
        "{seen:?}"
    );
    assert!(
        seen.contains(&ProcessorEvent::DeadLettered {
            id,
            reason: REASON_MAX_DELIVERIES.into(),
        }),
        "{seen:?}"
    );
    assert!(
        seen.contains(&ProcessorEvent::Scaled { workers: 0 }),
        "{seen:?}"
    );
}

#[test]
fn worker_counts_past_the_bound_are_refused_before_any_thread_starts() {
    let dir = tempfile::tempdir().unwrap();
    let store = postbox::Store::open(dir.path().join("s.postbox")).unwrap();
    let q = store.queue("q").unwrap();
    let too_many = postbox::MAX_PROCESSOR_WORKERS + 1;
    let refused = |b: postbox::ProcessorBuilder| match b.start(|_m| Ok::<(), String>(())) {
        Err(e) => e.kind() == postbox::ErrorKind::InvalidArgument,
        Ok(_) => false,
    };
    assert!(refused(postbox::Processor::builder(&q).workers(too_many)));
    assert!(refused(
        postbox::Processor::builder(&q).autoscale(postbox::Autoscale::new(0, too_many))
    ));
    assert!(refused(
        postbox::Processor::builder(&q).autoscale(postbox::Autoscale::new(0, 4).reserve(too_many))
    ));
    // The bound itself is allowed (and autoscaling from zero starts no thread).
    let p = postbox::Processor::builder(&q)
        .autoscale(postbox::Autoscale::new(0, postbox::MAX_PROCESSOR_WORKERS))
        .start(|_m| Ok::<(), String>(()))
        .unwrap();
    p.stop();
}

/// Issue 27 item 2: a handler records each work item with `mark_done`; a failed run leaves
/// the keys it recorded, and the redelivery reads them with `done_keys` and skips exactly
/// those. In a transactional handler too: the keys are written at once, not with the handler's
/// transaction, which the failure aborts.
#[test]
fn a_handler_checkpoints_what_it_did_and_its_redelivery_skips_it() {
    for transactional in [false, true] {
        let (_dir, store) = store();
        let q = store.queue("fanout").unwrap();
        q.send("notify users 0 to 9").unwrap();
        let notified = Arc::new(Mutex::new(Vec::<(u32, String)>::new()));
        let (done_tx, done_rx) = mpsc::channel();
        let run = {
            let notified = notified.clone();
            move |d: &postbox::Delivery| -> Result<(), String> {
                let done = d.done_keys().map_err(|e| e.to_string())?;
                let _ = done_tx.send((d.delivery_count(), done.len()));
                for u in 0..10 {
                    let key = format!("user-{u}");
                    if done.contains(&key) {
                        continue;
                    }
                    notified
                        .lock()
                        .unwrap()
                        .push((d.delivery_count(), key.clone()));
                    let before = d.locked_until();
                    let until = d.mark_done([key]).map_err(|e| e.to_string())?;
                    // The processor's lock, renewed by the checkpoint's commit.
                    assert!(until >= before && d.locked_until() == until);
                    if d.delivery_count() == 1 && u == 3 {
                        return Err("the notifier fell over after user 3".into());
                    }
                }
                Ok(())
            }
        };
        let b = Processor::builder(&q)
            .workers(2)
            .retry(RetryPolicy::immediate());
        let p = if transactional {
            b.start_transactional(move |d, _tx| run(d)).unwrap()
        } else {
            b.start(run).unwrap()
        };
        assert_eq!(done_rx.recv_timeout(WAIT).unwrap(), (1, 0));
        assert_eq!(
            done_rx.recv_timeout(WAIT).unwrap(),
            (2, 4),
            "the redelivery sees 4 keys"
        );
        let report = p.shutdown(WAIT);
        assert_eq!((report.processed, report.failed), (1, 1), "{report:?}");
        let notified = notified.lock().unwrap().clone();
        let expected: Vec<(u32, String)> = (0..10)
            .map(|u| (if u <= 3 { 1 } else { 2 }, format!("user-{u}")))
            .collect();
        assert_eq!(
            notified, expected,
            "each user once (transactional: {transactional})"
        );
        let s = q.stats().unwrap();
        assert_eq!((s.active, s.locked, s.scheduled), (0, 0, 0));
    }
}

/// A handler that runs past its lock with renewal off keeps the lock by renewing it itself
/// (`renew_lock`, and `mark_done`, which renews in the same commit): the processor completes
/// the message, delivered once.
#[test]
fn a_handler_renews_the_processors_lock_itself() {
    let (_dir, store) = fast_store();
    let q = store
        .queue_with(
            "jobs",
            QueueOptions::default().lock_duration(Duration::from_millis(400)),
        )
        .unwrap();
    q.send("long work").unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(2)
        .max_auto_renew(Duration::ZERO)
        .start(move |d| -> Result<(), String> {
            for step in 0..6 {
                // The work: 1.2 s in all, three times the lock.
                std::thread::sleep(Duration::from_millis(200));
                let before = d.locked_until();
                let until = if step % 2 == 0 {
                    d.renew_lock()
                } else {
                    d.mark_done([format!("step-{step}")])
                }
                .map_err(|e| e.to_string())?;
                assert!(until > before, "step {step}");
            }
            let _ = tx.send((d.delivery_count(), d.lock_lost()));
            Ok(())
        })
        .unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), (1, false));
    let report = p.shutdown(WAIT);
    assert_eq!(
        (report.processed, report.lock_lost, report.failed),
        (1, 0, 0),
        "{report:?}"
    );
    assert!(rx.try_recv().is_err(), "delivered once");
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (0, 0));
}

/// Issue 27 item 2: a processor is a responder. Three requesters make 20 `request` calls each
/// at once; a plain handler answers with `Delivery::reply`, a transactional one with
/// `Delivery::reply` or `Transaction::reply` (every other message), in the completion's commit.
#[test]
fn a_processor_answers_three_times_twenty_requests() {
    for transactional in [false, true] {
        let (_dir, store) = store();
        let service = store.queue("service").unwrap();
        let answer = |d: &postbox::Delivery| format!("re: {}", String::from_utf8_lossy(d.body()));
        let b = Processor::builder(&service).workers(3);
        let p = if transactional {
            b.start_transactional(move |d, tx| -> postbox::Result<()> {
                if d.id().get() % 2 == 0 {
                    d.reply(answer(d).as_str())?;
                } else {
                    tx.reply(d, answer(d).as_str())?;
                }
                Ok(())
            })
            .unwrap()
        } else {
            b.start(move |d| -> postbox::Result<()> {
                d.reply(answer(d).as_str())?;
                Ok(())
            })
            .unwrap()
        };
        let requesters: Vec<_> = (0..3)
            .map(|t| {
                let service = service.clone();
                std::thread::spawn(move || {
                    for i in 0..20 {
                        let body = format!("{t}-{i}");
                        let reply = service
                            .request(body.as_str(), WAIT)
                            .unwrap()
                            .expect("a reply within the guard time");
                        assert_eq!(reply.body(), format!("re: {body}").as_bytes());
                    }
                })
            })
            .collect();
        for r in requesters {
            r.join().unwrap();
        }
        let report = p.shutdown(WAIT);
        assert_eq!(
            (report.processed, report.failed, report.dead_lettered),
            (60, 0, 0),
            "{report:?} (transactional: {transactional})"
        );
        let s = service.stats().unwrap();
        assert_eq!((s.active, s.locked, s.dead_lettered), (0, 0, 0));
    }
}

/// A handler's reply goes with the completion: a failed run sends none (its retry answers), a
/// dead-lettered one none; the reply is checked when it is asked for.
#[test]
fn a_reply_is_sent_only_with_the_completion() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    let replies = store.queue("replies").unwrap();
    q.send(Message::new("retry me").reply_to("replies"))
        .unwrap();
    q.send(Message::new("dead").reply_to("replies")).unwrap();
    q.send(Message::new("nowhere").reply_to("gone")).unwrap();
    q.send("no reply_to").unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(1)
        .retry(RetryPolicy::immediate())
        .start(move |d| -> Result<(), String> {
            let body = String::from_utf8_lossy(d.body()).into_owned();
            let r = d.reply(format!("answer {} to {body}", d.delivery_count()).as_str());
            match body.as_str() {
                "retry me" => {
                    r.map_err(|e| e.to_string())?;
                    let again = d.reply("twice").unwrap_err();
                    assert_eq!(again.kind(), postbox::ErrorKind::InvalidArgument, "{again}");
                    if d.delivery_count() == 1 {
                        return Err("not this time".into());
                    }
                }
                "dead" => {
                    r.map_err(|e| e.to_string())?;
                    d.dead_letter("Refused", "").map_err(|e| e.to_string())?;
                }
                "nowhere" => assert!(matches!(r, Err(Error::QueueNotFound(_))), "{r:?}"),
                _ => assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}"),
            }
            let _ = tx.send(body);
            Ok(())
        })
        .unwrap();
    for _ in 0..4 {
        rx.recv_timeout(WAIT).unwrap();
    }
    let report = p.shutdown(WAIT);
    assert_eq!(
        (report.processed, report.failed, report.dead_lettered),
        (3, 1, 1),
        "{report:?}"
    );
    assert_eq!(body_of(&replies), vec!["answer 2 to retry me".to_string()]);
}

/// A dead-letter reason over `MAX_REASON_LEN` is refused when asked for, not when the handler
/// returned (where nobody would see the refusal).
#[test]
fn a_dead_letter_reason_too_long_is_refused_at_once() {
    let (_dir, store) = store();
    let q = store.queue("jobs").unwrap();
    q.send("x").unwrap();
    let (tx, rx) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(1)
        .start(move |d| -> Result<(), String> {
            let long = "r".repeat(postbox::MAX_REASON_LEN + 1);
            let _ = tx.send(d.dead_letter(&long, "").map_err(|e| e.kind()));
            Ok(())
        })
        .unwrap();
    assert_eq!(
        rx.recv_timeout(WAIT).unwrap(),
        Err(postbox::ErrorKind::InvalidArgument)
    );
    let report = p.shutdown(WAIT);
    assert_eq!(
        (report.processed, report.dead_lettered),
        (1, 0),
        "{report:?}"
    );
}
