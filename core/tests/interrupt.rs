//! `binding::interruptible`: another thread ends a binding's waits (what Python's Ctrl-C does),
//! each as if its time were up, in single- and multi-process stores.

use std::time::{Duration, Instant};

use postbox::binding::{Interrupt, interrupted, interruptible};
use postbox::{JobOptions, Message, MessageId, Processor, QueueOptions, Store};

const LONG: Duration = Duration::from_secs(3600);
/// Far below `LONG`: a wait that returns within it was interrupted.
const PROMPT: Duration = Duration::from_secs(30);

/// Runs `wait` under an interrupt fired from another thread once the wait has begun (or, on a
/// slow machine, just before: both must end it); returns what the wait returned.
fn interrupted_wait<R>(wait: impl FnOnce() -> R) -> R {
    let interrupt = Interrupt::new();
    let fire = interrupt.clone();
    let firing = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        fire.fire();
    });
    let start = Instant::now();
    let got = interruptible(&interrupt, wait);
    assert!(
        start.elapsed() < PROMPT,
        "the interrupt ended the wait ({:?})",
        start.elapsed()
    );
    assert!(interrupt.is_fired());
    firing.join().unwrap();
    got
}

fn every_wait_ends(store: &Store) {
    let q = store.queue("empty").unwrap();
    assert!(interrupted_wait(|| q.receive(LONG)).unwrap().is_none());
    assert!(
        interrupted_wait(|| q.receive_batch(5, LONG))
            .unwrap()
            .is_empty()
    );
    assert!(
        interrupted_wait(|| q.receive_by_id(MessageId(u64::MAX), LONG))
            .unwrap()
            .is_none()
    );
    assert!(
        interrupted_wait(|| q.receive_by_correlation_id("nobody", LONG))
            .unwrap()
            .is_none()
    );
    assert!(interrupted_wait(|| q.peek_wait(LONG)).unwrap().is_none());
    let mut tx = store.begin();
    assert!(interrupted_wait(|| tx.receive(&q, LONG)).unwrap().is_none());
    tx.abort().unwrap();

    let sessions = store
        .queue_with("sessions", QueueOptions::default().requires_session(true))
        .unwrap();
    assert!(
        interrupted_wait(|| sessions.accept_session(LONG))
            .unwrap()
            .is_none()
    );

    let pieces = store.queue("pieces").unwrap();
    let job = store.create_job(JobOptions::default()).unwrap();
    job.send(&pieces, Message::new("piece")).unwrap();
    job.seal().unwrap();
    assert!(interrupted_wait(|| job.wait(LONG)).unwrap().is_none());

    let p = Processor::builder(&q)
        .workers(1)
        .start(|_| -> Result<(), String> { Ok(()) })
        .unwrap();
    assert!(!interrupted_wait(|| p.join(LONG)).finished);
    assert!(p.shutdown(PROMPT).finished);

    // The interrupt belongs to `interruptible`'s call only: later waits run their time.
    assert!(!interrupted());
    let start = Instant::now();
    assert!(q.receive(Duration::from_millis(50)).unwrap().is_none());
    assert!(start.elapsed() >= Duration::from_millis(50));
}

#[test]
fn an_interrupt_ends_every_kind_of_wait_in_a_single_process_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    every_wait_ends(&store);
}

#[test]
fn an_interrupt_ends_every_kind_of_wait_in_a_multi_process_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder()
        .multi_process(true)
        .open(dir.path().join("s"))
        .unwrap();
    every_wait_ends(&store);
}

#[test]
fn a_fired_interrupt_ends_a_wait_at_once_and_a_message_still_wins() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("q").unwrap();
    let interrupt = Interrupt::new();
    interrupt.fire();
    assert!(
        interruptible(&interrupt, || q.receive(LONG))
            .unwrap()
            .is_none()
    );
    assert!(interruptible(&interrupt, interrupted));
    // An interrupted wait still tries once: what is there is taken.
    q.send("here").unwrap();
    let m = interruptible(&interrupt, || q.receive(LONG))
        .unwrap()
        .expect("the message");
    m.complete().unwrap();
}
