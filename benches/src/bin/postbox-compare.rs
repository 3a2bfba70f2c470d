//! The Rust side of the comparison harness (`benches/compare/run.sh`): workloads A and B on
//! postbox, one JSON line per phase on stdout.
//!
//! ```text
//! postbox-compare --workload A|B --class per-message|batched --dir DIR
//!                 [--count 20000] [--seconds 10] [--body 1024] [--producers 4]
//!                 [--consumers 4] [--depth 100] [--batch 100] [--multi-process] [--no-log]
//! ```
//!
//! A (burst): `count` sends from one thread, then receive+complete of all of them.
//! B (steady state): `producers` + `consumers` threads for `seconds`; producers hold the
//! backlog near `depth`. Per-message: `send` / `receive` + `complete`; batched: `send_batch` /
//! `receive_batch` + `complete_batch` of `batch` (workload B uses depth / producers).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use postbox::{Message, Queue, Store};
use postbox_benches as pb;
use serde_json::json;

struct Args {
    workload: String,
    batched: bool,
    dir: std::path::PathBuf,
    count: u64,
    seconds: f64,
    body: usize,
    producers: usize,
    consumers: usize,
    depth: i64,
    batch: usize,
    multi_process: bool,
    /// `--no-log`: commit durably to the store file, as before the write-ahead log.
    no_log: bool,
    cap: f64,
    /// The `system` field of the output (a second run beside the C workload has its own).
    system: String,
    consume_loop: bool,
}

