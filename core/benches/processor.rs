//! Processor throughput with and without the combined commit (settle the finished message and
//! lock the next one in the same durable commit), on a durable store.
//!
//! Run: `cargo bench -p postbox --bench processor`. Each iteration processes `MESSAGES` no-op
//! messages from start to a finished shutdown; the commits per message are printed once per
//! configuration.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use postbox::{Message, Processor, Store};

const MESSAGES: usize = 100;

/// Processes `MESSAGES` messages once; returns the elapsed time and the commits it took.
fn run_once(workers: usize, combined: bool) -> (Duration, u64) {
    // On the real disk (not a tmpfs), so that a commit costs a real fsync.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let store = Store::open(dir.path().join("bench.postbox")).expect("open");
    let q = store.queue("bench").expect("queue");
    q.send_batch((0..MESSAGES).map(|i| Message::new(format!("m{i}"))))
        .expect("send");
    let (tx, rx) = mpsc::channel();
    let before = store.stats().commits;
    let t = Instant::now();
    let p = Processor::builder(&q)
        .workers(workers)
        .combined_commit(combined)
        .start(move |_| -> Result<(), String> {
            let _ = tx.send(());
            Ok(())
        })
        .expect("start");
    for _ in 0..MESSAGES {
        rx.recv().expect("handler ran");
    }
    let report = p.shutdown(Duration::from_secs(60));
    let elapsed = t.elapsed();
    assert_eq!(report.processed, MESSAGES as u64);
    (elapsed, store.stats().commits - before)
}

fn processor(c: &mut Criterion) {
    let mut g = c.benchmark_group("processor_durable");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(MESSAGES as u64));
    for workers in [1, 4] {
        for combined in [true, false] {
            let name = if combined { "combined" } else { "separate" };
            let (_, commits) = run_once(workers, combined);
            eprintln!(
                "processor {name} commit, {workers} worker(s): {:.2} commits per message",
                commits as f64 / MESSAGES as f64
            );
            g.bench_function(BenchmarkId::new(name, format!("{workers}w")), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| run_once(workers, combined).0).sum())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, processor);
criterion_main!(benches);
