//! The admin endpoint: an application holding its store in single-process mode serves it, and
//! `postbox --admin`, `/metrics` and the dashboard's JSON reach the store through it.

use std::time::Duration;

use assert_cmd::Command;
use postbox::{Message, MessageId, Store};
use postbox_cli::admin::{AdminOptions, ServeAdmin};
use predicates::prelude::*;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_postbox");

fn pb() -> Command {
    Command::new(BIN)
}

/// A store held in single-process mode, with a queue `jobs` holding three messages and one
/// dead letter.
fn app_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(dir.path().join("app.postbox")).expect("open");
    let q = store.queue("jobs").expect("queue");
    q.send_batch((0..3).map(|i| Message::new(format!("job {i}")).label("job")))
        .expect("send");
    q.send("poison").expect("send");
    // Taken by id: the poison message is not at the head.
    let poison = q
        .browse()
        .filter_map(Result::ok)
        .find(|m| m.body() == b"poison")
        .expect("poison is there");
    q.receive_by_id(poison.id(), Duration::ZERO)
        .expect("receive")
        .expect("poison")
        .dead_letter("Poison", "cannot parse")
        .expect("dead-letter");
    (dir, store)
}

fn get(url: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent.get(url).call().expect("GET");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().expect("body"))
}

fn post(url: &str, token: Option<&str>) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut call = agent.post(url);
    if let Some(t) = token {
        call = call.header("X-Postbox-Token", t);
    }
    let mut r = call.send_empty().expect("POST");
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().expect("body");
    (status, serde_json::from_str(&text).expect("JSON"))
}

#[test]
fn the_command_reaches_a_single_process_store_through_the_endpoint() {
    let (dir, store) = app_store();
    let server = store
        .serve_admin_with(
            "127.0.0.1:0",
            AdminOptions::with_actions(Some("s3cret".into())),
        )
        .expect("serve");
    let url = server.url();

    // Opened by path, the store is busy, and the message says what to do instead.
    pb().args(["queues"])
        .arg(dir.path().join("app.postbox"))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("--admin"));

    // Through the endpoint: the same commands, the same output.
    let out = pb()
        .args(["--json", "--admin", &url, "queues"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let doc: Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(doc["queues"][0]["name"], "jobs");
    assert_eq!(doc["queues"][0]["counts"]["active"], 3);
    assert_eq!(doc["queues"][0]["counts"]["dead_lettered"], 1);

    // Failures keep their exit codes.
    pb().args(["--admin", &url, "peek", "nosuch"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("nosuch"));

    // Changing the store needs the token; the body travels from this side's standard input.
    pb().args(["--admin", &url, "send", "jobs"])
        .write_stdin("refused")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("token"));
    pb().args([
        "--admin", &url, "--token", "s3cret", "send", "jobs", "--label", "remote",
    ])
    .write_stdin("from afar")
    .assert()
    .success();
    assert_eq!(store.open_queue("jobs").unwrap().stats().unwrap().active, 4);

    // Files stay on the caller's side: an export lands here.
    let file = dir.path().join("jobs.jsonl");
    pb().args(["--admin", &url, "export", "jobs"])
        .arg(&file)
        .assert()
        .success();
    let text = std::fs::read_to_string(&file).expect("export file");
    assert_eq!(text.lines().count(), 4);
    assert!(text.contains("from afar"));

    // Commands that need the file itself say so.
    pb().args(["--admin", &url, "backup"])
        .arg(dir.path().join("copy.postbox"))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("multi_process"));

    // Redrive through the endpoint moves the dead letter back.
    pb().args(["--admin", &url, "--token", "s3cret", "redrive", "jobs"])
        .assert()
        .success();
    let s = store.open_queue("jobs").unwrap().stats().unwrap();
    assert_eq!((s.active, s.dead_lettered), (5, 0));
    server.stop();
    store.close().expect("close");
}

#[test]
fn a_read_only_endpoint_refuses_changes() {
    let (_dir, store) = app_store();
    let server = store.serve_admin("127.0.0.1:0").expect("serve");
    assert!(server.token().is_none());
    pb().args([
        "--admin",
        &server.url(),
        "--token",
        "guess",
        "purge",
        "jobs",
    ])
    .assert()
    .code(1)
    .stderr(predicate::str::contains("only reads"));
    let (status, doc) = post(
        &format!("{}api/resubmit?queue=jobs&id=4", server.url()),
        Some("guess"),
    );
    assert_eq!(status, 403, "{doc}");
    assert_eq!(store.open_queue("jobs").unwrap().stats().unwrap().active, 3);
}

