//! A child process for the cross-process tests. It opens a store, does what its arguments say,
//! and prints one line per thing it did — always *after* the call returned, and flushed — so the
//! parent can verify it and synchronize on it:
//!
//! ```text
//! READY                 store open (and setup done)
//! SENT <id> <body>      a send returned Ok
//! LOCKED <id> <dc>      a receive returned a locked message with delivery count <dc>
//! HELD                  every requested lock is held; the child now waits to be killed
//! WAITING               about to block in receive
//! GOT <id> <dc> <body>  a blocking receive returned a message
//! DONE <id> <body>      a complete returned Ok
//! VALUE <v>             an increment of an application table counter returned v
//! CONFLICTS <n>         a counting thread's transactions met n conflicts and ran again
//! ERR <kind> <text>     an unexpected error (exit status 2)
//! END                   finished normally
//! ```
//!
//! Usage: `pbx-child <mode> <store> <queue> [args…]`; the modes are documented on their
//! functions. Every mode opens the store with `multi_process(true)` except those ending in
//! `-single` (`hold-single`, `session-hold-single`), `logged` (single-process, through the
//! write-ahead log) and `open-only` (a single-process open, to be killed during it).

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postbox::{Message, Queue, QueueOptions, Received, Store};

fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // The parent may have stopped reading (it killed us or gave up): nothing to do then.
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

trait OrDie<T> {
    fn or_die(self) -> T;
}

impl<T> OrDie<T> for postbox::Result<T> {
    fn or_die(self) -> T {
        self.unwrap_or_else(|e| die(&e))
    }
}

impl OrDie<()> for Result<(), postbox::SettleError> {
    fn or_die(self) {
        self.map_err(postbox::Error::from).or_die()
    }
}

fn open(path: &str, multi: bool) -> Store {
    Store::builder().multi_process(multi).open(path).or_die()
}

fn body(r: &Received) -> String {
    String::from_utf8_lossy(r.body()).into_owned()
}

/// Blocks until the parent closes our stdin (or kills us).
fn wait_for_stdin_eof() {
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// `mixed <tag> <count> <receivers>`: one thread sends `count` messages with bodies
/// `<tag>-<i>` while `receivers` threads receive and complete whatever arrives (from any
/// process), until the parent closes stdin.
fn mixed(q: &Queue, args: &[String]) {
    let tag = args[0].clone();
    let count: u64 = args[1].parse().expect("count");
    let receivers: usize = args[2].parse().expect("receivers");
    let stop = Arc::new(AtomicBool::new(false));
    say!("READY");
    let mut threads = Vec::new();
    for _ in 0..receivers {
        let (q, stop) = (q.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                // The timeout only bounds how late the stop flag is noticed.
                if let Some(m) = q.receive(Duration::from_millis(200)).or_die() {
                    let (id, b) = (m.id(), body(&m));
                    m.complete().or_die();
                    say!("DONE {id} {b}");
                }
            }
        }));
    }
    let sender = {
        let q = q.clone();
        std::thread::spawn(move || {
            for i in 0..count {
                let b = format!("{tag}-{i}");
                let id = q.send(Message::new(b.clone())).or_die();
                say!("SENT {id} {b}");
            }
            say!("SENT-ALL");
        })
    };
    sender.join().expect("sender");
    wait_for_stdin_eof();
    stop.store(true, Ordering::Release);
    for t in threads {
        t.join().expect("receiver");
    }
}

/// `hold <n>`: locks `n` messages (waiting for each), prints them, then holds the locks until
/// killed (or until stdin closes, when it exits without settling).
fn hold(q: &Queue, args: &[String]) {
    let n: usize = args[0].parse().expect("n");
    let mut held = Vec::new();
    say!("READY");
    while held.len() < n {
        match q.receive(Duration::from_secs(60)).or_die() {
            Some(m) => {
                say!("LOCKED {} {}", m.id(), m.delivery_count());
                held.push(m);
            }
            None => {
                say!("ERR Timeout no message to hold");
                std::process::exit(2);
            }
        }
    }
    say!("HELD");
    wait_for_stdin_eof();
    std::mem::forget(held);
}

