//! Topics and subscriptions: fan-out in one commit, filters, transactions, and changes to the
//! subscriptions while publishers run.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::TestStore;
use postbox::{ErrorKind, Filter, Message, QueueOptions, Store};

fn bodies(q: &postbox::Queue) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = q.try_receive().unwrap() {
        out.push(String::from_utf8(m.body().to_vec()).unwrap());
        m.complete().unwrap();
    }
    out
}

#[test]
fn each_subscription_gets_exactly_its_matching_messages() {
    let t = TestStore::new();
    let orders = t.store().topic("orders").unwrap();
    let all = orders.subscribe("all", Filter::All).unwrap();
    let by_label = orders
        .subscribe("refunds", Filter::correlation().label("refund"))
        .unwrap();
    let eu_vip = orders
        .subscribe(
            "eu-vip",
            Filter::correlation()
                .property("region", "eu")
                .property("tier", "vip"),
        )
        .unwrap();
    assert_eq!(
        orders.subscriptions().unwrap(),
        ["all", "eu-vip", "refunds"]
    );

    let sent = [
        (Message::new("1").label("order").property("region", "eu"), 1),
        (
            Message::new("2").label("refund").property("region", "us"),
            2,
        ),
        (
            Message::new("3")
                .label("order")
                .property("region", "eu")
                .property("tier", "vip"),
            2,
        ),
        (
            Message::new("4")
                .label("refund")
                .property("region", "eu")
                .property("tier", "vip"),
            3,
        ),
    ];
    for (m, reached) in sent {
        assert_eq!(orders.publish(m).unwrap(), reached);
    }
    assert_eq!(bodies(&all), ["1", "2", "3", "4"]);
    assert_eq!(bodies(&by_label), ["2", "4"]);
    assert_eq!(bodies(&eu_vip), ["3", "4"]);

    // A message no subscription takes is delivered nowhere and counted.
    orders.unsubscribe("all").unwrap();
    assert_eq!(orders.publish(Message::new("5").label("order")).unwrap(), 0);
    let s = orders.stats().unwrap();
    assert_eq!((s.published, s.unmatched, s.subscriptions), (5, 1, 2));
    assert_eq!(
        all.try_receive().unwrap_err().kind(),
        ErrorKind::QueueNotFound,
        "an unsubscribed queue is gone"
    );
}

#[test]
fn a_publish_in_a_transaction_reaches_subscribers_only_on_commit() {
    let t = TestStore::new();
    let topic = t.store().topic("events").unwrap();
    let subs: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| topic.subscribe(n, Filter::All).unwrap())
        .collect();
    let jobs = t.store().queue("jobs").unwrap();
    jobs.send("job").unwrap();

    let mut tx = t.store().begin();
    tx.receive(&jobs, Duration::ZERO).unwrap().unwrap();
    tx.publish(&topic, "done").unwrap();
    assert_eq!(tx.len(), (1, 1));
    tx.abort().unwrap();
    assert!(subs.iter().all(|s| s.len().unwrap() == 0));
    assert_eq!(topic.stats().unwrap().published, 0);
    assert_eq!(jobs.len().unwrap(), 1);

    let mut tx = t.store().begin();
    tx.receive(&jobs, Duration::ZERO).unwrap().unwrap();
    tx.publish(&topic, "done").unwrap();
    tx.commit().unwrap();
    assert!(subs.iter().all(|s| s.len().unwrap() == 1));
    assert_eq!(jobs.len().unwrap(), 0);
}

#[test]
fn a_full_subscription_refuses_the_whole_publish() {
    let t = TestStore::new();
    let topic = t.store().topic("t").unwrap();
    let roomy = topic.subscribe("roomy", Filter::All).unwrap();
    let tight = topic
        .subscribe_with(
            "tight",
            Filter::All,
            QueueOptions::default().max_messages(1),
        )
        .unwrap();
    topic.publish("1").unwrap();
    let e = topic.publish("2").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::QueueFull);
    assert_eq!((roomy.len().unwrap(), tight.len().unwrap()), (1, 1));
    assert_eq!(topic.stats().unwrap().published, 1);
    // Each subscription has its own options and dead-letter queue.
    assert_eq!(tight.options().unwrap().max_messages, Some(1));
    assert!(tight.dead_letters().unwrap().is_dead_letter_queue());
}

