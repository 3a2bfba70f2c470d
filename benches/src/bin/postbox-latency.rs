//! Send latency against the fsync probe's, across write-ahead log checkpoints, for the
//! comparison report.
//!
//! ```text
//! postbox-latency DIR [--seconds 12] [--count N] [--probe-seconds 6] [--min-checkpoints 10]
//!                     [--max-seconds 60] [--cache-mib N] [--checkpoint-ms N]
//!                     [--checkpoint-records N] [--rate N]
//! ```
//!
//! In a temporary directory under DIR (on the measured filesystem):
//!
//! 1. the fsync probe as a distribution: each 1 KiB append + `fdatasync` timed, half of
//!    `probe-seconds` before the sends and half after, so the disk's drift over the run
//!    touches both sides alike;
//! 2. a store opened with the defaults (durable, single-process, write-ahead log on, the
//!    default checkpoint policy) and 1 KiB `send`s from one thread, each call timed, for
//!    `seconds` (or `count` sends) and on until the log has checkpointed `min-checkpoints`
//!    times, but no longer than `max-seconds`. Nothing is received: the store grows by the
//!    bodies it holds (about 1 KiB × the sends), which a run of seconds keeps small.
//!
//! Prints one JSON line: count, p50, p99, p99.9, p99.99 and max (µs) of the probe and of the
//! sends, the checkpoints the sends crossed (`Store::stats`), the same figures for the sends
//! during which one completed, and send p99.9 ÷ probe p99.9 beside the target (≤ 3× over at
//! least 10 checkpoints). At thousands of sends a second a checkpoint a second is rarer than
//! one send in a thousand, so p99.9 can pass while every checkpoint stalls its caller: the
//! `send_at_checkpoint` figures and the max show those stalls.
//! `--count N` also caps the probe at N syncs (N / 2 on each side). `--cache-mib N` opens the
//! store with `StoreBuilder::cache_size(N MiB)` instead of the default: the pages the log's
//! background commits leave in that cache are what a checkpoint writes (docs/design.md
//! § *Checkpoints*). `--checkpoint-ms N` checkpoints the log every N ms of sends instead of
//! the default's 250 ms (the hidden `StoreBuilder::log_checkpoints`); `--checkpoint-records
//! N` makes the interval count only once the log holds N records (`log_checkpoint_records`).
//! `--rate N` paces the sends at N a second (a trickle, where each send finds the disk idle)
//! instead of sending back to back, and the probe's syncs alike: a sync after a sleep finds
//! the machine idle, which costs more than one in a busy loop.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use postbox::{Message, Store};
use postbox_benches as pb;
use serde_json::{Value, json};

/// The target: send p99.9 at most this many times the probe's p99.9.
const TARGET_RATIO: f64 = 3.0;
/// … over a run that crosses at least this many checkpoints.
const TARGET_CHECKPOINTS: u64 = 10;
/// Sends before the timed ones: the queue's creation and the first commits.
const WARM_UP: u64 = 200;

struct Args {
    root: PathBuf,
    seconds: f64,
    count: Option<u64>,
    probe_seconds: f64,
    min_checkpoints: u64,
    max_seconds: f64,
    cache_mib: Option<usize>,
    checkpoint_ms: Option<u64>,
    checkpoint_records: Option<u64>,
    rate: Option<f64>,
}

