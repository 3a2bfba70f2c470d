//! The bridge's speed against the broker's own, measured in one run on a private node:
//!
//! - **broker**: the broker's batched-confirm publish rate — `lapin` publishing 1 KiB
//!   persistent messages to a quorum queue with 1,000 confirms in flight (the bridge's
//!   default `in_flight`); measured before and after the bridge, the mean is the baseline;
//! - **outgoing**: a local queue of the same messages drained into a quorum queue;
//! - **incoming**: that quorum queue consumed into a local queue;
//! - **latency**: one message every 2 ms sent to a local queue and consumed from the broker
//!   by a plain `lapin` consumer; p50 and p99 of send → consume.
//!
//! `cargo bench -p postbox-bridge --bench forward`; `POSTBOX_BRIDGE_BENCH_MESSAGES` sets the
//! stream (default 20,000); `POSTBOX_BRIDGE_BENCH_OUT` also writes the Markdown table there.

// The RabbitMQ harness runs on Unix only.
#[cfg(not(unix))]
fn main() {
    eprintln!("the bridge benchmark needs the RabbitMQ harness, which runs on Unix only");
}

#[cfg(unix)]
fn main() {
    unix::main();
}

#[cfg(unix)]
mod unix {

    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use futures_util::StreamExt;
    use lapin::options::{
        BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions,
    };
    use lapin::types::{AMQPValue, FieldTable};
    use lapin::{BasicProperties, Connection, ConnectionProperties};
    use postbox::{Message, Store};
    use postbox_bridge::{Bridge, BridgeConfig, LinkConfig};
    use postbox_testkit::{broker, env_u64};

    const BODY: usize = 1024;
    const WINDOW: usize = 1000;

    fn quorum() -> FieldTable {
        let mut t = FieldTable::default();
        t.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
        t
    }

    async fn declare(ch: &lapin::Channel, q: &str) {
        ch.queue_declare(
            q.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            quorum(),
        )
        .await
        .expect("declare");
    }

    /// Publishes `n` messages with `WINDOW` confirms in flight; messages per second.
    async fn broker_publish(uri: &str, q: &str, n: u64) -> f64 {
        let conn = Connection::connect(uri, ConnectionProperties::default())
            .await
            .expect("connect");
        let ch = conn.create_channel().await.expect("channel");
        declare(&ch, q).await;
        ch.confirm_select(Default::default())
            .await
            .expect("confirms");
        let body = vec![b'x'; BODY];
        let mut pending = std::collections::VecDeque::new();
        let t = Instant::now();
        for i in 0..n {
            let c = ch
                .basic_publish(
                    "".into(),
                    q.into(),
                    BasicPublishOptions::default(),
                    &body,
                    BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_message_id(format!("b{i}").into()),
                )
                .await
                .expect("publish");
            pending.push_back(c);
            if pending.len() >= WINDOW {
                let c = pending.pop_front().expect("one");
                assert!(c.await.expect("confirm").is_ack());
            }
        }
        for c in pending {
            assert!(c.await.expect("confirm").is_ack());
        }
        let rate = n as f64 / t.elapsed().as_secs_f64();
        let _ = conn.close(200, "done".into()).await;
        rate
    }

    fn wait(b: &Bridge, n: u64) {
        while b.stats().forwarded() < n {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn micros_now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }

    pub fn main() {
        if let Err(why) = broker::available() {
            println!("SKIPPED: rabbitmq-server is not installed: {why}");
            return;
        }
        let n = env_u64("POSTBOX_BRIDGE_BENCH_MESSAGES", 20_000);
        let node = broker::Node::start().expect("node");
        let uri = node.amqp_uri();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(dir.path().join("bench.postbox")).expect("store");

        // Warm the node (its first quorum queue, code loading) out of the figures.
        rt.block_on(broker_publish(&uri, "warm", 2000));
        let before = rt.block_on(broker_publish(&uri, "baseline-1", n));

        let out = store.queue("out").expect("out");
        for chunk in 0..n.div_ceil(1000) {
            let k = (n - chunk * 1000).min(1000);
            out.send_batch((0..k).map(|_| Message::new(vec![b'x'; BODY])))
                .expect("fill");
        }
        let t = Instant::now();
        let b = Bridge::start(
            &store,
            BridgeConfig::new(&uri).link(LinkConfig::outgoing("out", "forwarded")),
        )
        .expect("bridge");
        wait(&b, n);
        let outgoing = n as f64 / t.elapsed().as_secs_f64();
        b.stop();

        let t = Instant::now();
        let b = Bridge::start(
            &store,
            BridgeConfig::new(&uri).link(LinkConfig::incoming("forwarded", "in")),
        )
        .expect("bridge");
        wait(&b, n);
        let incoming = n as f64 / t.elapsed().as_secs_f64();
        b.stop();

        let after = rt.block_on(broker_publish(&uri, "baseline-2", n));
        let baseline = (before + after) / 2.0;

        // Latency: paced sends, a plain consumer on the far side.
        let samples = env_u64("POSTBOX_BRIDGE_BENCH_LATENCY", 2000);
        let lat = store.queue("lat").expect("lat");
        let b = Bridge::start(
            &store,
            BridgeConfig::new(&uri).link(LinkConfig::outgoing("lat", "latency")),
        )
        .expect("bridge");
        let consumer = rt.spawn({
            let uri = uri.clone();
            async move {
                let conn = Connection::connect(&uri, ConnectionProperties::default())
                    .await
                    .expect("connect");
                let ch = conn.create_channel().await.expect("channel");
                declare(&ch, "latency").await;
                let mut c = ch
                    .basic_consume(
                        "latency".into(),
                        "bench".into(),
                        BasicConsumeOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .expect("consume");
                let mut took = Vec::new();
                while (took.len() as u64) < samples {
                    let d = c.next().await.expect("delivery").expect("ok");
                    let now = micros_now();
                    let sent: u64 = std::str::from_utf8(&d.data)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(now);
                    took.push(now.saturating_sub(sent));
                    d.ack(BasicAckOptions::default()).await.expect("ack");
                }
                took
            }
        });
        assert!(b.wait_connected(Duration::from_secs(30)));
        for _ in 0..samples {
            lat.send(micros_now().to_string()).expect("send");
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut took = rt.block_on(consumer).expect("consumer");
        b.stop();
        took.sort_unstable();
        let pct = |p: f64| took[((took.len() - 1) as f64 * p) as usize] as f64 / 1000.0;

        let table = format!(
            "| measure | msgs/s | vs broker publish |\n|---|---|---|\n\
         | broker: batched-confirm publish (1,000 in flight, mean of before {before:.0} and after {after:.0}) | {baseline:.0} | 1.00× |\n\
         | bridge outgoing: local queue → quorum queue | {outgoing:.0} | {:.2}× |\n\
         | bridge incoming: quorum queue → local queue | {incoming:.0} | {:.2}× |\n\n\
         Latency, local send → remote consume, one message every 2 ms ({samples} samples): \
         p50 {:.2} ms, p99 {:.2} ms.\n",
            outgoing / baseline,
            incoming / baseline,
            pct(0.50),
            pct(0.99),
        );
        println!("{n} messages of {BODY} bytes\n\n{table}");
        if let Ok(path) = std::env::var("POSTBOX_BRIDGE_BENCH_OUT") {
            std::fs::write(path, &table).expect("write the table");
        }
    }
}
