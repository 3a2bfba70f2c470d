//! The postbox demo: post 10,000 jobs to a durable store and process them with a 4-worker
//! processor, each job inside a transaction that completes it and records its result atomically.
//!
//! ```text
//! cargo run --release --example demo [-- --jobs N --workers N --path FILE]
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

use postbox::{Message, Processor, QueueOptions, Store};

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

    // Process them with a processor: 4 workers, each job received, "worked" and answered inside
    // one transaction, so a job is gone exactly when its result exists.
    let t1 = Instant::now();
    let answers = results.clone();
    let processor = Processor::builder(&jobs)
        .workers(args.workers)
        .start_transactional(move |job, tx| -> postbox::Result<()> {
            let checksum = job
                .body()
                .iter()
                .fold(0u32, |h, b| h.rotate_left(5) ^ u32::from(*b));
            tx.send(
                &answers,
                Message::new(format!("{checksum:08x}")).correlation_id(job.id().to_string()),
            )?;
            Ok(())
        })?;
    let mut out = std::io::stdout();
    loop {
        let s = processor.stats();
        let elapsed = t1.elapsed().as_secs_f64();
        write!(
            out,
            "\r  {:>6}/{} done  {:>5.0} msgs/s  {} in flight  {} failed  ",
            s.processed,
            args.jobs,
            s.processed as f64 / elapsed.max(1e-9),
            s.in_flight,
            s.failed
        )?;
        out.flush()?;
        if s.processed + s.dead_lettered >= args.jobs {
            break;
        }
        // Screen refresh only; the work does not depend on this loop.
        std::thread::sleep(Duration::from_millis(100));
    }
    let report = processor.shutdown(Duration::from_secs(10));
    let processed = t1.elapsed();
    let n = report.processed;
    println!(
        "\nprocessed {n} jobs with {} workers in {:.2?} ({:.0} msgs/s, one durable transaction each)",
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
