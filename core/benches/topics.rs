//! Topic publish throughput with 1, 4 and 16 matching subscriptions, on a durable store, and
//! the commits each publish costs (one, whatever the fan-out).
//!
//! Run: `cargo bench -p postbox --bench topics`. One publish per iteration, one caller: the
//! figure to compare with a plain `Queue::send` (`send/durable`, also measured here).

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use postbox::{Filter, Message, Store};

fn topics(c: &mut Criterion) {
    let mut g = c.benchmark_group("topic_publish_durable");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    // On the real disk (not a tmpfs), so that a commit costs a real fsync.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let store = Store::open(dir.path().join("bench.postbox")).expect("open");
    let body = vec![7u8; 1024];

    let plain = store.queue("plain").expect("queue");
    g.bench_function("send/durable", |b| {
        b.iter(|| plain.send(Message::new(body.clone())).expect("send"))
    });
    plain.purge().expect("purge");

    for subs in [1usize, 4, 16] {
        let topic = store.topic(&format!("t{subs}")).expect("topic");
        // Every subscription matches; one more that never does, as filters cost too.
        for i in 0..subs {
            let f = Filter::correlation().label("order");
            topic.subscribe(&format!("s{i}"), f).expect("subscribe");
        }
        topic
            .subscribe("other", Filter::correlation().label("refund"))
            .expect("subscribe");
        let publish = || {
            let m = Message::new(body.clone()).label("order");
            assert_eq!(topic.publish(m).expect("publish"), subs);
        };
        let before = store.stats().commits;
        for _ in 0..20 {
            publish();
        }
        eprintln!(
            "topic with {subs} matching subscription(s): {:.2} commits per publish",
            (store.stats().commits - before) as f64 / 20.0
        );
        g.bench_function(BenchmarkId::new("publish", format!("{subs}subs")), |b| {
            b.iter(publish)
        });
        store.delete_queue(topic.name()).expect("delete");
    }
    g.finish();
}

criterion_group!(benches, topics);
criterion_main!(benches);
