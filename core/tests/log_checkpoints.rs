//! How often the write-ahead log is checkpointed into the store file while writes go on: at
//! least every 250 ms (`StoreBuilder::write_ahead_log`'s docs), which bounds both what an open
//! after a crash replays and the send a checkpoint stalls (docs/design.md § Checkpoints).
//!
//! The interval is wall-clock time, so this test sends for real time rather than advancing a
//! manual clock.

use std::time::{Duration, Instant};

use postbox::Store;

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