#[test]
fn an_unreachable_endpoint_is_a_store_error() {
    pb().args(["--admin", "http://127.0.0.1:1/", "queues"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("cannot reach"));
}

#[test]
fn overview_and_resubmit_serve_the_dashboard() {
    let (_dir, store) = app_store();
    let server = store
        .serve_admin_with("127.0.0.1:0", AdminOptions::with_actions(None))
        .expect("serve");
    let token = server.token().expect("a random token").to_owned();
    assert_eq!(token.len(), 32);

    let (status, page) = get(&server.url());
    assert_eq!(status, 200);
    assert!(page.contains("<title>postbox dashboard</title>"));

    let (status, text) = get(&format!("{}api/overview", server.url()));
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(doc["actions"], true);
    assert_eq!(doc["queues"][0]["active"], 3);
    assert_eq!(doc["queues"][0]["sent_total"], 4);

    let (status, text) = get(&format!("{}api/dead-letters?queue=jobs", server.url()));
    assert_eq!(status, 200);
    let dl: Value = serde_json::from_str(&text).expect("JSON");
    let list = dl["dead_letters"].as_array().expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["dead_letter"]["reason"], "Poison");
    let id = list[0]["id"].as_u64().expect("id");

    let resubmit = format!("{}api/resubmit?queue=jobs&id={id}", server.url());
    assert_eq!(post(&resubmit, None).0, 403);
    assert_eq!(post(&resubmit, Some("wrong")).0, 403);
    let (status, doc) = post(&resubmit, Some(&token));
    assert_eq!(status, 200, "{doc}");
    // Gone from the dead letters, back in the queue; a second try finds nothing.
    let jobs = store.open_queue("jobs").unwrap();
    assert!(jobs.get(MessageId(id)).unwrap().is_some());
    assert_eq!(jobs.stats().unwrap().dead_lettered, 0);
    assert_eq!(post(&resubmit, Some(&token)).0, 404);
    assert_eq!(get(&format!("{}nowhere", server.url())).0, 404);
}

/// Every sample line of the exposition: `name{labels} value`.
fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("name value");
            (series.to_owned(), value.parse::<f64>().expect("a number"))
        })
        .collect()
}

