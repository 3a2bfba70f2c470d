//! Queues in use: a queue named by another queue's `forward_to`, `forward_dead_letters_to` or
//! `receipts_to`, by a collator as its destination, or by a job that is not done as the queue
//! of its continuation, is not deleted — an explicit deletion fails with `QueueInUse` naming
//! the user, idle deletion skips it — so nothing those promise to deliver is lost. Options
//! and references that name a missing or temporary queue are refused when they are set. A
//! store an older postbox wrote, where such queues were deleted, loses nothing either.

use std::path::Path;
use std::time::Duration;

use postbox::{
    ErrorKind, Filter, JobOptions, ManualClock, Message, QueueOptions, REASON_DESTINATION_MISSING,
    Store,
};

const SEC: Duration = Duration::from_secs(1);

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path().join("s.postbox")).unwrap();
    (dir, s)
}

/// Deleting `name` fails with `QueueInUse`, its text naming `user`, and changes nothing.
fn refused(s: &Store, name: &str, user: &str) {
    let before = s.open_queue(name).unwrap().stats().unwrap();
    let e = s.delete_queue(name).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InUse, "{e}");
    let text = e.to_string();
    assert!(text.contains(user), "{text:?} should name {user:?}");
    assert!(text.contains(&format!("{name:?}")), "{text:?}");
    assert!(matches!(e, postbox::Error::QueueInUse { ref queue, .. } if queue == name));
    assert_eq!(s.open_queue(name).unwrap().stats().unwrap(), before);
}

#[test]
fn a_queue_named_by_an_option_is_not_deleted_until_the_option_goes() {
    let (_d, s) = store();
    for target in ["fwd", "dead", "audit"] {
        s.queue(target).unwrap().send("kept").unwrap();
    }
    s.queue_with("a", QueueOptions::default().forward_to("fwd"))
        .unwrap();
    s.queue_with("b", QueueOptions::default().forward_dead_letters_to("dead"))
        .unwrap();
    s.queue_with("c", QueueOptions::default().receipts_to("audit"))
        .unwrap();
    refused(&s, "fwd", "the forward_to of queue \"a\"");
    refused(&s, "dead", "the forward_dead_letters_to of queue \"b\"");
    refused(&s, "audit", "the receipts_to of queue \"c\"");

    // A queue naming itself, or a queue deleted with it, does not count.
    s.queue("self").unwrap();
    s.queue_with("self", QueueOptions::default().receipts_to("self"))
        .unwrap();
    assert!(s.delete_queue("self").unwrap());

    // Once the option is cleared (or its queue deleted), the target goes.
    s.queue_with("a", QueueOptions::default().no_forward_to())
        .unwrap();
    assert!(s.delete_queue("fwd").unwrap());
    assert!(s.delete_queue("b").unwrap());
    assert!(s.delete_queue("dead").unwrap());
    s.queue_with("c", QueueOptions::default().no_receipts_to())
        .unwrap();
    assert!(s.delete_queue("audit").unwrap());
}

#[test]
fn a_subscription_in_use_keeps_its_topic_too() {
    let (_d, s) = store();
    let topic = s.topic("news").unwrap();
    let sub = topic.subscribe("audit", Filter::All).unwrap();
    s.queue_with("orders", QueueOptions::default().receipts_to(sub.name()))
        .unwrap();
    topic.publish("hello").unwrap();
    let e = topic.unsubscribe("audit").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InUse, "{e}");
    let e = s.delete_queue("news").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InUse, "{e}");
    assert_eq!(sub.len().unwrap(), 1, "nothing was deleted");
    assert_eq!(topic.subscriptions().unwrap(), vec!["audit".to_string()]);
    // Subscriptions naming each other go with their topic.
    let t2 = s.topic("t2").unwrap();
    t2.subscribe("x", Filter::All).unwrap();
    t2.subscribe_with(
        "y",
        Filter::All,
        QueueOptions::default().forward_dead_letters_to("t2/$subscriptions/x"),
    )
    .unwrap();
    assert!(s.delete_queue("t2").unwrap());
}

#[test]
fn a_collator_destination_is_in_use_until_the_collator_goes() {
    let (_d, s) = store();
    let tiles = s.queue("tiles").unwrap();
    let c = s.collator("tiles-in", &tiles).unwrap();
    c.send(Message::new("t2").group("img").sequence(2)).unwrap();
    refused(&s, "tiles", "the destination of collator \"tiles-in\"");
    // The held message still reaches it.
    let got = c.send(Message::new("t1").group("img").sequence(1)).unwrap();
    assert_eq!(got.released.len(), 2);
    assert_eq!(tiles.len().unwrap(), 2);
    assert!(s.delete_queue("tiles-in").unwrap());
    assert!(s.delete_queue("tiles").unwrap());
}

