//! A child process for the processor kill test: it opens a shared store and runs a processor
//! whose handler notifies users, recording each with `Delivery::mark_done`; it prints one line
//! per step, after the step returned:
//!
//! ```text
//! READY                    store open, processor started
//! MARKED <key>             the checkpoint for <key> committed
//! HALF                     <stop-after> keys recorded: the handler waits to be killed
//! ERR <kind> <text>        an unexpected error (exit status 2)
//! ```
//!
//! Usage: `pbx-processor <store> <queue> <users> <stop-after> <plain|transactional>`.

use std::io::Write;
use std::time::Duration;

use postbox::{Delivery, Processor, Store};

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

/// Seed 003's workflow, stopped half-way: skip the users recorded, notify and record the
/// others one by one; after `stop_after` of them, wait to be killed with the message locked.
fn notify(d: &Delivery, users: u64, stop_after: u64) -> postbox::Result<()> {
    let done = d.done_keys()?;
    let mut marked = 0;
    for u in 0..users {
        let key = format!("user-{u:03}");
        if done.contains(&key) {
            continue;
        }
        d.mark_done([key.as_str()])?;
        say!("MARKED {key}");
        marked += 1;
        if marked == stop_after {
            say!("HALF");
            loop {
                std::thread::sleep(Duration::from_secs(600));
            }
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 5 {
        eprintln!(
            "usage: pbx-processor <store> <queue> <users> <stop-after> <plain|transactional>"
        );
        std::process::exit(64);
    }
    let num = |s: &str| s.parse::<u64>().unwrap_or(0);
    let (users, stop_after) = (num(&args[2]), num(&args[3]));
    let store = Store::builder()
        .multi_process(true)
        .open(&args[0])
        .unwrap_or_else(|e| die(&e));
    let q = store.open_queue(&args[1]).unwrap_or_else(|e| die(&e));
    let b = Processor::builder(&q).workers(2);
    let started = match args[4].as_str() {
        "transactional" => b.start_transactional(move |d, _tx| notify(d, users, stop_after)),
        _ => b.start(move |d| notify(d, users, stop_after)),
    };
    let _processor = started.unwrap_or_else(|e| die(&e));
    say!("READY");
    loop {
        std::thread::sleep(Duration::from_secs(600));
    }
}
