//! The postbox command end to end, against real stores.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant, SystemTime};

use assert_cmd::Command;
use postbox::{Envelope, Message, PropertyValue, QueueOptions, Store};
use predicates::prelude::*;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_postbox");

fn pb() -> Command {
    Command::new(BIN)
}

/// A store file in a fresh directory (the directory goes with the returned guard).
fn store_path() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("s.postbox");
    (dir, path)
}

/// Opens the store as the command does, so the test and the command can share it.
fn open(path: &Path) -> Store {
    Store::builder()
        .multi_process(true)
        .open(path)
        .expect("open store")
}

fn json_out(cmd: &mut Command) -> Value {
    let out = cmd.assert().success().get_output().stdout.clone();
    serde_json::from_slice(&out).expect("stdout is one JSON document")
}

fn json_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

/// A `postbox hold` child: the store stays open until it is dropped.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Holder {
    fn start(path: &Path, single_process: bool) -> Holder {
        let mut cmd = std::process::Command::new(BIN);
        cmd.arg("hold").arg(path);
        if single_process {
            cmd.arg("--single-process");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn holder");
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("holder output");
        assert!(line.starts_with("holding"), "holder said {line:?}");
        Holder { child, stdin }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn demo_then_queues_stats_browse_peek_in_json_and_tables() {
    let (_d, path) = store_path();
    pb().arg("demo")
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains("postbox queues"));
    // A second demo on the same path refuses to touch it.
    pb().arg("demo").arg(&path).assert().code(1);

    let doc = json_out(pb().args(["--json", "queues"]).arg(&path));
    let queues = doc["queues"].as_array().expect("queues array");
    let names: Vec<&str> = queues.iter().filter_map(|q| q["name"].as_str()).collect();
    assert_eq!(names, ["audit", "emails", "orders"]);
    let orders = &queues[2];
    assert_eq!(orders["counts"]["active"], 4);
    assert_eq!(orders["counts"]["scheduled"], 1);
    assert_eq!(orders["options"]["max_deliveries"], 5);
    assert!(orders["oldest_age_ms"].is_u64());
    assert_eq!(queues[1]["counts"]["dead_lettered"], 2);

    pb().arg("queues")
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains("ACTIVE").and(predicate::str::contains("orders")));

    let doc = json_out(pb().arg("stats").arg(&path).arg("orders").arg("--json"));
    assert_eq!(doc["queues"][0]["counts"]["active"], 4);

    let out = pb()
        .args(["browse", "--json"])
        .arg(&path)
        .arg("orders")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let msgs = json_lines(&out);
    assert_eq!(msgs.len(), 4);
    assert_eq!(
        msgs[0]["priority"], 6,
        "delivery order: highest priority first"
    );
    pb().args(["browse", "-n", "2"])
        .arg(&path)
        .arg("orders")
        .assert()
        .success()
        .stdout(
            predicate::str::contains("new-order")
                .and(predicate::function(|s: &str| s.lines().count() == 3)),
        );

    let head = json_out(pb().args(["peek", "--json"]).arg(&path).arg("orders"));
    assert_eq!(head["id"], msgs[0]["id"]);
    pb().arg("peek")
        .arg(&path)
        .arg("audit")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no receivable message"));
}

#[test]
fn stats_watch_prints_json_lines_until_stopped() {
    let (_d, path) = store_path();
    open(&path)
        .queue("jobs")
        .expect("queue")
        .send("x")
        .expect("send");
    let mut child = std::process::Command::new(BIN)
        .args(["stats", "--watch", "--interval", "100ms", "--json"])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first: Value =
        serde_json::from_str(&lines.next().expect("line").expect("read")).expect("json");
    let second: Value =
        serde_json::from_str(&lines.next().expect("line").expect("read")).expect("json");
    child.kill().expect("kill");
    let _ = child.wait();
    assert_eq!(first["queues"][0]["counts"]["active"], 1);
    assert!(first["queues"][0]["counts"]["held_per_second"].is_null());
    assert!(second["queues"][0]["counts"]["held_per_second"].is_number());
}

