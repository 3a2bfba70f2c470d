//! The locks of a process that died are released at once (not after `lock_duration`), with the
//! delivery counts they incremented kept.
//!
//! Every queue here has a 60 s lock duration and every wait is far shorter, so lock expiry can
//! never be what released a lock.

use std::collections::BTreeMap;
use std::time::Duration;

use postbox::{Message, QueueOptions, Store};
use postbox_tests::{Guard, Proc, arg, num};

const CHILD: &str = env!("CARGO_BIN_EXE_pbx-child");
const LOCK: Duration = Duration::from_secs(60);
/// Failure guard for "promptly": a fraction of `LOCK`.
const PROMPT: Duration = Duration::from_secs(20);

fn options() -> QueueOptions {
    QueueOptions::default().lock_duration(LOCK)
}

/// Starts a holder child that locks `n` messages; returns it and `id -> delivery count`.
fn holder(mode: &str, path: &std::path::Path, n: usize) -> (Proc, BTreeMap<u64, u32>) {
    let mut p = Proc::spawn(CHILD, "holder", &[mode, arg(path), "jobs", &n.to_string()]);
    let mut locked = BTreeMap::new();
    p.expect_with("HELD", |w| {
        if w.first() == Some(&"LOCKED") {
            locked.insert(num(w[1]), num(w[2]) as u32);
        }
        assert_ne!(w.first(), Some(&"ERR"), "holder failed: {w:?}");
    });
    assert_eq!(locked.len(), n);
    (p, locked)
}

/// Multi-process: a holder is killed while another process is already blocked in receive on
/// the same queue, and a third (this one) has the store open. The blocked process gets every
/// message the dead one held, well before the locks could expire, with delivery count 2.
#[test]
fn killed_holder_releases_its_locks_to_live_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dead.postbox");
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    let q = store.queue_with("jobs", options()).unwrap();
    for i in 0..4 {
        q.send(Message::new(format!("job-{i}"))).unwrap();
    }
    let (mut h, locked) = holder("hold", &path, 4);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (0, 4));

    // A waiter that is blocked before the holder dies: only the holder's death can feed it.
    let mut w = Proc::spawn(
        CHILD,
        "observer",
        &[
            "observe",
            arg(&path),
            "jobs",
            "4",
            &PROMPT.as_millis().to_string(),
        ],
    );
    w.expect("READY");
    w.expect("WAITING");
    h.kill9();
    let mut got = BTreeMap::new();
    for _ in 0..4 {
        let line = w.expect("GOT");
        got.insert(num(&line[0]), num(&line[1]) as u32);
        w.expect("DONE");
    }
    w.finish();
    let expected: BTreeMap<u64, u32> = locked.iter().map(|(id, dc)| (*id, dc + 1)).collect();
    assert_eq!(
        got, expected,
        "the dead holder's messages, each delivered once more"
    );
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (0, 0));

    // Again, and this time this process (open all along) picks them up.
    for i in 0..3 {
        q.send(Message::new(format!("job-b{i}"))).unwrap();
    }
    let (mut h, locked) = holder("hold", &path, 3);
    h.kill9();
    let guard = Guard::new(PROMPT, "the dead holder's locks to be released");
    let mut got = BTreeMap::new();
    while got.len() < locked.len() {
        guard.check();
        if let Some(m) = q.receive(guard.left()).unwrap() {
            got.insert(m.id().get(), m.delivery_count());
            m.complete().unwrap();
        }
    }
    let expected: BTreeMap<u64, u32> = locked.iter().map(|(id, dc)| (*id, dc + 1)).collect();
    assert_eq!(got, expected);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked, s.dead_lettered), (0, 0, 0));
}