#[test]
fn an_ungrouped_message_skips_a_session_subscription_and_reaches_the_others() {
    // A session subscription used to make every publish without a group fail, for every
    // subscription: it now takes grouped messages only.
    let t = TestStore::new();
    let store = t.store();
    let topic = store.topic("orders").unwrap();
    let plain = topic.subscribe("audit", Filter::All).unwrap();
    let sessions = topic
        .subscribe_with(
            "by-customer",
            Filter::All,
            QueueOptions::default().requires_session(true),
        )
        .unwrap();
    // Forwarding to a session queue counts as requiring sessions too.
    let ordered = store
        .queue_with("ordered", QueueOptions::default().requires_session(true))
        .unwrap();
    let forwarding = topic
        .subscribe_with(
            "forwarded",
            Filter::All,
            QueueOptions::default().forward_to("ordered"),
        )
        .unwrap();
    assert_eq!(topic.publish("no group").unwrap(), 1);
    assert_eq!(
        topic.publish(Message::new("grouped").group("c-1")).unwrap(),
        3
    );
    assert_eq!(bodies(&plain), ["no group", "grouped"]);
    assert_eq!(sessions.len().unwrap(), 1);
    assert_eq!((forwarding.len().unwrap(), ordered.len().unwrap()), (0, 1));
    let s = sessions.accept_session(Duration::ZERO).unwrap().unwrap();
    assert_eq!(s.group(), "c-1");
    // With no other subscription, an ungrouped message is unmatched, not refused.
    let only = store.topic("only-sessions").unwrap();
    only.subscribe_with(
        "s",
        Filter::All,
        QueueOptions::default().requires_session(true),
    )
    .unwrap();
    assert_eq!(only.publish_batch(["a", "b"]).unwrap(), [0, 0]);
    assert_eq!(only.stats().unwrap().unmatched, 2);
    // In a transaction, the fan-out at commit follows the same rule.
    let mut tx = store.begin();
    tx.publish(&topic, "in tx").unwrap();
    tx.commit().unwrap();
    assert_eq!(bodies(&plain), ["in tx"]);
    assert_eq!(sessions.stats().unwrap().active, 1);
}

#[test]
fn topics_subscriptions_and_filters_survive_a_restart_and_names_do_not_clash() {
    let mut t = TestStore::new();
    {
        let topic = t.store().topic("news").unwrap();
        topic
            .subscribe("sports", Filter::correlation().label("sports"))
            .unwrap();
        assert_eq!(
            t.store().queue("news").unwrap_err().kind(),
            ErrorKind::InvalidArgument,
            "a topic is not a queue"
        );
        t.store().queue("plain").unwrap();
        assert_eq!(
            t.store().topic("plain").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            t.store().queue("x/$subscriptions/y").unwrap_err().kind(),
            ErrorKind::InvalidArgument,
            "the subscription infix is reserved"
        );
    }
    t.reopen();
    let topic = t.store().open_topic("news").unwrap();
    assert_eq!(t.store().topics().unwrap(), ["news"]);
    assert_eq!(
        topic.publish(Message::new("goal").label("sports")).unwrap(),
        1
    );
    assert_eq!(
        topic
            .publish(Message::new("rain").label("weather"))
            .unwrap(),
        0
    );
    let sports = topic.subscription("sports").unwrap();
    assert_eq!(bodies(&sports), ["goal"]);
    assert_eq!(
        topic.subscription("none").unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
    // Deleting the topic deletes its subscriptions.
    assert!(t.store().delete_queue("news").unwrap());
    assert!(t.store().topics().unwrap().is_empty());
    assert_eq!(t.store().queues().unwrap(), ["plain"]);
    assert_eq!(
        topic.publish("late").unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
    assert_eq!(
        t.store().open_topic("news").unwrap_err().kind(),
        ErrorKind::QueueNotFound
    );
}

#[test]
fn subscriptions_come_and_go_while_publishers_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let topic = store.topic("feed").unwrap();
    let all = topic.subscribe("all", Filter::All).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let (topic, stop) = (topic.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) || n < 50 {
                topic.publish(n.to_string()).unwrap();
                n += 1;
            }
            n
        })
    };
    // Wait (on data, not time) until publishing is under way, then subscribe and unsubscribe.
    while all.len().unwrap() < 10 {
        std::thread::yield_now();
    }
    let late = topic.subscribe("late", Filter::All).unwrap();
    let brief = topic.subscribe("brief", Filter::All).unwrap();
    while late.len().unwrap() < 10 {
        std::thread::yield_now();
    }
    assert!(topic.unsubscribe("brief").unwrap());
    stop.store(true, Ordering::Release);
    let published = publisher.join().unwrap();

    let everything = bodies(&all);
    assert_eq!(
        everything.len() as u64,
        published,
        "the first subscription got every message"
    );
    assert!(
        everything
            .iter()
            .enumerate()
            .all(|(i, b)| *b == i.to_string())
    );
    // The late subscription got an unbroken run that ends with the last message.
    let got = bodies(&late);
    let first: u64 = got[0].parse().unwrap();
    let expected: Vec<String> = (first..published).map(|n| n.to_string()).collect();
    assert_eq!(got, expected);
    assert_eq!(brief.len().unwrap_err().kind(), ErrorKind::QueueNotFound);
    assert_eq!(topic.stats().unwrap().published, published);
}

