//! How often the write-ahead log is checkpointed into the store file while writes go on: at
//! least every 250 ms (`StoreBuilder::write_ahead_log`'s docs), which bounds both what an open
//! after a crash replays and the send a checkpoint stalls (docs/design.md § Checkpoints); and
//! the policy's floor of records, off by default, which holds the interval back until the log
//! holds that many records.
//!
//! The interval is wall-clock time, so these tests send for real time rather than advancing a
//! manual clock.

use std::time::{Duration, Instant};

use postbox::{Store, StoreStats};

/// What one send saw: the store's figures after it, and when it returned.
struct After {
    stats: StoreStats,
    at: Instant,
}

/// Sends from one thread until `checkpoints` more checkpoints than at the start completed (or
/// `give_up` passed), and returns what each send that completed a checkpoint saw.
fn send_until(store: &Store, checkpoints: u64, give_up: Duration) -> Vec<After> {
    let q = store.queue("q").unwrap();
    let start = store.stats().checkpoints;
    let started = Instant::now();
    let mut seen = Vec::new();
    while (seen.len() as u64) < checkpoints && started.elapsed() < give_up {
        let before = store.stats().checkpoints;
        q.send("x").unwrap();
        let stats = store.stats();
        if stats.checkpoints != before {
            assert!(stats.checkpoints > start);
            seen.push(After {
                stats,
                at: Instant::now(),
            });
        }
    }
    seen
}

/// A store in `dir` whose log checkpoints after 250 ms only once it holds `records` records.
fn with_floor(dir: &std::path::Path, records: u64) -> Store {
    Store::builder()
        .log_checkpoint_records(records)
        .open(dir.join("s.postbox"))
        .unwrap()
}

/// Checks each gap between the checkpoints `seen`: at least `records` records and 250 ms.
fn assert_gaps(seen: &[After], records: u64) {
    for pair in seen.windows(2) {
        let logged = pair[1].stats.log_records - pair[0].stats.log_records;
        let operations = pair[1].stats.operations - pair[0].stats.operations;
        let elapsed = pair[1].at - pair[0].at;
        assert!(
            logged >= records,
            "a checkpoint after {logged} records ({elapsed:?})"
        );
        assert!(
            elapsed >= Duration::from_millis(250),
            "a checkpoint after {elapsed:?} ({logged} records)"
        );
        // Between checkpoints the sends are logged, not each committed to the store file.
        assert!(operations >= logged, "{operations} sends, {logged} records");
    }
}

#[test]
fn the_log_checkpoints_at_least_every_250_ms_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.postbox")).unwrap();
    let q = store.queue("q").unwrap();
    let before = store.stats();
    let started = Instant::now();
    // Four intervals, with room for sends that a loaded machine slows down.
    while started.elapsed() < Duration::from_millis(1500) {
        q.send("x").unwrap();
    }
    let after = store.stats();
    let checkpoints = after.checkpoints - before.checkpoints;
    assert!(
        after.log_records > before.log_records,
        "the sends went through the log"
    );
    assert!(
        checkpoints >= 4,
        "{checkpoints} checkpoints in {:?} of sends",
        started.elapsed()
    );
    // Between checkpoints the sends are logged, not each committed to the store file.
    let sends = after.operations - before.operations;
    assert!(
        checkpoints * 10 < sends,
        "{checkpoints} checkpoints for {sends} sends"
    );
}

#[test]
fn the_least_number_of_records_and_the_interval_both_hold() {
    let dir = tempfile::tempdir().unwrap();
    let store = with_floor(dir.path(), 300);
    let seen = send_until(&store, 4, Duration::from_secs(120));
    assert_eq!(seen.len(), 4, "four checkpoints within 120 s of sends");
    assert_gaps(&seen, 300);
}

#[test]
fn below_the_floor_of_records_a_trickle_of_sends_waits_for_no_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let store = with_floor(dir.path(), 2_000);
    let q = store.queue("q").unwrap();
    q.send("first").unwrap();
    let before = store.stats();
    let started = Instant::now();
    // Well past the interval, with a record every few milliseconds: at 250 ms alone, this
    // would checkpoint at least twice.
    while started.elapsed() < Duration::from_millis(700) {
        q.send("x").unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = store.stats();
    assert!(after.log_records > before.log_records + 10);
    assert_eq!(
        after.checkpoints,
        before.checkpoints,
        "{} records in {:?}",
        after.log_records - before.log_records,
        started.elapsed()
    );
}
