//! `Queue::browse_all`: every message of a queue whatever its state, in id order, each tagged
//! with its state as stored — the tally `Queue::stats` keeps — with bodies and properties
//! intact; dead-letter queues, empty and deleted queues, and changes made while it iterates.

mod common;

use std::time::Duration;

use common::TestStore;
use postbox::{Envelope, ErrorKind, Message, MessageId, MessageState, PropertyValue, Queue};

fn all(q: &Queue) -> Vec<(Envelope, MessageState)> {
    q.browse_all().collect::<postbox::Result<_>>().unwrap()
}

fn ids_and_states(q: &Queue) -> Vec<(MessageId, MessageState)> {
    let listed: Vec<_> = all(q).into_iter().map(|(e, s)| (e.id(), s)).collect();
    // One rule: a lookup by id reports each message in the state the listing gives it.
    for (id, state) in &listed {
        let got = q.get_with_state(*id).unwrap().map(|(e, s)| (e.id(), s));
        assert_eq!(
            got,
            Some((*id, *state)),
            "get_with_state disagrees with browse_all"
        );
    }
    listed
}

#[test]
fn every_state_appears_with_its_tag_in_id_order() {
    let t = TestStore::new();
    let store = t.store();
    let q = store.queue("work").unwrap();
    let other = store.queue("other").unwrap();
    // Priorities make delivery order differ from id order; another queue's messages sit
    // between this queue's ids.
    let low = q
        .send(
            Message::new("low")
                .priority(1)
                .label("first")
                .content_type("text/plain")
                .property("text", "v")
                .property("bytes", vec![0u8, 1, 2]),
        )
        .unwrap();
    other.send("elsewhere").unwrap();
    let held_id = q.send(Message::new("held").priority(7)).unwrap();
    let later = q
        .send(Message::new("later").delay(Duration::from_secs(60)))
        .unwrap();
    other.send("elsewhere too").unwrap();
    let deferred_id = q.send(Message::new("deferred").priority(6)).unwrap();
    let active = q.send("active").unwrap();

    let held = q.try_receive().unwrap().unwrap();
    assert_eq!(held.id(), held_id);
    let d = q.try_receive().unwrap().unwrap();
    assert_eq!(d.id(), deferred_id);
    d.defer().unwrap();

    let listed = all(&q);
    let tags: Vec<_> = listed.iter().map(|(e, s)| (e.id(), *s)).collect();
    assert_eq!(
        tags,
        [
            (low, MessageState::Active),
            (held_id, MessageState::Locked),
            (later, MessageState::Scheduled),
            (deferred_id, MessageState::Deferred),
            (active, MessageState::Active),
        ]
    );
    // Bodies and properties are the stored ones; every message names this queue.
    let (first, _) = &listed[0];
    assert_eq!(first.body(), b"low");
    assert_eq!(
        (first.label(), first.content_type(), first.priority()),
        (Some("first"), Some("text/plain"), 1)
    );
    assert_eq!(first.property("text"), Some(&PropertyValue::from("v")));
    assert_eq!(
        first.property("bytes"),
        Some(&PropertyValue::from(vec![0u8, 1, 2]))
    );
    assert_eq!(listed[1].0.body(), b"held");
    assert_eq!(listed[1].0.delivery_count(), 1);
    let (scheduled, _) = &listed[2];
    assert_eq!(scheduled.body(), b"later");
    assert_eq!(
        scheduled.visible_at(),
        Some(t.now() + Duration::from_secs(60))
    );
    assert_eq!(listed[3].0.body(), b"deferred");
    assert!(listed.iter().all(|(e, _)| e.queue() == "work"));
    assert!(listed.iter().all(|(e, _)| e.dead_letter_info().is_none()));

    // The tally is the one stats keeps.
    let s = q.stats().unwrap();
    let count = |want| listed.iter().filter(|(_, st)| *st == want).count() as u64;
    assert_eq!(
        (s.active, s.locked, s.scheduled, s.deferred),
        (
            count(MessageState::Active),
            count(MessageState::Locked),
            count(MessageState::Scheduled),
            count(MessageState::Deferred)
        )
    );
    // Nothing was locked or changed by looking.
    assert_eq!(q.stats().unwrap(), s);
    assert_eq!(ids_and_states(&other).len(), 2);
    held.complete().unwrap();
}

