//! A child process for the job, checkpoint and outbox kill tests. It opens a shared store,
//! does what its mode says and prints one line per step, after the step returned:
//!
//! ```text
//! READY                    store open
//! DONE <id>                a piece was completed
//! DEAD <id>                a piece was dead-lettered
//! ABANDONED <id>           a piece was abandoned
//! MARKED <n>               n progress keys are recorded on the held message
//! HALF                     the checkpoint worker stopped half-way and waits to be killed
//! COMMITTED <i>            the outbox transaction i committed (row and message)
//! IDLE                     the job worker found nothing more to do
//! ERR <kind> <text>        an unexpected error (exit status 2)
//! ```
//!
//! Usage: `pbx-tracker <mode> <store> <queue> [args…]`:
//! - `job-worker <seed>`: takes pieces until none comes for two seconds; one in eight is
//!   abandoned, one in eight dead-lettered, the rest completed.
//! - `checkpoint <keys> <stop-after>`: receives one message, records `user-0000`… one key at a
//!   time (each its own commit) up to `stop-after`, says HALF and waits to be killed.
//! - `outbox <count>`: `count` transactions, each writing row `order-<i>` of table `orders`
//!   and sending message `ship-<i>`.

use std::io::Write;
use std::time::Duration;

use postbox::{Queue, Store};
use postbox_testkit::Rng;

fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

macro_rules! say {
    ($($t:tt)*) => { say(format_args!($($t)*)) };
}

fn die(e: &postbox::Error) -> ! {
    say!("ERR {:?} {e}", e.kind());
    std::process::exit(2);
}

fn job_worker(q: &Queue, seed: u64) {
    let mut rng = Rng::new(seed);
    loop {
        let m = match q.receive(Duration::from_secs(2)) {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(e) => die(&e),
        };
        let id = m.id();
        match rng.below(8) {
            0 => match m.abandon() {
                Ok(()) => say!("ABANDONED {id}"),
                Err(e) if e.is_lock_lost() => {}
                Err(e) => die(e.error()),
            },
            1 => match m.dead_letter("Unreadable", "tile cannot be read") {
                Ok(()) => say!("DEAD {id}"),
                Err(e) if e.is_lock_lost() => {}
                Err(e) => die(e.error()),
            },
            _ => match m.complete() {
                Ok(()) => say!("DONE {id}"),
                Err(e) if e.is_lock_lost() => {}
                Err(e) => die(e.error()),
            },
        }
    }
    say!("IDLE");
}

fn checkpoint(q: &Queue, keys: u64, stop_after: u64) {
    let mut m = match q.receive(Duration::from_secs(10)) {
        Ok(Some(m)) => m,
        Ok(None) => {
            say!("ERR Timeout nothing to receive");
            std::process::exit(2);
        }
        Err(e) => die(&e),
    };
    for i in 0..keys.min(stop_after) {
        if let Err(e) = m.mark_done([format!("user-{i:04}")]) {
            die(&e);
        }
        say!("MARKED {}", i + 1);
    }
    say!("HALF");
    std::thread::sleep(Duration::from_secs(600));
}

fn outbox(store: &Store, q: &Queue, count: u64) {
    for i in 0..count {
        let mut tx = store.begin();
        let step = (|| {
            tx.table("orders")?
                .put(format!("order-{i}").as_bytes(), b"paid")?;
            tx.send(q, format!("ship-{i}").as_str())?;
            tx.commit()
        })();
        if let Err(e) = step {
            die(&e);
        }
        say!("COMMITTED {i}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: pbx-tracker <mode> <store> <queue> [args…]");
        std::process::exit(64);
    }
    let (mode, path, name, rest) = (&args[0], &args[1], &args[2], &args[3..]);
    let num = |i: usize| rest.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let store = Store::builder()
        .multi_process(true)
        .open(path)
        .unwrap_or_else(|e| die(&e));
    let q = store.open_queue(name).unwrap_or_else(|e| die(&e));
    say!("READY");
    match mode.as_str() {
        "job-worker" => job_worker(&q, num(0)),
        "checkpoint" => checkpoint(&q, num(0), num(1)),
        "outbox" => outbox(&store, &q, num(0)),
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(64);
        }
    }
    if let Err(e) = store.close() {
        die(&e);
    }
}