#[test]
fn send_every_property_then_get_it_back() {
    let (_d, path) = store_path();
    open(&path).queue("jobs").expect("queue");
    let sent = json_out(
        pb().args(["--json", "send"])
            .arg(&path)
            .args(["jobs", "the body"])
            .args(["--label", "resize", "--content-type", "text/plain"])
            .args(["--correlation-id", "req-1", "--reply-to", "replies"])
            .args(["--message-key", "k-1", "--group", "g", "--sequence", "2"])
            .args(["--priority", "6", "--expires-at", "2099-01-01T00:00:00Z"])
            .args(["--delay", "1h", "-p", "tenant=acme", "--property", "eq=a=b"]),
    );
    let id = sent["id"].as_u64().expect("id");
    let got = json_out(
        pb().args(["--json", "get"])
            .arg(&path)
            .args(["jobs", &id.to_string()]),
    );
    assert_eq!(got["body"], "the body");
    assert_eq!(got["label"], "resize");
    assert_eq!(got["content_type"], "text/plain");
    assert_eq!(got["correlation_id"], "req-1");
    assert_eq!(got["reply_to"], "replies");
    assert_eq!(got["message_key"], "k-1");
    assert_eq!(got["group"], "g");
    assert_eq!(got["sequence"], 2);
    assert_eq!(got["priority"], 6);
    assert_eq!(got["expires_at"], "2099-01-01T00:00:00.000Z");
    assert!(got["visible_at"].is_string(), "scheduled by --delay");
    assert_eq!(got["properties"]["tenant"], "acme");
    assert_eq!(got["properties"]["eq"], "a=b");

    // Standard input and --file bodies, byte for byte.
    let binary: Vec<u8> = (0..=255u8).collect();
    let sent = json_out(
        pb().args(["--json", "send"])
            .arg(&path)
            .arg("jobs")
            .write_stdin(binary.clone()),
    );
    let store = open(&path);
    let q = store.open_queue("jobs").expect("queue");
    let env = q
        .get(postbox::MessageId(sent["id"].as_u64().expect("id")))
        .expect("get")
        .expect("there");
    assert_eq!(env.body(), &binary[..]);
    let file = path.with_file_name("body.bin");
    std::fs::write(&file, b"from a file").expect("write");
    pb().arg("send")
        .arg(&path)
        .arg("jobs")
        .arg("--file")
        .arg(&file)
        .assert()
        .success()
        .stdout(predicate::str::contains("sent message"));
    assert_eq!(q.stats().expect("stats").active, 2);

    // Refusals: unknown queue, bad priority, bad flag, missing store.
    pb().arg("send")
        .arg(&path)
        .args(["nope", "x"])
        .assert()
        .code(2);
    pb().arg("send")
        .arg(&path)
        .args(["nope", "x", "--create"])
        .assert()
        .success();
    pb().arg("send")
        .arg(&path)
        .args(["jobs", "x", "--priority", "9"])
        .assert()
        .code(1);
    pb().arg("send")
        .arg(&path)
        .args(["jobs", "x", "--no-such-flag"])
        .assert()
        .code(1);
    pb().arg("queues")
        .arg(path.with_file_name("missing.postbox"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no store"));
    pb().arg("get")
        .arg(&path)
        .args(["jobs", "999999"])
        .assert()
        .code(2);
}

#[test]
fn receive_completes_abandons_and_dead_letters() {
    let (_d, path) = store_path();
    {
        let q = open(&path).queue("jobs").expect("queue");
        q.send_batch(["a", "b", "c"]).expect("send");
    }
    let got = json_out(pb().args(["--json", "receive"]).arg(&path).arg("jobs"));
    assert_eq!(got["body"], "a");
    assert_eq!(got["outcome"], "abandoned");
    let got = json_out(
        pb().args(["--json", "receive", "--complete"])
            .arg(&path)
            .arg("jobs"),
    );
    assert_eq!(got["body"], "a");
    assert_eq!(got["delivery_count"], 2);
    pb().args([
        "receive",
        "--dead-letter",
        "Bad",
        "--description",
        "why not",
    ])
    .arg(&path)
    .arg("jobs")
    .assert()
    .success()
    .stdout(predicate::str::contains("dead-lettered"));
    let out = pb()
        .args(["--json", "dead-letters"])
        .arg(&path)
        .arg("jobs")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let dead = json_lines(&out);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["body"], "b");
    assert_eq!(dead[0]["dead_letter"]["reason"], "Bad");
    assert_eq!(dead[0]["dead_letter"]["description"], "why not");
    assert_eq!(dead[0]["dead_letter"]["source_queue"], "jobs");
    pb().arg("dead-letters")
        .arg(&path)
        .arg("jobs")
        .assert()
        .success()
        .stdout(predicate::str::contains("why not"));
    // The dead-letter queue through --dead-letters.
    let head = json_out(pb().args(["--json", "peek", "-D"]).arg(&path).arg("jobs"));
    assert_eq!(head["body"], "b");

    pb().args(["receive", "--complete"])
        .arg(&path)
        .arg("jobs")
        .assert()
        .success();
    let started = Instant::now();
    pb().args(["receive", "--timeout", "300ms"])
        .arg(&path)
        .arg("jobs")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nothing to receive"));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[test]
fn purge_and_move() {
    let (_d, path) = store_path();
    {
        let store = open(&path);
        let a = store.queue("a").expect("queue");
        a.send_batch((0..250).map(|i| Message::new(format!("m{i}")).label("moved")))
            .expect("send");
        store.queue("b").expect("queue");
    }
    let doc = json_out(
        pb().args(["--json", "move", "-n", "120"])
            .arg(&path)
            .args(["a", "b"]),
    );
    assert_eq!(doc["moved"], 120);
    pb().arg("move")
        .arg(&path)
        .args(["a", "c"])
        .assert()
        .code(2);
    pb().arg("move")
        .arg(&path)
        .args(["a", "c", "--create"])
        .assert()
        .success()
        .stdout(predicate::str::contains("moved 130 messages"));
    let store = open(&path);
    let b = store.open_queue("b").expect("b");
    let first = b.peek().expect("peek").expect("a message");
    assert_eq!(first.body(), b"m0");
    assert_eq!(first.label(), Some("moved"));
    assert_eq!(b.stats().expect("stats").active, 120);
    assert_eq!(
        store
            .open_queue("a")
            .expect("a")
            .stats()
            .expect("stats")
            .active,
        0
    );
    let doc = json_out(pb().args(["--json", "purge"]).arg(&path).arg("b"));
    assert_eq!(doc["purged"], 120);
    assert_eq!(b.stats().expect("stats").active, 0);
}

#[test]
fn redrive_with_filters_and_a_rate() {
    let (_d, path) = store_path();
    let ids: Vec<u64> = {
        let store = open(&path);
        let q = store.queue("jobs").expect("queue");
        q.send_batch((0..10).map(|i| format!("job {i}")))
            .expect("send");
        let mut ids = Vec::new();
        for i in 0..10 {
            let m = q.try_receive().expect("receive").expect("message");
            ids.push(m.id().get());
            let reason = if i < 6 { "Timeout" } else { "Invalid" };
            m.dead_letter(reason, &format!("attempt {i}"))
                .expect("dead-letter");
        }
        ids
    };
    // Nothing is old enough yet.
    let doc = json_out(
        pb().args(["--json", "redrive", "--older-than", "1h"])
            .arg(&path)
            .arg("jobs"),
    );
    assert_eq!(doc["resubmitted"], 0);
    // A dry run changes nothing.
    pb().args(["redrive", "--reason", "Invalid", "--dry-run"])
        .arg(&path)
        .arg("jobs")
        .assert()
        .success()
        .stdout(predicate::str::contains("4 dead letters match"));
    let started = Instant::now();
    let doc = json_out(
        pb().args(["--json", "redrive", "--reason", "Timeout", "--rate", "20/s"])
            .arg(&path)
            .arg("jobs"),
    );
    assert_eq!(doc["resubmitted"], 6);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "6 at 20/s take at least 250 ms"
    );
    // By id, through the resubmit alias.
    let doc = json_out(
        pb().args(["--json", "resubmit", "--id"])
            .arg(ids[9].to_string())
            .arg(&path)
            .arg("jobs"),
    );
    assert_eq!(doc["resubmitted"], 1);

    let store = open(&path);
    let q = store.open_queue("jobs").expect("queue");
    let s = q.stats().expect("stats");
    assert_eq!((s.active, s.dead_lettered), (7, 3));
    let back: Vec<u64> = q.browse().map(|e| e.expect("browse").id().get()).collect();
    let mut want: Vec<u64> = ids[..6].to_vec();
    want.push(ids[9]);
    assert_eq!(back, want);
    for env in q.dead_letters().expect("dlq").browse() {
        let env = env.expect("browse");
        assert_eq!(env.dead_letter_info().expect("info").reason, "Invalid");
    }
    let redriven = q.peek().expect("peek").expect("head");
    assert!(redriven.dead_letter_info().is_none());

    // The rest, all at once (several threads), still in id order.
    let doc = json_out(pb().args(["--json", "redrive"]).arg(&path).arg("jobs"));
    assert_eq!(doc["resubmitted"], 3);
    let back: Vec<u64> = q.browse().map(|e| e.expect("browse").id().get()).collect();
    assert_eq!(back, ids);
}

/// 10,000 messages with every property and text and binary bodies go out and come back
/// unchanged.
#[test]
fn export_import_round_trip_of_10000_messages() {
    let (dir, path) = store_path();
    let expires = SystemTime::UNIX_EPOCH + Duration::from_millis(4_102_444_800_123);
    {
        let store = open(&path);
        let q = store.queue("src").expect("queue");
        let mut batch = Vec::new();
        for i in 0u32..10_000 {
            let body: Vec<u8> = if i % 3 == 0 {
                // Not UTF-8: exported as base64.
                (0..(i % 97 + 1))
                    .map(|j| (i.wrapping_mul(31) + j * 7) as u8 | 0x80)
                    .collect()
            } else {
                format!("message {i}: ünïcödé \"quoted\"\n\ttabbed").into_bytes()
            };
            let mut m = Message::new(body)
                .priority((i % 8) as u8)
                .label(format!("label-{}", i % 13))
                .property("n", i.to_string())
                .property("raw", vec![0u8, 255, (i % 256) as u8]);
            if i % 2 == 0 {
                m = m
                    .content_type("application/octet-stream")
                    .correlation_id(format!("corr-{i}"))
                    .reply_to("replies")
                    .message_key(format!("key-{i}"))
                    .group(format!("g{}", i % 5))
                    .sequence(u64::from(i))
                    .expires_at(expires);
            }
            batch.push(m);
            if batch.len() == 1000 {
                q.send_batch(std::mem::take(&mut batch)).expect("send");
            }
        }
    }
    let file = dir.path().join("src.jsonl");
    pb().arg("export")
        .arg(&path)
        .arg("src")
        .arg(&file)
        .assert()
        .success()
        .stderr(predicate::str::contains("exported 10000 messages"));
    let text = std::fs::read(&file).expect("export file");
    assert_eq!(json_lines(&text).len(), 10_000);

    let copy = dir.path().join("copy.postbox");
    open(&copy);
    let doc = json_out(
        pb().args(["--json", "import", "--create"])
            .arg(&copy)
            .arg("dst")
            .arg(&file),
    );
    assert_eq!(doc["imported"], 10_000);

    let a = open(&path).open_queue("src").expect("src");
    let b = open(&copy).open_queue("dst").expect("dst");
    let left: Vec<Envelope> = a.browse().map(|e| e.expect("browse")).collect();
    let right: Vec<Envelope> = b.browse().map(|e| e.expect("browse")).collect();
    assert_eq!(left.len(), 10_000);
    assert_eq!(right.len(), 10_000);
    for (x, y) in left.iter().zip(&right) {
        assert_eq!(x.body(), y.body(), "body of {}", x.id());
        assert_eq!(x.priority(), y.priority());
        assert_eq!(x.label(), y.label());
        assert_eq!(x.content_type(), y.content_type());
        assert_eq!(x.correlation_id(), y.correlation_id());
        assert_eq!(x.reply_to(), y.reply_to());
        assert_eq!(x.message_key(), y.message_key());
        assert_eq!(x.group(), y.group());
        assert_eq!(x.sequence(), y.sequence());
        assert_eq!(x.expires_at(), y.expires_at());
        assert_eq!(x.properties(), y.properties());
    }
    assert_eq!(
        right[0].property("raw"),
        Some(&PropertyValue::Bytes(vec![0, 255, 7]))
    );
}

#[test]
fn import_reports_the_bad_line() {
    let (dir, path) = store_path();
    open(&path).queue("q").expect("queue");
    let file = dir.path().join("in.jsonl");
    let mut f = std::fs::File::create(&file).expect("create");
    writeln!(f, r#"{{"body":"one"}}"#).expect("write");
    writeln!(f, r#"{{"body_base64":"AAEC","label":"two"}}"#).expect("write");
    writeln!(f, "not json").expect("write");
    drop(f);
    pb().arg("import")
        .arg(&path)
        .arg("q")
        .arg(&file)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("line 3"));
    // From standard input.
    pb().arg("import")
        .arg(&path)
        .arg("q")
        .write_stdin("{\"body\":\"three\",\"priority\":7}\n")
        .assert()
        .success()
        .stdout(predicate::str::contains("imported 1"));
    let q = open(&path).open_queue("q").expect("queue");
    assert_eq!(q.peek().expect("peek").expect("head").body(), b"three");
}

#[test]
fn check_and_backup_of_a_store_in_use() {
    let (dir, path) = store_path();
    let store = open(&path);
    let q = store
        .queue_with("jobs", QueueOptions::default().max_deliveries(2))
        .expect("queue");
    q.send_batch((0..500).map(|i| format!("job {i}")))
        .expect("send");

    // A message locked in the live store comes back in the copy.
    let held = q.try_receive().expect("receive").expect("a message");
    // Another process holds the store in multi-process mode; this one keeps sending.
    let _holder = Holder::start(&path, false);
    let writer = {
        let q = q.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                q.send(format!("late {i}")).expect("send");
            }
        })
    };
    pb().arg("check")
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: every page verified"));
    let dest = dir.path().join("backup.postbox");
    let doc = json_out(pb().args(["--json", "backup"]).arg(&path).arg(&dest));
    writer.join().expect("writer");
    let copied = doc["messages"].as_u64().expect("messages");
    assert!((500..=700).contains(&copied), "copied {copied}");
    drop(held);
    pb().arg("backup").arg(&path).arg(&dest).assert().code(1);

    let copy = Store::open(&dest).expect("the backup opens");
    let jobs = copy.open_queue("jobs").expect("queue");
    let counts = jobs.stats().expect("stats");
    assert_eq!((counts.active, counts.locked), (copied, 0));
    assert_eq!(jobs.options().expect("options").max_deliveries, 2);
    copy.close().expect("close");
    pb().arg("check").arg(&dest).assert().success();

    // Commands work while the other process holds the store.
    pb().arg("send")
        .arg(&path)
        .args(["jobs", "from the command"])
        .assert()
        .success();
    assert_eq!(q.stats().expect("stats").active, 701);

    // Not a store: a store error.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 8192]).expect("write");
    pb().arg("check").arg(&junk).assert().code(4);
}

