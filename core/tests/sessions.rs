//! Sessions: each group of a queue that requires sessions is delivered in send order, one
//! message at a time, to the one receiver holding its session; groups go to receivers in
//! parallel; a session's state survives its locks and redeliveries.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{Rng, SEC, TestStore, knob};
use postbox::{Durability, ErrorKind, Message, MessageId, Queue, QueueOptions, Store};

const NOW: Duration = Duration::ZERO;

fn sessions() -> QueueOptions {
    QueueOptions::default().requires_session(true)
}

#[test]
fn a_group_is_delivered_in_order_one_message_at_a_time() {
    let t = TestStore::new();
    let q = t.store().queue_with("orders", sessions()).unwrap();
    for step in ["1", "2", "3"] {
        q.send(Message::new(step).group("order-7")).unwrap();
    }
    let s = q.accept_session(NOW).unwrap().unwrap();
    assert_eq!(s.group(), "order-7");
    let first = s.receive(NOW).unwrap().unwrap();
    assert_eq!(first.body(), b"1");
    assert!(s.receive(NOW).unwrap().is_none(), "one at a time");
    first.abandon().unwrap();
    let again = s.receive(NOW).unwrap().unwrap();
    assert_eq!((again.body(), again.delivery_count()), (&b"1"[..], 2));
    again.complete().unwrap();
    let second = s.receive(NOW).unwrap().unwrap();
    assert_eq!(second.body(), b"2");
    // Deferring lets the next one through; the deferred one is received by id later.
    second.defer().unwrap();
    let third = s.receive(NOW).unwrap().unwrap();
    assert_eq!(third.body(), b"3");
    third.complete().unwrap();
    assert_eq!(q.stats().unwrap().deferred, 1);
}

