//! The admin endpoint: an application holding its store in single-process mode serves it, and
//! `postbox --admin`, `/metrics` and the dashboard's JSON reach the store through it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use postbox::{Message, MessageId, Store};
use postbox_admin::{AdminOptions, ServeAdmin};
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
    get_with(url, None)
}

fn get_with(url: &str, token: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut call = agent.get(url);
    if let Some(t) = token {
        call = call.header("X-Postbox-Token", t);
    }
    let mut r = call.call().expect("GET");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().expect("body"))
}

/// Sends `request` as it is on a new connection to `addr` and returns all the answer (a
/// reset after it counts as its end).
fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // Asking for the close, so that a server that would keep the connection open ends the
    // answer too.
    let line = request
        .iter()
        .position(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    s.write_all(&request[..line]).expect("send");
    s.write_all(b"Connection: close\r\n").expect("send");
    s.write_all(&request[line..]).expect("send");
    read_all(s)
}

fn read_all(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the answer: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The status of a raw answer.
fn status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// A POST of `body` as a page on another site can make it without a preflight: a "simple"
/// request (text/plain, no custom header), with its Origin.
fn cross_site_post(addr: SocketAddr, path: &str, body: &str) -> String {
    raw(
        addr,
        format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://evil.example\r\n\
             Content-Type: text/plain;charset=UTF-8\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
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

    // Through the endpoint: the same commands, the same output — with the token, which
    // reading needs too.
    pb().args(["--admin", &url, "queues"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("token"));
    let out = pb()
        .args(["--json", "--admin", &url, "--token", "s3cret", "queues"])
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
    pb().args(["--admin", &url, "--token", "s3cret", "peek", "nosuch"])
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

    // Files stay on the caller's side: an export lands here, readable by its owner only.
    let file = dir.path().join("jobs.jsonl");
    pb().args(["--admin", &url, "--token", "s3cret", "export", "jobs"])
        .arg(&file)
        .assert()
        .success();
    let text = std::fs::read_to_string(&file).expect("export file");
    assert_eq!(text.lines().count(), 4);
    assert!(text.contains("from afar"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "export mode {mode:o}");
    }

    // Commands that need the file itself say so.
    pb().args(["--admin", &url, "--token", "s3cret", "backup"])
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
    // Reading needs a token: a random one.
    let token = server.token().to_owned();
    assert_eq!(token.len(), 32);
    assert!(!server.actions_allowed());
    pb().args(["--admin", &server.url(), "--token", &token, "purge", "jobs"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("only reads"));
    pb().args(["--admin", &server.url(), "--token", &token, "queues"])
        .assert()
        .success();
    let (status, doc) = post(
        &format!("{}api/resubmit?queue=jobs&id=4", server.url()),
        Some(&token),
    );
    assert_eq!(status, 403, "{doc}");
    assert!(doc["error"].as_str().unwrap().contains("actions are off"));
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
    let token = server.token().to_owned();
    assert_eq!(token.len(), 32);
    assert!(server.page_url().ends_with(&format!("/#token={token}")));

    let (status, page) = get(&server.url());
    assert_eq!(status, 200);
    assert!(page.contains("<title>postbox dashboard</title>"));

    let (status, text) = get(&format!("{}api/overview", server.url()));
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(doc["actions"], true);
    assert_eq!(doc["queues"][0]["active"], 3);
    assert_eq!(doc["queues"][0]["sent_total"], 4);

    // Dead letters hold bodies: they need the token.
    let dead_letters = format!("{}api/dead-letters?queue=jobs", server.url());
    assert_eq!(get(&dead_letters).0, 403);
    assert_eq!(get_with(&dead_letters, Some("wrong")).0, 403);
    let (status, text) = get_with(&dead_letters, Some(&token));
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

/// The overview, as the page reads it.
fn overview_doc(server: &postbox_admin::AdminServer) -> Value {
    let (status, text) = get(&format!("{}api/overview", server.url()));
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).expect("JSON")
}

/// Polls the overview until `ok` holds of it (the sampler reads the store once a second);
/// fails after 30 s with the last document.
fn wait_for_overview(
    server: &postbox_admin::AdminServer,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let doc = overview_doc(server);
        if ok(&doc) {
            return doc;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "waited 30 s for {what}: {doc}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A queue's entry in each history point of an overview.
fn history_of<'a>(doc: &'a Value, queue: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    doc["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(move |p| p["queues"].get(queue))
}

/// Issue 28: writes by other processes showed as no throughput at all, since the rates were
/// the serving process's own traffic. The change of the counts, which the store file keeps for
/// every process, shows them; the serving process's own sends stay apart, named as its own.
#[test]
fn the_change_of_counts_shows_what_other_processes_write() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("shared.postbox");
    pb().args(["create"])
        .arg(&path)
        .arg("jobs")
        .assert()
        .success();
    let store = Store::builder()
        .multi_process(true)
        .open(&path)
        .expect("open shared");
    let server = store
        .serve_admin_with("127.0.0.1:0", AdminOptions::with_actions(Some("t".into())))
        .expect("serve");
    let doc = overview_doc(&server);
    assert_eq!(doc["multi_process"], true);
    assert_eq!(doc["all_processes"]["messages"], 0);

    // Another process sends 50 messages.
    let file = dir.path().join("fifty.jsonl");
    let lines: String = (0..50)
        .map(|i| format!("{{\"body\":\"m{i}\"}}\n"))
        .collect();
    std::fs::write(&file, lines).unwrap();
    pb().arg("import")
        .arg(&path)
        .arg("jobs")
        .arg(&file)
        .assert()
        .success();
    let doc = wait_for_overview(&server, "the sends of another process", |d| {
        history_of(d, "jobs").any(|q| q["net_per_second"].as_f64().unwrap() > 0.0)
    });
    assert_eq!(doc["all_processes"]["messages"], 50);
    let jobs = &doc["queues"][0];
    assert_eq!(jobs["active"], 50);
    // This process sent nothing, and says so.
    assert_eq!(jobs["sent_total"], 0);
    assert!(history_of(&doc, "jobs").all(|q| q["sends_per_second"] == 0.0));

    // Another process takes them away: the change is negative.
    pb().arg("purge").arg(&path).arg("jobs").assert().success();
    let doc = wait_for_overview(&server, "the purge of another process", |d| {
        history_of(d, "jobs").any(|q| q["net_per_second"].as_f64().unwrap() < 0.0)
    });
    assert_eq!(doc["all_processes"]["messages"], 0);
    let net: Vec<f64> = history_of(&doc, "jobs")
        .map(|q| q["net_per_second"].as_f64().unwrap())
        .collect();
    assert!(
        net.iter().any(|&r| r > 0.0) && net.iter().any(|&r| r < 0.0),
        "{net:?}"
    );
    assert!(
        history_of(&doc, "jobs").all(|q| q["completions_per_second"] == 0.0),
        "the completions of this process"
    );
    server.stop();
}

/// Runs `args` (program name first) through `POST /api/command` as the page's purge button
/// does; returns the HTTP status and, for a 200, the exit code and the output and error text.
fn page_command(
    server: &postbox_admin::AdminServer,
    token: Option<&str>,
    args: &[&str],
) -> (u16, Option<i32>, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut call = agent
        .post(&format!("{}api/command", server.url()))
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        call = call.header("X-Postbox-Token", t);
    }
    let body = serde_json::json!({ "args": args, "stdin_base64": "" }).to_string();
    let mut r = call.send(body.as_str()).expect("POST");
    let status = r.status().as_u16();
    let bytes = r.body_mut().read_to_vec().expect("body");
    if status != 200 {
        return (
            status,
            None,
            String::from_utf8_lossy(&bytes).into_owned(),
            String::new(),
        );
    }
    let (mut code, mut out, mut err) = (None, String::new(), String::new());
    let mut rest = &bytes[..];
    while let Some((tag, b)) = postbox_admin::wire::read_frame(&mut rest).expect("a frame") {
        match tag {
            postbox_admin::wire::OUT => out.push_str(&String::from_utf8_lossy(&b)),
            postbox_admin::wire::ERR => err.push_str(&String::from_utf8_lossy(&b)),
            postbox_admin::wire::EXIT => {
                code = Some(i32::from_le_bytes(b.try_into().expect("4 bytes")));
            }
            _ => {}
        }
    }
    (status, code, out, err)
}

#[test]
fn the_page_purges_a_queue_through_the_command_with_the_token() {
    let purge = ["postbox", "--json", "purge", "(admin)", "jobs"];
    let (_dir, store) = app_store();
    let jobs = store.open_queue("jobs").unwrap();

    // Read-only: the token is right, the purge is refused, and says why.
    let server = store.serve_admin("127.0.0.1:0").expect("serve");
    let token = server.token().to_owned();
    let (status, code, _, err) = page_command(&server, Some(&token), &purge);
    assert_eq!((status, code), (200, Some(1)), "{err}");
    assert!(err.contains("only reads"), "{err}");
    assert_eq!(jobs.stats().unwrap().active, 3);
    server.stop();

    let server = store
        .serve_admin_with(
            "127.0.0.1:0",
            AdminOptions::with_actions(Some("s3cret".into())),
        )
        .expect("serve");
    // Without the token, or with a wrong one: refused before the command runs.
    for token in [None, Some("wrong")] {
        let (status, code, text, _) = page_command(&server, token, &purge);
        assert_eq!((status, code), (403, None), "{text}");
        let doc: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(doc["error"], "wrong or missing X-Postbox-Token");
        assert_eq!(jobs.stats().unwrap().active, 3);
    }
    // With it: every message goes, the dead letter stays; the answer says how many.
    let (status, code, out, err) = page_command(&server, Some("s3cret"), &purge);
    assert_eq!((status, code), (200, Some(0)), "{err}");
    let doc: Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(doc, serde_json::json!({ "queue": "jobs", "purged": 3 }));
    let s = jobs.stats().unwrap();
    assert_eq!((s.active, s.dead_lettered), (0, 1));
    // A queue that is not there: the command's own failure, exit code 2.
    let (status, code, _, err) = page_command(
        &server,
        Some("s3cret"),
        &["postbox", "--json", "purge", "(admin)", "nosuch"],
    );
    assert_eq!((status, code), (200, Some(2)), "{err}");
    assert!(err.contains("nosuch"), "{err}");
}

#[test]
fn the_page_says_how_to_get_the_token_and_whose_figures_it_shows() {
    let (_dir, store) = app_store();
    let server = store.serve_admin("127.0.0.1:0").expect("serve");
    let (status, page) = get(&server.url());
    assert_eq!(status, 200);
    // The notice the page shows without a token or with a refused one, and how to get it.
    for text in [
        r#"<div id="token-help" class="alert" role="alert" hidden>"#,
        "No token: this page was opened without the admin token.",
        "The token was refused (wrong or missing X-Postbox-Token).",
        "<code>postbox dashboard</code> prints it when it starts",
        "<code>token:</code> line",
        "<code>http://…/#token=…</code>",
        "paste the token in the Token box above",
        "<code>AdminServer::token()</code>",
        // Whose figures: every process's from the file's counts, or this process's.
        "commits by this process",
        "operations by this process",
        "Change/s<small>every process</small>",
        "Sends/s<small>this process</small>",
        "Purge",
    ] {
        assert!(page.contains(text), "the page lacks {text:?}");
    }
    // The refusal the notice recognises is the one the endpoint gives.
    let (status, text) = get(&format!("{}api/dead-letters?queue=jobs", server.url()));
    assert_eq!(status, 403);
    assert!(text.contains("X-Postbox-Token"), "{text}");
    // A single-process store: this process is its only writer, which the page says.
    assert_eq!(overview_doc(&server)["multi_process"], false);
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

#[test]
fn rebinding_hosts_are_refused_on_every_route() {
    let (_dir, store) = app_store();
    let server = store
        .serve_admin_with("127.0.0.1:0", AdminOptions::with_actions(Some("t".into())))
        .expect("serve");
    let addr = server.addr();
    let port = addr.port();
    let command = r#"{"args":["postbox","browse","(admin)","jobs"]}"#;
    let requests = |host: Option<&str>| -> Vec<String> {
        let host = host.map_or(String::new(), |h| format!("Host: {h}\r\n"));
        vec![
            format!("GET / HTTP/1.1\r\n{host}\r\n"),
            format!("GET /metrics HTTP/1.1\r\n{host}\r\n"),
            format!("GET /api/overview HTTP/1.1\r\n{host}\r\n"),
            format!(
                "GET /api/dead-letters?queue=jobs HTTP/1.1\r\n{host}X-Postbox-Token: t\r\n\r\n"
            ),
            format!(
                "POST /api/resubmit?queue=jobs&id=4 HTTP/1.1\r\n{host}X-Postbox-Token: t\r\n\r\n"
            ),
            format!(
                "POST /api/command HTTP/1.1\r\n{host}X-Postbox-Token: t\r\n\
                 Content-Length: {}\r\n\r\n{command}",
                command.len()
            ),
        ]
    };
    // A page from a name the attacker points at 127.0.0.1 sends that name: refused, even
    // with the token (a rebinding page cannot know it, but the name alone is enough).
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_owned(),
        format!("127.0.0.1.evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
        format!("10.9.8.7:{port}"),
    ] {
        for request in requests(Some(&host)) {
            let answer = raw(addr, request.as_bytes());
            assert_eq!(status(&answer), 421, "{host}: {request}\n{answer}");
            assert!(!answer.contains("job 0") && !answer.contains("poison"));
        }
    }
    for request in requests(None) {
        assert_eq!(status(&raw(addr, request.as_bytes())), 400, "{request}");
    }
    // The names and addresses of this machine's loopback pass (any port: tunnels change it).
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "localhost:8000".to_owned(),
        format!("[::1]:{port}"),
    ] {
        let answer = raw(
            addr,
            format!("GET /api/overview HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        );
        assert_eq!(status(&answer), 200, "{host}: {answer}");
    }
    // Nothing was resubmitted by the refused requests.
    assert_eq!(
        store
            .open_queue("jobs")
            .unwrap()
            .stats()
            .unwrap()
            .dead_lettered,
        1
    );
}

#[test]
fn cross_site_simple_requests_read_and_change_nothing() {
    let (_dir, store) = app_store();
    let server = store
        .serve_admin_with("127.0.0.1:0", AdminOptions::with_actions(Some("t".into())))
        .expect("serve");
    let addr = server.addr();
    // What issue 26 showed returning message bodies, each as a simple cross-site request.
    for args in [
        r#"["postbox","browse","(admin)","jobs"]"#,
        r#"["postbox","export","(admin)","jobs"]"#,
        r#"["postbox","peek","(admin)","jobs"]"#,
        r#"["postbox","get","(admin)","jobs","1"]"#,
        r#"["postbox","dead-letters","(admin)","jobs"]"#,
        r#"["postbox","purge","(admin)","jobs"]"#,
        r#"["postbox","send","(admin)","jobs","forged"]"#,
    ] {
        let answer = cross_site_post(addr, "/api/command", &format!(r#"{{"args":{args}}}"#));
        assert_eq!(status(&answer), 403, "{args}\n{answer}");
        assert!(
            !answer.contains("job ") && !answer.contains("poison"),
            "{args}\n{answer}"
        );
    }
    let answer = cross_site_post(addr, "/api/resubmit?queue=jobs&id=4", "");
    assert_eq!(status(&answer), 403, "{answer}");
    let answer = raw(
        addr,
        format!(
            "GET /api/dead-letters?queue=jobs HTTP/1.1\r\nHost: {addr}\r\n\
             Origin: http://evil.example\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(status(&answer), 403, "{answer}");
    assert!(!answer.contains("poison"));
    // A page's fetch with the token header needs a preflight first: it gets no permission.
    let preflight = raw(
        addr,
        format!(
            "OPTIONS /api/command HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://evil.example\r\n\
             Access-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: x-postbox-token,content-type\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(status(&preflight), 405, "{preflight}");
    // No answer of any route carries a CORS permission.
    let token = server.token().to_owned();
    for answer in [
        preflight,
        raw(addr, format!("GET / HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://evil.example\r\n\r\n").as_bytes()),
        raw(addr, format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://evil.example\r\n\r\n").as_bytes()),
        raw(addr, format!("GET /api/overview HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://evil.example\r\n\r\n").as_bytes()),
        raw(addr, format!("GET /api/dead-letters?queue=jobs HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://evil.example\r\nX-Postbox-Token: {token}\r\n\r\n").as_bytes()),
    ] {
        assert!(
            !answer.to_ascii_lowercase().contains("access-control-"),
            "{answer}"
        );
    }
    let s = store.open_queue("jobs").unwrap().stats().unwrap();
    assert_eq!((s.active, s.dead_lettered), (3, 1), "nothing changed");
}

#[test]
fn long_commands_take_at_most_four_workers_and_stop_with_the_endpoint() {
    let (_dir, store) = app_store();
    let server = store
        .serve_admin_with("127.0.0.1:0", AdminOptions::with_actions(Some("t".into())))
        .expect("serve");
    let addr = server.addr();
    let watch = || {
        let body =
            r#"{"args":["postbox","--json","stats","(admin)","--watch","--interval","100ms"]}"#;
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(
            format!(
                "POST /api/command HTTP/1.1\r\nHost: {addr}\r\nX-Postbox-Token: t\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
        s
    };
    // Four streams run; the first bytes of each show it.
    let mut running: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = watch();
            let mut head = [0u8; 12];
            s.read_exact(&mut head).expect("a stream");
            assert_eq!(&head, b"HTTP/1.1 200");
            s
        })
        .collect();
    // A fifth is refused at once, while the page's reads go on being served promptly.
    assert_eq!(status(&read_all(watch())), 503);
    let t = Instant::now();
    let (code, _) = get(&format!("{}api/overview", server.url()));
    assert_eq!(code, 200);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // One caller leaves: its command notices (its next write fails) and frees its slot.
    drop(running.pop());
    let started = Instant::now();
    let fifth = loop {
        let mut s = watch();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).expect("an answer");
        if &head == b"HTTP/1.1 200" {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the slot was never freed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    running.push(fifth);
    // Stopping the endpoint stops the commands: each stream ends with its exit frame.
    server.stop();
    for s in running {
        let t = Instant::now();
        let rest = read_all(s);
        assert!(t.elapsed() < Duration::from_secs(10));
        let bytes = rest.as_bytes();
        assert!(bytes.len() >= 9, "{rest:?}");
        assert_eq!(
            bytes[bytes.len() - 9],
            b'X',
            "ends with the exit code: {rest:?}"
        );
    }
}

/// `postbox dashboard` in a process of its own (its threads and memory are measured from
/// /proc), on a demo store, with actions allowed.
#[cfg(target_os = "linux")]
struct Dashboard {
    child: std::process::Child,
    _dir: tempfile::TempDir,
    url: String,
    addr: SocketAddr,
    token: String,
}

#[cfg(target_os = "linux")]
impl Dashboard {
    fn start() -> Dashboard {
        use std::io::BufRead;
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = dir.path().join("shop.postbox");
        pb().arg("demo").arg(&store).assert().success();
        let mut child = std::process::Command::new(BIN)
            .args(["--json", "dashboard"])
            .arg(&store)
            .args(["--bind", "127.0.0.1:0", "--allow-actions"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the dashboard");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the dashboard's first line");
        let doc: Value = serde_json::from_str(&line).expect("JSON");
        let url = doc["url"].as_str().unwrap().to_owned();
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("an address");
        Dashboard {
            child,
            _dir: dir,
            url,
            addr,
            token: doc["token"].as_str().unwrap().to_owned(),
        }
    }

    /// A number from /proc/PID/status (`Threads`, or a size in kB such as `VmHWM`).
    fn status(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc status");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in\n{text}"))
    }

    fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .expect("/proc fd")
            .count()
    }
}

#[cfg(target_os = "linux")]
impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issue 26: 3,000 connections that sent part of a request made 2,991 threads, still open
/// 40 s later. Now they cost no thread, at most 256 of them are kept, each for at most the
/// header timeout (10 s), and the endpoint answers meanwhile.
#[cfg(target_os = "linux")]
#[test]
fn a_thousand_idle_connections_cost_no_threads_and_are_closed() {
    let d = Dashboard::start();
    // The endpoint's threads are all there from the start.
    let (code, _) = get(&format!("{}api/overview", d.url));
    assert_eq!(code, 200);
    let threads_before = d.status("Threads");
    let files_before = d.open_files();
    let opened = Instant::now();
    let idle: Vec<TcpStream> = (0..1000)
        .map(|i| {
            let mut s = TcpStream::connect(d.addr).expect("connect");
            if i % 2 == 1 {
                // Half a request head, and then nothing.
                s.write_all(
                    format!("GET /api/overview HTTP/1.1\r\nHost: {}\r\n", d.addr).as_bytes(),
                )
                .unwrap();
            }
            s
        })
        .collect();
    let t = Instant::now();
    let (code, _) = get(&format!("{}api/overview", d.url));
    assert_eq!(code, 200);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "answered in {:?} among 1,000 idle connections",
        t.elapsed()
    );
    let threads = d.status("Threads");
    assert_eq!(
        threads, threads_before,
        "threads grew with idle connections"
    );
    let files = d.open_files();
    assert!(
        files <= files_before + 256 + 16,
        "{files} open files (from {files_before})"
    );
    // Every one is closed within the header timeout (the half-sent ones with a 408).
    for s in idle {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let answer = read_all(s);
        assert!(answer.is_empty() || status(&answer) == 408, "{answer}");
    }
    let waited = opened.elapsed();
    assert!(waited < Duration::from_secs(20), "closed after {waited:?}");
    assert_eq!(d.status("Threads"), threads_before);
}

/// Issue 26: three 400 MB chunked bodies pushed the application to 1.2 GB. Now a request
/// without the token is refused on its head, and one with it is cut at 8 MiB as it arrives.
#[cfg(target_os = "linux")]
#[test]
fn huge_bodies_are_refused_with_bounded_memory() {
    const HUGE: usize = 400 << 20;
    let d = Dashboard::start();
    let (code, _) = get(&format!("{}api/overview", d.url));
    assert_eq!(code, 200);
    let peak_before = d.status("VmHWM");
    let send_huge = |token: Option<&str>| -> (u16, usize) {
        let mut s = TcpStream::connect(d.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let token = token.map_or(String::new(), |t| format!("X-Postbox-Token: {t}\r\n"));
        s.write_all(
            format!(
                "POST /api/command HTTP/1.1\r\nHost: {}\r\nContent-Type: text/plain\r\n\
                 {token}Transfer-Encoding: chunked\r\n\r\n",
                d.addr
            )
            .as_bytes(),
        )
        .unwrap();
        let mut w = s.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let mut chunk = format!("{:x}\r\n", 1 << 20).into_bytes();
            chunk.extend(std::iter::repeat_n(b'A', 1 << 20));
            chunk.extend_from_slice(b"\r\n");
            let mut sent = 0;
            while sent < HUGE {
                if w.write_all(&chunk).is_err() {
                    break;
                }
                sent += 1 << 20;
            }
            sent
        });
        let answer = read_all(s);
        (status(&answer), sender.join().unwrap())
    };
    for _ in 0..3 {
        let (code, sent) = send_huge(None);
        assert_eq!(code, 403);
        assert!(sent < 64 << 20, "sent {sent} bytes before the refusal");
    }
    for _ in 0..3 {
        let (code, sent) = send_huge(Some(&d.token));
        assert_eq!(code, 413);
        assert!(sent < 64 << 20, "sent {sent} bytes before the refusal");
    }
    // A length over the cap is refused before a byte of the body is read.
    let answer = raw(
        d.addr,
        format!(
            "POST /api/command HTTP/1.1\r\nHost: {}\r\nX-Postbox-Token: {}\r\n\
             Content-Length: {HUGE}\r\n\r\n",
            d.addr, d.token
        )
        .as_bytes(),
    );
    assert_eq!(status(&answer), 413, "{answer}");
    let grown_kb = d.status("VmHWM").saturating_sub(peak_before);
    assert!(
        grown_kb < 64 << 10,
        "the peak of the dashboard's memory grew by {grown_kb} kB"
    );
    // And it still works.
    pb().args(["--admin", &d.url, "--token", &d.token, "queues"])
        .assert()
        .success();
}

#[test]
fn an_upload_larger_than_the_cap_is_refused_before_sending() {
    let (dir, store) = app_store();
    let server = store
        .serve_admin_with("127.0.0.1:0", AdminOptions::with_actions(Some("t".into())))
        .expect("serve");
    let file = dir.path().join("big.jsonl");
    let line = format!("{{\"body\":\"{}\"}}\n", "x".repeat(1 << 20));
    std::fs::write(&file, line.repeat(8)).unwrap();
    pb().args(["--admin", &server.url(), "--token", "t", "import", "jobs"])
        .arg(&file)
        .assert()
        .code(5)
        .stderr(predicate::str::contains("larger than the admin endpoint"));
    assert_eq!(store.open_queue("jobs").unwrap().stats().unwrap().active, 3);
}