#[test]
fn create_makes_a_store_and_send_create_does_too() {
    let (dir, path) = store_path();
    // A new store, with queues, as `sqlite3 FILE` would make one.
    pb().arg("create")
        .arg(&path)
        .args(["orders", "emails"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("created store")
                .and(predicate::str::contains("created queue orders"))
                .and(predicate::str::contains("created queue emails")),
        );
    assert_eq!(open(&path).queues().expect("queues"), ["emails", "orders"]);
    // Again: nothing that exists changes; a new queue is added.
    open(&path)
        .queue("orders")
        .expect("orders")
        .send("kept")
        .expect("send");
    let v = json_out(
        pb().args(["--json", "create"])
            .arg(&path)
            .args(["orders", "audit"]),
    );
    assert_eq!(v["created"], false);
    assert_eq!(
        v["queues"][0],
        serde_json::json!({"name": "orders", "created": false})
    );
    assert_eq!(
        v["queues"][1],
        serde_json::json!({"name": "audit", "created": true})
    );
    assert_eq!(
        open(&path)
            .queue("orders")
            .expect("orders")
            .len()
            .expect("len"),
        1
    );
    // Without the store, send says how to make one; with --create it makes store and queue.
    let fresh = dir.path().join("fresh.postbox");
    pb().arg("send")
        .arg(&fresh)
        .args(["jobs", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("postbox create"));
    assert!(!fresh.exists(), "a typo makes nothing");
    pb().arg("send")
        .arg(&fresh)
        .args(["jobs", "first", "--create"])
        .assert()
        .success()
        .stdout(predicate::str::contains("sent message"));
    let s = open(&fresh);
    assert_eq!(s.queue("jobs").expect("jobs").len().expect("len"), 1);
    drop(s);
    // Import --create too.
    let imported = dir.path().join("imported.postbox");
    pb().arg("import")
        .arg(&imported)
        .args(["jobs", "--create"])
        .write_stdin("{\"body\":\"a\"}\n")
        .assert()
        .success();
    assert_eq!(
        open(&imported)
            .queue("jobs")
            .expect("jobs")
            .len()
            .expect("len"),
        1
    );
    // A file that is not a store is not made one.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 8192]).expect("write");
    pb().arg("create").arg(&junk).assert().code(4);
}

#[test]
fn a_store_held_in_single_process_mode_is_busy() {
    let (_d, path) = store_path();
    Store::open(&path).expect("create").close().expect("close");
    let _holder = Holder::start(&path, true);
    let out = pb()
        .arg("queues")
        .arg(&path)
        .assert()
        .code(3)
        .stderr(
            predicate::str::contains("single-process")
                .and(predicate::str::contains("--admin"))
                // The fix in each language's terms, each once: the holder may be any of them.
                .and(predicate::str::contains(
                    "Rust: Store::builder().multi_process(true)",
                ))
                .and(predicate::str::contains(
                    "C: postbox_store_options.multi_process = 1",
                ))
                .and(predicate::str::contains(
                    "Python: postbox.Store(path, multi_process=True)",
                )),
        )
        .get_output()
        .stderr
        .clone();
    let text = String::from_utf8_lossy(&out);
    assert_eq!(text.matches("multi_process(true)").count(), 1, "{text}");
    let out = pb()
        .args(["--json", "queues"])
        .arg(&path)
        .assert()
        .code(3)
        .get_output()
        .stderr
        .clone();
    let err: Value = serde_json::from_slice(&out).expect("a JSON error");
    assert_eq!(err["exit_code"], 3);
}

#[test]
fn help_lists_the_exit_codes() {
    pb().arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Exit codes").and(predicate::str::contains("130")));
    pb().assert().code(1);
}

/// Ctrl-C stops a redrive between two commits: every dead letter is either back in its queue
/// or still a dead letter, and the command says how far it got.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_between_commits() {
    let (_d, path) = store_path();
    {
        let q = open(&path).queue("jobs").expect("queue");
        q.send_batch((0..20).map(|i| format!("job {i}")))
            .expect("send");
        for _ in 0..20 {
            let m = q.try_receive().expect("receive").expect("message");
            m.dead_letter("Later", "").expect("dead-letter");
        }
    }
    let child = std::process::Command::new(BIN)
        .args(["redrive", "--rate", "10"])
        .arg(&path)
        .arg("jobs")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Interrupt once the first dead letter is back: the rest are paced over two seconds.
    let watch = open(&path).open_queue("jobs").expect("queue");
    let deadline = Instant::now() + Duration::from_secs(20);
    while watch.stats().expect("stats").active == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(130));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("interrupted by Ctrl-C"), "{err}");
    let q = open(&path).open_queue("jobs").expect("queue");
    let s = q.stats().expect("stats");
    assert_eq!(s.active + s.dead_lettered, 20);
    assert!(s.active > 0 && s.active < 20, "{s:?}");
}

