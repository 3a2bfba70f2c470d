//! Knowing when work is done: jobs, replies and requests, receipts, checkpoints, application
//! tables in the same commit, temporary and idle queues, and send results.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use postbox::{
    ErrorKind, JobOptions, Message, PieceState, PropertyValue, QueueOptions, RECEIPT_OUTCOME,
    RECEIPT_REASON, Store,
};
use postbox_testkit::{Rng, knob, seed_from_env};

const SEC: Duration = Duration::from_secs(1);

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path().join("s.postbox")).unwrap();
    (dir, s)
}

#[test]
fn a_job_is_done_when_its_last_piece_settles_and_continues_once() {
    let (_d, s) = store();
    let tiles = s
        .queue_with(
            "tiles",
            QueueOptions::default()
                .max_deliveries(3)
                .lock_duration(Duration::from_millis(300)),
        )
        .unwrap();
    let stitch = s.queue("stitch").unwrap();
    let job = s
        .create_job(JobOptions::default().continuation(&stitch, Message::new("stitch")))
        .unwrap();
    let pieces = knob("POSTBOX_JOB_PIECES", 100) as u64;
    for i in 0..pieces {
        job.send(&tiles, format!("tile {i}").as_str()).unwrap();
    }
    let p = job.progress().unwrap();
    assert_eq!(
        (p.total, p.pending, p.sealed, p.done),
        (pieces, pieces, false, false)
    );
    job.seal().unwrap();
    assert!(
        job.send(&tiles, "late").is_err(),
        "a sealed job takes no pieces"
    );

    let seed = seed_from_env("POSTBOX_JOB_SEED");
    let settled = Arc::new(AtomicU64::new(0));
    std::thread::scope(|sc| {
        for w in 0..8u64 {
            let tiles = tiles.clone();
            let settled = settled.clone();
            sc.spawn(move || {
                let mut rng = Rng::new(seed ^ w);
                while let Some(mut m) = tiles.receive(Duration::from_millis(800)).unwrap() {
                    match rng.below(10) {
                        0 => drop(m.abandon()),
                        1 => {
                            // Let the lock expire: the message comes back counted.
                            std::thread::sleep(Duration::from_millis(350));
                            assert!(m.complete().is_err_and(|e| e.is_lock_lost()));
                        }
                        // On a slow machine a 300 ms lock may run out before the settle; the
                        // message then comes back, which the job must survive too.
                        2 => match m.dead_letter("Bad", "tile cannot be read") {
                            Ok(()) => {
                                settled.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => assert!(e.is_lock_lost(), "{e:?}"),
                        },
                        _ => {
                            if let Err(e) = m.renew_lock() {
                                assert!(e.is_lock_lost(), "{e:?}");
                                continue;
                            }
                            match m.complete() {
                                Ok(()) => {
                                    settled.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => assert!(e.is_lock_lost(), "{e:?}"),
                            }
                        }
                    }
                }
            });
        }
    });
    let p = job.wait(10 * SEC).unwrap().expect("done in time");
    assert!(p.done, "{p:?}");
    assert_eq!(p.completed + p.dead_lettered, pieces);
    assert_eq!(p.pending, 0);
    let dead = tiles.dead_letters().unwrap().len().unwrap();
    assert_eq!(p.dead_lettered, dead, "dead-lettered pieces are in the DLQ");
    // The tracking table agrees with the counts.
    let rows = job.pieces().unwrap();
    assert_eq!(rows.len() as u64, pieces);
    let completed = rows
        .iter()
        .filter(|(_, s)| matches!(s, PieceState::Completed(_)))
        .count() as u64;
    assert_eq!(completed, p.completed);
    assert!(job.pending().unwrap().is_empty());
    assert_eq!(
        stitch.len().unwrap(),
        1,
        "the continuation is sent exactly once"
    );
    assert_eq!(stitch.peek().unwrap().unwrap().body(), b"stitch");
}

#[test]
fn sealing_a_finished_job_sends_the_continuation_then() {
    let (_d, s) = store();
    let q = s.queue("q").unwrap();
    let next = s.queue("next").unwrap();
    let job = s
        .create_job(JobOptions::default().continuation(&next, "go"))
        .unwrap();
    let mut tx = s.begin();
    let a = tx.send_piece(&job, &q, "a").unwrap();
    tx.commit().unwrap();
    let m = q.receive(SEC).unwrap().unwrap();
    assert_eq!(
        m.id(),
        a,
        "the id a transaction's send returns is the message's"
    );
    m.complete().unwrap();
    assert!(!job.progress().unwrap().done);
    assert_eq!(next.len().unwrap(), 0);
    assert!(job.seal().unwrap().done);
    assert_eq!(next.len().unwrap(), 1);
    job.seal().unwrap();
    assert_eq!(next.len().unwrap(), 1);
    // Opened again by id (as another process would).
    let again = s.job(job.id()).unwrap();
    assert!(again.progress().unwrap().done);
    assert!(again.delete().unwrap());
    assert_eq!(s.job(job.id()).unwrap_err().kind(), ErrorKind::NotFound);
}

#[test]
fn requests_get_only_their_own_replies() {
    let (_d, s) = store();
    let service = s.queue("service").unwrap();
    let n = knob("POSTBOX_REQUESTS", 25);
    std::thread::scope(|sc| {
        let responder = service.clone();
        sc.spawn(move || {
            for _ in 0..4 * n {
                let m = responder.receive(10 * SEC).unwrap().unwrap();
                let answer = format!("re: {}", String::from_utf8_lossy(m.body()));
                m.reply(answer.as_str()).unwrap();
            }
        });
        for r in 0..4 {
            let service = service.clone();
            sc.spawn(move || {
                for i in 0..n {
                    let ask = format!("requester {r} question {i}");
                    let reply = service.request(ask.as_str(), 10 * SEC).unwrap().unwrap();
                    assert_eq!(reply.body(), format!("re: {ask}").as_bytes());
                }
            });
        }
    });
}

#[test]
fn late_replies_are_dropped_and_do_not_slow_later_requests() {
    let (_d, s) = store();
    let service = s.queue("service").unwrap();
    // A request nobody answers in time.
    assert!(
        service
            .request("anyone?", Duration::from_millis(20))
            .unwrap()
            .is_none()
    );
    let late = service.receive(SEC).unwrap().unwrap();
    let reply_to = late.reply_to().unwrap().to_owned();
    let replies = s.open_queue(&reply_to).unwrap();
    // Its reply, after the timeout, and a pile of other late ones (as if 50,000 requests had
    // timed out): before, they stayed until the store closed and every correlated receive read
    // through all of them (31 ms behind 50,000).
    late.reply("too late").unwrap();
    let n = knob("POSTBOX_LATE_REPLIES", 50_000);
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        replies
            .send_batch(
                chunk
                    .iter()
                    .map(|i| Message::new("late").correlation_id(format!("request-gone-{i}"))),
            )
            .unwrap();
    }
    assert_eq!(replies.len().unwrap(), n as u64 + 1);
    // Generous bounds: dropping 50,000 replies in one debug-build commit on a loaded machine
    // has taken over 10 s; each wait ends as soon as its message comes.
    std::thread::scope(|sc| {
        let responder = service.clone();
        sc.spawn(move || {
            for _ in 0..21 {
                let m = responder.receive(60 * SEC).unwrap().unwrap();
                m.reply("answer").unwrap();
            }
        });
        // The next request takes its reply and drops every reply nobody waits for.
        let got = service.request("now", 60 * SEC).unwrap().unwrap();
        assert_eq!(got.body(), b"answer");
        assert_eq!(replies.len().unwrap(), 0, "the late replies are gone");
        // So later requests read no pile: each reply is the only message in the queue.
        for _ in 0..20 {
            let before = replies.stats().unwrap();
            assert_eq!(before.active + before.locked + before.scheduled, 0);
            assert!(service.request("again", 60 * SEC).unwrap().is_some());
        }
    });
    // The requests' own replies were taken; nothing is left behind.
    assert_eq!(replies.len().unwrap(), 0);
}

#[test]
fn a_reply_is_kept_while_its_request_waits_in_another_thread() {
    // Dropping only what no request waits for: a slow reply to a request still waiting in
    // another thread survives the scans of quicker requests.
    let (_d, s) = store();
    let service = s.queue("service").unwrap();
    std::thread::scope(|sc| {
        let slow = service.clone();
        let waiting = sc.spawn(move || slow.request("slow", 20 * SEC).unwrap());
        let first = service.receive(10 * SEC).unwrap().unwrap();
        assert_eq!(first.body(), b"slow");
        let quick = service.clone();
        let answered = sc.spawn(move || quick.request("quick", 20 * SEC).unwrap());
        let second = service.receive(10 * SEC).unwrap().unwrap();
        // The slow request's reply goes first, so the quick request's scan passes it.
        first.reply("slow answer").unwrap();
        second.reply("quick answer").unwrap();
        assert_eq!(answered.join().unwrap().unwrap().body(), b"quick answer");
        assert_eq!(waiting.join().unwrap().unwrap().body(), b"slow answer");
    });
}

#[test]
fn reply_needs_a_reply_to_and_commits_with_the_completion() {
    let (_d, s) = store();
    let q = s.queue("q").unwrap();
    let answers = s.queue("answers").unwrap();
    q.send("no reply_to").unwrap();
    let m = q.receive(SEC).unwrap().unwrap();
    let e = m.reply("x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    e.into_message().abandon().unwrap();
    let m = q.receive(SEC).unwrap().unwrap();
    m.complete().unwrap();
    let id = q
        .send(
            Message::new("ask")
                .reply_to("answers")
                .correlation_id("c-1"),
        )
        .unwrap();
    let m = q.receive(SEC).unwrap().unwrap();
    assert_eq!(m.id(), id);
    m.reply("answer").unwrap();
    assert_eq!(q.stats().unwrap().active + q.stats().unwrap().locked, 0);
    let r = answers.receive(SEC).unwrap().unwrap();
    assert_eq!(r.correlation_id(), Some("c-1"));
}

#[test]
fn receipts_are_posted_in_the_settling_commit() {
    let (_d, s) = store();
    let receipts = s.queue("receipts").unwrap();
    let q = s
        .queue_with("work", QueueOptions::default().receipts_to("receipts"))
        .unwrap();
    let a = q.send("a").unwrap();
    let b = q.send("b").unwrap();
    q.receive(SEC).unwrap().unwrap().complete().unwrap();
    q.receive(SEC)
        .unwrap()
        .unwrap()
        .dead_letter("Poison", "bad input")
        .unwrap();
    let r1 = receipts
        .receive_by_correlation_id(&a.get().to_string(), SEC)
        .unwrap()
        .unwrap();
    assert_eq!(
        r1.property(RECEIPT_OUTCOME),
        Some(&PropertyValue::from("completed"))
    );
    let r2 = receipts
        .receive_by_correlation_id(&b.get().to_string(), SEC)
        .unwrap()
        .unwrap();
    assert_eq!(
        r2.property(RECEIPT_OUTCOME),
        Some(&PropertyValue::from("dead-lettered"))
    );
    assert_eq!(
        r2.property(RECEIPT_REASON),
        Some(&PropertyValue::from("Poison"))
    );
    assert_eq!(
        q.options().unwrap().receipts_to.as_deref(),
        Some("receipts")
    );
}

#[test]
fn checkpoints_survive_a_redelivery_and_go_with_the_message() {
    let (_d, s) = store();
    let q = s.queue("fanout").unwrap();
    q.send("notify 1000 users").unwrap();
    let keys = knob("POSTBOX_CHECKPOINT_KEYS", 1000) as u64;
    let mut m = q.receive(SEC).unwrap().unwrap();
    assert!(m.done_keys().unwrap().is_empty());
    let half: Vec<String> = (0..keys / 2).map(|i| format!("user-{i:04}")).collect();
    for chunk in half.chunks(100) {
        m.mark_done(chunk.iter().cloned()).unwrap();
    }
    m.abandon().unwrap();
    let m = q.receive(SEC).unwrap().unwrap();
    assert_eq!(m.delivery_count(), 2);
    let done = m.done_keys().unwrap();
    assert_eq!(done.len() as u64, keys / 2);
    let rest: BTreeSet<String> = (0..keys)
        .map(|i| format!("user-{i:04}"))
        .filter(|k| !done.contains(k))
        .collect();
    assert_eq!(rest.len() as u64, keys - keys / 2);
    let id = m.id();
    m.complete().unwrap();
    assert!(q.get(id).unwrap().is_none());
}

#[test]
fn an_aborted_outbox_transaction_leaves_neither_row_nor_message() {
    let (_d, s) = store();
    let shipping = s.queue("shipping").unwrap();
    let mut tx = s.begin();
    tx.table("orders").unwrap().put(b"42", b"paid").unwrap();
    assert_eq!(
        tx.table("orders").unwrap().get(b"42").unwrap(),
        Some(b"paid".to_vec())
    );
    tx.send(&shipping, "ship 42").unwrap();
    tx.abort().unwrap();
    assert_eq!(s.table("orders").unwrap().get(b"42").unwrap(), None);
    assert_eq!(shipping.len().unwrap(), 0);

    let mut tx = s.begin();
    let id = tx.send(&shipping, "ship 42").unwrap();
    tx.table("orders")
        .unwrap()
        .put(b"42", &id.get().to_le_bytes())
        .unwrap();
    tx.commit().unwrap();
    assert_eq!(
        s.table("orders").unwrap().get(b"42").unwrap(),
        Some(id.get().to_le_bytes().to_vec())
    );
    assert_eq!(shipping.peek().unwrap().unwrap().id(), id);
    // A received message completed with a row: the inbox.
    let mut tx = s.begin();
    let m = tx.receive(&shipping, SEC).unwrap().unwrap();
    let mut t = tx.table("inbox").unwrap();
    t.put(format!("seen-{}", m.id()).as_bytes(), b"").unwrap();
    t.delete(b"missing").unwrap();
    tx.commit().unwrap();
    let rows = s.table("inbox").unwrap().range(b"", None, 10).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(shipping.len().unwrap(), 0);
}

#[test]
fn sends_say_when_they_were_duplicates() {
    let (_d, s) = store();
    let q = s
        .queue_with("q", QueueOptions::default().dedup_window(60 * SEC))
        .unwrap();
    let first = q.send_checked(Message::new("a").message_key("k")).unwrap();
    assert!(!first.duplicate);
    let again = q.send_checked(Message::new("a").message_key("k")).unwrap();
    assert!(again.duplicate);
    assert_eq!(again.id, first.id);
    let mut tx = s.begin();
    let t = tx
        .send_checked(&q, Message::new("a").message_key("k"))
        .unwrap();
    assert!(t.duplicate);
    assert_eq!(t.id, first.id);
    let n = tx
        .send_checked(&q, Message::new("b").message_key("k2"))
        .unwrap();
    let n2 = tx
        .send_checked(&q, Message::new("b").message_key("k2"))
        .unwrap();
    assert!(!n.duplicate && n2.duplicate && n2.id == n.id);
    tx.commit().unwrap();
    assert_eq!(q.len().unwrap(), 2);
    assert!(q.get(n.id).unwrap().is_some());
}

#[test]
fn temporary_queues_go_with_their_store_handle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let s = Store::open(&path).unwrap();
    let t = s.temporary_queue(None).unwrap();
    assert!(t.name().starts_with("$temporary/"));
    t.send("x").unwrap();
    let infos = s.queue_infos().unwrap();
    let info = infos.iter().find(|i| i.name == t.name()).unwrap();
    assert!(info.temporary);
    assert!(info.last_activity.is_some());
    assert_eq!(
        s.queue("$temporary/1/2").unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "temporary names cannot be created by hand"
    );
    // A responder opens it by name, as it would from a reply_to.
    assert_eq!(s.open_queue(t.name()).unwrap().len().unwrap(), 1);
    let name = t.name().to_owned();
    s.close().unwrap();
    let s = Store::open(&path).unwrap();
    assert!(!s.queues().unwrap().contains(&name));
}

#[test]
fn an_idle_queue_is_deleted_and_a_busy_one_is_not() {
    let (_d, s) = store();
    let idle = s
        .queue_with(
            "idle",
            QueueOptions::default().auto_delete_on_idle(Duration::from_secs(2)),
        )
        .unwrap();
    let busy = s
        .queue_with(
            "busy",
            QueueOptions::default().auto_delete_on_idle(Duration::from_secs(2)),
        )
        .unwrap();
    let started = std::time::Instant::now();
    idle.send("left alone").unwrap();
    // Keep "busy" active until "idle" is gone (at most 20 s: its idle period, the second of
    // recording slack and the janitor's period, on a slow machine).
    let mut gone = false;
    while started.elapsed() < 20 * SEC {
        busy.send("x").unwrap();
        busy.receive(SEC).unwrap().unwrap().complete().unwrap();
        if !s.queues().unwrap().contains(&"idle".to_string()) {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(gone, "the idle queue was not deleted");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "not before its idle period"
    );
    assert!(s.queues().unwrap().contains(&"busy".to_string()));
    assert_eq!(
        idle.send("again").unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
}

/// Polls (every 2 ms, up to `limit`) until queue `name` is gone; returns when it was seen gone.
fn gone_at(s: &Store, name: &str, limit: Duration) -> std::time::Instant {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let now = std::time::Instant::now();
        if !s.queues().unwrap().iter().any(|q| q == name) {
            return now;
        }
        assert!(now < deadline, "{name} was not deleted within {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn an_idle_queue_goes_within_a_second_after_its_idle_period_and_never_before() {
    // The documented bound: deleted between `idle` and `idle` + 1 s after the last activity
    // (before the janitor slept exactly until then, it took 2 to 3 s for an idle period of 1 s).
    let (_d, s) = store();
    let idle = SEC;
    // Another queue with the option keeps the janitor running in its own rhythm meanwhile.
    s.queue_with(
        "long",
        QueueOptions::default().auto_delete_on_idle(3600 * SEC),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let q = s
        .queue_with("idle", QueueOptions::default().auto_delete_on_idle(idle))
        .unwrap();
    let sent = std::time::Instant::now();
    q.send("last activity").unwrap();
    let answered = std::time::Instant::now();
    let gone = gone_at(&s, "idle", 10 * SEC);
    assert!(gone - sent >= idle, "deleted early: {:?}", gone - sent);
    // A loaded two-core machine gets the rest of the second as margin; the janitor's own
    // lateness is a few milliseconds.
    assert!(
        gone - answered < idle + SEC,
        "deleted {:?} after its last activity, more than a second after its idle period",
        gone - answered
    );

    // A send in the window starts the period again.
    let q = s
        .queue_with(
            "restarted",
            QueueOptions::default().auto_delete_on_idle(idle),
        )
        .unwrap();
    let first = std::time::Instant::now();
    q.send("a").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let again = std::time::Instant::now();
    q.send("b").unwrap();
    let answered = std::time::Instant::now();
    let gone = gone_at(&s, "restarted", 10 * SEC);
    assert!(
        gone - again >= idle,
        "deleted {:?} after the first send: the second did not restart the period",
        gone - first
    );
    assert!(gone - answered < idle + SEC, "{:?}", gone - answered);
    assert!(s.queues().unwrap().contains(&"long".to_string()));
}

#[test]
fn a_queue_freed_of_its_last_lock_goes_within_a_second_after_its_idle_period() {
    let (_d, s) = store();
    let idle = Duration::from_millis(300);
    let q = s
        .queue_with("held", QueueOptions::default().auto_delete_on_idle(idle))
        .unwrap();
    q.send("x").unwrap();
    let m = q.receive(SEC).unwrap().unwrap();
    // Locked: never idle, however long.
    std::thread::sleep(idle + Duration::from_millis(400));
    assert!(s.queues().unwrap().contains(&"held".to_string()));
    m.complete().unwrap();
    let completed = std::time::Instant::now();
    let gone = gone_at(&s, "held", 10 * SEC);
    assert!(gone - completed < idle + SEC, "{:?}", gone - completed);
}

#[test]
fn the_janitor_starts_again_for_a_queue_opened_after_it_ended() {
    // The janitor ends when no queue asks for idle deletion (here: it deleted the only one);
    // a queue opened later with the option gets a new one.
    let (_d, s) = store();
    let short = Duration::from_millis(100);
    s.queue_with("first", QueueOptions::default().auto_delete_on_idle(short))
        .unwrap();
    gone_at(&s, "first", 10 * SEC);
    std::thread::sleep(Duration::from_millis(200));
    s.queue_with("second", QueueOptions::default().auto_delete_on_idle(short))
        .unwrap();
    gone_at(&s, "second", 10 * SEC);
}

#[test]
fn a_refused_message_keeps_its_whole_batch_out_of_a_transaction() {
    let (_d, s) = store();
    let q = s
        .queue_with("q", QueueOptions::default().max_message_size(64))
        .unwrap();
    let job = s.create_job(Default::default()).unwrap();
    let mut tx = s.begin();
    tx.send(&q, "kept").unwrap();
    let batch = vec![
        Message::new("a"),
        Message::new(vec![0u8; 100]),
        Message::new("c"),
    ];
    assert_eq!(
        tx.send_batch_checked(&q, batch.clone()).unwrap_err().kind(),
        ErrorKind::TooLarge
    );
    assert_eq!(
        tx.send_pieces(&job, &q, batch).unwrap_err().kind(),
        ErrorKind::TooLarge
    );
    assert_eq!(tx.len().1, 1, "only the message sent before the batch");
    let ids = tx.send_pieces(&job, &q, ["x", "y"]).unwrap();
    tx.commit().unwrap();
    assert_eq!(q.len().unwrap(), 3);
    assert_eq!(job.progress().unwrap().total, 2);
    assert_eq!(job.pending().unwrap(), ids);
}
