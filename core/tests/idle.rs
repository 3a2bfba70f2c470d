//! Invariant 15, silent when idle: an open store, waiting receivers (blocking, async, by
//! session) and idle processors do not wake the process, single-process or shared. Counted on
//! this process's threads from Linux's `/proc` (tests/idle/measure.py does the same across
//! languages, one process per scenario).
//!
//! The only test of this binary, so that no other test's threads are counted.

#![cfg(target_os = "linux")]

use std::collections::HashMap;
use std::time::Duration;

use postbox::{Processor, QueueOptions, Store};

/// Context switches (voluntary and not) per thread of this process, with the thread's name,
/// leaving out the calling thread (which sleeps through the window).
fn switches() -> HashMap<u32, (String, u64)> {
    let me = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse::<u32>().ok());
    let mut out = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        if Some(tid) == me {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue; // ended meanwhile
        };
        let mut name = String::new();
        let mut n = 0;
        for line in status.lines() {
            if let Some(v) = line.strip_prefix("Name:") {
                name = v.trim().to_owned();
            }
            if line.starts_with("voluntary_ctxt_switches:")
                || line.starts_with("nonvoluntary_ctxt_switches:")
            {
                n += line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        out.insert(tid, (name, n));
    }
    out
}

/// Waiters and processors of every kind on `store`, all idle; returns what keeps them.
fn idle_scenarios(store: &Store) -> (Vec<Processor>, Vec<std::thread::JoinHandle<()>>) {
    let plain = store.queue("plain").unwrap();
    let sessions = store
        .queue_with("sessions", QueueOptions::default().requires_session(true))
        .unwrap();
    let waiting = store.queue("waiting").unwrap();
    let processors = vec![
        Processor::builder(&plain)
            .start(|_| -> Result<(), String> { Ok(()) })
            .unwrap(),
        Processor::builder(&sessions)
            .sessions(true)
            .start(|_| -> Result<(), String> { Ok(()) })
            .unwrap(),
    ];
    let blocking = {
        let q = waiting.clone();
        std::thread::spawn(move || {
            assert!(matches!(q.receive_blocking(), Err(postbox::Error::Closed)))
        })
    };
    let timed = {
        let q = waiting.clone();
        std::thread::spawn(move || assert!(q.receive(Duration::from_secs(3600)).is_err()))
    };
    let future = std::thread::spawn(move || {
        assert!(futures::executor::block_on(waiting.receive_async(None)).is_err());
    });
    (processors, vec![blocking, timed, future])
}

#[test]
fn nothing_wakes_an_idle_process() {
    let dir = tempfile::tempdir().unwrap();
    let single = Store::open(dir.path().join("single")).unwrap();
    let shared = Store::builder()
        .multi_process(true)
        .open(dir.path().join("shared"))
        .unwrap();
    let (p1, t1) = idle_scenarios(&single);
    let (p2, t2) = idle_scenarios(&shared);
    // Start-up work ends (first receives, the session workers' first looks).
    std::thread::sleep(Duration::from_millis(500));
    let window = Duration::from_secs(3);
    let before = switches();
    std::thread::sleep(window);
    let after = switches();
    let mut woke: Vec<(String, u64)> = after
        .iter()
        .map(|(tid, (name, n))| (name.clone(), n - before.get(tid).map_or(0, |b| b.1)))
        .filter(|(_, n)| *n > 0)
        .collect();
    woke.sort();
    let total: u64 = woke.iter().map(|(_, n)| n).sum();
    // The shared store looks at its file every five seconds while something waits (see
    // engine/poll.rs): once in the window at most, which wakes a thread or two.
    assert!(
        total <= 3,
        "{total} wake-ups in {window:?} across {} threads: {woke:?}",
        after.len()
    );
    for p in p1.iter().chain(&p2) {
        assert!(p.shutdown(Duration::from_secs(30)).finished);
    }
    single.close().unwrap();
    shared.close().unwrap();
    for t in t1.into_iter().chain(t2) {
        t.join().unwrap();
    }
}
