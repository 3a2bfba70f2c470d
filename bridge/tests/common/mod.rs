//! What the bridge's tests share: a broker, or a clear reason to skip; and the checker that
//! compares what was sent on one side with what arrived on the other.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use postbox::Queue;
use postbox_testkit::broker;

/// A private RabbitMQ node, or `None` (with the reason printed) where none can run.
pub fn node() -> Option<broker::Node> {
    if let Err(why) = broker::available() {
        println!("SKIPPED: rabbitmq-server is not installed: {why}");
        return None;
    }
    Some(broker::Node::start().expect("a RabbitMQ node starts"))
}

/// A private node with lines added to its `rabbitmq.conf`, or `None` as for [`node`].
pub fn node_with(config: &[&str]) -> Option<broker::Node> {
    if let Err(why) = broker::available() {
        println!("SKIPPED: rabbitmq-server is not installed: {why}");
        return None;
    }
    let options = broker::NodeOptions {
        extra_config: config.iter().map(|s| (*s).to_owned()).collect(),
        ..broker::NodeOptions::default()
    };
    Some(broker::Node::start_with(options).expect("a RabbitMQ node starts"))
}

/// A private 3-node cluster, or `None` as for [`node`].
pub fn cluster() -> Option<broker::Cluster> {
    if let Err(why) = broker::available() {
        println!("SKIPPED: rabbitmq-server is not installed: {why}");
        return None;
    }
    Some(broker::Cluster::start(3).expect("a 3-node RabbitMQ cluster starts"))
}

/// Polls `done` every 20 ms until it holds; panics with `what()` after `limit`.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {}", what());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What arrived in a local queue, read back: per `message_key`, how many copies; and per
/// group, the keys in arrival order.
pub struct Arrived {
    pub copies: BTreeMap<String, u32>,
    pub by_group: HashMap<String, Vec<u64>>,
    pub total: u64,
}

/// Reads every message of `q` (browse, so nothing is consumed).
pub fn arrived(q: &Queue) -> Arrived {
    let mut a = Arrived {
        copies: BTreeMap::new(),
        by_group: HashMap::new(),
        total: 0,
    };
    for m in q.browse() {
        let m = m.expect("browse");
        a.total += 1;
        let key = m
            .message_key()
            .expect("every forwarded message has a key")
            .to_owned();
        *a.copies.entry(key).or_default() += 1;
        if let Some(g) = m.group() {
            a.by_group.entry(g.to_owned()).or_default().push(
                m.sequence()
                    .expect("grouped test messages carry a sequence"),
            );
        }
    }
    a
}

impl Arrived {
    /// Every key of `sent` arrived; nothing else did; per group, the first copy of each
    /// message comes after the first copy of the one before it (duplicates, with a repeated
    /// key, may come later). Returns the number of duplicates.
    pub fn check(&self, sent: &[String]) -> u64 {
        for k in sent {
            assert!(self.copies.contains_key(k), "lost: {k}");
        }
        assert_eq!(self.copies.len(), sent.len(), "unexpected keys arrived");
        for (g, seqs) in &self.by_group {
            let mut seen = std::collections::HashSet::new();
            let firsts: Vec<u64> = seqs.iter().copied().filter(|s| seen.insert(*s)).collect();
            assert!(
                firsts.windows(2).all(|w| w[0] < w[1]),
                "group {g} out of order: {firsts:?}"
            );
        }
        self.total - self.copies.len() as u64
    }
}