#[test]
fn an_empty_queue_yields_nothing() {
    let t = TestStore::new();
    let q = t.store().queue("empty").unwrap();
    t.store().queue("busy").unwrap().send("x").unwrap();
    assert!(all(&q).is_empty());
    assert!(all(&q.dead_letters().unwrap()).is_empty());
}

#[test]
fn a_dead_letter_queue_lists_its_dead_letters_with_their_state_there() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let a = q.send(Message::new("a").property("k", "v")).unwrap();
    let b = q.send("b").unwrap();
    let c = q.send("c").unwrap();
    for _ in 0..2 {
        q.try_receive()
            .unwrap()
            .unwrap()
            .dead_letter("Bad", "bad input")
            .unwrap();
    }
    let dlq = q.dead_letters().unwrap();
    // One dead letter held by a receiver of the dead-letter queue.
    let held = dlq.try_receive().unwrap().unwrap();
    assert_eq!(held.id(), a);

    let listed = all(&dlq);
    let tags: Vec<_> = listed.iter().map(|(e, s)| (e.id(), *s)).collect();
    assert_eq!(tags, [(a, MessageState::Locked), (b, MessageState::Active)]);
    for (e, _) in &listed {
        let info = e.dead_letter_info().unwrap();
        assert_eq!(
            (info.reason.as_str(), info.source_queue.as_str()),
            ("Bad", "q")
        );
        assert_eq!(e.queue(), dlq.name());
    }
    assert_eq!(listed[0].0.property("k"), Some(&PropertyValue::from("v")));
    // The source queue lists what is left in it.
    assert_eq!(ids_and_states(&q), [(c, MessageState::Active)]);
    held.abandon().unwrap();
    assert_eq!(
        ids_and_states(&dlq),
        [(a, MessageState::Active), (b, MessageState::Active)]
    );
}

#[test]
fn due_time_driven_changes_count_as_done_as_stats_counts_them() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with(
            "q",
            postbox::QueueOptions::default()
                .lock_duration(Duration::from_secs(10))
                .max_deliveries(3),
        )
        .unwrap();
    let held_id = q.send("held").unwrap();
    let soon = q
        .send(Message::new("soon").delay(Duration::from_secs(5)))
        .unwrap();
    let deferred_id = q.send("deferred").unwrap();
    let spent_id = q.send("spent").unwrap();
    let expiring = q
        .send(Message::new("expiring").ttl(Duration::from_secs(20)))
        .unwrap();
    let held = q.try_receive().unwrap().unwrap();
    assert_eq!(held.id(), held_id);
    let d = q.try_receive().unwrap().unwrap();
    assert_eq!(d.id(), deferred_id);
    d.defer().unwrap();
    let d = q
        .receive_by_id(deferred_id, Duration::ZERO)
        .unwrap()
        .unwrap();
    // Three deliveries, the queue's max: its lock ending sends it to the dead-letter queue.
    for _ in 0..2 {
        let s = q.receive_by_id(spent_id, Duration::ZERO).unwrap().unwrap();
        s.abandon().unwrap();
    }
    let s2 = q.receive_by_id(spent_id, Duration::ZERO).unwrap().unwrap();
    assert_eq!(s2.delivery_count(), 3);
    // Another queue's message is not this queue's to look up.
    let elsewhere = t.store().queue("elsewhere").unwrap().send("x").unwrap();
    assert_eq!(q.get_with_state(elsewhere).unwrap(), None);
    assert_eq!(
        ids_and_states(&q),
        [
            (held_id, MessageState::Locked),
            (soon, MessageState::Scheduled),
            (deferred_id, MessageState::Locked),
            (spent_id, MessageState::Locked),
            (expiring, MessageState::Active),
        ]
    );

    t.clock.advance(Duration::from_secs(30));
    // Locks expired, the scheduled time came, a time to live ran out; nothing has written
    // since. The expired locks and the due message count as back in the queue, as stats
    // counts them; the spent ones are still listed, with the state they have until then.
    assert_eq!(
        ids_and_states(&q),
        [
            (held_id, MessageState::Active),
            (soon, MessageState::Active),
            (deferred_id, MessageState::Deferred),
            (spent_id, MessageState::Locked),
            (expiring, MessageState::Active),
        ]
    );
    // Stats applies the due work: the spent ones move to the dead-letter queue.
    let s = q.stats().unwrap();
    assert_eq!(
        (s.active, s.locked, s.scheduled, s.deferred, s.dead_lettered),
        (2, 0, 0, 1, 2)
    );
    assert_eq!(
        ids_and_states(&q),
        [
            (held_id, MessageState::Active),
            (soon, MessageState::Active),
            (deferred_id, MessageState::Deferred),
        ]
    );
    assert_eq!(
        ids_and_states(&q.dead_letters().unwrap()),
        [
            (spent_id, MessageState::Active),
            (expiring, MessageState::Active)
        ]
    );
    drop((held, d, s2));
}

