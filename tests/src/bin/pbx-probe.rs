//! `pbx-probe <store> <log:0|1> [read]`: opens the store (with or without the write-ahead log),
//! sends one message (or with `read`, only counts the queue) and closes it, then prints one line:
//! `OK <count>`, or `ERR <ErrorKind> <os error number or -1>` for the first call that failed.
//! The file-system refusal tests run it as another user, so it must not need anything but the
//! store's path.

use postbox::{Error, Store};

fn report(e: &Error) -> ! {
    println!("ERR {:?} {}", e.kind(), e.os_error().unwrap_or(-1));
    eprintln!("{e}");
    std::process::exit(0);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: pbx-probe <store> <log:0|1> [read]");
        std::process::exit(64);
    }
    let read_only = args.get(2).is_some_and(|a| a == "read");
    let store = Store::builder()
        .write_ahead_log(args[1] == "1")
        .open(&args[0])
        .unwrap_or_else(|e| report(&e));
    let q = store.queue("q").unwrap_or_else(|e| report(&e));
    if !read_only {
        q.send("from the probe").unwrap_or_else(|e| report(&e));
    }
    let n = q.len().unwrap_or_else(|e| report(&e));
    drop(q);
    store.close().unwrap_or_else(|e| report(&e));
    println!("OK {n}");
}