#[test]
fn metrics_report_counts_and_traffic() {
    let (_dir, store) = app_store();
    let server = store.serve_admin("127.0.0.1:0").expect("serve");
    let jobs = store.open_queue("jobs").unwrap();
    jobs.receive(Duration::ZERO)
        .unwrap()
        .unwrap()
        .complete()
        .unwrap();
    let (status, text) = get(&format!("{}metrics", server.url()));
    assert_eq!(status, 200);
    let s = samples(&text);
    let value = |series: &str| {
        s.iter()
            .find(|(k, _)| k == series)
            .unwrap_or_else(|| panic!("{series} missing from\n{text}"))
            .1
    };
    assert_eq!(
        value(r#"postbox_queue_messages{queue="jobs",state="active"}"#),
        2.0
    );
    assert_eq!(
        value(r#"postbox_queue_messages{queue="jobs",state="dead_lettered"}"#),
        1.0
    );
    assert_eq!(value(r#"postbox_queue_sent_total{queue="jobs"}"#), 4.0);
    assert_eq!(value(r#"postbox_queue_completed_total{queue="jobs"}"#), 1.0);
    assert!(value("postbox_store_commits_total") >= 1.0);
    assert!(value(r#"postbox_queue_oldest_message_age_seconds{queue="jobs"}"#) >= 0.0);
    // Every family is declared before its samples.
    for (series, _) in &s {
        let name = series.split('{').next().unwrap();
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} has no TYPE"
        );
    }
}

#[test]
fn serve_admin_refuses_a_bad_address_and_a_closed_store() {
    let (_dir, store) = app_store();
    let e = store.serve_admin("not an address").unwrap_err();
    assert_eq!(e.kind(), postbox::ErrorKind::InvalidArgument);
    let first = store.serve_admin("127.0.0.1:0").expect("serve");
    let e = store.serve_admin(&first.addr().to_string()).unwrap_err();
    assert_eq!(e.kind(), postbox::ErrorKind::Io);
    drop(first);
    store.clone().close().expect("close");
    assert_eq!(
        store.serve_admin("127.0.0.1:0").unwrap_err().kind(),
        postbox::ErrorKind::Closed
    );
}

#[test]
fn a_remote_command_stops_when_its_caller_goes_away() {
    let (_dir, store) = app_store();
    let jobs = store.open_queue("jobs").unwrap();
    for _ in 0..3 {
        jobs.receive(Duration::ZERO)
            .unwrap()
            .unwrap()
            .dead_letter("Bad", "")
            .unwrap();
    }
    jobs.send_batch((0..17).map(|i| Message::new(format!("more {i}"))))
        .unwrap();
    while let Some(m) = jobs.receive(Duration::ZERO).unwrap() {
        m.dead_letter("Bad", "").unwrap();
    }
    let dead = || jobs.stats().unwrap().dead_lettered;
    assert_eq!(dead(), 21);
    let server = store
        .serve_admin_with("127.0.0.1:0", AdminOptions::with_actions(Some("t".into())))
        .expect("serve");
    // Four a second: all 21 would take five seconds.
    let mut child = std::process::Command::new(BIN)
        .args([
            "--admin",
            &server.url(),
            "--token",
            "t",
            "redrive",
            "jobs",
            "--rate",
            "4",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let started = std::time::Instant::now();
    while dead() == 21 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "redrive never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Like Ctrl-C: the connection closes, the heartbeat's write fails, the command stops
    // between two commits.
    child.kill().expect("kill");
    child.wait().expect("wait");
    // Long enough for the whole redrive to have finished had it kept going.
    std::thread::sleep(Duration::from_secs(7));
    let left = dead();
    assert!(left > 0, "the redrive went on without its caller");
    let s = jobs.stats().unwrap();
    assert_eq!(
        s.active + s.dead_lettered,
        21,
        "every message is in one place"
    );
}

#[test]
fn batches_and_sessions_show_on_the_page_and_in_metrics() {
    let (_dir, store) = app_store();
    let orders = store
        .queue_with(
            "orders",
            postbox::QueueOptions::default().requires_session(true),
        )
        .unwrap();
    orders.send(Message::new("a1").group("alice")).unwrap();
    orders.send(Message::new("b1").group("bob")).unwrap();
    let session = orders
        .accept_named_session("bob", Duration::ZERO)
        .unwrap()
        .expect("bob's session");
    let tiles = store.queue("tiles").unwrap();
    let job = store.create_job(postbox::JobOptions::default()).unwrap();
    job.send_batch(&tiles, (0..3).map(|i| Message::new(format!("tile {i}"))))
        .unwrap();
    job.seal().unwrap();
    tiles
        .receive(Duration::ZERO)
        .unwrap()
        .unwrap()
        .complete()
        .unwrap();

    let server = store.serve_admin("127.0.0.1:0").expect("serve");
    let (_, text) = get(&format!("{}api/overview", server.url()));
    let doc: Value = serde_json::from_str(&text).unwrap();
    let jobs = doc["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], job.id());
    assert_eq!(
        (
            &jobs[0]["total"],
            &jobs[0]["completed"],
            &jobs[0]["pending"]
        ),
        (&Value::from(3), &Value::from(1), &Value::from(2))
    );
    assert_eq!(jobs[0]["sealed"], true);
    let q = doc["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "orders")
        .unwrap();
    let groups: Vec<(String, bool)> = q["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["group"].as_str().unwrap().to_owned(),
                g["held"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        [("alice".to_owned(), false), ("bob".to_owned(), true)]
    );

    let (_, metrics) = get(&format!("{}metrics", server.url()));
    let s = samples(&metrics);
    let value = |series: String| s.iter().find(|(k, _)| *k == series).map(|(_, v)| *v);
    let id = job.id();
    assert_eq!(
        value(format!(
            r#"postbox_job_pieces{{job="{id}",state="pending"}}"#
        )),
        Some(2.0)
    );
    assert_eq!(
        value(format!(
            r#"postbox_job_pieces{{job="{id}",state="completed"}}"#
        )),
        Some(1.0)
    );
    assert_eq!(
        value(r#"postbox_queue_sessions{queue="orders",held="true"}"#.into()),
        Some(1.0)
    );
    assert_eq!(
        value(r#"postbox_queue_sessions{queue="orders",held="false"}"#.into()),
        Some(1.0)
    );
    drop(session);
}