#[test]
fn a_pending_continuation_keeps_its_queue_until_the_job_is_done() {
    let (_d, s) = store();
    let pieces = s.queue("pieces").unwrap();
    let stitch = s.queue("stitch").unwrap();
    let job = s
        .create_job(JobOptions::default().continuation(&stitch, Message::new("stitch it")))
        .unwrap();
    job.send(&pieces, "p1").unwrap();
    job.seal().unwrap();
    refused(
        &s,
        "stitch",
        &format!("the queue of job {}'s continuation", job.id()),
    );
    pieces.receive(SEC).unwrap().unwrap().complete().unwrap();
    assert!(job.progress().unwrap().done);
    assert_eq!(stitch.receive(SEC).unwrap().unwrap().body(), b"stitch it");
    // Done: the queue is free.
    assert!(s.delete_queue("stitch").unwrap());

    // A deleted job frees it too.
    let stitch = s.queue("stitch").unwrap();
    let job = s
        .create_job(JobOptions::default().continuation(&stitch, Message::new("x")))
        .unwrap();
    assert_eq!(
        s.delete_queue("stitch").unwrap_err().kind(),
        ErrorKind::InUse
    );
    assert!(job.delete().unwrap());
    assert!(s.delete_queue("stitch").unwrap());
}

#[test]
fn options_and_references_to_missing_or_temporary_queues_are_refused() {
    let (_d, s) = store();
    // `receipts_to` a misspelt queue is refused like `forward_to`.
    for o in [
        QueueOptions::default().receipts_to("audti"),
        QueueOptions::default().forward_to("audti"),
        QueueOptions::default().forward_dead_letters_to("audti"),
    ] {
        let e = s.queue_with("work", o).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("\"audti\": no such queue"), "{e}");
    }
    // Nothing was created or changed.
    assert!(!s.queues().unwrap().contains(&"work".to_string()));
    let work = s.queue("work").unwrap();
    let e = s
        .queue_with("work", QueueOptions::default().receipts_to("audti"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(work.options().unwrap().receipts_to, None);

    // A temporary queue goes with its process: nothing lasting may name it.
    let temp = s.temporary_queue(None).unwrap();
    let e = s
        .queue_with("work", QueueOptions::default().receipts_to(temp.name()))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("temporary"), "{e}");
    let e = s.collator("c", &temp).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = s
        .create_job(JobOptions::default().continuation(&temp, Message::new("x")))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[test]
fn idle_deletion_skips_a_queue_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new();
    let s = Store::builder()
        .clock(clock.clone())
        .open(dir.path().join("s.postbox"))
        .unwrap();
    let idle = QueueOptions::default().auto_delete_on_idle(Duration::from_secs(5));
    let pieces = s.queue("pieces").unwrap();
    let stitch = s.queue_with("stitch", idle.clone()).unwrap();
    let audit = s.queue_with("audit", idle.clone()).unwrap();
    let spare = s.queue_with("spare", idle).unwrap();
    let work = s
        .queue_with("work", QueueOptions::default().receipts_to("audit"))
        .unwrap();
    let job = s
        .create_job(JobOptions::default().continuation(&stitch, Message::new("stitch it")))
        .unwrap();
    job.send(&pieces, "p1").unwrap();
    job.seal().unwrap();
    drop(spare);

    clock.advance(Duration::from_secs(60));
    // "spare" is idle and unused: once the janitor took it, it has judged the others too.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while s.queues().unwrap().contains(&"spare".to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle queue was not deleted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let names = s.queues().unwrap();
    assert!(names.contains(&"stitch".to_string()), "{names:?}");
    assert!(names.contains(&"audit".to_string()), "{names:?}");

    // What they were kept for arrives, exactly once.
    pieces.receive(SEC).unwrap().unwrap().complete().unwrap();
    assert!(job.progress().unwrap().done);
    assert_eq!(stitch.len().unwrap(), 1);
    work.send("w").unwrap();
    work.receive(SEC).unwrap().unwrap().complete().unwrap();
    assert_eq!(audit.len().unwrap(), 1);
}

/// `fixtures/dangling-v5.postbox` was written by the postbox before queues in use existed
/// (format 5, closed cleanly), by this scenario:
///
/// - queue `work` with `receipts_to("audit")` and one message `w1`; `audit` then deleted;
/// - queue `front` with `forward_to("gone")`; `gone` then deleted;
/// - collator `tiles-in` into `tiles` holding numbers 2 (`t2`) and 3 (`t3`, the last) of
///   series `img`; `tiles` then deleted;
/// - a sealed job with continuation `stitch it` to `stitch` and two pending pieces `p1`, `p2`
///   in queue `pieces`; an unsealed job with no pieces and continuation `never` to `stitch2`;
///   `stitch` and `stitch2` then deleted;
/// - topic `news` with subscription `"x" * 300`, whose queue name is over 255 bytes, holding
///   one published message (for `topics.rs`).
fn dangling_fixture(dir: &Path) -> Store {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dangling-v5.postbox");
    let path = dir.join("dangling.postbox");
    std::fs::copy(from, &path).unwrap();
    Store::open(&path).unwrap()
}