fn parse() -> Args {
    let mut a = Args {
        workload: "A".into(),
        batched: false,
        dir: std::env::temp_dir(),
        count: 20_000,
        seconds: 10.0,
        body: 1024,
        producers: 4,
        consumers: 4,
        depth: 100,
        batch: 100,
        multi_process: false,
        no_log: false,
        cap: 15.0,
        system: "postbox".into(),
        consume_loop: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--workload" => a.workload = v().to_uppercase(),
            "--class" => a.batched = v() == "batched",
            "--dir" => a.dir = v().into(),
            "--count" => a.count = v().parse().expect("--count"),
            "--seconds" => a.seconds = v().parse().expect("--seconds"),
            "--body" => a.body = v().parse().expect("--body"),
            "--producers" => a.producers = v().parse().expect("--producers"),
            "--consumers" => a.consumers = v().parse().expect("--consumers"),
            "--depth" => a.depth = v().parse().expect("--depth"),
            "--batch" => a.batch = v().parse().expect("--batch"),
            "--cap" => a.cap = v().parse().expect("--cap"),
            "--multi-process" => a.multi_process = true,
            "--no-log" => a.no_log = true,
            "--system" => a.system = v(),
            "--no-consume-loop" => a.consume_loop = false,
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn class(a: &Args) -> &'static str {
    if a.batched { "batched" } else { "per-message" }
}

fn emit(a: &Args, phase: &str, msgs: u64, secs: f64, depth: &str, extra: serde_json::Value) {
    let mut v = json!({
        "system": a.system,
        "class": class(a),
        "workload": a.workload,
        "phase": phase,
        "msgs": msgs,
        "secs": secs,
        "msgs_per_s": msgs as f64 / secs,
        "depth": depth,
        "durability": "fsync per commit (group commit)",
    });
    if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    println!("{v}");
}

/// Commits between two readings of the store's counters, and where a logged commit's time
/// went (mean µs per log record: running the batch, applying it to redb, writing and syncing
/// its record).
fn commit_facts(from: &postbox::StoreStats, to: &postbox::StoreStats) -> serde_json::Value {
    let records = (to.log_records - from.log_records).max(1) as f64;
    let us = |a: Duration, b: Duration| (b - a).as_secs_f64() * 1e6 / records;
    let (f, t) = (&from.log_timing, &to.log_timing);
    json!({
        "commits": to.commits - from.commits,
        "log_records": to.log_records - from.log_records,
        "checkpoints": to.checkpoints - from.checkpoints,
        "us_run": us(f.run, t.run),
        "us_apply": us(f.apply, t.apply),
        "us_write": us(f.write, t.write),
        "us_sync": us(f.sync, t.sync),
    })
}

fn workload_a(a: &Args, store: &Store, q: &Queue) {
    let body = pb::body(a.body);
    let cap = Duration::from_secs_f64(a.cap);
    let before = store.stats();
    let t = Instant::now();
    let mut sent = 0u64;
    while sent < a.count && t.elapsed() < cap {
        if a.batched {
            let k = (a.count - sent).min(a.batch as u64);
            q.send_batch((0..k).map(|_| Message::new(body.clone())))
                .expect("send_batch");
            sent += k;
        } else {
            q.send(Message::new(body.clone())).expect("send");
            sent += 1;
        }
    }
    let send_s = t.elapsed().as_secs_f64();
    let mid = store.stats();
    let capped = |done: u64| {
        if done < a.count {
            format!(" (capped at {} s)", a.cap)
        } else {
            String::new()
        }
    };
    emit(
        a,
        "send",
        sent,
        send_s,
        &format!("0→{sent}{}", capped(sent)),
        commit_facts(&before, &mid),
    );
    let t = Instant::now();
    let mut got = 0u64;
    let mut held = Vec::new();
    while got < sent && t.elapsed() < cap {
        if a.batched {
            // Completes the last batch and locks the next in one commit.
            let want = a
                .batch
                .min(usize::try_from(sent - got).unwrap_or(usize::MAX));
            held = q
                .complete_batch_and_receive(held, want, Duration::from_secs(10))
                .expect("complete_batch_and_receive");
            assert!(!held.is_empty(), "receive_batch timed out");
            got += held.len() as u64;
        } else {
            let m = q
                .receive(Duration::from_secs(10))
                .expect("receive")
                .expect("a message");
            m.complete().expect("complete");
            got += 1;
        }
    }
    q.complete_batch(held).expect("complete_batch");
    let recv_s = t.elapsed().as_secs_f64();
    let end = store.stats();
    emit(
        a,
        "receive+complete",
        got,
        recv_s,
        &format!(
            "{sent}→{}{}",
            sent - got,
            if got < sent { capped(0) } else { String::new() }
        ),
        commit_facts(&mid, &end),
    );
    emit(
        a,
        "total",
        sent + got,
        send_s + recv_s,
        &format!("0→{sent}→{}", sent - got),
        json!({}),
    );
    if !a.batched && a.consume_loop {
        consume_loop(a, store, q, sent, got);
    }
}

/// Per message, the way a processor consumes: each call completes the message held and locks
/// the next in one commit, so a consumed message costs one commit instead of two. The queue is
/// first refilled (untimed) to the `sent` messages the receive+complete phase started from.
fn consume_loop(a: &Args, store: &Store, q: &Queue, sent: u64, consumed: u64) {
    let body = pb::body(a.body);
    let mut refill = consumed;
    while refill > 0 {
        let k = refill.min(100);
        q.send_batch((0..k).map(|_| Message::new(body.clone())))
            .expect("refill");
        refill -= k;
    }
    let cap = Duration::from_secs_f64(a.cap);
    let before = store.stats();
    let t = Instant::now();
    let mut got = 0u64;
    let mut held = Vec::new();
    while got < sent && t.elapsed() < cap {
        held = q
            .complete_batch_and_receive(held, 1, Duration::from_secs(10))
            .expect("complete_batch_and_receive");
        assert!(!held.is_empty(), "receive timed out");
        got += 1;
    }
    q.complete_batch(held).expect("complete_batch");
    let secs = t.elapsed().as_secs_f64();
    let end = store.stats();
    let capped = if got < sent {
        format!(" (capped at {} s)", a.cap)
    } else {
        String::new()
    };
    emit(
        a,
        "consume loop",
        got,
        secs,
        &format!("{sent}→{}{capped}", sent - got),
        commit_facts(&before, &end),
    );
}

fn workload_b(a: &Args, store: &Store, q: &Queue) {
    let body = pb::body(a.body);
    let depth = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let batch = if a.batched {
        (a.depth as usize / a.producers.max(1)).max(1)
    } else {
        1
    };
    let before = store.stats();
    let mut handles = Vec::new();
    for _ in 0..a.producers {
        let (q, body, depth, stop) = (q.clone(), body.clone(), depth.clone(), stop.clone());
        let target = a.depth;
        handles.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if depth.load(Ordering::Relaxed) >= target {
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                // Counted before the send returns: a consumer may see it first.
                depth.fetch_add(batch as i64, Ordering::Relaxed);
                if batch > 1 {
                    q.send_batch((0..batch).map(|_| Message::new(body.clone())))
                        .expect("send_batch");
                } else {
                    q.send(Message::new(body.clone())).expect("send");
                }
            }
        }));
    }
    for _ in 0..a.consumers {
        let (q, depth, stop, done, measuring) = (
            q.clone(),
            depth.clone(),
            stop.clone(),
            done.clone(),
            measuring.clone(),
        );
        handles.push(std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let n = if batch > 1 {
                    // Completes the last batch and locks the next in one commit.
                    held = q
                        .complete_batch_and_receive(held, batch, Duration::from_millis(100))
                        .expect("complete_batch_and_receive");
                    held.len()
                } else {
                    match q.receive(Duration::from_millis(100)).expect("receive") {
                        Some(m) => {
                            m.complete().expect("complete");
                            1
                        }
                        None => 0,
                    }
                };
                depth.fetch_sub(n as i64, Ordering::Relaxed);
                if measuring.load(Ordering::Relaxed) {
                    done.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
            q.complete_batch(held).expect("complete_batch");
        }));
    }
    // One second of warm-up, then the measured window; depth is sampled every 10 ms.
    std::thread::sleep(Duration::from_secs(1));
    measuring.store(true, Ordering::Relaxed);
    let t = Instant::now();
    let window = Duration::from_secs_f64(a.seconds);
    let (mut sum, mut samples) = (0i64, 0i64);
    while t.elapsed() < window {
        std::thread::sleep(Duration::from_millis(10));
        sum += depth.load(Ordering::Relaxed);
        samples += 1;
    }
    measuring.store(false, Ordering::Relaxed);
    let secs = t.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("worker");
    }
    let after = store.stats();
    emit(
        a,
        "steady",
        n,
        secs,
        &format!("~{}", sum / samples.max(1)),
        json!({
            "producers": a.producers,
            "consumers": a.consumers,
            "batch": batch,
            "ops_per_commit": (after.operations - before.operations) as f64
                / (after.commits - before.commits).max(1) as f64,
        }),
    );
}

fn main() {
    let a = parse();
    let dir = tempfile::Builder::new()
        .prefix("postbox-compare-")
        .tempdir_in(&a.dir)
        .expect("temp dir");
    let store = Store::builder()
        .multi_process(a.multi_process)
        .write_ahead_log(!a.no_log)
        .open(dir.path().join("compare.postbox"))
        .expect("open store");
    let q = store.queue("work").expect("queue");
    match a.workload.as_str() {
        "A" => workload_a(&a, &store, &q),
        "B" => workload_b(&a, &store, &q),
        w => panic!("unknown workload {w}"),
    }
    store.close().expect("close");
}
