//! Crash loop: a child holding locks and sending in a loop is killed with SIGKILL at a random
//! moment, again and again (`POSTBOX_CRASH_ITERATIONS`, default 5). After each kill:
//!
//! - every send that returned `Ok` (the child printed its id) is in the queue or was completed;
//! - nothing this test completed ever comes back;
//! - the dead child's locks are released promptly (the queue's lock duration is 60 s), and the
//!   delivery counts it incremented are kept;
//! - the store opens without error, and the exact counts match what is found.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postbox::{Message, QueueOptions, Received, Store};
use postbox_tests::{Guard, Proc, Rng, arg, env_u64, num, stress};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");
/// Failure guard for "promptly": far below the 60 s lock duration.
const PROMPT: Duration = Duration::from_secs(20);

#[test]
fn sigkill_while_holding_locks_and_sending() {
    let iterations = env_u64("POSTBOX_CRASH_ITERATIONS", 5 * stress()).max(1);
    let mut rng = Rng::from_env("crash_loop");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.postbox");
    let options = QueueOptions::default()
        .lock_duration(Duration::from_secs(60))
        .max_deliveries(1_000_000);

    // What the parent knows: ids acknowledged to some sender, ids it completed, and how many
    // deliveries each message has had.
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let mut completed: BTreeSet<u64> = BTreeSet::new();
    let mut deliveries: BTreeMap<u64, u32> = BTreeMap::new();
    {
        let store = Store::builder().multi_process(true).open(&path).unwrap();
        let q = store.queue_with("crash", options.clone()).unwrap();
        for i in 0..8 {
            acked.insert(q.send(Message::new(format!("seed-{i}"))).unwrap().get());
        }
        store.close().unwrap();
    }

    let mut landed_unacked = 0;
    for it in 0..iterations {
        // The store opens without error after every kill (and reaps the dead child, if this
        // open is the first to notice).
        let store = Store::builder()
            .multi_process(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("iteration {it}: reopen failed: {e}"));
        let q = store.queue("crash").unwrap();

        let hold = 1 + rng.below(5);
        // Enough receivable messages for the child to lock.
        while q.stats().unwrap().active < hold {
            acked.insert(q.send(Message::new(format!("top-up-{it}"))).unwrap().get());
        }
        let mut child = Proc::spawn(
            CHILD,
            &format!("crash-{it}"),
            &[
                "crash",
                arg(&path),
                "crash",
                &it.to_string(),
                &hold.to_string(),
            ],
        );
        let mut held = BTreeSet::new();
        child.expect_with("READY", |w| match w.first() {
            Some(&"LOCKED") => {
                let (id, dc) = (num(w[1]), num(w[2]) as u32);
                let known = deliveries.entry(id).or_default();
                assert_eq!(dc, *known + 1, "message {id}: delivery count when locked");
                *known = dc;
                held.insert(id);
            }
            Some(&"ERR") => panic!("child failed: {w:?}"),
            _ => {}
        });
        assert!(!held.is_empty(), "iteration {it}: the child holds no lock");
        // Meanwhile this process sends too, so the kill also lands while a live process waits
        // for (or holds) the file's writer lock.
        let stop = Arc::new(AtomicBool::new(false));
        let parent_sender = {
            let (q, stop) = (q.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    let id = q.send(Message::new(format!("parent-{it}"))).unwrap();
                    ids.push(id.get());
                }
                ids
            })
        };
        // Kill at a random moment: after a random number of acknowledged sends, plus a random
        // delay of up to 3 ms so the kill lands anywhere in the next send's commit.
        let sends = rng.below(25);
        for _ in 0..sends {
            let w = child.expect("SENT");
            acked.insert(num(&w[0]));
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
        for line in child.kill9() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.first() {
                Some(&"SENT") => {
                    acked.insert(num(w[1]));
                }
                Some(&"ERR") => panic!("child failed: {line}"),
                _ => {}
            }
        }

        stop.store(true, Ordering::Release);
        acked.extend(parent_sender.join().expect("parent sender"));

        // Take everything that must be there, and whatever else is. The dead child's locks
        // have to be released for this to finish.
        let expected: BTreeSet<u64> = acked.difference(&completed).copied().collect();
        let guard = Guard::new(
            PROMPT,
            format!("iteration {it}: the dead child's locks {held:?} to be released"),
        );
        let mut got: BTreeMap<u64, Received> = BTreeMap::new();
        let take = |m: Received,
                    got: &mut BTreeMap<u64, Received>,
                    deliveries: &mut BTreeMap<u64, u32>,
                    acked: &mut BTreeSet<u64>,
                    landed: &mut u64| {
            let id = m.id().get();
            assert!(!completed.contains(&id), "completed message {id} came back");
            let known = deliveries.entry(id).or_default();
            assert_eq!(
                m.delivery_count(),
                *known + 1,
                "message {id}: delivery count"
            );
            *known = m.delivery_count();
            if acked.insert(id) {
                // A send that committed but whose id the child could not print before dying.
                *landed += 1;
            }
            assert!(got.insert(id, m).is_none(), "message {id} held twice");
        };
        while !expected.iter().all(|id| got.contains_key(id)) {
            guard.check();
            let missing: Vec<_> = expected.iter().filter(|id| !got.contains_key(id)).collect();
            match q.receive(guard.left()).unwrap() {
                Some(m) => take(
                    m,
                    &mut got,
                    &mut deliveries,
                    &mut acked,
                    &mut landed_unacked,
                ),
                None => panic!("iteration {it}: acknowledged messages missing: {missing:?}"),
            }
        }
        while let Some(m) = q.try_receive().unwrap() {
            take(
                m,
                &mut got,
                &mut deliveries,
                &mut acked,
                &mut landed_unacked,
            );
        }
        for id in &held {
            assert!(
                got.contains_key(id) || completed.contains(id),
                "held {id} lost"
            );
        }
        let s = q.stats().unwrap();
        assert_eq!(
            (s.active, s.locked, s.scheduled, s.dead_lettered),
            (0, got.len() as u64, 0, 0),
            "iteration {it}: counts while this process holds everything"
        );

        // Complete a random part (those must never come back), abandon the rest.
        let mut kept = 0;
        for (id, m) in got {
            if rng.below(2) == 0 {
                m.complete().unwrap();
                completed.insert(id);
            } else {
                m.abandon().unwrap();
                kept += 1;
            }
        }
        let s = q.stats().unwrap();
        assert_eq!((s.active, s.locked), (kept, 0), "iteration {it}: counts");
        drop(q);
        store.close().unwrap();
    }

    // Final check with a fresh single-process open (which would also release any stale lock).
    let store = Store::open(&path).unwrap();
    let q = store.queue("crash").unwrap();
    let left: BTreeSet<u64> = q.browse().map(|e| e.unwrap().id().get()).collect();
    let expected: BTreeSet<u64> = acked.difference(&completed).copied().collect();
    assert_eq!(left, expected);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (expected.len() as u64, 0));
    eprintln!(
        "crash_loop: {iterations} kills, {} acknowledged sends, {} completed, {landed_unacked} \
         unacknowledged sends that landed",
        acked.len(),
        completed.len()
    );
}