#[test]
fn check_finds_a_damaged_message() {
    let (_d, path) = store_path();
    {
        let q = open(&path).queue("jobs").expect("queue");
        q.send_batch((0..200).map(|i| format!("body number {i:05}")))
            .expect("send");
    }
    pb().arg("check").arg(&path).assert().success();
    let mut bytes = std::fs::read(&path).expect("read");
    let at = bytes
        .windows(17)
        .position(|w| w == b"body number 00100")
        .expect("the body is in the file");
    bytes[at + 3] ^= 0xff;
    std::fs::write(&path, bytes).expect("write");
    pb().arg("check")
        .arg(&path)
        .assert()
        .code(4)
        .stderr(predicate::str::contains("corrupted"));
}

#[test]
fn export_writes_every_state_and_compact_gives_space_back() {
    let (_dir, path) = store_path();
    let store = open(&path);
    let q = store.queue("q").unwrap();
    for body in ["locked", "deferred", "active"] {
        q.send(body).unwrap();
    }
    q.send(Message::new("scheduled").delay(Duration::from_secs(3600)))
        .unwrap();
    let held = q.receive(Duration::ZERO).unwrap().unwrap();
    assert_eq!(held.body(), b"locked");
    q.receive(Duration::ZERO).unwrap().unwrap().defer().unwrap();

    let out = pb()
        .arg("export")
        .arg(&path)
        .arg("q")
        .assert()
        .success()
        .stderr(predicate::str::contains("1 active"))
        .get_output()
        .stdout
        .clone();
    let states: Vec<(String, String)> = json_lines(&out)
        .iter()
        .map(|r| {
            (
                r["body"].as_str().unwrap().to_owned(),
                r["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = [
        ("locked", "locked"),
        ("deferred", "deferred"),
        ("active", "active"),
        ("scheduled", "scheduled"),
    ];
    assert_eq!(
        states,
        want.map(|(b, s)| (b.to_owned(), s.to_owned())).to_vec()
    );
    held.complete().unwrap();

    // A deleted queue's space goes back to the file system.
    let big = store.queue("big").unwrap();
    big.send_batch((0..40).map(|_| Message::new(vec![7u8; 256 * 1024])))
        .unwrap();
    store.delete_queue("big").unwrap();
    store.close().unwrap();
    let doc = json_out(pb().arg("--json").arg("compact").arg(&path));
    let (before, after) = (
        doc["bytes_before"].as_u64().unwrap(),
        doc["bytes_after"].as_u64().unwrap(),
    );
    assert!(after < before / 2, "{before} -> {after}");
    assert!(std::fs::metadata(&path).unwrap().len() < before / 2);
    // Nothing else changed.
    let store = open(&path);
    let s = store.open_queue("q").unwrap().stats().unwrap();
    assert_eq!((s.active, s.scheduled, s.deferred), (1, 1, 1));
}

/// A store that crashed needs its write-ahead log: without it every command refuses the
/// store (a store error, exit 4, naming the log and `postbox recover`); `postbox recover`
/// opens it anyway, says what was lost, and afterwards it opens normally.
#[test]
fn recover_opens_a_crashed_store_whose_log_is_missing() {
    let (dir, path) = store_path();
    let live = Store::open(&path).expect("open");
    let q = live.queue("jobs").expect("queue");
    for i in 0..3 {
        q.send(format!("m{i}")).expect("send");
    }
    // The store file alone, as a crash leaves it, without its log.
    let copy = dir.path().join("copy.postbox");
    std::fs::copy(&path, &copy).expect("copy");
    drop(q);
    live.close().expect("close");
    pb().arg("queues")
        .arg(&copy)
        .assert()
        .code(4)
        .stderr(predicate::str::contains("-log"))
        .stderr(predicate::str::contains("postbox recover"));
    pb().arg("recover")
        .arg(&copy)
        .assert()
        .success()
        .stdout(predicate::str::contains("recovered with a loss"))
        .stdout(predicate::str::contains("missing"));
    pb().arg("queues").arg(&copy).assert().success();
    let doc = json_out(pb().args(["--json", "recover"]).arg(&copy));
    assert_eq!(doc["lost"], Value::Bool(false));
    pb().arg("recover")
        .arg(dir.path().join("none.postbox"))
        .assert()
        .code(2);
}

/// Issue 26: an export holds message bodies, so it is as private as the store (0600), whatever
/// the umask, and an existing file is made private before it is written.
#[cfg(unix)]
#[test]
fn export_files_are_readable_by_their_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, path) = store_path();
    let store = open(&path);
    store.queue("q").unwrap().send("secret").unwrap();
    store.close().unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let fresh = dir.path().join("fresh.jsonl");
    let stale = dir.path().join("stale.jsonl");
    std::fs::write(
        &stale,
        "an older export, longer than the new one\n".repeat(10),
    )
    .unwrap();
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).unwrap();
    for file in [&fresh, &stale] {
        // Through a shell, for the umask a user's would have.
        let done = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"umask 022 && exec "$0" export "$1" q "$2""#)
            .arg(BIN)
            .arg(&path)
            .arg(file)
            .output()
            .expect("sh");
        assert!(done.status.success(), "{done:?}");
        assert_eq!(mode(file), 0o600, "{}", file.display());
        let text = std::fs::read_to_string(file).unwrap();
        assert_eq!(text.lines().count(), 1, "truncated first: {text}");
        assert!(text.contains("secret"));
    }
    // The store's own file is 0600 too: the export is no easier to read than the store.
    assert_eq!(mode(&path), 0o600);
}

