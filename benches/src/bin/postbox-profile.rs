//! A fixed amount of one operation, for profilers (perf, callgrind) rather than for timing.
//!
//! `postbox-profile OP N [none|durable] [threads]` with OP one of `send`, `receive_complete`,
//! `send_batch100` (N calls of 100), `job_receive_complete` (as `receive_complete`, the messages
//! being pieces of one job), `raw_insert` / `raw_insert100` (raw redb, 1 or 100 inserts
//! per durable transaction, N inserts in all), `raw_indexed` / `raw_indexed32` (raw redb, 1 or
//! 32 inserts per durable transaction plus the index rows a send writes, see
//! `RawRedb::insert_indexed_batch`): does N of them on a fresh store in the
//! system temporary directory (or `POSTBOX_BENCH_DIR`) and prints the elapsed time.
//!
//! ```text
//! valgrind --tool=callgrind target/release/postbox-profile send 2000 none
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | head -60
//! ```

use std::time::{Duration, Instant};

use postbox::{Durability, Message, Store};
use postbox_benches as pb;

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "send".into());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let durability = match args.next().as_deref() {
        Some("durable") => Durability::Immediate,
        _ => Durability::None,
    };
    let threads: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let dir = pb::temp_dir("postbox-profile-");
    let body = pb::body(1024);
    if let Some(batch) = op.strip_prefix("raw_indexed") {
        // `raw_indexed` is one insert per transaction, `raw_indexed8` eight, and so on.
        let batch: u64 = batch.parse().unwrap_or(1).max(1);
        let mut db = pb::RawRedb::create(&dir.path().join("raw.redb"), false);
        let t = Instant::now();
        for _ in 0..n / batch {
            db.insert_indexed_batch(batch as usize, &body);
        }
        println!("{op}: {n} in {:?}", t.elapsed());
        return;
    }
    if let Some(batch) = op.strip_prefix("raw_insert") {
        // `raw_insert` is one insert per transaction, `raw_insert100` a hundred.
        let batch: u64 = batch.parse().unwrap_or(1).max(1);
        let mut db = pb::RawRedb::create(&dir.path().join("raw.redb"), false);
        if std::env::var_os("POSTBOX_PROFILE_PREGROW").is_some() {
            // Grow the file first and free the space again, so the measured commits reuse
            // pages instead of extending the file.
            for _ in 0..40 {
                db.insert_batch(1000, &body);
            }
            db.clear();
        }
        let t = Instant::now();
        for _ in 0..n / batch {
            db.insert_batch(batch as usize, &body);
        }
        println!("{op}: {n} in {:?}", t.elapsed());
        return;
    }
    let store = Store::builder()
        .durability(durability)
        .open(dir.path().join("profile.postbox"))
        .expect("open");
    let q = store.queue("profile").expect("queue");
    if op == "receive_complete" || op == "job_receive_complete" {
        let job = (op == "job_receive_complete")
            .then(|| store.create_job(Default::default()).expect("job"));
        let mut left = n;
        while left > 0 {
            let k = left.min(500);
            let msgs = (0..k).map(|_| Message::new(body.clone()));
            match &job {
                Some(job) => job.send_batch(&q, msgs).map(drop),
                None => q.send_batch(msgs).map(drop),
            }
            .expect("fill");
            left -= k;
        }
    }
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..n / threads {
                    match op.as_str() {
                        "send" => {
                            q.send(Message::new(body.clone())).expect("send");
                        }
                        "send_batch100" => {
                            q.send_batch((0..100).map(|_| Message::new(body.clone())))
                                .expect("send_batch");
                        }
                        "receive_complete" | "job_receive_complete" => {
                            let m = q
                                .receive(Duration::from_secs(5))
                                .expect("receive")
                                .expect("a message");
                            m.complete().expect("complete");
                        }
                        other => panic!("unknown op {other}"),
                    }
                }
            });
        }
    });
    let st = store.stats();
    println!(
        "{op}: {n} in {:?} ({} commits, {} operations)",
        t.elapsed(),
        st.commits,
        st.operations
    );
    if st.log_records > 0 {
        // Where a logged commit's time goes, per record.
        let per = |d: Duration| d.as_nanos() as f64 / 1e3 / st.log_records as f64;
        let lt = &st.log_timing;
        println!(
            "per logged record: run {:.1} us, apply {:.1} us, write {:.1} us, sync {:.1} us ({} records, {} checkpoints)",
            per(lt.run),
            per(lt.apply),
            per(lt.write),
            per(lt.sync),
            st.log_records,
            st.checkpoints
        );
    }
}
