//! What tracking work costs on a durable store, one caller: a job piece's send and its
//! receive + complete against a plain message's; a request/reply round trip; a transaction
//! that writes an application row with its send against one that only sends; a receive +
//! mark_done + complete against a receive + complete.
//!
//! Run: `cargo bench -p postbox --bench tracking`.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use postbox::{Message, Store};

fn tracking(c: &mut Criterion) {
    let mut g = c.benchmark_group("tracking_durable");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    // On the real disk (not a tmpfs), so that a commit costs a real fsync.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let store = Store::open(dir.path().join("bench.postbox")).expect("open");
    let body = vec![7u8; 1024];
    let q = store.queue("work").expect("queue");
    let job = store.create_job(Default::default()).expect("job");
    let sec = Duration::from_secs(1);

    g.bench_function("send/plain", |b| {
        b.iter(|| q.send(Message::new(body.clone())).expect("send"))
    });
    g.bench_function("receive_complete/plain", |b| {
        b.iter(|| {
            let m = q.receive(sec).expect("receive");
            m.map(|m| m.complete().expect("complete"))
        })
    });
    q.purge().expect("purge");
    g.bench_function("send/job_piece", |b| {
        b.iter(|| job.send(&q, Message::new(body.clone())).expect("send"))
    });
    g.bench_function("receive_complete/job_piece", |b| {
        b.iter(|| {
            let m = q.receive(sec).expect("receive");
            m.map(|m| m.complete().expect("complete"))
        })
    });
    q.purge().expect("purge");

    let mut n = 0u64;
    g.bench_function("tx_send/plain", |b| {
        b.iter(|| {
            let mut tx = store.begin();
            tx.send(&q, Message::new(body.clone())).expect("send");
            tx.commit().expect("commit")
        })
    });
    g.bench_function("tx_send/with_row", |b| {
        b.iter(|| {
            n += 1;
            let mut tx = store.begin();
            let id = tx.send(&q, Message::new(body.clone())).expect("send");
            let mut t = tx.table("orders").expect("table");
            t.put(&n.to_be_bytes(), &id.get().to_le_bytes())
                .expect("put");
            tx.commit().expect("commit")
        })
    });
    q.purge().expect("purge");

    q.send_batch((0..50_000).map(|_| Message::new(body.clone())))
        .expect("fill");
    g.bench_function("receive_mark_done_complete", |b| {
        b.iter(|| {
            let mut m = q.receive(sec).expect("receive").expect("a message");
            m.mark_done(["step-1"]).expect("mark");
            m.complete().expect("complete")
        })
    });
    q.purge().expect("purge");

    let service = store.queue("service").expect("queue");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let responder = service.clone();
        let stop = &stop;
        s.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(m) = responder
                    .receive(Duration::from_millis(100))
                    .expect("receive")
                {
                    m.reply("ok").expect("reply");
                }
            }
        });
        g.bench_function("request_reply", |b| {
            b.iter(|| {
                service
                    .request("ping", 5 * sec)
                    .expect("request")
                    .expect("a reply")
            })
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    g.finish();
}

criterion_group!(benches, tracking);
criterion_main!(benches);