/// Listings leave no queue out: a subscription whose queue name is over 255 bytes (which an
/// older postbox allowed; `core/tests/fixtures/dangling-v5.postbox` has one, with a message)
/// is listed, checked and backed up like any queue.
#[test]
fn queues_check_and_backup_cover_an_over_long_subscription() {
    let (dir, path) = store_path();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures/dangling-v5.postbox");
    std::fs::copy(fixture, &path).expect("copy the fixture");
    let long = format!("news/$subscriptions/{}", "x".repeat(300));
    let doc = json_out(pb().args(["--json", "queues"]).arg(&path));
    let listed = doc["queues"].as_array().expect("queues");
    let entry = listed
        .iter()
        .find(|q| q["name"] == long.as_str())
        .expect("the long subscription is listed");
    assert_eq!(entry["counts"]["active"], 1);
    let infos = open(&path).queue_infos().expect("queue_infos").len();
    assert_eq!(listed.len(), infos, "every queue, none left out");
    pb().arg("check").arg(&path).assert().success();
    let dest = dir.path().join("backup.postbox");
    pb().arg("backup").arg(&path).arg(&dest).assert().success();
    let copy = Store::open(&dest).expect("the backup opens");
    assert_eq!(
        copy.open_queue(&long).expect("queue").len().expect("len"),
        1
    );
}
