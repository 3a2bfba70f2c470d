//! How often the write-ahead log is checkpointed into the store file while writes go on: once
//! the log holds 2,000 records and the last checkpoint is 250 ms old (`StoreBuilder::
//! write_ahead_log`'s docs), which bounds what an open after a crash replays and the send a
//! checkpoint stalls, and keeps the stalls rarer than one batch in a thousand whatever the
//! disk's speed (docs/design.md § Checkpoints).
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
fn the_log_checkpoints_after_2000_records_and_250_ms() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.postbox")).unwrap();
    // The first send checkpoints (the open starts the log's cycle), then one more.
    let seen = send_until(&store, 2, Duration::from_secs(120));
    assert_eq!(seen.len(), 2, "two checkpoints within 120 s of sends");
    assert_gaps(&seen, 2_000);
}

#[test]
fn the_least_number_of_records_and_the_interval_both_hold() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder()
        .log_checkpoint_records(300)
        .open(dir.path().join("s.postbox"))
        .unwrap();
    let seen = send_until(&store, 4, Duration::from_secs(120));
    assert_eq!(seen.len(), 4, "four checkpoints within 120 s of sends");
    assert_gaps(&seen, 300);
}

#[test]
fn a_trickle_of_sends_is_logged_without_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s.postbox")).unwrap();
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

#[test]
fn without_the_floor_the_log_checkpoints_every_250_ms() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::builder()
        .log_checkpoints(32 << 20, Duration::from_millis(250))
        .open(dir.path().join("s.postbox"))
        .unwrap();
    let seen = send_until(&store, 5, Duration::from_secs(30));
    assert_eq!(seen.len(), 5, "five checkpoints within 30 s of sends");
    for pair in seen.windows(2) {
        let elapsed = pair[1].at - pair[0].at;
        let records = pair[1].stats.log_records - pair[0].stats.log_records;
        assert!(
            elapsed >= Duration::from_millis(250),
            "a checkpoint after {elapsed:?}"
        );
        // A loaded machine slows the sends, never the rule: a checkpoint comes with the first
        // batch after the interval, so the gaps stay well under a second.
        assert!(
            elapsed < Duration::from_secs(5),
            "{elapsed:?} without a checkpoint ({records} records)"
        );
        assert!(
            records >= 1,
            "a checkpoint with no record logged since the last"
        );
    }
}