/// A subscription's queue is named `<topic>/$subscriptions/<name>`, and that whole name is
/// bounded like every queue name (255 bytes of UTF-8, no control characters): a longer one
/// could be neither opened, listed by the command line, nor deleted by name.
#[test]
fn subscription_names_keep_the_queue_name_within_255_bytes() {
    let t = TestStore::new();
    let store = t.store();
    let topic = store.topic("orders").unwrap();
    let room = 255 - "orders/$subscriptions/".len();
    let fits = "s".repeat(room);
    let q = topic.subscribe(&fits, Filter::All).unwrap();
    assert_eq!(q.name().len(), 255);
    for bad in [
        "s".repeat(room + 1),
        "é".repeat(room / 2 + 1),
        "x".repeat(1 << 20),
        "tab\there".to_string(),
    ] {
        let e = topic.subscribe(&bad, Filter::All).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        let text = e.to_string();
        assert!(text.contains(&format!("at most {room} bytes")), "{text}");
        assert!(text.len() < 600, "the message does not repeat a huge name");
    }
    // Nothing was created; what is listed opens, and deletes, by its name.
    assert_eq!(store.queues().unwrap(), vec![q.name().to_string()]);
    assert_eq!(topic.publish("m").unwrap(), 1);
    for info in store.queue_infos().unwrap() {
        assert_eq!(store.open_queue(&info.name).unwrap().len().unwrap(), 1);
    }
    assert!(store.delete_queue(q.name()).unwrap());
}

/// A store an older postbox wrote may hold a subscription whose queue name is over 255 bytes
/// (`fixtures/dangling-v5.postbox`: topic `news`, subscription of 300 `x`, one message). It is
/// listed, opens and counts by its name, and goes with `unsubscribe` or `delete_queue`.
#[test]
fn an_over_long_subscription_an_older_postbox_made_is_listed_and_deletable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.postbox");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dangling-v5.postbox"),
        &path,
    )
    .unwrap();
    let store = postbox::Store::open(&path).unwrap();
    let long = format!("news/$subscriptions/{}", "x".repeat(300));
    assert!(store.queues().unwrap().contains(&long));
    assert!(store.queue_infos().unwrap().iter().any(|i| i.name == long));
    let q = store.open_queue(&long).unwrap();
    assert_eq!(q.stats().unwrap().active, 1);
    assert_eq!(store.queue(&long).unwrap().len().unwrap(), 1);
    // Publishing still reaches it; new names that long are refused.
    let news = store.topic("news").unwrap();
    assert_eq!(news.publish("again").unwrap(), 1);
    assert_eq!(
        news.subscribe(&"y".repeat(300), Filter::All)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert!(store.delete_queue(&long).unwrap());
    assert!(!store.queues().unwrap().contains(&long));
    // A name that long that nothing has is still refused as a name.
    assert_eq!(
        store.open_queue(&long).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}
