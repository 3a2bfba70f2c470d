//! Jobs, checkpoints and the outbox survive SIGKILL: a job whose workers run in three
//! processes, one killed mid-run, ends exactly when its last piece settles and continues once;
//! a worker killed half-way through a message's 1,000 progress keys leaves the redelivery the
//! keys it recorded; a process killed between outbox transactions never leaves a row without
//! its message or a message without its row.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use postbox::{JobOptions, Message, PieceState, QueueOptions, Store};
use postbox_testkit::{knob, seed_from_env};
use postbox_tests::{Proc, arg, num};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-tracker");

fn shared(path: &std::path::Path) -> Store {
    Store::builder().multi_process(true).open(path).unwrap()
}

#[test]
fn a_job_survives_a_killed_worker_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.postbox");
    let store = shared(&path);
    let tiles = store
        .queue_with(
            "tiles",
            QueueOptions::default()
                .lock_duration(Duration::from_secs(1))
                .max_deliveries(5),
        )
        .unwrap();
    let stitch = store.queue("stitch").unwrap();
    let job = store
        .create_job(JobOptions::default().continuation(&stitch, Message::new("stitch")))
        .unwrap();
    let pieces = knob("POSTBOX_JOB_PIECES", 100) as u64;
    let msgs: Vec<Message> = (0..pieces)
        .map(|i| Message::new(format!("tile {i}")))
        .collect();
    let ids: BTreeSet<u64> = job
        .send_batch(&tiles, msgs)
        .unwrap()
        .into_iter()
        .map(|id| id.get())
        .collect();
    job.seal().unwrap();

    let seed = seed_from_env("POSTBOX_JOB_SEED");
    let mut workers: Vec<Proc> = (0..3u64)
        .map(|w| {
            let s = (seed ^ w).to_string();
            Proc::spawn(
                CHILD,
                &format!("worker-{w}"),
                &["job-worker", arg(&path), "tiles", &s],
            )
        })
        .collect();
    for w in &mut workers {
        w.expect("READY");
    }
    // Kill the first worker once it has completed a few pieces.
    let mut victim = workers.remove(0);
    let mut done_by_victim = Vec::new();
    while done_by_victim.len() < 5 {
        let line = victim.next_line().expect("the victim stopped early");
        if let Some(id) = line.strip_prefix("DONE ") {
            done_by_victim.push(num(id));
        }
        assert!(!line.starts_with("ERR"), "{line}");
    }
    victim.kill9();

    let p = job
        .wait(Duration::from_secs(120))
        .unwrap()
        .expect("done in time");
    assert!(p.done, "{p:?}");
    let mut done: Vec<u64> = done_by_victim;
    let mut dead: Vec<u64> = Vec::new();
    for w in workers {
        for line in w.finish() {
            let words: Vec<&str> = line.split(' ').collect();
            match words[0] {
                "DONE" => done.push(num(words[1])),
                "DEAD" => dead.push(num(words[1])),
                "ERR" => panic!("{line}"),
                _ => {}
            }
        }
    }
    let states: BTreeMap<u64, PieceState> = job
        .pieces()
        .unwrap()
        .into_iter()
        .map(|(id, s)| (id.get(), s))
        .collect();
    assert_eq!(states.keys().copied().collect::<BTreeSet<_>>(), ids);
    let completed: BTreeSet<u64> = states
        .iter()
        .filter(|(_, s)| matches!(s, PieceState::Completed(_)))
        .map(|(id, _)| *id)
        .collect();
    // Nothing reported completed twice, and every reported completion is in the table.
    let reported: BTreeSet<u64> = done.iter().copied().collect();
    assert_eq!(reported.len(), done.len(), "a piece was completed twice");
    assert!(reported.is_subset(&completed));
    for id in dead {
        assert!(matches!(states[&id], PieceState::DeadLettered(_)));
    }
    assert_eq!(p.completed, completed.len() as u64);
    assert_eq!(p.completed + p.dead_lettered, pieces);
    assert_eq!(
        tiles.dead_letters().unwrap().len().unwrap(),
        p.dead_lettered,
        "every dead-lettered piece is in the dead-letter queue"
    );
    assert_eq!(
        stitch.len().unwrap(),
        1,
        "the continuation is sent exactly once"
    );
    assert_eq!(
        tiles.stats().unwrap().active + tiles.stats().unwrap().locked,
        0
    );
}

#[test]
fn a_redelivery_after_a_kill_sees_the_recorded_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fanout.postbox");
    let store = shared(&path);
    let q = store.queue("fanout").unwrap();
    let id = q.send("notify 1000 users").unwrap();
    let mut child = Proc::spawn(
        CHILD,
        "checkpoint",
        &["checkpoint", arg(&path), "fanout", "1000", "500"],
    );
    child.expect("READY");
    child.expect("HALF");
    child.kill9();
    // The dead worker's lock is released by the next writer that notices it died.
    let mut m = q.receive(Duration::from_secs(30)).unwrap().unwrap();
    assert_eq!(m.id(), id);
    assert_eq!(m.delivery_count(), 2);
    let done = m.done_keys().unwrap();
    assert_eq!(done.len(), 500);
    let rest: Vec<String> = (0..1000)
        .map(|i| format!("user-{i:04}"))
        .filter(|k| !done.contains(k))
        .collect();
    assert_eq!(rest.len(), 500);
    assert!(rest.iter().all(|k| k.as_str() >= "user-0500"));
    m.mark_done(rest).unwrap();
    assert_eq!(m.done_keys().unwrap().len(), 1000);
    m.complete().unwrap();
}

#[test]
fn a_kill_between_outbox_transactions_never_splits_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.postbox");
    let store = shared(&path);
    let shipping = store.queue("shipping").unwrap();
    let mut child = Proc::spawn(
        CHILD,
        "outbox",
        &["outbox", arg(&path), "shipping", "100000"],
    );
    child.expect("READY");
    let mut committed = 0;
    while committed < 20 {
        let line = child.next_line().expect("the outbox stopped early");
        assert!(!line.starts_with("ERR"), "{line}");
        if line.starts_with("COMMITTED") {
            committed += 1;
        }
    }
    child.kill9();
    let rows: BTreeSet<String> = store
        .table("orders")
        .unwrap()
        .range(b"", None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(k, _)| String::from_utf8(k).unwrap().replace("order-", ""))
        .collect();
    let messages: BTreeSet<String> = shipping
        .browse()
        .map(|e| {
            String::from_utf8(e.unwrap().body().to_vec())
                .unwrap()
                .replace("ship-", "")
        })
        .collect();
    assert!(rows.len() >= 20, "{}", rows.len());
    assert_eq!(
        rows, messages,
        "every row has its message and every message its row"
    );
}
