//! The bridge against a real RabbitMQ node: both directions, properties, order, broker kills,
//! negative confirms, unroutable and refused messages, stopping. Each test starts a private
//! node (own name, ports and data directory on 127.0.0.1) and skips, saying why, only where
//! `rabbitmq-server` is not installed. `POSTBOX_BRIDGE_MESSAGES` scales the streams.

// The broker harness runs RabbitMQ's Unix scripts in process groups: Unix only.
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use common::{arrived, node, wait_until};
use lapin::options::{BasicGetOptions, BasicNackOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use postbox::{Message, PropertyValue, QueueOptions, Store};
use postbox_bridge::{Bridge, BridgeConfig, LinkConfig, RetryConfig};
use postbox_testkit::env_u64;

const LIMIT: Duration = Duration::from_secs(120);

fn messages() -> u64 {
    env_u64("POSTBOX_BRIDGE_MESSAGES", 2000)
}

fn fast_retry() -> RetryConfig {
    RetryConfig {
        initial_ms: 50,
        max_ms: 1000,
        poison_after: 3,
        confirm_timeout_ms: 3_000,
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn channel(uri: &str) -> (Connection, lapin::Channel) {
    let c = Connection::connect(uri, ConnectionProperties::default())
        .await
        .unwrap();
    let ch = c.create_channel().await.unwrap();
    (c, ch)
}

fn quorum_args(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    for (k, v) in extra {
        t.insert((*k).into(), v.clone());
    }
    t
}

#[test]
fn both_directions_carry_bodies_properties_ids_and_order() {
    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let out = store.queue("out").unwrap();
    let n = messages();
    let mut sent = Vec::new();
    for i in 0..n {
        let mut m = Message::new(format!("body {i}"))
            .group(format!("g{}", i % 10))
            .sequence(i)
            .label("order")
            .content_type("text/plain")
            .correlation_id(format!("c{i}"))
            .reply_to("replies")
            .priority(5)
            .ttl(Duration::from_secs(3600))
            .property("tenant", "acme")
            .property("raw", vec![0u8, 255]);
        if i % 2 == 0 {
            m = m.message_key(format!("k{i}"));
        }
        let id = out.send(m).unwrap();
        sent.push(if i % 2 == 0 {
            format!("k{i}")
        } else {
            format!("postbox-out-{}", id.get())
        });
    }
    let bridge = Bridge::start(
        &store,
        BridgeConfig::new(&node.amqp_uri())
            .retry(fast_retry())
            .link(LinkConfig::outgoing("out", "orders"))
            .link(LinkConfig::incoming("orders", "in")),
    )
    .unwrap();
    let inq = store.queue("in").unwrap();
    wait_until(
        LIMIT,
        || inq.len().unwrap() >= n,
        || bridge.stats().status_line(),
    );
    let stats = bridge.stop();
    assert_eq!(out.len().unwrap(), 0, "the outgoing queue drained");
    let a = arrived(&inq);
    assert_eq!(a.check(&sent), 0, "no duplicates without failures");
    let m = inq.browse().next().unwrap().unwrap();
    assert_eq!(m.label(), Some("order"));
    assert_eq!(m.content_type(), Some("text/plain"));
    assert_eq!(m.correlation_id(), Some("c0"));
    assert_eq!(m.reply_to(), Some("replies"));
    assert_eq!(m.property("tenant"), Some(&PropertyValue::from("acme")));
    assert_eq!(m.property("raw"), Some(&PropertyValue::Bytes(vec![0, 255])));
    assert!(m.expires_at().unwrap() > SystemTime::now() + Duration::from_secs(3000));
    assert_eq!(m.delivery_count(), 0);
    assert_eq!(stats.forwarded(), 2 * n);
    let text = stats.prometheus();
    assert!(text.contains(&format!(
        "postbox_bridge_forwarded_total{{direction=\"outgoing\",local=\"out\",remote=\"orders\"}} {n}"
    )));
}

/// A broker killed with SIGKILL and restarted in the middle of both streams: every message
/// sent locally arrives on the other side; copies only with a repeated key; per group in order.
#[test]
fn a_killed_broker_loses_and_reorders_nothing() {
    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let out = store.queue("out").unwrap();
    let bridge = Bridge::start(
        &store,
        BridgeConfig::new(&node.amqp_uri())
            .retry(fast_retry())
            .link(LinkConfig::outgoing("out", "stream").in_flight(200))
            .link(LinkConfig::incoming("stream", "in").prefetch(100)),
    )
    .unwrap();
    let inq = store.queue("in").unwrap();
    let n = messages();
    let mut sent = Vec::new();
    let send = |i: u64, sent: &mut Vec<String>| {
        out.send(
            Message::new(format!("m{i}"))
                .message_key(format!("k{i}"))
                .group(format!("g{}", i % 20))
                .sequence(i),
        )
        .unwrap();
        sent.push(format!("k{i}"));
    };
    for i in 0..n / 2 {
        send(i, &mut sent);
    }
    wait_until(
        LIMIT,
        || bridge.stats().links[1].forwarded >= n / 8,
        || bridge.stats().status_line(),
    );
    node.kill();
    for i in n / 2..n {
        send(i, &mut sent);
    }
    node.restart().unwrap();
    wait_until(
        LIMIT,
        || {
            let a = arrived(&inq);
            a.copies.len() as u64 >= n
        },
        || bridge.stats().status_line(),
    );
    let stats = bridge.stop();
    assert!(
        stats.links.iter().all(|l| l.reconnects >= 1),
        "both links reconnected: {stats:?}"
    );
    let dups = arrived(&inq).check(&sent);
    assert_eq!(out.len().unwrap(), 0);
    assert_eq!(out.dead_letters().unwrap().len().unwrap(), 0);
    println!(
        "{n} messages, {dups} duplicates, {} republished",
        stats.links[0].republished
    );
}

/// A quorum queue that refuses publishes while full (`reject-publish`): the negative
/// confirms are retried with backoff until the consumer makes room, and no group is
/// reordered.
#[test]
fn negative_confirms_are_retried_without_reordering_a_group() {
    let Some(node) = node() else { return };
    let uri = node.amqp_uri();
    rt().block_on(async {
        let (_c, ch) = channel(&uri).await;
        ch.queue_declare(
            "small".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            quorum_args(&[
                ("x-max-length", AMQPValue::LongLongInt(5)),
                ("x-overflow", AMQPValue::LongString("reject-publish".into())),
            ]),
        )
        .await
        .unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let out = store.queue("out").unwrap();
    let mut sent = Vec::new();
    for i in 0..300u64 {
        out.send(
            Message::new(format!("m{i}"))
                .message_key(format!("k{i}"))
                .group(format!("g{}", i % 4))
                .sequence(i),
        )
        .unwrap();
        sent.push(format!("k{i}"));
    }
    // Outgoing first, alone, so that the queue fills and publishes are refused.
    let pusher = Bridge::start(
        &store,
        BridgeConfig::new(&uri)
            .retry(fast_retry())
            .link(LinkConfig::outgoing("out", "small").declare(false)),
    )
    .unwrap();
    wait_until(
        LIMIT,
        || pusher.stats().links[0].nacked > 0,
        || pusher.stats().status_line(),
    );
    let drain = Bridge::start(
        &store,
        BridgeConfig::new(&uri).retry(fast_retry()).link(
            LinkConfig::incoming("small", "in")
                .declare(false)
                .prefetch(2),
        ),
    )
    .unwrap();
    let inq = store.queue("in").unwrap();
    wait_until(
        LIMIT,
        || inq.len().unwrap() >= 300,
        || {
            format!(
                "{} / {}",
                pusher.stats().status_line(),
                drain.stats().status_line()
            )
        },
    );
    let pushed = pusher.stop();
    drain.stop();
    assert!(pushed.links[0].nacked > 0);
    assert_eq!(arrived(&inq).check(&sent), 0);
    assert_eq!(out.len().unwrap(), 0);
}

/// Unroutable messages come back from the broker and go to the local dead-letter queue with
/// its reason; a message over the broker's size limit closes the channel each time it is
/// sent and is dead-lettered after `poison_after` tries, while the rest flows on.
#[test]
fn messages_the_broker_will_never_take_are_dead_lettered_locally() {
    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let out = store.queue("out").unwrap();
    for i in 0..5 {
        out.send(Message::new(format!("nobody wants {i}"))).unwrap();
    }
    let bridge = Bridge::start(
        &store,
        BridgeConfig::new(&node.amqp_uri())
            .retry(fast_retry())
            .link(LinkConfig::outgoing_to_exchange(
                "out",
                "amq.direct",
                "unbound",
            )),
    )
    .unwrap();
    let dlq = out.dead_letters().unwrap();
    wait_until(
        LIMIT,
        || dlq.len().unwrap() == 5,
        || bridge.stats().status_line(),
    );
    let stats = bridge.stop();
    assert_eq!(stats.links[0].dead_lettered, 5);
    let m = dlq.browse().next().unwrap().unwrap();
    let info = m.dead_letter_info().unwrap();
    assert_eq!(info.reason, "BrokerRefused");
    assert!(info.description.contains("312 NO_ROUTE"), "{info:?}");
    assert_eq!(out.len().unwrap(), 0);
}

#[test]
fn a_message_over_the_broker_size_limit_is_poison_and_the_rest_flows() {
    // The broker refuses messages over 1 MiB.
    let limit = 1u64 << 20;
    let Some(node) = common::node_with(&[&format!("max_message_size = {limit}")]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let out = store
        .queue_with("out", QueueOptions::default().max_message_size(8 << 20))
        .unwrap();
    let mut sent = Vec::new();
    for i in 0..20u64 {
        let body = if i == 7 {
            vec![b'x'; limit as usize + 1024]
        } else {
            format!("small {i}").into_bytes()
        };
        out.send(Message::new(body).message_key(format!("k{i}")))
            .unwrap();
        if i != 7 {
            sent.push(format!("k{i}"));
        }
    }
    let bridge = Bridge::start(
        &store,
        BridgeConfig::new(&node.amqp_uri())
            .retry(fast_retry())
            .link(LinkConfig::outgoing("out", "sized"))
            .link(LinkConfig::incoming("sized", "in")),
    )
    .unwrap();
    let inq = store.queue("in").unwrap();
    let dlq = out.dead_letters().unwrap();
    wait_until(
        LIMIT,
        || dlq.len().unwrap() == 1 && arrived(&inq).copies.len() >= 19,
        || bridge.stats().status_line(),
    );
    let stats = bridge.stop();
    let m = dlq.browse().next().unwrap().unwrap();
    assert_eq!(m.message_key(), Some("k7"));
    let info = m.dead_letter_info().unwrap();
    assert_eq!(info.reason, "BrokerRefused");
    assert!(info.description.contains("PRECONDITION_FAILED"), "{info:?}");
    assert_eq!(stats.links[0].dead_lettered, 1);
    let a = arrived(&inq);
    a.check(&sent);
}

/// Incoming: `x-delivery-count` becomes the local delivery count; a delivery the local queue
/// refuses for good is rejected, and the broker's dead-letter policy takes it.
#[test]
fn incoming_maps_delivery_counts_and_rejects_to_the_broker_policy() {
    let Some(node) = node() else { return };
    let uri = node.amqp_uri();
    rt().block_on(async {
        let (_c, ch) = channel(&uri).await;
        ch.queue_declare(
            "parked".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            quorum_args(&[]),
        )
        .await
        .unwrap();
        ch.queue_bind(
            "parked".into(),
            "amq.fanout".into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.queue_declare(
            "work".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            quorum_args(&[(
                "x-dead-letter-exchange",
                AMQPValue::LongString("amq.fanout".into()),
            )]),
        )
        .await
        .unwrap();
        ch.confirm_select(Default::default()).await.unwrap();
        for body in [b"once refused".to_vec(), vec![b'x'; 4096], b"fine".to_vec()] {
            ch.basic_publish(
                "".into(),
                "work".into(),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        }
        // One delivery given back, so the broker counts it.
        let got = ch
            .basic_get("work".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.delivery.data, b"once refused");
        got.delivery
            .nack(BasicNackOptions {
                requeue: true,
                ..Default::default()
            })
            .await
            .unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let inq = store
        .queue_with("in", QueueOptions::default().max_message_size(1024))
        .unwrap();
    let bridge = Bridge::start(
        &store,
        BridgeConfig::new(&uri)
            .retry(fast_retry())
            .link(LinkConfig::incoming("work", "in").declare(false))
            .link(LinkConfig::incoming("parked", "parked-in").declare(false)),
    )
    .unwrap();
    let parked = store.queue("parked-in").unwrap();
    wait_until(
        LIMIT,
        || inq.len().unwrap() == 2 && parked.len().unwrap() == 1,
        || bridge.stats().status_line(),
    );
    let stats = bridge.stop();
    assert_eq!(stats.links[0].rejected, 1);
    let by_body: BTreeMap<Vec<u8>, u32> = inq
        .browse()
        .map(|m| {
            let m = m.unwrap();
            (m.body().to_vec(), m.delivery_count())
        })
        .collect();
    assert_eq!(by_body.get(&b"once refused"[..]), Some(&1));
    assert_eq!(by_body.get(&b"fine"[..]), Some(&0));
    let p = parked.browse().next().unwrap().unwrap();
    assert_eq!(
        p.body().len(),
        4096,
        "the refused delivery went to the broker's DLX"
    );
}

/// Stopping while the broker is unreachable gives every held message back with its delivery
/// uncounted; a later bridge forwards them.
#[test]
fn stopping_gives_held_messages_back_uncounted() {
    let Some(node) = node() else { return };
    let uri = node.amqp_uri();
    node.stop().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let out = store.queue("out").unwrap();
    for i in 0..50 {
        out.send(Message::new(format!("m{i}")).message_key(format!("k{i}")))
            .unwrap();
    }
    for _ in 0..3 {
        let bridge = Bridge::start(
            &store,
            BridgeConfig::new(&uri)
                .retry(fast_retry())
                .link(LinkConfig::outgoing("out", "later")),
        )
        .unwrap();
        wait_until(
            LIMIT,
            || {
                bridge.stats().links[0].in_flight == 50
                    || bridge.stats().links[0].last_error.is_some()
            },
            || bridge.stats().status_line(),
        );
        let stats = bridge.stop();
        assert!(!stats.links[0].connected);
        assert_eq!(stats.links[0].forwarded, 0);
    }
    assert_eq!(out.len().unwrap(), 50);
    for m in out.browse() {
        assert_eq!(
            m.unwrap().delivery_count(),
            0,
            "stopping counted no delivery"
        );
    }
    node.restart().unwrap();
    let bridge = Bridge::start(
        &store,
        BridgeConfig::new(&uri)
            .retry(fast_retry())
            .link(LinkConfig::outgoing("out", "later"))
            .link(LinkConfig::incoming("later", "in")),
    )
    .unwrap();
    let inq = store.queue("in").unwrap();
    wait_until(
        LIMIT,
        || inq.len().unwrap() == 50,
        || bridge.stats().status_line(),
    );
    bridge.stop();
    let sent: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    arrived(&inq).check(&sent);
}
