//! `postbox bridge --config FILE` as a process of its own against a private RabbitMQ node:
//! killed with SIGKILL mid-stream and started again, it loses nothing and reorders no group;
//! its counters are on the dashboard's `/metrics`; Ctrl-C stops it cleanly. Skips, saying
//! why, only where `rabbitmq-server` is not installed.

// The broker harness runs RabbitMQ's Unix scripts in process groups: Unix only.
#![cfg(unix)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use postbox::{Message, Queue, Store};
use postbox_testkit::broker;

const BIN: &str = env!("CARGO_BIN_EXE_postbox");

/// Starts `postbox bridge`, returning it and its dashboard's address (from its first lines).
fn start(config: &Path) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["bridge", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("postbox bridge starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout"));
    let mut url = None;
    let mut line = String::new();
    while url.is_none() {
        line.clear();
        assert!(
            lines.read_line(&mut line).expect("read") > 0,
            "no dashboard line"
        );
        if let Some(rest) = line.trim().strip_prefix("metrics:") {
            url = Some(rest.trim().trim_start_matches("http://").to_owned());
        }
    }
    // Keep reading its output so that it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = lines.read_to_string(&mut sink);
    });
    (child, url.expect("url"))
}

fn get(addr_path: &str) -> String {
    let (addr, path) = addr_path.split_once('/').expect("host/path");
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(s, "GET /{path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    out
}

fn keys(q: &Queue) -> (BTreeMap<String, u32>, HashMap<String, Vec<u64>>) {
    let mut copies = BTreeMap::new();
    let mut groups: HashMap<String, Vec<u64>> = HashMap::new();
    for m in q.browse() {
        let m = m.expect("browse");
        *copies
            .entry(m.message_key().expect("key").to_owned())
            .or_insert(0) += 1;
        groups
            .entry(m.group().expect("group").to_owned())
            .or_default()
            .push(m.sequence().expect("sequence"));
    }
    (copies, groups)
}

fn wait_for(limit: Duration, mut done: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_killed_bridge_process_starts_again_and_loses_nothing() {
    if let Err(why) = broker::available() {
        println!("SKIPPED: rabbitmq-server is not installed: {why}");
        return;
    }
    let node = broker::Node::start().expect("a RabbitMQ node starts");
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::builder()
        .multi_process(true)
        .open(dir.path().join("s.postbox"))
        .expect("store");
    let out = store.queue("out").expect("out");
    let inq = store.queue("in").expect("in");
    let n = 3000u64;
    out.send_batch((0..n).map(|i| {
        Message::new(format!("m{i}"))
            .message_key(format!("k{i}"))
            .group(format!("g{}", i % 8))
            .sequence(i)
    }))
    .expect("send");
    let config = dir.path().join("bridge.toml");
    std::fs::write(
        &config,
        format!(
            r#"
store = "s.postbox"
bind = "127.0.0.1:0"
broker = "{}"

[retry]
initial_ms = 50
max_ms = 1000

[[link]]
direction = "outgoing"
local = "out"
queue = "cli-q"
in_flight = 100

[[link]]
direction = "incoming"
queue = "cli-q"
local = "in"
prefetch = 50
"#,
            node.amqp_uri()
        ),
    )
    .expect("config");

    let (mut first, _) = start(&config);
    wait_for(
        Duration::from_secs(120),
        || inq.len().expect("len") >= n / 4,
        "a quarter to arrive",
    );
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");

    let (mut second, metrics) = start(&config);
    wait_for(
        Duration::from_secs(120),
        || keys(&inq).0.len() as u64 >= n,
        "every message to arrive",
    );
    let text = get(&metrics);
    assert!(
        text.contains(
            "postbox_bridge_forwarded_total{direction=\"incoming\",local=\"in\",remote=\"cli-q\"}"
        ),
        "{text}"
    );
    assert!(text.contains("postbox_bridge_connected{direction=\"outgoing\""));
    assert!(
        text.contains("postbox_queue_messages"),
        "the store's own metrics too"
    );

    let pid = second.id().to_string();
    let stopped = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(stopped.success());
    let status = second.wait().expect("exit");
    assert!(
        status.success(),
        "Ctrl-C stops the bridge cleanly: {status:?}"
    );

    let (copies, groups) = keys(&inq);
    assert_eq!(copies.len() as u64, n, "every key arrived, no other");
    assert!(copies.values().all(|c| *c >= 1));
    for (g, seqs) in groups {
        let mut seen = HashSet::new();
        let firsts: Vec<u64> = seqs.into_iter().filter(|s| seen.insert(*s)).collect();
        assert!(
            firsts.windows(2).all(|w| w[0] < w[1]),
            "group {g} reordered"
        );
    }
    assert_eq!(out.len().expect("len"), 0);
    let dups: u32 = copies.values().map(|c| c - 1).sum();
    println!("bridge process killed once: {n} messages, {dups} duplicates");
}
