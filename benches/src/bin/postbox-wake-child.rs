//! Child process of the cross-process wake-up benchmark.
//!
//! `postbox-wake-child STORE QUEUE` opens STORE in multi-process mode, prints `ready`, then
//! loops: a blocking receive on QUEUE; on each message, prints the nanoseconds between the
//! sender's timestamp (the body, nanoseconds since the Unix epoch as text) and the moment the
//! receive returned, then completes it. The body `quit` ends the loop.

use std::io::Write;
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(queue)) = (args.next(), args.next()) else {
        eprintln!("usage: postbox-wake-child STORE QUEUE");
        std::process::exit(2);
    };
    let store = postbox::Store::builder()
        .multi_process(true)
        .verify_on_open(false)
        .open(&path)
        .expect("open store");
    let q = store.queue(&queue).expect("open queue");
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")
        .and_then(|()| out.flush())
        .expect("stdout");
    loop {
        let Some(msg) = q.receive(Duration::from_secs(60)).expect("receive") else {
            break;
        };
        let now = postbox_benches::epoch_nanos();
        let body = String::from_utf8_lossy(msg.body()).into_owned();
        if body == "quit" {
            msg.complete().expect("complete");
            break;
        }
        let sent: u128 = body.parse().unwrap_or(now);
        writeln!(out, "{}", now.saturating_sub(sent))
            .and_then(|()| out.flush())
            .expect("stdout");
        msg.complete().expect("complete");
    }
}