/// A waiter that never polls the file (a poll interval of an hour) still gets a killed
/// holder's messages promptly: the holder's death closes the store file, which the file watch
/// reports (Linux), and the look that follows finds the dead process's locks.
#[cfg(target_os = "linux")]
#[test]
fn a_waiter_that_never_polls_gets_a_killed_holders_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dead.postbox");
    let hour = Duration::from_secs(3600);
    let store = Store::builder()
        .multi_process(true)
        .poll_interval(hour, hour)
        .open(&path)
        .unwrap();
    let q = store.queue_with("jobs", options()).unwrap();
    for i in 0..2 {
        q.send(Message::new(format!("job-{i}"))).unwrap();
    }
    let (mut h, locked) = holder("hold", &path, 2);
    let waiter = {
        let q = q.clone();
        std::thread::spawn(move || {
            let mut got = BTreeMap::new();
            let start = std::time::Instant::now();
            while got.len() < 2 {
                let m = q
                    .receive(PROMPT)
                    .unwrap()
                    .expect("the dead holder's message");
                got.insert(m.id().get(), m.delivery_count());
                m.complete().unwrap();
            }
            (got, start.elapsed())
        })
    };
    h.kill9();
    let (got, took) = waiter.join().unwrap();
    let expected: BTreeMap<u64, u32> = locked.iter().map(|(id, dc)| (*id, dc + 1)).collect();
    assert_eq!(got, expected);
    // Sooner than the slow safety look (every 5 s, engine/poll.rs): the close was noticed.
    assert!(took < Duration::from_secs(4), "took {took:?}");
}

/// Holders killed one after another: each finds the previous one's locks released with their
/// delivery counts kept, and a fresh multi-process open reaps the last one at once.
#[test]
fn killed_holder_of_several_messages_keeps_delivery_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.postbox");
    {
        let store = Store::builder().multi_process(true).open(&path).unwrap();
        let q = store.queue_with("jobs", options()).unwrap();
        for i in 0..5 {
            q.send(Message::new(format!("job-{i}"))).unwrap();
        }
        store.close().unwrap();
    }
    // Three holders in a row, each killed: the counts climb to 3 for the messages all of
    // them held.
    let mut history: BTreeMap<u64, u32> = BTreeMap::new();
    for _ in 0..3 {
        let (mut h, locked) = holder("hold", &path, 5);
        for (id, dc) in &locked {
            let prev = history.insert(*id, *dc).unwrap_or(0);
            assert_eq!(*dc, prev + 1, "message {id}: delivery count");
        }
        h.kill9();
    }
    // A fresh open in multi-process mode reaps the dead registrations at once.
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    let q = store.queue("jobs").unwrap();
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (5, 0));
    for e in q.browse() {
        let e = e.unwrap();
        assert_eq!(e.delivery_count(), 3, "message {}", e.id());
    }
}

/// Single-process mode: reopening after the holder was killed releases every stale lock at once.
#[test]
fn single_process_reopen_after_kill_releases_every_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("single.postbox");
    {
        let store = Store::open(&path).unwrap();
        let q = store.queue_with("jobs", options()).unwrap();
        for i in 0..6 {
            q.send(Message::new(format!("job-{i}"))).unwrap();
        }
        store.close().unwrap();
    }
    let (mut h, locked) = holder("hold-single", &path, 4);
    // While it lives, the store is its alone.
    let err = Store::open(&path).unwrap_err();
    assert_eq!(err.kind(), postbox::ErrorKind::AlreadyOpen, "{err}");
    h.kill9();

    let store = Store::open(&path).unwrap();
    let q = store.queue("jobs").unwrap();
    let s = q.stats().unwrap();
    assert_eq!(
        (s.active, s.locked),
        (6, 0),
        "every stale lock released on open"
    );
    let counts: BTreeMap<u64, u32> = q
        .browse()
        .map(|e| {
            let e = e.unwrap();
            (e.id().get(), e.delivery_count())
        })
        .collect();
    for (id, dc) in &counts {
        let expected = if locked.contains_key(id) { 1 } else { 0 };
        assert_eq!(*dc, expected, "message {id}");
    }
    // And they are receivable right away, in send order.
    let mut ids = Vec::new();
    while let Some(m) = q.try_receive().unwrap() {
        ids.push(m.id().get());
        m.complete().unwrap();
    }
    assert_eq!(ids, counts.keys().copied().collect::<Vec<_>>());
}

