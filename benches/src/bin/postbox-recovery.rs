//! How long a store takes to open after `kill -9`, for the comparison table.
//!
//! `postbox-recovery DIR [MESSAGES]` prints one JSON line with two cases:
//!
//! - `full_log`: a child sends 1 KiB messages one at a time through the write-ahead log with
//!   checkpoints held off until the log holds 32 MiB (where the default policy would
//!   checkpoint), and is killed with SIGKILL; the open that replays it is timed, and the replay
//!   rate is records per second of that open.
//! - `big_store`: a store of `MESSAGES` (default 1,000,000) 100-byte messages, then a child
//!   that sends 1,000 more through the log and is killed; the open that replays them is timed,
//!   and so are clean opens of the same store with and without `verify_on_open` (which reads
//!   every page), so the replay's share is visible.
//!
//! The child is this program again: `postbox-recovery --child STORE LOG_BYTES COUNT` prints
//! `FULL` once it has logged `LOG_BYTES` or sent `COUNT` messages, then waits to be killed.
//! `postbox-recovery --open STORE` times one open (for a profiler, on a copy of a crashed
//! store and its log).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use postbox::{Message, Store};
use postbox_benches as pb;
use serde_json::json;

const FULL_LOG: u64 = 32 << 20;

fn child(args: &[String]) {
    let (path, log_bytes, count) = (&args[0], &args[1], &args[2]);
    let log_bytes: u64 = log_bytes.parse().expect("log bytes");
    let count: u64 = count.parse().expect("count");
    let store = Store::builder()
        // Hold checkpoints off, so the log keeps everything until the kill.
        .log_checkpoints(u64::MAX, Duration::from_secs(3600))
        .open(path)
        .expect("open");
    let q = store.queue("q").expect("queue");
    let body = pb::body(1024);
    let mut sent = 0;
    while store.stats().log_bytes < log_bytes && sent < count {
        q.send(Message::new(body.clone())).expect("send");
        sent += 1;
    }
    println!("FULL {sent}");
    std::thread::sleep(Duration::from_secs(3600));
}

/// Runs the child on `path` and kills it once it says FULL; returns what it sent.
fn crash_after(path: &Path, log_bytes: u64, count: u64) -> u64 {
    let exe = std::env::current_exe().expect("own path");
    let mut c = Command::new(exe)
        .arg("--child")
        .arg(path)
        .arg(log_bytes.to_string())
        .arg(count.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut line = String::new();
    BufReader::new(c.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("child line");
    c.kill().expect("SIGKILL");
    c.wait().expect("wait");
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("FULL <sent>")
}

/// Opens `path`, timing it; returns (seconds, records replayed).
fn timed_open(path: &Path, verify: bool) -> (f64, u64) {
    let (took, replayed, _) = timed_open_and_send(path, verify);
    (took, replayed)
}

/// Times the open and then the first send after it: after a crash the open replays without
/// a durable commit, and that first write is the checkpoint that makes the replay durable.
fn timed_open_and_send(path: &Path, verify: bool) -> (f64, u64, f64) {
    let started = Instant::now();
    let store = Store::builder()
        .verify_on_open(verify)
        .open(path)
        .expect("open after the crash");
    let took = started.elapsed().as_secs_f64();
    let replayed = store.stats().replayed_records;
    let sent = Instant::now();
    store
        .queue("after-open")
        .and_then(|q| q.send("first write after the open"))
        .expect("the first send after the open");
    let first_write = sent.elapsed().as_secs_f64();
    store.close().expect("close");
    (took, replayed, first_write)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("--open") {
        let (s, replayed, first) = timed_open_and_send(Path::new(&args[1]), true);
        println!(
            "{}",
            json!({"open_s": s, "replayed": replayed, "first_write_s": first})
        );
        return;
    }
    let root = args.first().map_or_else(pb::bench_root, Into::into);
    let messages: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::Builder::new()
        .prefix("postbox-recovery-")
        .tempdir_in(root)
        .expect("temp dir");

    let path = dir.path().join("full-log.postbox");
    let sent = crash_after(&path, FULL_LOG, u64::MAX);
    let log_len = std::fs::metadata(dir.path().join("full-log.postbox-log")).map_or(0, |m| m.len());
    let (open_s, replayed, first_write_s) = timed_open_and_send(&path, true);
    let full_log = json!({
        "sent": sent, "log_file_bytes": log_len, "replayed": replayed, "open_s": open_s,
        "replay_per_s": replayed as f64 / open_s, "first_write_s": first_write_s,
    });

    let path = dir.path().join("big.postbox");
    let build_started = Instant::now();
    {
        let store = Store::open(&path).expect("open");
        let q = store.queue("q").expect("queue");
        let body = pb::body(100);
        let mut left = messages;
        while left > 0 {
            let n = left.min(1000);
            q.send_batch((0..n).map(|_| Message::new(body.clone())))
                .expect("send_batch");
            left -= n;
        }
        store.close().expect("close");
    }
    let build_s = build_started.elapsed().as_secs_f64();
    let logged = crash_after(&path, u64::MAX, 1000);
    let store_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    let (crash_open_s, replayed) = timed_open(&path, true);
    let (clean_open_s, _) = timed_open(&path, true);
    let (clean_open_noverify_s, _) = timed_open(&path, false);
    let big_store = json!({
        "messages": messages, "store_bytes": store_bytes, "build_s": build_s,
        "logged_before_kill": logged, "replayed": replayed, "open_after_kill_s": crash_open_s,
        "clean_open_s": clean_open_s, "clean_open_noverify_s": clean_open_noverify_s,
    });
    println!("{}", json!({"full_log": full_log, "big_store": big_store}));
}
