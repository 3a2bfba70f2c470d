//! The kernel the C and Python bindings share (`postbox::binding`): a handle's lock states,
//! all-or-none batches, flat send options and processor loans behave the same for both.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{SEC, TestStore};
use postbox::binding::{FlatSend, FlatSendError, HeldMessage, finish_lent, retry_policy};
use postbox::{ErrorKind, Message, MessageId, MessageState, Processor, RetryPolicy};

const WAIT: Duration = Duration::from_secs(20);

type Handle = HeldMessage<()>;

fn receive(t: &TestStore, q: &str) -> Handle {
    let q = t.store().queue(q).unwrap();
    HeldMessage::received(q.try_receive().unwrap().expect("a message"))
}

#[test]
fn a_settle_refused_by_the_engine_gives_the_lock_back() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    q.send(Message::new("a")).unwrap();
    let m = receive(&t, "jobs");
    assert_eq!(m.state(), "locked");
    // A resubmit of a message that is not in a dead-letter queue is refused...
    let e = m.settle("resubmitted", |r| r.resubmit()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // ...and the handle still holds the lock, so a valid settle follows.
    assert!(m.is_held());
    m.settle("completed", |r| r.complete()).unwrap();
    assert_eq!(m.state(), "completed");
    assert_eq!(m.locked_until(), None);
    let again = m.settle("completed", |r| r.complete()).unwrap_err();
    assert!(
        again.to_string().contains("already settled (completed)"),
        "{again}"
    );
    assert_eq!(q.stats().unwrap().active, 0);
}

#[test]
fn a_lost_lock_spends_the_handle() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    q.send(Message::new("a")).unwrap();
    let m = receive(&t, "jobs");
    t.clock.advance(SEC * 31);
    let e = m.settle("completed", |r| r.complete()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LockLost);
    assert_eq!(m.state(), "lock lost");
    assert!(!m.is_held());
    // The message is receivable again by anyone.
    assert!(q.try_receive().unwrap().is_some());
}

#[test]
fn take_all_is_all_or_none() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    let other = t.store().queue("other").unwrap();
    for b in ["a", "b", "d"] {
        q.send(Message::new(b)).unwrap();
    }
    other.send(Message::new("c")).unwrap();
    let (a, b) = (receive(&t, "jobs"), receive(&t, "jobs"));
    let c = receive(&t, "other");
    let peeked: Handle =
        HeldMessage::read(q.peek().unwrap().expect("a message"), MessageState::Active);

    for (handles, why) in [
        (vec![&a, &b, &a], "messages[2] is listed twice"),
        (vec![&a, &c], "not of \"jobs\""),
        (vec![&a, &b, &peeked], "holds no lock"),
    ] {
        let e = HeldMessage::take_all(&handles, "jobs", "completed").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains(why), "{e}");
        // Every handle is as it was.
        assert!(a.is_held() && b.is_held() && c.is_held());
    }
    let taken = HeldMessage::take_all(&[&a, &b], "jobs", "completed").unwrap();
    q.complete_batch(taken).unwrap();
    assert_eq!(a.state(), "completed");
    assert_eq!(q.stats().unwrap().active, 1);
}

#[test]
fn a_lent_message_reaches_the_processors_lock_until_its_handler_returns() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    let replies = t.store().queue("replies").unwrap();
    let id = q.send(Message::new("a").reply_to("replies")).unwrap();
    let (kept, returned) = mpsc::channel();
    let p = Processor::builder(&q)
        .workers(1)
        .start(move |d| -> Result<(), String> {
            let m: Handle = HeldMessage::lent(d);
            assert!(m.is_lent());
            assert_eq!(m.state(), "processor");
            assert_eq!(m.locked_until(), Some(d.locked_until()));
            // A lent message is settled by the processor, never through the handle.
            assert!(m.settle("completed", |r| r.complete()).is_err());
            // Checkpoints, renewal and the reply go to the processor's lock.
            m.mark_done(vec!["k1".to_owned()]).unwrap();
            assert_eq!(
                d.done_keys().unwrap().into_iter().collect::<Vec<_>>(),
                ["k1"]
            );
            assert_eq!(m.done_keys().unwrap(), d.done_keys().unwrap());
            assert_eq!(m.renew_lock().unwrap(), d.locked_until());
            let reply = m.reply("replied", Message::new("answer")).unwrap();
            let again = m.reply("replied", Message::new("twice")).unwrap_err();
            assert_eq!(again.kind(), ErrorKind::InvalidArgument, "{again}");
            let long = "r".repeat(postbox::MAX_REASON_LEN + 1);
            assert_eq!(
                m.request_dead_letter(&long, "").unwrap_err().kind(),
                ErrorKind::InvalidArgument
            );
            let result = finish_lent(&m, Ok(()));
            assert_eq!(m.state(), "settled by the processor");
            assert_eq!(m.locked_until(), None);
            let _ = kept.send((m, reply));
            result
        })
        .unwrap();
    let (m, reply): (Handle, MessageId) = returned.recv_timeout(WAIT).unwrap();
    let report = p.shutdown(WAIT);
    assert_eq!((report.processed, report.failed), (1, 0), "{report:?}");
    // The handle outlived its handler: every processor call is refused now.
    for e in [
        m.mark_done(vec!["late".to_owned()]).unwrap_err(),
        m.done_keys().unwrap_err(),
        m.renew_lock().unwrap_err(),
        m.request_dead_letter("late", "").unwrap_err(),
        m.reply("replied", Message::new("late")).unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
    // The reply went with the completion, answering the request.
    let r = replies.try_receive().unwrap().expect("the reply");
    assert_eq!(r.id(), reply);
    assert_eq!(r.correlation_id(), Some(id.get().to_string().as_str()));
    r.complete().unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (0, 0));
    // An unlocked handle cannot ask for a dead letter.
    q.send(Message::new("b")).unwrap();
    let peeked: Handle = HeldMessage::read(q.peek().unwrap().unwrap(), MessageState::Active);
    assert!(peeked.request_dead_letter("bad", "").is_err());
}

