//! Collators: out-of-order series released in order, duplicates recognised, gaps reported,
//! and nothing lost across a restart.

mod common;

use std::sync::mpsc;

use common::TestStore;
use postbox::{ErrorKind, Message, Queue};

fn part(series: &str, n: u64) -> Message {
    Message::new(format!("{series}:{n}"))
        .group(series)
        .sequence(n)
}

fn drain(q: &Queue) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = q.try_receive().unwrap() {
        out.push(String::from_utf8(m.body().to_vec()).unwrap());
        m.complete().unwrap();
    }
    out
}

#[test]
fn out_of_order_arrival_from_two_producers_is_released_in_order() {
    let t = TestStore::new();
    let dest = t.store().queue("ordered").unwrap();
    let c = t.store().collator("ordered-in", &dest).unwrap();
    // Arrival 1, 2, 3, 5, 6, 4: producer A has 1, 3, 5, producer B 2, 6, 4; each waits for
    // its turn on a channel so the arrival order is exact.
    let arrival = [1u64, 2, 3, 5, 6, 4];
    let (to_a, a_turns) = mpsc::channel::<u64>();
    let (to_b, b_turns) = mpsc::channel::<u64>();
    let (done_tx, done) = mpsc::channel::<(u64, u64)>();
    let producers: Vec<_> = [(a_turns, done_tx.clone()), (b_turns, done_tx)]
        .into_iter()
        .map(|(turns, done)| {
            let c = c.clone();
            std::thread::spawn(move || {
                for n in turns {
                    let got = c.send(part("s", n)).unwrap();
                    assert!(!got.duplicate);
                    done.send((n, got.released.len() as u64)).unwrap();
                }
            })
        })
        .collect();
    let mut released = Vec::new();
    for n in arrival {
        if [1, 3, 5].contains(&n) { &to_a } else { &to_b }
            .send(n)
            .unwrap();
        let (m, r) = done.recv().unwrap();
        assert_eq!(m, n);
        released.push(r);
        if n == 3 {
            assert_eq!(dest.len().unwrap(), 3, "1, 2, 3 are out at once");
        }
    }
    drop((to_a, to_b));
    for p in producers {
        p.join().unwrap();
    }
    assert_eq!(released, [1, 1, 1, 0, 0, 3]);
    assert_eq!(drain(&dest), ["s:1", "s:2", "s:3", "s:4", "s:5", "s:6"]);
}