fn parse() -> Args {
    let mut a = Args {
        root: pb::bench_root(),
        seconds: 12.0,
        count: None,
        probe_seconds: 6.0,
        min_checkpoints: TARGET_CHECKPOINTS,
        max_seconds: 60.0,
        cache_mib: None,
        checkpoint_ms: None,
        checkpoint_records: None,
        rate: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--seconds" => a.seconds = v().parse().expect("--seconds"),
            "--count" => a.count = Some(v().parse().expect("--count")),
            "--probe-seconds" => a.probe_seconds = v().parse().expect("--probe-seconds"),
            "--min-checkpoints" => a.min_checkpoints = v().parse().expect("--min-checkpoints"),
            "--max-seconds" => a.max_seconds = v().parse().expect("--max-seconds"),
            "--cache-mib" => a.cache_mib = Some(v().parse().expect("--cache-mib")),
            "--checkpoint-ms" => a.checkpoint_ms = Some(v().parse().expect("--checkpoint-ms")),
            "--checkpoint-records" => {
                a.checkpoint_records = Some(v().parse().expect("--checkpoint-records"))
            }
            "--rate" => a.rate = Some(v().parse().expect("--rate")),
            other if !other.starts_with("--") => a.root = other.into(),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// Microseconds, to a tenth.
fn us(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e7).round() / 10.0
}

/// count, p50, p99, p99.9, p99.99 and max (µs) of `samples`.
fn summary(samples: &mut [Duration]) -> Value {
    let [p50, p99, p999, p9999] = [50.0, 99.0, 99.9, 99.99].map(|q| us(pb::percentile(samples, q)));
    json!({
        "count": samples.len(),
        "p50_us": p50,
        "p99_us": p99,
        "p999_us": p999,
        "p9999_us": p9999,
        "max_us": us(samples.iter().max().copied().unwrap_or_default()),
    })
}

/// What the timed sends saw.
struct Sends {
    all: Vec<Duration>,
    /// Sends during which the checkpoint count went up: the calls a checkpoint could stall.
    at_checkpoint: Vec<Duration>,
    /// Checkpoints completed from the first timed send to the last.
    checkpoints: u64,
    /// How long the timed sends took.
    secs: f64,
}

/// The time from one paced call to the next (`--rate`), for the sends and the probe alike.
fn pace(a: &Args) -> Option<Duration> {
    a.rate.map(|r| Duration::from_secs_f64(1.0 / r))
}

fn sends(dir: &std::path::Path, a: &Args) -> Sends {
    let mut builder = Store::builder();
    if let Some(mib) = a.cache_mib {
        builder = builder.cache_size(mib << 20);
    }
    if let Some(ms) = a.checkpoint_ms {
        builder = builder.log_checkpoints(32 << 20, Duration::from_millis(ms));
    }
    if let Some(records) = a.checkpoint_records {
        builder = builder.log_checkpoint_records(records);
    }
    let pace = pace(a);
    let store = builder
        .open(dir.join("latency.postbox"))
        .expect("open the store");
    let q = store.queue("latency").expect("queue");
    let body = pb::body(1024);
    for _ in 0..WARM_UP {
        q.send(Message::new(body.clone())).expect("send");
    }
    let first = store.stats().checkpoints;
    let mut s = Sends {
        all: Vec::with_capacity(1 << 16),
        at_checkpoint: Vec::new(),
        checkpoints: 0,
        secs: 0.0,
    };
    let start = Instant::now();
    let mut next = start;
    loop {
        if let Some(pace) = pace {
            next += pace;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let m = Message::new(body.clone());
        let before = store.stats().checkpoints;
        let call = Instant::now();
        q.send(m).expect("send");
        let took = call.elapsed();
        let after = store.stats().checkpoints;
        s.all.push(took);
        if after != before {
            s.at_checkpoint.push(took);
        }
        s.checkpoints = after - first;
        let elapsed = start.elapsed().as_secs_f64();
        let asked = match a.count {
            Some(n) => s.all.len() as u64 >= n,
            None => elapsed >= a.seconds,
        };
        if (asked && s.checkpoints >= a.min_checkpoints) || elapsed >= a.max_seconds {
            s.secs = elapsed;
            break;
        }
    }
    s
}

fn main() {
    let a = parse();
    let dir = tempfile::Builder::new()
        .prefix("postbox-latency-")
        .tempdir_in(&a.root)
        .expect("temp dir");
    let half = Duration::from_secs_f64(a.probe_seconds / 2.0);
    let probe_cap = a.count.map_or(u64::MAX, |n| n.div_ceil(2));
    let pace = pace(&a);
    let mut probe = pb::fsync_probe_samples(dir.path(), half, probe_cap, pace);
    let mut s = sends(dir.path(), &a);
    probe.extend(pb::fsync_probe_samples(dir.path(), half, probe_cap, pace));

    let probe_json = summary(&mut probe);
    let send_json = summary(&mut s.all);
    let at_checkpoint = summary(&mut s.at_checkpoint);
    let p999 = |v: &Value| v["p999_us"].as_f64().unwrap_or(0.0);
    let ratio = if p999(&probe_json) > 0.0 {
        p999(&send_json) / p999(&probe_json)
    } else {
        0.0
    };
    // run.sh pastes this line into a Python literal (it defines `null`, `true` and `false`).
    println!(
        "{}",
        json!({
            "probe": probe_json,
            "send": send_json,
            "send_secs": s.secs,
            "sends_per_s": s.all.len() as f64 / s.secs.max(f64::MIN_POSITIVE),
            "checkpoints": s.checkpoints,
            "min_checkpoints": a.min_checkpoints,
            "send_at_checkpoint": at_checkpoint,
            "p999_ratio": ratio,
            "target_ratio": TARGET_RATIO,
            "target_checkpoints": TARGET_CHECKPOINTS,
            "cache_mib": a.cache_mib,
            "checkpoint_ms": a.checkpoint_ms,
            "checkpoint_records": a.checkpoint_records,
            "rate": a.rate,
        })
    );
}