#[test]
fn a_dead_letter_asked_through_a_lent_message_wins_over_its_reply() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    let replies = t.store().queue("replies").unwrap();
    q.send(Message::new("a").reply_to("replies")).unwrap();
    let p = Processor::builder(&q)
        .workers(1)
        .start(move |d| -> Result<(), String> {
            let m: Handle = HeldMessage::lent(d);
            m.reply("replied", Message::new("answer")).unwrap();
            m.request_dead_letter("bad", "why").unwrap();
            assert!(m.request_dead_letter("again", "").is_err());
            finish_lent(&m, Err("failed too".to_owned()))
        })
        .unwrap();
    let dlq = q.dead_letters().unwrap();
    let dead = dlq.receive(WAIT).unwrap().expect("the dead letter");
    let info = dead.dead_letter_info().unwrap();
    assert_eq!(
        (info.reason.as_str(), info.description.as_str()),
        ("bad", "why")
    );
    p.shutdown(WAIT);
    assert_eq!(replies.len().unwrap(), 0, "no reply for a dead letter");
}

#[test]
fn flat_send_options_are_checked_together() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    let apply = |f: FlatSend| f.apply(Message::new("x")).map(|m| q.send(m).unwrap());
    for p in [-1, 8, i128::from(u64::MAX)] {
        let f = FlatSend {
            priority: Some(p),
            ..FlatSend::default()
        };
        assert_eq!(apply(f).unwrap_err(), FlatSendError::Priority(p));
    }
    let now = t.now();
    let both_visible = FlatSend {
        delay: Some(SEC),
        visible_at: Some(now),
        ..FlatSend::default()
    };
    assert_eq!(
        apply(both_visible).unwrap_err(),
        FlatSendError::DelayAndVisibleAt
    );
    let both_expiry = FlatSend {
        ttl: Some(SEC),
        expires_at: Some(now),
        ..FlatSend::default()
    };
    assert_eq!(
        apply(both_expiry).unwrap_err(),
        FlatSendError::TtlAndExpiresAt
    );
    let ok = FlatSend {
        priority: Some(7),
        delay: Some(SEC),
        ttl: Some(SEC * 60),
        ..FlatSend::default()
    };
    let id = apply(ok).unwrap();
    let env = q.get(id).unwrap().expect("sent");
    assert_eq!(env.priority(), 7);
    assert_eq!(env.visible_at(), Some(now + SEC));
    assert_eq!(env.expires_at(), Some(now + SEC * 60));
}

#[test]
fn flat_retry_options_fill_in_the_defaults() {
    let d = RetryPolicy::default();
    assert_eq!(retry_policy(None, None, None), None);
    let p = retry_policy(Some(Duration::from_millis(5)), None, None).unwrap();
    assert_eq!(
        (p.initial, p.multiplier, p.max),
        (Duration::from_millis(5), d.multiplier, d.max)
    );
    let p = retry_policy(None, Some(3), Some(SEC)).unwrap();
    assert_eq!((p.initial, p.multiplier, p.max), (d.initial, 3, SEC));
}

#[test]
fn a_handle_read_without_a_lock_reports_its_queue_state() {
    let t = TestStore::new();
    let q = t.store().queue("jobs").unwrap();
    let id = q.send(Message::new("a")).unwrap();
    let env = q.peek().unwrap().unwrap();
    let peeked: Handle = HeldMessage::read(env.clone(), MessageState::Active);
    assert_eq!(
        (peeked.state(), peeked.read_state()),
        ("active", Some(MessageState::Active))
    );
    let held = receive(&t, "jobs");
    assert_eq!(held.read_state(), Some(MessageState::Locked));
    let (env, state) = q.get_with_state(id).unwrap().unwrap();
    let looked_up: Handle = HeldMessage::read(env.clone(), state);
    assert_eq!(looked_up.state(), "locked", "held by another handle");
    assert!(looked_up.settle("completed", |r| r.complete()).is_err());
    let reply: Handle = HeldMessage::settled(env.clone(), "completed");
    assert_eq!((reply.state(), reply.read_state()), ("completed", None));
    // A transaction's message reads as its transaction's outcome once it has one.
    let in_tx: HeldMessage<bool> = HeldMessage::in_transaction(env, true, None, None);
    assert_eq!(in_tx.state_with(|_| None), "transaction");
    assert_eq!(
        in_tx.state_with(|finished| finished.then_some("abandoned")),
        "abandoned"
    );
}