#[test]
fn each_step_sees_the_changes_made_meanwhile() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let ids: Vec<_> = (0..4)
        .map(|i| q.send(format!("m{i}").as_str()).unwrap())
        .collect();
    let mut it = q.browse_all();
    let (first, _) = it.next().unwrap().unwrap();
    assert_eq!(first.id(), ids[0]);
    // Message 1 is completed before the iteration reaches it; a new one is sent.
    let m = q.receive_by_id(ids[1], Duration::ZERO).unwrap().unwrap();
    m.complete().unwrap();
    let late = q.send("late").unwrap();
    let rest: Vec<_> = it.map(|r| r.unwrap().0.id()).collect();
    assert_eq!(rest, [ids[2], ids[3], late]);
}

#[test]
fn a_deleted_queue_or_a_closed_store_ends_the_iteration_with_an_error() {
    let t = TestStore::new();
    let store = t.store().clone();
    let q = store.queue("q").unwrap();
    q.send("a").unwrap();
    q.send("b").unwrap();
    let mut it = q.browse_all();
    assert!(it.next().unwrap().is_ok());
    store.delete_queue("q").unwrap();
    assert_eq!(
        it.next().unwrap().unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
    assert!(it.next().is_none());

    let q = store.queue("again").unwrap();
    q.send("x").unwrap();
    store.clone().close().unwrap();
    let mut it = q.browse_all();
    assert_eq!(it.next().unwrap().unwrap_err().kind(), ErrorKind::Closed);
    assert!(it.next().is_none());
}

#[test]
fn a_large_queue_is_listed_whole_across_reopens() {
    let mut t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let noise = t.store().queue("noise").unwrap();
    let mut ids = Vec::new();
    for round in 0..60u32 {
        let batch = (0..5).map(|k| {
            let i = round * 5 + k;
            Message::new(i.to_le_bytes().to_vec()).priority((i % 8) as u8)
        });
        ids.extend(q.send_batch(batch).unwrap());
        noise.send_batch(["n", "n"]).unwrap();
    }
    drop((q, noise));
    t.reopen();
    let q = t.store().queue("q").unwrap();
    let listed = all(&q);
    assert_eq!(listed.iter().map(|(e, _)| e.id()).collect::<Vec<_>>(), ids);
    for (i, (e, s)) in listed.iter().enumerate() {
        assert_eq!(e.body(), (i as u32).to_le_bytes());
        assert_eq!(*s, MessageState::Active);
    }
}
