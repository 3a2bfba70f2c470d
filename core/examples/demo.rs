//! The postbox demo: post 10,000 jobs to a durable store and process them with 4 receiver
//! threads, each job inside a transaction that completes it and records its result atomically.
//!
//! ```text
//! cargo run --release --example demo [-- --jobs N --workers N --path FILE]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use postbox::{Message, QueueOptions, Store};

struct Args {
    jobs: u64,
    workers: usize,
    path: Option<std::path::PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        jobs: 10_000,
        workers: 4,
        path: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--jobs" => args.jobs = value()?.parse().map_err(|e| format!("--jobs: {e}"))?,
            "--workers" => {
                args.workers = value()?.parse().map_err(|e| format!("--workers: {e}"))?
            }
            "--path" => args.path = Some(value()?.into()),
            other => {
                return Err(format!(
                    "unknown argument {other:?}; use --jobs N --workers N --path FILE"
                ));
            }
        }
    }
    Ok(args)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let tmp = tempfile::tempdir()?;
    let path = args
        .path
        .clone()
        .unwrap_or_else(|| tmp.path().join("demo.postbox"));
    let store = Store::open(&path)?;
    let jobs = store.queue_with("jobs", QueueOptions::default().max_deliveries(5))?;
    let results = store.queue("results")?;
    println!("store: {}", path.display());

    // Post the work, 100 jobs per atomic batch.
    let t0 = Instant::now();
    for chunk in (0..args.jobs).collect::<Vec<_>>().chunks(100) {
        jobs.send_batch(chunk.iter().map(|n| {
            Message::new(format!("resize image-{n:05}.png to 256x256"))
                .label("resize")
                .priority((n % 8) as u8)
                .property("job", n.to_string())
        }))?;
    }
    let posted = t0.elapsed();
    println!(
        "posted {} jobs in {:.2?} ({:.0} msgs/s, durable, batches of 100)",
        args.jobs,
        posted,
        args.jobs as f64 / posted.as_secs_f64()
    );

    // Process them: each job is received, "worked" and answered inside one transaction.
    let done = Arc::new(AtomicU64::new(0));
    let t1 = Instant::now();
    let handles: Vec<_> = (0..args.workers)
        .map(|_| {
            let (store, jobs, results, done) =
                (store.clone(), jobs.clone(), results.clone(), done.clone());
            std::thread::spawn(move || -> postbox::Result<()> {
                loop {
                    let mut tx = store.begin();
                    let Some(job) = tx.receive(&jobs, Duration::from_millis(200))? else {
                        return Ok(());
                    };
                    let checksum = job
                        .body()
                        .iter()
                        .fold(0u32, |h, b| h.rotate_left(5) ^ u32::from(*b));
                    tx.send(
                        &results,
                        Message::new(format!("{checksum:08x}"))
                            .correlation_id(job.id().to_string()),
                    )?;
                    tx.commit()?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "worker panicked")??;
    }
    let processed = t1.elapsed();
    let n = done.load(Ordering::Relaxed);
    println!(
        "processed {n} jobs with {} workers in {:.2?} ({:.0} msgs/s, one durable transaction each)",
        args.workers,
        processed,
        n as f64 / processed.as_secs_f64()
    );

    let js = jobs.stats()?;
    let rs = results.stats()?;
    let st = store.stats();
    println!(
        "jobs:    active {} locked {} scheduled {} dead-lettered {}",
        js.active, js.locked, js.scheduled, js.dead_lettered
    );
    println!("results: active {} ({} bytes)", rs.active, rs.bytes);
    println!(
        "group commit: {} operations in {} commits ({:.1} per commit)",
        st.operations,
        st.commits,
        st.operations as f64 / st.commits.max(1) as f64
    );
    if js.active + js.locked + js.scheduled + js.dead_lettered != 0 || rs.active != args.jobs {
        return Err("counts do not add up".into());
    }
    Ok(())
}
