//! A child process for the idle wake-up measurement (tests/idle/measure.py): it opens a store,
//! sets up one idle scenario, prints `IDLE` and then waits for nothing, forever, until killed.
//!
//! Usage: `pbx-idle <store> <open|receive|processor> [multi]`.
//!
//! - `open`: the store stays open, nothing waits.
//! - `receive`: the main thread blocks in `Queue::receive_blocking` on an empty queue.
//! - `processor`: a processor with the default workers on an empty queue.
//!
//! With `multi`, the store is opened with `multi_process(true)`.

use std::io::Write;

use postbox::{Delivery, Processor, Store};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 || args.len() > 3 || args.get(2).is_some_and(|m| m != "multi") {
        eprintln!("usage: pbx-idle <store> <open|receive|processor> [multi]");
        std::process::exit(64);
    }
    let multi = args.len() == 3;
    let store = Store::builder()
        .multi_process(multi)
        .open(&args[0])
        .unwrap_or_else(|e| fail(&e));
    let queue = store.queue("idle").unwrap_or_else(|e| fail(&e));
    let idle = || {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "IDLE");
        let _ = out.flush();
    };
    match args[1].as_str() {
        "open" => {
            idle();
            loop {
                std::thread::park();
            }
        }
        "receive" => {
            idle();
            match queue.receive_blocking() {
                Ok(_) => fail_text("a message arrived on a queue nobody sends to"),
                Err(e) => fail(&e),
            }
        }
        "processor" => {
            let _p = Processor::builder(&queue)
                .start(|_d: &Delivery| -> Result<(), std::io::Error> { Ok(()) })
                .unwrap_or_else(|e| fail(&e));
            idle();
            loop {
                std::thread::park();
            }
        }
        other => fail_text(&format!("unknown scenario {other}")),
    }
}

fn fail(e: &postbox::Error) -> ! {
    fail_text(&e.to_string())
}

fn fail_text(text: &str) -> ! {
    eprintln!("pbx-idle: {text}");
    std::process::exit(2);
}