#[test]
fn gaps_are_reported_and_duplicates_recognised() {
    let t = TestStore::new();
    let dest = t.store().queue("d").unwrap();
    let c = t.store().collator("c", &dest).unwrap();
    c.send(part("a", 1).series_length(4)).unwrap();
    c.send(part("a", 3)).unwrap();
    let held = c.send(part("a", 4)).unwrap();
    assert!(held.released.is_empty() && !held.duplicate);
    c.send(part("b", 2).last_in_series()).unwrap();

    let gaps = c.incomplete().unwrap();
    assert_eq!(gaps.len(), 2);
    assert_eq!(
        (
            gaps[0].series.as_str(),
            gaps[0].next,
            gaps[0].length,
            gaps[0].held.clone()
        ),
        ("a", 2, Some(4), vec![3, 4])
    );
    assert_eq!(
        (
            gaps[1].series.as_str(),
            gaps[1].next,
            gaps[1].length,
            gaps[1].held.clone()
        ),
        ("b", 1, Some(2), vec![2])
    );
    // Resending what was released or is held stores nothing.
    let again = c.send(part("a", 1)).unwrap();
    assert!(again.duplicate && again.released.is_empty());
    assert!(c.send(part("a", 4)).unwrap().duplicate);
    // Beyond the declared end, zero, a contradicting length, no series: refused.
    for bad in [
        part("a", 5),
        part("a", 0),
        part("a", 2).series_length(3),
        Message::new("x").sequence(1),
        Message::new("x").group("g"),
    ] {
        assert_eq!(c.send(bad).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
    let out = c.send(part("a", 2)).unwrap().released;
    assert_eq!(out.len(), 3);
    assert!(out.windows(2).all(|w| w[0] < w[1]), "ids follow the series");
    assert_eq!(drain(&dest), ["a:1", "a:2", "a:3", "a:4"]);
    let gaps = c.incomplete().unwrap();
    assert_eq!(gaps.len(), 1, "a is complete: {gaps:?}");
    // A completed series remembers what it released.
    assert!(c.send(part("a", 3)).unwrap().duplicate);
}

#[test]
fn a_resend_that_contradicts_its_series_is_refused_not_taken_as_a_duplicate() {
    let t = TestStore::new();
    let dest = t.store().queue("d").unwrap();
    let c = t.store().collator("c", &dest).unwrap();
    c.send(part("po-1", 1).series_length(3)).unwrap();
    c.send(part("po-1", 3)).unwrap();
    // The same numbers again with another length (released 1, held 3): refused, not a duplicate.
    for bad in [
        part("po-1", 1).series_length(2),
        part("po-1", 3).series_length(4),
        part("po-1", 3).last_in_series().series_length(5),
    ] {
        let e = c.send(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
    // Agreeing with the series, a resend is a duplicate as before.
    assert!(c.send(part("po-1", 1).series_length(3)).unwrap().duplicate);
    assert!(c.send(part("po-1", 3).last_in_series()).unwrap().duplicate);
    assert!(c.send(part("po-1", 1)).unwrap().duplicate);
    // A length shorter than a number already held cannot be the series' length either.
    c.send(part("q", 5)).unwrap();
    let e = c.send(part("q", 2).series_length(3)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(c.incomplete().unwrap()[1].length, None, "nothing recorded");
    assert_eq!(c.held().unwrap(), 2, "po-1 #3 and q #5");
}

#[test]
fn a_forgotten_series_starts_again_from_one() {
    let t = TestStore::new();
    let dest = t.store().queue("d").unwrap();
    let c = t.store().collator("c", &dest).unwrap();
    c.send(part("po-1", 1)).unwrap();
    c.send(part("po-1", 2).last_in_series()).unwrap();
    assert_eq!(drain(&dest), ["po-1:1", "po-1:2"]);
    // Complete, and remembered: the name cannot be used again...
    assert!(c.send(part("po-1", 1)).unwrap().duplicate);
    // ...until the series is forgotten.
    assert!(c.forget("po-1").unwrap());
    assert!(!c.forget("po-1").unwrap(), "nothing left to forget");
    let again = c.send(part("po-1", 1).series_length(1)).unwrap();
    assert!(!again.duplicate && again.released.len() == 1);
    assert_eq!(drain(&dest), ["po-1:1"]);
    // A series that holds messages is not forgotten: they would be lost.
    c.send(part("po-2", 2)).unwrap();
    let e = c.forget("po-2").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(c.held().unwrap(), 1);
    assert_eq!(c.incomplete().unwrap()[0].held, vec![2]);
    // Deleted with the collator, like everything it holds.
    t.store().delete_queue("c").unwrap();
    assert_eq!(
        c.forget("po-1").unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
}

#[test]
fn held_messages_survive_a_restart_and_deleting_the_collator_drops_them() {
    let mut t = TestStore::new();
    {
        let dest = t.store().queue("d").unwrap();
        let c = t.store().collator("c", &dest).unwrap();
        for n in [2, 3] {
            assert!(c.send(part("s", n)).unwrap().released.is_empty());
        }
    }
    t.reopen();
    let dest = t.store().queue("d").unwrap();
    let c = t.store().collator("c", &dest).unwrap();
    assert_eq!(c.incomplete().unwrap()[0].held, vec![2, 3]);
    assert_eq!(c.send(part("s", 1)).unwrap().released.len(), 3);
    assert_eq!(drain(&dest), ["s:1", "s:2", "s:3"]);

    c.send(part("t", 2)).unwrap();
    let other = t.store().queue("other").unwrap();
    assert_eq!(
        t.store().collator("c", &other).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "a collator keeps its destination"
    );
    assert_eq!(
        t.store().queue("c").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert!(t.store().delete_queue("c").unwrap());
    assert_eq!(
        c.send(part("t", 1)).unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
    let s = dest.stats().unwrap();
    assert_eq!((s.active, s.bytes), (0, 0));
}

/// A name of the wrong kind is refused with what it is: a collator is not a topic or a queue,
/// a topic not a collator.
#[test]
fn a_name_of_another_kind_says_what_it_is() {
    let t = TestStore::new();
    let s = t.store();
    let dest = s.queue("dest").unwrap();
    s.collator("c", &dest).unwrap();
    s.topic("t").unwrap();
    let said = |e: postbox::Error, what: &str| {
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains(what), "{e} should say {what:?}");
    };
    said(
        s.topic("c").unwrap_err(),
        "\"c\" is a collator, not a topic",
    );
    said(
        s.queue("c").unwrap_err(),
        "\"c\" is a collator, not a queue",
    );
    said(s.queue("t").unwrap_err(), "\"t\" is a topic, not a queue");
    said(
        s.collator("t", &dest).unwrap_err(),
        "\"t\" is a topic, not a collator",
    );
    said(
        s.collator("dest", &dest).unwrap_err(),
        "\"dest\" is a queue, not a collator",
    );
    said(
        s.topic("dest").unwrap_err(),
        "\"dest\" is a queue, not a topic",
    );
}
