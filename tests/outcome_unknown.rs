//! A commit that fails (fsync returned EIO) is reported as `Error::OutcomeUnknown`, the store
//! recovers on the same handle, and a retry with the same `message_key` after a reopen stores
//! the message exactly once.
//!
//! The failure is injected for real: the `pbx-eio` helper binary defines its own `fdatasync` and
//! `fsync`, which the linker binds the standard library's (and so redb's) calls to, and which
//! fail with EIO while a flag is set. That needs Linux; elsewhere only the mapping check runs.

use postbox::{Error, ErrorKind};

/// The mapping itself: every redb commit failure that is not "disk full" means the outcome is
/// unknown.
#[test]
fn commit_errors_map_to_outcome_unknown() {
    let eio = std::io::Error::from_raw_os_error(5);
    let e = Error::from(redb::CommitError::Storage(redb::StorageError::Io(eio)));
    assert_eq!(e.kind(), ErrorKind::OutcomeUnknown, "{e}");
    assert!(e.is_outcome_unknown());
    let full = std::io::Error::from_raw_os_error(28);
    let e = Error::from(redb::CommitError::Storage(redb::StorageError::Io(full)));
    assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}");
}

#[cfg(target_os = "linux")]
#[test]
fn fsync_eio_is_outcome_unknown_and_a_keyed_retry_is_safe() {
    use std::time::Duration;

    use postbox::{Message, QueueOptions, Store};
    use postbox_tests::{Proc, arg};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eio.postbox");
    let mut p = Proc::spawn(env!("CARGO_BIN_EXE_pbx-eio"), "eio", &[arg(&path), "q"]);
    p.expect("SENT");
    let failed = p.expect("FAILED");
    assert_eq!(failed[0], "OutcomeUnknown", "{failed:?}");
    // redb refuses a database after a failed write; the store opens its file again by itself,
    // so the next send (with fsync working again) succeeds on the same handle.
    let after = p.expect("AFTER");
    assert_eq!(
        after[0], "ok",
        "the store recovers after a failed fsync: {after:?}"
    );
    p.expect("CLOSE");
    let status = p.wait();
    assert!(status.success(), "{status:?}");

    // Reopen: the store opens, the acknowledged message is there, and retrying the unknown send
    // with its key leaves exactly one copy whether or not the first attempt landed.
    let store = Store::open(&path).unwrap();
    let q = store
        .queue_with(
            "q",
            QueueOptions::default().dedup_window(Duration::from_secs(3600)),
        )
        .unwrap();
    let bodies = |q: &postbox::Queue| -> Vec<Vec<u8>> {
        q.browse().map(|e| e.unwrap().body().to_vec()).collect()
    };
    let before = bodies(&q);
    assert_eq!(before[0], b"before");
    assert!(
        before.iter().any(|b| b == b"after"),
        "the acknowledged send after recovery"
    );
    let landed = before.iter().any(|b| b == b"during");
    eprintln!(
        "the send whose fsync failed {}",
        if landed { "landed" } else { "did not land" }
    );
    q.send(Message::new("during").message_key("during"))
        .unwrap();
    let during = bodies(&q).iter().filter(|b| *b == b"during").count();
    assert_eq!(during, 1);
    let s = q.stats().unwrap();
    assert_eq!((s.active, s.locked), (bodies(&q).len() as u64, 0));
    store.close().unwrap();
}