/// `session-hold <group>`: accepts session `group` of the queue (which requires sessions),
/// receives its next message, prints `LOCKED <id> <dc>` and `HELD`, then holds the session
/// lock and the message lock until killed (or until stdin closes, when it exits without
/// settling or releasing).
fn session_hold(q: &Queue, args: &[String]) {
    let group = &args[0];
    say!("READY");
    let Some(session) = q
        .accept_named_session(group, Duration::from_secs(60))
        .or_die()
    else {
        say!("ERR Timeout session {group} not accepted");
        std::process::exit(2);
    };
    let Some(m) = session.receive(Duration::from_secs(60)).or_die() else {
        say!("ERR Timeout no message in session {group}");
        std::process::exit(2);
    };
    say!("LOCKED {} {}", m.id(), m.delivery_count());
    say!("HELD");
    wait_for_stdin_eof();
    std::mem::forget(m);
    std::mem::forget(session);
}

/// `observe <n> <timeout_ms>`: blocks in receive until it got `n` messages, completing each;
/// prints `TIMEOUT` and exits 1 if one does not come within the timeout.
fn observe(q: &Queue, args: &[String]) {
    let n: usize = args[0].parse().expect("n");
    let timeout = Duration::from_millis(args[1].parse().expect("timeout"));
    say!("READY");
    for _ in 0..n {
        say!("WAITING");
        match q.receive(timeout).or_die() {
            Some(m) => {
                let (id, dc, b) = (m.id(), m.delivery_count(), body(&m));
                say!("GOT {id} {dc} {b}");
                m.complete().or_die();
                say!("DONE {id} {b}");
            }
            None => {
                say!("TIMEOUT");
                std::process::exit(1);
            }
        }
    }
}

/// `crash <iteration> <hold>`: locks up to `hold` messages without waiting, prints `READY`, then
/// sends `crash-<iteration>-<i>` forever, printing each id after its send returned — until the
/// parent kills it.
fn crash(q: &Queue, args: &[String]) {
    let iteration = &args[0];
    let n: usize = args[1].parse().expect("hold");
    let mut held = Vec::new();
    while held.len() < n {
        match q.try_receive().or_die() {
            Some(m) => {
                say!("LOCKED {} {}", m.id(), m.delivery_count());
                held.push(m);
            }
            None => break,
        }
    }
    say!("READY");
    for i in 0u64.. {
        let b = format!("crash-{iteration}-{i}");
        let id = q.send(Message::new(b.clone())).or_die();
        say!("SENT {id} {b}");
    }
}

/// `count <threads> <per_thread> <auto|tx>` (the "queue" argument names an application table):
/// prints READY, waits until the parent closes stdin (so that every process starts together),
/// then `threads` threads each add 1 to row `n` of the table `per_thread` times — `auto` with
/// `Table::increment` (one commit each), `tx` with `TxTable::increment` in a transaction that
/// is run again after a `Conflict` — printing `VALUE <v>` for each value an increment returned
/// (for `tx`, only once its transaction committed) and `CONFLICTS <n>` per thread.
fn count(store: &Store, table: &str, args: &[String]) {
    let threads: usize = args[0].parse().expect("threads");
    let per_thread: u64 = args[1].parse().expect("per_thread");
    let in_tx = match args[2].as_str() {
        "auto" => false,
        "tx" => true,
        other => panic!("count mode {other:?}"),
    };
    say!("READY");
    wait_for_stdin_eof();
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| {
                let mut values = Vec::with_capacity(per_thread as usize);
                let mut conflicts = 0u64;
                for _ in 0..per_thread {
                    let v = if in_tx {
                        loop {
                            let mut tx = store.begin();
                            let v = tx.table(table).or_die().increment(b"n", 1).or_die();
                            match tx.commit() {
                                Ok(()) => break v,
                                Err(e) if e.is_conflict() => conflicts += 1,
                                Err(e) => die(&e),
                            }
                        }
                    } else {
                        store.table(table).or_die().increment(b"n", 1).or_die()
                    };
                    values.push(v);
                }
                let mut out = String::new();
                for v in values {
                    out.push_str(&format!("VALUE {v}\n"));
                }
                out.push_str(&format!("CONFLICTS {conflicts}"));
                say!("{out}");
            });
        }
    });
}

/// `send-keys <window_ms> <key>…`: opens the queue with that `dedup_window` and sends one
/// message per key (body = key), printing `SENT <id> <key>`.
fn send_keys(store: &Store, name: &str, args: &[String]) {
    let window = Duration::from_millis(args[0].parse().expect("window"));
    let q = store
        .queue_with(name, QueueOptions::default().dedup_window(window))
        .or_die();
    say!("READY");
    for key in &args[1..] {
        let id = q.send(Message::new(key.clone()).message_key(key)).or_die();
        say!("SENT {id} {key}");
    }
}