/// Starts a child that accepts session `group` of queue `sessions` and receives its first
/// message; returns it once it holds both locks.
fn session_holder(mode: &str, path: &std::path::Path, group: &str) -> (Proc, u64) {
    let mut p = Proc::spawn(
        CHILD,
        "session holder",
        &[mode, arg(path), "sessions", group],
    );
    let mut locked = None;
    p.expect_with("HELD", |w| {
        if w.first() == Some(&"LOCKED") {
            locked = Some(num(w[1]));
        }
        assert_ne!(w.first(), Some(&"ERR"), "session holder failed: {w:?}");
    });
    (p, locked.expect("a LOCKED line"))
}

fn session_options() -> QueueOptions {
    options().requires_session(true)
}

/// Single-process mode: after the session holder is killed, reopening releases its session
/// lock with its message lock, so the session can be accepted at once — not after the lock
/// duration (60 s here; the default 30 s in the issue).
#[test]
fn single_process_reopen_after_kill_releases_the_session_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.postbox");
    {
        let store = Store::open(&path).unwrap();
        let q = store.queue_with("sessions", session_options()).unwrap();
        for i in 0..3 {
            q.send(Message::new(format!("a-{i}")).group("a")).unwrap();
        }
        store.close().unwrap();
    }
    let (mut h, held) = session_holder("session-hold-single", &path, "a");
    h.kill9();

    let store = Store::open(&path).unwrap();
    let q = store.queue("sessions").unwrap();
    assert_eq!(q.stats().unwrap().locked, 0, "the message lock is released");
    let session = q
        .accept_named_session("a", Duration::ZERO)
        .unwrap()
        .expect("the dead holder's session is free at once");
    let m = session
        .receive(Duration::ZERO)
        .unwrap()
        .expect("its message");
    assert_eq!(m.id().get(), held, "the session goes on where it was");
    assert_eq!(m.delivery_count(), 2);
    m.complete().unwrap();
    drop(session);
    // Any receiver may take the group now, without naming it.
    assert!(q.accept_session(Duration::ZERO).unwrap().is_some());
}

/// Multi-process mode: a live process waiting to accept the session gets it as soon as the
/// holder dies, and a fresh open finds it free too.
#[test]
fn killed_session_holder_releases_its_session_to_live_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions-mp.postbox");
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    let q = store.queue_with("sessions", session_options()).unwrap();
    for g in ["a", "b"] {
        for i in 0..2 {
            q.send(Message::new(format!("{g}-{i}")).group(g)).unwrap();
        }
    }
    let (mut h, held) = session_holder("session-hold", &path, "a");
    assert!(
        q.accept_named_session("a", Duration::ZERO)
            .unwrap()
            .is_none(),
        "held while the holder lives"
    );
    h.kill9();
    let session = q
        .accept_named_session("a", PROMPT)
        .unwrap()
        .expect("the dead holder's session, well before its lock could expire");
    let m = session
        .receive(Duration::ZERO)
        .unwrap()
        .expect("its message");
    assert_eq!((m.id().get(), m.delivery_count()), (held, 2));
    m.complete().unwrap();
    drop(session);

    // Killed again, then reaped by a fresh open of another handle.
    let (mut h, _) = session_holder("session-hold", &path, "b");
    h.kill9();
    drop(q);
    store.close().unwrap();
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    let q = store.queue("sessions").unwrap();
    assert!(
        q.accept_named_session("b", Duration::ZERO)
            .unwrap()
            .is_some(),
        "a fresh open reaps the dead holder's session"
    );
}
