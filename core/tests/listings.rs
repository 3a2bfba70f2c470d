//! Read-only listings for a dashboard: every job with its progress (`Store::jobs`) and the
//! groups of a queue that requires sessions with their messages, locks and state
//! (`Queue::sessions`).

mod common;

use std::time::Duration;

use common::{SEC, TestStore};
use postbox::{Error, JobOptions, Message, QueueOptions, SessionInfo};

const NOW: Duration = Duration::ZERO;

/// A listing entry as a comparable tuple: group, messages, lock held, state.
fn row(s: &SessionInfo) -> (&str, u64, bool, bool) {
    (
        s.group.as_str(),
        s.messages,
        s.locked_until.is_some(),
        s.has_state,
    )
}

#[test]
fn jobs_lists_every_job_with_its_progress_in_id_order() {
    let t = TestStore::new();
    let s = t.store();
    assert!(s.jobs().unwrap().is_empty(), "a new store has no jobs");

    let tiles = s.queue("tiles").unwrap();
    let pages = s.queue("pages").unwrap();
    // Job 1: one piece completed, one dead-lettered, one pending; sealed.
    let first = s.create_job(JobOptions::default()).unwrap();
    for i in 0..3 {
        first.send(&tiles, format!("tile {i}").as_str()).unwrap();
    }
    first.seal().unwrap();
    tiles.try_receive().unwrap().unwrap().complete().unwrap();
    tiles
        .try_receive()
        .unwrap()
        .unwrap()
        .dead_letter("Bad", "unreadable")
        .unwrap();
    // Job 2: both pieces completed, not sealed (so not done).
    let second = s.create_job(JobOptions::default()).unwrap();
    second.send_batch(&pages, ["p0", "p1"]).unwrap();
    while let Some(m) = pages.try_receive().unwrap() {
        m.complete().unwrap();
    }

    let jobs = s.jobs().unwrap();
    let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
    let mut sorted = vec![first.id(), second.id()];
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "every job, in id order");
    for job in [&first, &second] {
        let info = jobs.iter().find(|i| i.id == job.id()).unwrap();
        assert_eq!(info.progress, job.progress().unwrap(), "job {}", job.id());
    }
    let p1 = jobs.iter().find(|i| i.id == first.id()).unwrap().progress;
    assert_eq!(
        (
            p1.total,
            p1.completed,
            p1.dead_lettered,
            p1.pending,
            p1.sealed,
            p1.done
        ),
        (3, 1, 1, 1, true, false)
    );
    let p2 = jobs.iter().find(|i| i.id == second.id()).unwrap().progress;
    assert_eq!(
        (
            p2.total,
            p2.completed,
            p2.dead_lettered,
            p2.pending,
            p2.sealed,
            p2.done
        ),
        (2, 2, 0, 0, false, false)
    );

    // Ending the last piece of the sealed job makes it done; it stays listed until deleted.
    tiles.try_receive().unwrap().unwrap().complete().unwrap();
    let done = s.jobs().unwrap();
    let p1 = done.iter().find(|i| i.id == first.id()).unwrap().progress;
    assert!(p1.done && p1.pending == 0, "{p1:?}");

    assert!(first.delete().unwrap());
    let left: Vec<u64> = s.jobs().unwrap().iter().map(|j| j.id).collect();
    assert_eq!(left, [second.id()], "a deleted job disappears");
}

#[test]
fn sessions_lists_groups_with_messages_locks_and_state() {
    let t = TestStore::new();
    let s = t.store();
    let lock = 10 * SEC;
    let q = s
        .queue_with(
            "orders",
            QueueOptions::default()
                .requires_session(true)
                .lock_duration(lock),
        )
        .unwrap();
    assert!(q.sessions().unwrap().is_empty(), "no groups yet");
    // Sent out of name order: the listing is in name order all the same.
    q.send(Message::new("b1").group("b")).unwrap();
    for i in 0..3 {
        q.send(Message::new(format!("a{i}")).group("a")).unwrap();
    }
    let listed = q.sessions().unwrap();
    assert_eq!(
        listed.iter().map(row).collect::<Vec<_>>(),
        [("a", 3, false, false), ("b", 1, false, false)]
    );

    // A session accepted on b: its lock is listed, in the future, as the session has it.
    let b = q.accept_named_session("b", NOW).unwrap().unwrap();
    let listed = q.sessions().unwrap();
    let until = listed[1].locked_until.expect("b is locked");
    assert!(until > t.now(), "{until:?} is not after {:?}", t.now());
    assert_eq!(until, b.locked_until());
    assert_eq!(listed[0].locked_until, None, "a is free");

    b.set_state(Some(b"step 1")).unwrap();
    assert_eq!(
        q.sessions().unwrap().iter().map(row).collect::<Vec<_>>(),
        [("a", 3, false, false), ("b", 1, true, true)]
    );

    // Completing messages of a lowers its count; a locked (received) one still counts.
    let a = q.accept_named_session("a", NOW).unwrap().unwrap();
    for _ in 0..2 {
        a.receive(NOW).unwrap().unwrap().complete().unwrap();
    }
    let held = a.receive(NOW).unwrap().unwrap();
    assert_eq!(
        q.sessions().unwrap().iter().map(row).collect::<Vec<_>>(),
        [("a", 1, true, false), ("b", 1, true, true)]
    );
    held.complete().unwrap();
    a.release().unwrap();

    // Released, b keeps its state and messages but no lock; a, with neither messages nor a
    // session record left, is no longer listed.
    b.release().unwrap();
    assert_eq!(
        q.sessions().unwrap().iter().map(row).collect::<Vec<_>>(),
        [("b", 1, false, true)]
    );

    // A lock that expired on the store's clock is not listed as held, before any write.
    let b = q.accept_named_session("b", NOW).unwrap().unwrap();
    assert!(q.sessions().unwrap()[0].locked_until.is_some());
    t.clock.advance(lock + SEC);
    assert_eq!(q.sessions().unwrap()[0].locked_until, None);
    drop(b);

    // A queue that does not require sessions lists none, grouped messages or not.
    let plain = s.queue("plain").unwrap();
    plain.send(Message::new("x").group("a")).unwrap();
    assert!(plain.sessions().unwrap().is_empty());

    // A deleted queue is an error, as for its other reads.
    let gone = s
        .queue_with("gone", QueueOptions::default().requires_session(true))
        .unwrap();
    assert!(s.delete_queue("gone").unwrap());
    assert!(matches!(gone.sessions(), Err(Error::QueueNotFound(_))));
}

#[test]
fn listings_of_a_closed_store_fail_with_closed() {
    let t = TestStore::new();
    let s = t.store().clone();
    let q = s
        .queue_with("orders", QueueOptions::default().requires_session(true))
        .unwrap();
    s.create_job(JobOptions::default()).unwrap();
    s.clone().close().unwrap();
    assert!(matches!(s.jobs(), Err(Error::Closed)));
    assert!(matches!(q.sessions(), Err(Error::Closed)));
}
