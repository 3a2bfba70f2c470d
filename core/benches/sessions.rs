//! Session-mode processor throughput: 4 workers over 20 groups, against the plain processor on
//! the same messages (a queue without sessions), on a durable store.
//!
//! Run: `cargo bench -p postbox --bench sessions`. Each iteration sends `GROUPS * PER_GROUP`
//! no-op messages and processes them to a finished shutdown.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use postbox::{Message, Processor, QueueOptions, Store};

const GROUPS: usize = 20;
const PER_GROUP: usize = 10;

fn run_once(sessions: bool) -> Duration {
    // On the real disk (not a tmpfs), so that a commit costs a real fsync.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let store = Store::open(dir.path().join("bench.postbox")).expect("open");
    let q = store
        .queue_with("bench", QueueOptions::default().requires_session(sessions))
        .expect("queue");
    let n = GROUPS * PER_GROUP;
    q.send_batch((0..n).map(|i| Message::new(format!("m{i}")).group(format!("g{}", i % GROUPS))))
        .expect("send");
    let (tx, rx) = mpsc::channel();
    let t = Instant::now();
    let p = Processor::builder(&q)
        .workers(4)
        .sessions(sessions)
        .start(move |_| -> Result<(), String> {
            let _ = tx.send(());
            Ok(())
        })
        .expect("start");
    for _ in 0..n {
        rx.recv().expect("handler ran");
    }
    let report = p.shutdown(Duration::from_secs(60));
    assert_eq!(report.processed, n as u64);
    t.elapsed()
}

fn sessions(c: &mut Criterion) {
    let mut g = c.benchmark_group("processor_4w_20groups_durable");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements((GROUPS * PER_GROUP) as u64));
    for (name, on) in [("plain", false), ("sessions", true)] {
        g.bench_function(BenchmarkId::new(name, "4w"), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run_once(on)).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, sessions);
criterion_main!(benches);