/// `collate <collator> <series> <seq>…` (the queue argument is the destination): sends each
/// number of the series through the collator, then waits for stdin to close (or a SIGKILL).
fn collate(store: &Store, dest: &str, args: &[String]) {
    let dest = store.queue(dest).or_die();
    let c = store.collator(&args[0], &dest).or_die();
    say!("READY");
    for n in &args[2..] {
        let seq: u64 = n.parse().expect("sequence number");
        let body = format!("{}:{seq}", args[1]);
        let got = c
            .send(Message::new(body).group(args[1].clone()).sequence(seq))
            .or_die();
        say!("COLLATED {seq} {} {}", got.released.len(), got.duplicate);
    }
    say!("SENT-ALL");
    wait_for_stdin_eof();
}

/// `send <body>…`: sends one message per body.
fn send(q: &Queue, args: &[String]) {
    say!("READY");
    for b in args {
        let id = q.send(Message::new(b.clone())).or_die();
        say!("SENT {id} {b}");
    }
}

/// `churn <count>`: sends, receives and completes `count` messages one after the other, then
/// waits for stdin to close; used while another process reopens the store.
fn churn(q: &Queue, args: &[String]) {
    let count: u64 = args[0].parse().expect("count");
    say!("READY");
    for i in 0..count {
        let b = format!("churn-{i}");
        let id = q.send(Message::new(b.clone())).or_die();
        say!("SENT {id} {b}");
        if let Some(m) = q.try_receive().or_die() {
            let (id, b) = (m.id(), body(&m));
            m.complete().or_die();
            say!("DONE {id} {b}");
        }
    }
    say!("SENT-ALL");
    wait_for_stdin_eof();
}

/// `logged <tag> <checkpoint-bytes> [<checkpoint-interval-ms>]` (single-process, write-ahead log on, checkpoint every
/// `checkpoint-bytes` of log): until killed, two threads send (one message at a time, or a
/// batch of three), one receives and completes, and one moves messages in transactions
/// (receive, send a follow-up, commit). Prints READY, then SENT and DONE lines after each call
/// returned, and GOT when a receive returned (before the completion or commit, which a kill
/// may then land in).
fn logged(path: &str, name: &str, args: &[String]) {
    let tag = args[0].clone();
    let checkpoint_bytes: u64 = args[1].parse().expect("checkpoint bytes");
    let interval_ms: u64 = args
        .get(2)
        .map_or(1000, |a| a.parse().expect("interval ms"));
    let store = Store::builder()
        .log_checkpoints(checkpoint_bytes, Duration::from_millis(interval_ms))
        .open(path)
        .or_die();
    let q = store.queue(name).or_die();
    say!("READY");
    let mut threads = Vec::new();
    for t in 0..2 {
        let (q, tag) = (q.clone(), tag.clone());
        threads.push(std::thread::spawn(move || {
            for i in 0.. {
                if i % 4 == 3 {
                    let bodies: Vec<String> =
                        (0..3).map(|k| format!("{tag}-{t}-{i}.{k}")).collect();
                    let ids = q
                        .send_batch(bodies.iter().map(|b| Message::new(b.clone())))
                        .or_die();
                    for (id, b) in ids.iter().zip(&bodies) {
                        say!("SENT {id} {b}");
                    }
                } else {
                    let b = format!("{tag}-{t}-{i}");
                    let id = q.send(Message::new(b.clone())).or_die();
                    say!("SENT {id} {b}");
                }
            }
        }));
    }
    {
        let q = q.clone();
        threads.push(std::thread::spawn(move || {
            loop {
                if let Some(m) = q.receive(Duration::from_millis(100)).or_die() {
                    let (id, b) = (m.id(), body(&m));
                    say!("GOT {id}");
                    m.complete().or_die();
                    say!("DONE {id} {b}");
                }
            }
        }));
    }
    {
        let (q, store, tag) = (q.clone(), store.clone(), tag.clone());
        threads.push(std::thread::spawn(move || {
            for i in 0.. {
                let mut tx = store.begin();
                let Some(m) = tx.receive(&q, Duration::from_millis(100)).or_die() else {
                    continue;
                };
                let (id, b) = (m.id(), String::from_utf8_lossy(m.body()).into_owned());
                say!("GOT {id}");
                let next = format!("{tag}-tx-{i}");
                let sent = tx.send(&q, Message::new(next.clone())).or_die();
                tx.commit().or_die();
                say!("DONE {id} {b}");
                say!("SENT {sent} {next}");
            }
        }));
    }
    for t in threads {
        t.join().expect("logged thread");
    }
}