#[test]
fn plain_receives_and_groupless_sends_are_refused() {
    let t = TestStore::new();
    let q = t.store().queue_with("s", sessions()).unwrap();
    assert_eq!(
        q.send("no group").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    q.send(Message::new("x").group("g")).unwrap();
    assert_eq!(
        q.try_receive().unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        t.store()
            .queue_with("s", QueueOptions::default().requires_session(false))
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument,
        "fixed at creation"
    );
    let plain = t.store().queue("plain").unwrap();
    assert_eq!(
        plain.accept_session(NOW).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert!(q.options().unwrap().requires_session);
}

/// Invariant 7: while a receiver holds a group and works on its first message, nobody else
/// takes the second one, by id or by correlation id, alone or in a transaction; those receives
/// are refused on a session queue with a reason, whether or not the group is held.
#[test]
fn a_held_session_is_not_bypassed_by_id_or_correlation_id() {
    let t = TestStore::new();
    let store = t.store();
    let q = store.queue_with("s", sessions()).unwrap();
    q.send(Message::new("1").group("g").correlation_id("c-1"))
        .unwrap();
    let second = q
        .send(Message::new("2").group("g").correlation_id("c-2"))
        .unwrap();
    q.send(Message::new("other").group("h").correlation_id("c-2"))
        .unwrap();

    // Refused before anyone holds the group too: the rule does not depend on timing.
    let before = q.receive_by_id(second, NOW).unwrap_err();
    assert_eq!(before.kind(), ErrorKind::InvalidArgument);
    assert!(before.to_string().contains("requires sessions"), "{before}");

    let a = q.accept_named_session("g", NOW).unwrap().unwrap();
    let first = a.receive(NOW).unwrap().unwrap();
    assert_eq!(first.body(), b"1");

    let by_id = q.receive_by_id(second, SEC).unwrap_err();
    assert_eq!(by_id.kind(), ErrorKind::InvalidArgument);
    assert!(by_id.to_string().contains("accept a session"), "{by_id}");
    let by_cid = q.receive_by_correlation_id("c-2", SEC).unwrap_err();
    assert_eq!(by_cid.kind(), ErrorKind::InvalidArgument);
    assert!(by_cid.to_string().contains("by correlation id"), "{by_cid}");
    let mut tx = store.begin();
    assert_eq!(
        tx.receive_by_id(&q, second, NOW).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        tx.receive_by_correlation_id(&q, "c-2", NOW)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        tx.receive(&q, NOW).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    tx.abort().unwrap();

    // The holder of another group cannot reach into this one either.
    let b = q.accept_session(NOW).unwrap().unwrap();
    assert_eq!(b.group(), "h");
    assert!(b.receive_by_id(second, NOW).unwrap().is_none());
    let theirs = b.receive_by_correlation_id("c-2", NOW).unwrap().unwrap();
    assert_eq!(theirs.body(), b"other", "only its own group's c-2");
    theirs.complete().unwrap();

    // Nothing moved: the first is in hand, the second waits for it.
    let st = q.stats().unwrap();
    assert_eq!((st.active, st.locked), (1, 1));
    assert!(
        a.receive_by_id(second, NOW).unwrap().is_none(),
        "one at a time"
    );
    first.complete().unwrap();
    let m = a.receive_by_id(second, NOW).unwrap().unwrap();
    assert_eq!((m.body(), m.delivery_count()), (&b"2"[..], 1));
    m.complete().unwrap();
}

/// A session's holder picks its deferred messages by id or by correlation id while another
/// message of the group is in hand (Service Bus's receive-deferred); a non-deferred message
/// comes only when it is the group's next; a deferred message in hand holds nothing up.
#[test]
fn a_session_receives_its_deferred_messages_by_id_and_correlation_id() {
    let t = TestStore::new();
    let q = t.store().queue_with("s", sessions()).unwrap();
    let ids: Vec<MessageId> = ["a", "b", "c", "d"]
        .iter()
        .map(|c| {
            q.send(Message::new(*c).group("g").correlation_id(*c))
                .unwrap()
        })
        .collect();
    let s = q.accept_session(NOW).unwrap().unwrap();
    let a = s.receive(NOW).unwrap().unwrap();
    a.defer().unwrap();
    let b = s.receive(NOW).unwrap().unwrap();
    assert_eq!(b.id(), ids[1]);

    // b is in hand: c and d wait, the deferred a does not.
    assert!(s.receive_by_id(ids[2], NOW).unwrap().is_none());
    assert!(s.receive_by_correlation_id("c", NOW).unwrap().is_none());
    let a = s.receive_by_id(ids[0], NOW).unwrap().unwrap();
    assert_eq!((a.body(), a.delivery_count()), (&b"a"[..], 2));
    a.abandon().unwrap(); // stays deferred
    assert_eq!(q.stats().unwrap().deferred, 1);
    let a = s.receive_by_correlation_id("a", NOW).unwrap().unwrap();
    assert_eq!(a.id(), ids[0]);
    b.complete().unwrap();

    // The deferred a is in hand, and yet the group moves on.
    let c = s.receive(NOW).unwrap().unwrap();
    assert_eq!(c.id(), ids[2]);
    a.complete().unwrap();
    c.complete().unwrap();
    assert!(
        s.receive_by_correlation_id("b", NOW).unwrap().is_none(),
        "gone"
    );

    let d = s.receive_by_correlation_id("d", NOW).unwrap().unwrap();
    assert_eq!(d.id(), ids[3]);
    d.complete().unwrap();
    assert_eq!(q.stats().unwrap().deferred, 0);
}

/// A selective receive through a session waits while the message ahead is in hand and wakes
/// when it is settled.
#[test]
fn a_session_receive_by_id_waits_for_its_turn() {
    let t = TestStore::new();
    let q = t.store().queue_with("s", sessions()).unwrap();
    q.send(Message::new("1").group("g")).unwrap();
    let second = q.send(Message::new("2").group("g")).unwrap();
    let s = q.accept_session(NOW).unwrap().unwrap();
    let first = s.receive(NOW).unwrap().unwrap();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let got = std::thread::scope(|sc| {
        let waiter = sc.spawn(|| {
            started_tx.send(()).unwrap();
            s.receive_by_id(second, SEC * 60)
        });
        started_rx.recv().unwrap();
        first.complete().unwrap();
        waiter.join().unwrap()
    });
    let m = got.unwrap().expect("woken by the completion");
    assert_eq!(m.body(), b"2");
    m.complete().unwrap();

    // Its holder stalled past the session lock and another took the group over.
    t.clock.advance(SEC * 31);
    let _s2 = q.accept_named_session("g", NOW).unwrap().unwrap();
    assert_eq!(
        s.receive_by_id(second, NOW).unwrap_err().kind(),
        ErrorKind::LockLost
    );
    assert_eq!(
        s.receive_by_correlation_id("c", NOW).unwrap_err().kind(),
        ErrorKind::LockLost
    );
}

/// Waits on a session queue end when the message ahead is settled (completed, deferred,
/// dead-lettered) or the session released, not at the next time-driven wake-up: the clock
/// stands still here, and the waits are shorter than the lock duration.
#[test]
fn session_waiters_wake_when_the_message_ahead_leaves_or_the_session_is_released() {
    let t = TestStore::new();
    let q = t.store().queue_with("s", sessions()).unwrap();
    let ids: Vec<MessageId> = (0..4)
        .map(|n| q.send(Message::new(n.to_string()).group("g")).unwrap())
        .collect();
    let s = q.accept_session(NOW).unwrap().unwrap();
    let wait = SEC * 10;
    let mut ahead = s.receive(NOW).unwrap().unwrap();
    for (step, next) in ids.iter().enumerate().skip(1) {
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let got = std::thread::scope(|sc| {
            let waiter = sc.spawn(|| {
                started_tx.send(()).unwrap();
                if step == 2 {
                    s.receive_by_id(*next, wait)
                } else {
                    s.receive(wait)
                }
            });
            started_rx.recv().unwrap();
            match step {
                1 => ahead.complete().unwrap(),
                2 => ahead.defer().unwrap(),
                _ => ahead.dead_letter("poison", "test").unwrap(),
            }
            waiter.join().unwrap()
        });
        ahead = got.unwrap().expect("woken by the settle");
        assert_eq!(ahead.id(), *next);
    }
    ahead.complete().unwrap();
    let got = std::thread::scope(|sc| {
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let waiter = sc.spawn(move || {
            started_tx.send(()).unwrap();
            q.accept_named_session("g", wait)
        });
        started_rx.recv().unwrap();
        s.release().unwrap();
        waiter.join().unwrap()
    });
    assert!(got.unwrap().is_some(), "woken by the release");
}

/// On a queue that does not require sessions a group is only a property: grouped messages go
/// to receivers in parallel and are received by id and by correlation id like any other.
#[test]
fn a_group_on_a_plain_queue_changes_nothing() {
    let t = TestStore::new();
    let q = t.store().queue("plain").unwrap();
    let ids: Vec<MessageId> = (0..4)
        .map(|n| {
            q.send(
                Message::new(n.to_string())
                    .group("g")
                    .correlation_id(format!("c{n}")),
            )
            .unwrap()
        })
        .collect();
    let m0 = q.try_receive().unwrap().unwrap();
    let m1 = q.try_receive().unwrap().unwrap();
    assert_eq!(
        (m0.id(), m1.id()),
        (ids[0], ids[1]),
        "two of one group at once"
    );
    let m3 = q.receive_by_id(ids[3], NOW).unwrap().unwrap();
    let m2 = q.receive_by_correlation_id("c2", NOW).unwrap().unwrap();
    assert_eq!((m2.id(), m3.group()), (ids[2], Some("g")));
    for m in [m3, m1, m0, m2] {
        m.complete().unwrap();
    }
    assert!(
        q.accept_session(NOW)
            .unwrap_err()
            .to_string()
            .contains("sessions")
    );
}

#[test]
fn sessions_go_to_different_receivers_and_expire_like_locks() {
    let t = TestStore::new();
    let q = t.store().queue_with("s", sessions()).unwrap();
    for g in ["a", "b"] {
        q.send(Message::new(g).group(g)).unwrap();
    }
    let a = q.accept_session(NOW).unwrap().unwrap();
    let b = q.accept_session(NOW).unwrap().unwrap();
    assert_eq!((a.group(), b.group()), ("a", "b"));
    assert!(q.accept_session(NOW).unwrap().is_none(), "both are held");
    assert!(q.accept_named_session("a", NOW).unwrap().is_none());

    // a's holder stalls past the lock duration: another receiver takes the session over.
    let m = a.receive(NOW).unwrap().unwrap();
    t.clock.advance(SEC * 31);
    let a2 = q.accept_named_session("a", NOW).unwrap().unwrap();
    assert_eq!(m.complete().unwrap_err().kind(), ErrorKind::LockLost);
    assert_eq!(a.receive(NOW).unwrap_err().kind(), ErrorKind::LockLost);
    assert_eq!(
        a.set_state(Some(b"x")).unwrap_err().kind(),
        ErrorKind::LockLost
    );
    let again = a2.receive(NOW).unwrap().unwrap();
    assert_eq!(again.delivery_count(), 2);
    again.complete().unwrap();
    drop(a); // its release fails quietly: the lock is a2's
    a2.renew_lock().unwrap();
    a2.release().unwrap();
    drop(b); // released on drop
    let b2 = q.accept_session(NOW).unwrap().unwrap();
    assert_eq!(b2.group(), "b");
}

#[test]
fn session_state_survives_locks_restarts_and_commits_with_settles() {
    let mut t = TestStore::new();
    {
        let q = t.store().queue_with("s", sessions()).unwrap();
        for n in ["1", "2"] {
            q.send(Message::new(n).group("g")).unwrap();
        }
        let s = q.accept_session(NOW).unwrap().unwrap();
        assert_eq!(s.state().unwrap(), None);
        let m = s.receive(NOW).unwrap().unwrap();
        // In one commit: the completion and the state.
        let mut tx = t.store().begin();
        tx.complete(m).unwrap();
        tx.set_session_state(&s, Some(b"after 1")).unwrap();
        tx.commit().unwrap();
        let m = s.receive(NOW).unwrap().unwrap();
        let mut tx = t.store().begin();
        tx.complete(m).unwrap();
        tx.set_session_state(&s, Some(b"after 2")).unwrap();
        tx.abort().unwrap();
        assert_eq!(s.state().unwrap().as_deref(), Some(&b"after 1"[..]));
        s.release().unwrap();
    }
    t.reopen();
    let q = t.store().queue("s").unwrap();
    let s = q.accept_named_session("g", NOW).unwrap().unwrap();
    assert_eq!(s.state().unwrap().as_deref(), Some(&b"after 1"[..]));
    let m = s.receive(NOW).unwrap().unwrap();
    assert_eq!((m.body(), m.delivery_count()), (&b"2"[..], 2));
    m.complete().unwrap();
    s.set_state(None).unwrap();
    assert_eq!(
        s.set_state(Some(&vec![0u8; 65 * 1024])).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    s.release().unwrap();
    assert!(t.store().delete_queue("s").unwrap());
}

/// Receivers that take sessions in parallel, abandon at random and sometimes stall past the
/// lock: every group is processed in send order, each message completed exactly once.
#[test]
fn four_receivers_twenty_groups_in_order_despite_abandons_and_expiries() {
    let groups = knob("POSTBOX_SESSION_GROUPS", 20);
    let per_group = knob("POSTBOX_SESSION_MESSAGES", 100);
    let dir = common::fast_tempdir();
    let store = Store::builder()
        .durability(Durability::None)
        .open(dir.path().join("s"))
        .unwrap();
    let q = store
        .queue_with(
            "work",
            sessions()
                .lock_duration(Duration::from_millis(300))
                .max_deliveries(1000),
        )
        .unwrap();
    let mut ids: HashMap<(usize, usize), MessageId> = HashMap::new();
    for n in 0..per_group {
        for g in 0..groups {
            let m = Message::new(format!("{g}:{n}")).group(format!("g{g}"));
            ids.insert((g, n), q.send(m).unwrap());
        }
    }
    let ids = Arc::new(ids);
    let completed = Arc::new(AtomicU64::new(0));
    let total = (groups * per_group) as u64;
    let mut rng = Rng::from_env("sessions");
    let seeds: Vec<u64> = (0..4).map(|_| rng.next_u64()).collect();
    let receivers: Vec<_> = seeds
        .into_iter()
        .map(|seed| {
            let (q, ids, completed) = (q.clone(), ids.clone(), completed.clone());
            std::thread::spawn(move || receiver(&q, &ids, &completed, total, seed))
        })
        .collect();
    let stalls: u64 = receivers.into_iter().map(|r| r.join().unwrap()).sum();
    assert_eq!(completed.load(Ordering::SeqCst), total);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.dead_lettered), (0, 0, 0));
    eprintln!("{groups} groups x {per_group} messages, {stalls} stalled receivers");
}

/// One receiver: accept a session, work through it, release; returns how often it stalled.
fn receiver(
    q: &Queue,
    ids: &HashMap<(usize, usize), MessageId>,
    completed: &AtomicU64,
    total: u64,
    seed: u64,
) -> u64 {
    let mut rng = Rng::new(seed);
    let mut stalls = 0;
    while completed.load(Ordering::SeqCst) < total {
        let Some(s) = q.accept_session(Duration::from_millis(50)).unwrap() else {
            continue;
        };
        loop {
            let m = match s.receive(NOW) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) if e.is_lock_lost() => break,
                Err(e) => panic!("{e}"),
            };
            let body = String::from_utf8(m.body().to_vec()).unwrap();
            let (g, n) = body.split_once(':').unwrap();
            let (g, n): (usize, usize) = (g.parse().unwrap(), n.parse().unwrap());
            // In order: everything before it in its group is already gone.
            if n > 0 {
                assert!(
                    q.get(ids[&(g, n - 1)]).unwrap().is_none(),
                    "group {g}: message {n} delivered before {} was completed",
                    n - 1
                );
            }
            match rng.below(100) {
                0..=9 => m.abandon().unwrap(),
                10 if stalls < 2 => {
                    // A receiver that stalls past its locks: the session moves on without it.
                    stalls += 1;
                    std::thread::sleep(Duration::from_millis(400));
                    match m.complete() {
                        Ok(()) => {
                            completed.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => assert!(e.is_lock_lost(), "{e}"),
                    }
                    break;
                }
                _ => match m.complete() {
                    Ok(()) => {
                        completed.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) if e.is_lock_lost() => break,
                    Err(e) => panic!("{e}"),
                },
            }
        }
    }
    stalls
}

/// The processor's session mode: four workers on twenty groups, each group handled in order and
/// never by two workers at once, with failures retried in place.
#[test]
fn the_processor_in_session_mode_keeps_each_group_in_order() {
    use std::collections::HashSet;
    use std::sync::Mutex;

    let groups = knob("POSTBOX_SESSION_GROUPS", 20);
    let per_group = knob("POSTBOX_SESSION_MESSAGES", 100) / 2;
    let dir = common::fast_tempdir();
    let store = Store::builder()
        .durability(Durability::None)
        .open(dir.path().join("s"))
        .unwrap();
    let q = store.queue_with("work", sessions()).unwrap();
    for n in 0..per_group {
        for g in 0..groups {
            q.send(Message::new(format!("{g}:{n}")).group(format!("g{g}")))
                .unwrap();
        }
    }
    assert_eq!(
        postbox::Processor::builder(&q)
            .start(|_| -> Result<(), String> { Ok(()) })
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument,
        "a session queue needs session mode"
    );
    let seen: Arc<Mutex<HashMap<usize, Vec<usize>>>> = Arc::default();
    let busy: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let failures = Arc::new(AtomicU64::new(0));
    let (handled, handled_rx) = std::sync::mpsc::channel::<()>();
    let handled = Mutex::new(handled);
    let p = {
        let (seen, busy, failures) = (seen.clone(), busy.clone(), failures.clone());
        postbox::Processor::builder(&q)
            .workers(4)
            .sessions(true)
            .retry(postbox::RetryPolicy::immediate())
            .start(move |d| -> Result<(), String> {
                let body = String::from_utf8(d.body().to_vec()).unwrap();
                let (g, n) = body.split_once(':').unwrap();
                let (g, n): (usize, usize) = (g.parse().unwrap(), n.parse().unwrap());
                assert!(
                    busy.lock().unwrap().insert(g),
                    "group {g} on two workers at once"
                );
                // Every third message fails once: it must be retried before the next one.
                let fail = n % 3 == 0 && d.delivery_count() == 1;
                if !fail {
                    let mut seen = seen.lock().unwrap();
                    let got = seen.entry(g).or_default();
                    assert_eq!(got.len(), n, "group {g}: {n} handled out of order");
                    got.push(n);
                    let _ = handled.lock().unwrap().send(());
                }
                busy.lock().unwrap().remove(&g);
                if fail {
                    failures.fetch_add(1, Ordering::SeqCst);
                    return Err("first try fails".into());
                }
                Ok(())
            })
            .unwrap()
    };
    for _ in 0..groups * per_group {
        handled_rx
            .recv_timeout(Duration::from_secs(120))
            .expect("every message is handled");
    }
    let report = p.shutdown(Duration::from_secs(30));
    assert_eq!(report.processed, (groups * per_group) as u64);
    assert!(failures.load(Ordering::SeqCst) > 0);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.scheduled), (0, 0, 0));
}
