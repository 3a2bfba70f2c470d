//! Store operations: create, reopen, close, file mode, accessors.
//!
//! One test per operation of the public API, each asserting the resulting state and the exact
//! counts of `Queue::stats` (invariant 6). Time is driven by a manual clock: lock expiries,
//! TTLs and scheduled deliveries are crossed with `clock.advance`, never by sleeping.

mod common;

use common::{TestStore, counts};
use postbox::{Error, Message, Store};

#[test]
fn store_create_then_reopen_keeps_queues_messages_and_counts() {
    let mut t = TestStore::new();
    let q = t.store().queue("orders").unwrap();
    let other = t.store().queue("audit").unwrap();
    let a = q.send(Message::new("a").priority(5)).unwrap();
    let b = q.send("bb").unwrap();
    other.send("ccc").unwrap();
    let locked = q.try_receive().unwrap().unwrap();
    assert_eq!(locked.id(), a);
    locked.dead_letter("Bad", "bad input").unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 1, 2));
    drop((q, other));
    t.reopen();

    assert_eq!(t.store().queues().unwrap(), vec!["audit", "orders"]);
    let q = t.store().queue("orders").unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 1, 2));
    assert_eq!(counts(&t.store().queue("audit").unwrap()), (1, 0, 0, 0, 3));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.body()), (b, &b"bb"[..]));
    m.complete().unwrap();
    let dl = q.dead_letters().unwrap().try_receive().unwrap().unwrap();
    assert_eq!(dl.id(), a);
    assert_eq!(dl.dead_letter_info().unwrap().reason, "Bad");
    // New ids continue after the old ones: never reused across a reopen.
    let c = q.send("d").unwrap();
    assert!(c > b);
}

#[test]
fn store_close_releases_locks_with_delivery_count_kept() {
    let mut t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let id = q.send("x").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(counts(&q), (0, 1, 0, 0, 1));
    // The store closes while the message is held: its lock is released, its delivery counted.
    t.store().clone().close().unwrap();
    drop((m, q));
    t.reopen();
    let q = t.store().queue("q").unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 0, 1));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!((m.id(), m.delivery_count()), (id, 2));
}

/// Mode 0600 on Unix; on Windows the files take their directory's ACL (README § Platforms),
/// and the rest holds as it is: creation by a move leaves no temporary file, and the log goes
/// at close.
#[test]
fn store_file_is_created_with_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test.postbox");
    let names = || {
        let mut n: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    let store = Store::open(&path).unwrap();
    // While open, the write-ahead log sits beside the store; both are private.
    #[cfg(unix)]
    for name in ["test.postbox", "test.postbox-log"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}: mode {mode:o}");
    }
    // No temporary file is left beside them.
    assert_eq!(names(), ["test.postbox", "test.postbox-log"]);
    // Closed, the store is one file.
    store.close().unwrap();
    assert_eq!(names(), ["test.postbox"]);
}

#[test]
fn store_accessors_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let clock = postbox::ManualClock::new();
    let store = common::open_with(&path, &clock);
    assert_eq!(store.path(), path.as_path());
    assert!(!store.is_multi_process());
    assert_eq!(store.durability(), postbox::Durability::Immediate);
    let q = store.queue("q").unwrap();
    q.send("x").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    store.clone().close().unwrap();
    assert!(matches!(q.send("y"), Err(Error::Closed)));
    assert!(matches!(q.try_receive(), Err(Error::Closed)));
    assert!(matches!(q.stats(), Err(Error::Closed)));
    assert!(matches!(store.queues(), Err(Error::Closed)));
    assert!(matches!(store.queue("q"), Err(Error::Closed)));
    assert!(matches!(
        m.complete().map_err(Error::from),
        Err(Error::Closed)
    ));
    store.clone().close().unwrap(); // closing twice is harmless
    // Closing released the file and the lock, although handles to the closed store live on:
    // the message is receivable again after reopening.
    let again = common::open_with(&path, &clock);
    let q2 = again.queue("q").unwrap();
    assert_eq!(counts(&q2), (1, 0, 0, 0, 1));
    assert_eq!(q2.try_receive().unwrap().unwrap().delivery_count(), 2);
    drop((q, store));
}