#[test]
fn a_store_an_older_postbox_wrote_with_deleted_destinations_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = dangling_fixture(dir.path());

    // The receipt for `w1` becomes a dead letter of `work`, saying why.
    let work = s.open_queue("work").unwrap();
    let w1 = work.receive(SEC).unwrap().unwrap();
    let id = w1.id();
    w1.complete().unwrap();
    let dead = work.dead_letters().unwrap();
    let receipt = dead.receive(SEC).unwrap().unwrap();
    assert_eq!(receipt.label(), Some(postbox::RECEIPT_LABEL));
    assert_eq!(
        receipt.correlation_id(),
        Some(id.get().to_string().as_str())
    );
    let info = receipt.dead_letter_info().unwrap();
    assert_eq!(info.reason, REASON_DESTINATION_MISSING);
    assert!(info.description.contains("\"audit\""), "{info:?}");
    assert_eq!(info.source_queue, "work");

    // A forward to a missing queue is refused, naming it.
    let front = s.open_queue("front").unwrap();
    let e = front.send("x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QueueNotFound, "{e}");
    assert!(e.to_string().contains("\"gone\""), "{e}");

    // The job's continuation becomes a dead letter of the queue of its last piece.
    let jobs = s.jobs().unwrap();
    let sealed = jobs.iter().find(|j| j.progress.total == 2).unwrap();
    let open = jobs.iter().find(|j| j.progress.total == 0).unwrap();
    let pieces = s.open_queue("pieces").unwrap();
    for _ in 0..2 {
        pieces.receive(SEC).unwrap().unwrap().complete().unwrap();
    }
    let job = s.job(sealed.id).unwrap();
    assert!(job.progress().unwrap().done);
    let cont = pieces
        .dead_letters()
        .unwrap()
        .receive(SEC)
        .unwrap()
        .unwrap();
    assert_eq!(cont.body(), b"stitch it");
    let info = cont.dead_letter_info().unwrap();
    assert_eq!(info.reason, REASON_DESTINATION_MISSING);
    assert!(info.description.contains("continuation"), "{info:?}");
    assert_eq!(info.source_queue, "pieces");
    // Sealing the other would finish it with nowhere to send its continuation: refused.
    let other = s.job(open.id).unwrap();
    let e = other.seal().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(!other.progress().unwrap().sealed);
    assert!(other.delete().unwrap());

    // The collator keeps what it holds until it has a destination again.
    let tiles = s.queue("tiles").unwrap();
    let c = s.collator("tiles-in", &tiles).unwrap();
    assert_eq!(c.held().unwrap(), 2);
    assert_eq!(tiles.len().unwrap(), 0, "2 and 3 still wait for 1");
    let got = c.send(Message::new("t1").group("img").sequence(1)).unwrap();
    assert_eq!(got.released.len(), 3);
    let bodies: Vec<Vec<u8>> = std::iter::from_fn(|| tiles.try_receive().unwrap())
        .map(|m| {
            let b = m.body().to_vec();
            m.complete().unwrap();
            b
        })
        .collect();
    assert_eq!(bodies, vec![b"t1".to_vec(), b"t2".to_vec(), b"t3".to_vec()]);
    assert_eq!(c.held().unwrap(), 0);
}

#[test]
fn a_collator_whose_destination_is_gone_releases_once_it_has_one_again() {
    let dir = tempfile::tempdir().unwrap();
    let s = dangling_fixture(dir.path());
    // Numbers 2 and 3 are held and 1 is missing: opening with a destination releases nothing
    // yet, and 1 then releases all three there.
    let dest = s.queue("other").unwrap();
    let c = s.collator("tiles-in", &dest).unwrap();
    assert_eq!(c.destination().name(), "other");
    // The collator now names "other": it is in use, and the collator cannot be re-aimed.
    assert_eq!(
        s.delete_queue("other").unwrap_err().kind(),
        ErrorKind::InUse
    );
    let elsewhere = s.queue("elsewhere").unwrap();
    let e = s.collator("tiles-in", &elsewhere).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("\"other\""), "{e}");
    c.send(Message::new("t1").group("img").sequence(1)).unwrap();
    assert_eq!(dest.len().unwrap(), 3);
}