/// Opens a single-process store whose log is never checkpointed by the policy (no bytes or
/// time bound is reached), so everything written before an abort is still in the log,
/// whatever the machine's speed.
fn uncheckpointed(path: &str) -> Store {
    Store::builder()
        .log_checkpoints(u64::MAX, Duration::from_secs(3600))
        .open(path)
        .or_die()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: pbx-child <mode> <store> <queue> [args…]");
        std::process::exit(64);
    }
    let (mode, path, name, rest) = (&args[0], &args[1], &args[2], &args[3..]);
    if mode == "logged" {
        logged(path, name, rest);
        return;
    }
    if mode == "open-abort" {
        // Opens the store (replaying what its log holds), prints how many records that
        // replayed, and aborts before writing anything.
        let store = Store::open(path).or_die();
        say!("REPLAYED {}", store.stats().replayed_records);
        std::process::abort();
    }
    if mode == "send-rich-abort" {
        // Sends messages carrying every property a send can set to a single-process store
        // (so through the write-ahead log), prints SENT for each, then aborts: no close, no
        // checkpoint. The parent checks that replay gives every property back.
        let store = uncheckpointed(path);
        let q = store.queue(name).or_die();
        let n: u64 = rest[0].parse().expect("count");
        for i in 0..n {
            let id = q.send(postbox_tests::rich_message(i)).or_die();
            say!("SENT {id}");
        }
        let ids = q
            .send_batch((n..n + 3).map(postbox_tests::rich_message))
            .or_die();
        for id in ids {
            say!("SENT {id}");
        }
        std::process::abort();
    }
    if mode == "consume-abort" {
        // `consume-abort <store> <queue> <messages> <completions> <receipts>`: fills the queue
        // (with `receipts_to` an `audit` queue when <receipts> is 1), then runs the consume
        // loop (`complete_batch_and_receive`, one commit a message), printing `DONE <id>` for
        // each completion that returned, and aborts holding the last message received.
        let store = uncheckpointed(path);
        let opts = if rest[2] == "1" {
            store.queue("audit").or_die();
            QueueOptions::default().receipts_to("audit")
        } else {
            QueueOptions::default()
        };
        let q = store.queue_with(name, opts).or_die();
        let n: u64 = rest[0].parse().expect("messages");
        let completions: usize = rest[1].parse().expect("completions");
        for i in 0..n {
            let id = q.send(Message::new(format!("m{i}"))).or_die();
            say!("SENT {id}");
        }
        let mut held = q.receive_batch(1, Duration::ZERO).or_die();
        let mut done = 0;
        while !held.is_empty() && done < completions {
            let ids: Vec<_> = held.iter().map(|m| m.id()).collect();
            held = q
                .complete_batch_and_receive(held, 1, Duration::ZERO)
                .or_die();
            for id in ids {
                say!("DONE {id}");
                done += 1;
            }
        }
        for m in &held {
            say!("HELD {}", m.id());
        }
        std::process::abort();
    }
    if mode == "open-only" {
        // Opens the store (replaying what a crash left in its log) and waits to be killed: the
        // parent kills it at a random moment, often inside the open.
        let _store = Store::open(path).or_die();
        say!("OPENED");
        wait_for_stdin_eof();
        return;
    }
    let store = open(path, !mode.ends_with("-single"));
    if mode == "send-keys" {
        send_keys(&store, name, rest);
    } else if mode == "collate" {
        collate(&store, name, rest);
    } else if mode == "count" {
        count(&store, name, rest);
    } else {
        let q = store.queue(name).or_die();
        match mode.as_str() {
            "mixed" => mixed(&q, rest),
            "hold" | "hold-single" => hold(&q, rest),
            "session-hold" | "session-hold-single" => session_hold(&q, rest),
            "observe" => observe(&q, rest),
            "crash" => crash(&q, rest),
            "send" => send(&q, rest),
            "churn" => churn(&q, rest),
            other => {
                eprintln!("unknown mode {other}");
                std::process::exit(64);
            }
        }
    }
    store.close().or_die();
    say!("END");
}
