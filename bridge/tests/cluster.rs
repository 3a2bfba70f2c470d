//! The bridge against a 3-node RabbitMQ cluster on loopback, with a replicated quorum queue:
//! the node the links are connected to is killed mid-stream, later another member is; the
//! links fail over to the brokers that are left. Nothing acknowledged on either side is
//! lost; copies appear only with a repeated `message-id`; every group keeps its order.

// The broker harness runs RabbitMQ's Unix scripts in process groups: Unix only.
#![cfg(unix)]

mod common;

use std::time::Duration;

use common::{arrived, cluster, wait_until};
use postbox::{Message, Store};
use postbox_bridge::{Bridge, BridgeConfig, LinkConfig, RetryConfig};
use postbox_testkit::env_u64;

const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn the_connected_node_and_a_member_killed_mid_stream_lose_nothing() {
    let Some(cluster) = cluster() else { return };
    let uris = cluster.uris();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let out = store.queue("out").unwrap();
    let inq = store.queue("in").unwrap();
    let config = BridgeConfig::new(&uris[0])
        .broker(&uris[1])
        .broker(&uris[2])
        .retry(RetryConfig {
            initial_ms: 50,
            max_ms: 1000,
            poison_after: 3,
            confirm_timeout_ms: 3_000,
        })
        .link(LinkConfig::outgoing("out", "replicated").in_flight(200))
        .link(LinkConfig::incoming("replicated", "in").prefetch(100));
    let bridge = Bridge::start(&store, config).unwrap();
    let n = env_u64("POSTBOX_BRIDGE_MESSAGES", 2000).max(300);
    let mut sent = Vec::new();
    let mut next = 0u64;
    let mut send = |upto: u64, sent: &mut Vec<String>| {
        while next < upto {
            out.send(
                Message::new(format!("m{next}"))
                    .message_key(format!("k{next}"))
                    .group(format!("g{}", next % 16))
                    .sequence(next),
            )
            .unwrap();
            sent.push(format!("k{next}"));
            next += 1;
        }
    };
    let arrived_at_least = |k: u64| {
        let q = inq.clone();
        move || arrived(&q).copies.len() as u64 >= k
    };
    let status = || bridge.stats().status_line();

    send(n / 3, &mut sent);
    wait_until(LIMIT, arrived_at_least(n / 6), status);
    println!(
        "members before the kill: {:?}",
        cluster.node(1).run_cli(
            "rabbitmq-queues",
            &["quorum_status", "replicated", "--formatter", "json"]
        )
    );
    // The node both links are connected to (the first broker listed).
    cluster.kill(0);
    send(2 * n / 3, &mut sent);
    let status_now = || {
        format!(
            "{} / {:?}",
            bridge.stats().status_line(),
            cluster.node(1).run_cli(
                "rabbitmq-queues",
                &["quorum_status", "replicated", "--formatter", "json"]
            )
        )
    };
    wait_until(LIMIT, arrived_at_least(n / 2), status_now);
    cluster.restart(0).unwrap();
    cluster.wait_for_members(3).unwrap();
    // Another member, while the links are on one of the other two.
    cluster.kill(2);
    send(n, &mut sent);
    wait_until(LIMIT, arrived_at_least(n), status);
    cluster.restart(2).unwrap();
    let stats = bridge.stop();
    assert!(
        stats.links.iter().all(|l| l.reconnects >= 1),
        "both links failed over: {stats:?}"
    );
    let dups = arrived(&inq).check(&sent);
    assert_eq!(out.len().unwrap(), 0);
    assert_eq!(out.dead_letters().unwrap().len().unwrap(), 0);
    println!(
        "cluster: {n} messages, {dups} duplicates, {} republished, reconnects {} / {}",
        stats.links[0].republished, stats.links[0].reconnects, stats.links[1].reconnects
    );
}
