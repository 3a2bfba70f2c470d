//! Invariant 9: bad input gets a clear, typed error — never a panic, a hang or a damaged store —
//! and the store (or a fresh one) keeps working afterwards. Invariant 10: a failed open leaves
//! the file as it was.

mod common;

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::Duration;

use common::{Rng, TestStore, counts};
use postbox::{Durability, Error, ErrorKind, Message, QueueOptions, Store};

/// Opens `path` without letting a panic escape; returns the error.
fn open_err(path: &Path) -> Error {
    let r = catch_unwind(AssertUnwindSafe(|| Store::open(path)))
        .unwrap_or_else(|_| panic!("opening {} panicked", path.display()));
    match r {
        Ok(_) => panic!("opening {} succeeded", path.display()),
        Err(e) => {
            assert_clear(&e);
            e
        }
    }
}

/// The error message is lowercase and non-empty, as STYLE.md asks.
fn assert_clear(e: &Error) {
    let text = e.to_string();
    assert!(
        text.chars().next().is_some_and(|c| !c.is_uppercase()),
        "error text should start lowercase: {text:?}"
    );
}

/// A fresh store next to the bad file opens and works: the failure left nothing behind.
fn assert_fresh_store_works(dir: &Path) {
    let store = Store::open(dir.join("fresh.postbox")).unwrap();
    let q = store.queue("q").unwrap();
    let id = q.send("still works").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), id);
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

/// Sends, receives and completes on a live store: it still works after an error.
fn assert_store_works(store: &Store) {
    let q = store.queue("health").unwrap();
    let id = q.send("ok").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.id(), id);
    m.complete().unwrap();
    assert_eq!(counts(&q), (0, 0, 0, 0, 0));
}

// ---- errors on a live store -------------------------------------------------------------

#[test]
fn deleted_queue_is_queue_not_found_everywhere() {
    let t = TestStore::new();
    let q = t.store().queue("gone").unwrap();
    let src = t.store().queue("src").unwrap();
    src.send("m").unwrap();
    q.send("x").unwrap();
    assert!(t.store().delete_queue("gone").unwrap());
    for e in [
        q.send("x").unwrap_err(),
        q.try_receive().unwrap_err(),
        q.receive_batch(3, Duration::ZERO).unwrap_err(),
        q.stats().unwrap_err(),
        q.purge().unwrap_err(),
        q.dead_letters().unwrap_err(),
        q.peek().unwrap_err(),
        q.browse().next().unwrap().unwrap_err(),
        q.options().unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::QueueNotFound, "{e}");
        assert_clear(&e);
    }
    assert!(matches!(q.len(), Err(Error::QueueNotFound(_))));
    // A transactional send to the deleted queue is refused at once.
    let mut tx = t.store().begin();
    let e = tx.send(&q, "into the void").unwrap_err();
    assert!(matches!(&e, Error::QueueNotFound(n) if n == "gone"), "{e}");
    drop(tx);
    // A queue deleted after the send fails the commit as a whole, which returns its receive.
    let later = t.store().queue("later").unwrap();
    let mut tx = t.store().begin();
    tx.receive(&src, Duration::ZERO).unwrap().unwrap();
    tx.send(&later, "into the void").unwrap();
    assert!(t.store().delete_queue("later").unwrap());
    let e = tx.commit().unwrap_err();
    assert!(matches!(&e, Error::QueueNotFound(n) if n == "later"), "{e}");
    assert_eq!(counts(&src), (1, 0, 0, 0, 1));
    assert_eq!(t.store().queues().unwrap(), vec!["src"]);
    assert_store_works(t.store());
}

#[test]
fn oversize_and_quota_errors_leave_the_store_working() {
    let t = TestStore::new();
    let q = t
        .store()
        .queue_with(
            "q",
            QueueOptions::default()
                .max_message_size(10)
                .max_messages(2)
                .max_bytes(15),
        )
        .unwrap();
    let e = q.send(vec![0u8; 11]).unwrap_err();
    assert!(matches!(e, Error::MessageTooLarge { size: 11, max: 10 }));
    assert_clear(&e);
    q.send(vec![1u8; 10]).unwrap();
    let e = q.send(vec![2u8; 6]).unwrap_err();
    assert!(matches!(&e, Error::QueueFull { limit, .. } if limit.contains("max_bytes")));
    assert_clear(&e);
    q.send(vec![2u8; 5]).unwrap();
    let e = q.send(vec![]).unwrap_err();
    assert!(matches!(&e, Error::QueueFull { limit, .. } if limit.contains("max_messages")));
    assert_eq!(counts(&q), (2, 0, 0, 0, 15));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.body(), &[1u8; 10]);
    m.complete().unwrap();
    assert_eq!(counts(&q), (1, 0, 0, 0, 5));
    assert_store_works(t.store());
}

#[test]
fn invalid_arguments_are_rejected() {
    let t = TestStore::new();
    let store = t.store();
    let q = store.queue("q").unwrap();
    let dlq = q.dead_letters().unwrap();
    let invalid = |r: Result<(), Error>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{what}: {e}");
        assert_clear(&e);
    };
    invalid(
        q.send(Message::new("x").priority(8)).map(drop),
        "priority 8",
    );
    invalid(q.receive_batch(0, Duration::ZERO).map(drop), "batch of 0");
    invalid(dlq.send("x").map(drop), "send to a dead-letter queue");
    invalid(
        dlq.dead_letters().map(drop),
        "dead letters of a dead-letter queue",
    );
    invalid(
        store.delete_queue("q/$deadletterqueue").map(drop),
        "delete a dead-letter queue",
    );
    invalid(
        store
            .queue_with(
                "q/$deadletterqueue",
                QueueOptions::default().max_deliveries(3),
            )
            .map(drop),
        "options of a dead-letter queue",
    );
    for (opts, what) in [
        (
            QueueOptions::default().lock_duration(Duration::ZERO),
            "lock 0",
        ),
        (QueueOptions::default().max_deliveries(0), "deliveries 0"),
        (QueueOptions::default().default_ttl(Duration::ZERO), "ttl 0"),
        (
            QueueOptions::default().dedup_window(Duration::ZERO),
            "dedup 0",
        ),
        (
            QueueOptions::default().max_message_size(u32::MAX as usize + 1),
            "size over 4 GiB",
        ),
    ] {
        invalid(store.queue_with("opts", opts).map(drop), what);
    }
    assert_eq!(store.queues().unwrap(), vec!["q"]);
    let mut tx = store.begin();
    invalid(
        tx.send(&q, Message::new("x").priority(9)).map(drop),
        "tx priority 9",
    );
    drop(tx);

    // Settling the wrong way changes nothing, and the message goes straight back to its queue
    // (its delivery counted) instead of staying locked until its lock expires.
    q.send("m").unwrap();
    let m = q.try_receive().unwrap().unwrap();
    let refused = m.resubmit().expect_err("resubmit from a normal queue");
    assert_eq!(refused.kind(), ErrorKind::InvalidArgument);
    // The refused message comes back still locked; dropping it abandons it.
    let m = refused.into_message();
    assert_eq!(counts(&q), (0, 1, 0, 0, 1));
    drop(m);
    assert_eq!(counts(&q), (1, 0, 0, 0, 1));
    let m = q.try_receive().unwrap().unwrap();
    assert_eq!(m.delivery_count(), 2);
    m.dead_letter("r", "d").unwrap();
    let d = dlq.try_receive().unwrap().unwrap();
    invalid(
        d.dead_letter("again", "").map_err(Error::from),
        "dead-letter a dead letter",
    );
    assert_eq!(counts(&dlq), (1, 0, 0, 0, 1));
    assert_eq!(counts(&q), (0, 0, 0, 1, 0));
    assert_store_works(store);
}

#[test]
fn transaction_send_to_a_dead_letter_queue_fails_at_commit_or_send() {
    let t = TestStore::new();
    let q = t.store().queue("q").unwrap();
    let dlq = q.dead_letters().unwrap();
    let mut tx = t.store().begin();
    let early = tx.send(&dlq, "x");
    let e = match early {
        Err(e) => e,
        Ok(_) => tx.commit().unwrap_err(),
    };
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(counts(&dlq), (0, 0, 0, 0, 0));
}

#[test]
fn closed_store_reports_closed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("q").unwrap();
    store.clone().close().unwrap();
    for e in [
        q.send("x").unwrap_err(),
        q.try_receive().unwrap_err(),
        q.peek().unwrap_err(),
        store.queues().unwrap_err(),
        store.queue("other").unwrap_err(),
        store.delete_queue("q").unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::Closed, "{e}");
    }
    let mut b = q.browse();
    assert!(b.next().unwrap().is_err());
    assert!(b.next().is_none());
    drop(b);
    // A blocked receiver is released by the close, not left hanging.
    drop(q);
    drop(store);
    let store = Store::open(dir.path().join("s")).unwrap();
    let q = store.queue("q").unwrap();
    let waiter = {
        let q = q.clone();
        std::thread::spawn(move || q.receive(Duration::from_secs(600)))
    };
    let blocked = {
        let q = q.clone();
        std::thread::spawn(move || q.receive_blocking().map(|_| ()))
    };
    // Give the waiters a chance to block; correctness does not depend on it.
    std::thread::yield_now();
    store.clone().close().unwrap();
    let r = waiter.join().unwrap();
    assert!(matches!(r, Err(Error::Closed) | Ok(None)), "{r:?}");
    assert!(matches!(blocked.join().unwrap(), Err(Error::Closed)));
}

// ---- files that are not stores ------------------------------------------------------------

fn assert_not_a_store(dir: &Path, name: &str, content: &[u8], kinds: &[ErrorKind]) {
    let path = dir.join(name);
    fs::write(&path, content).unwrap();
    let e = open_err(&path);
    assert!(kinds.contains(&e.kind()), "{name}: {e:?}");
    assert!(fs::read(&path).unwrap() == content, "{name} was modified");
    // Multi-process mode refuses it the same way.
    let r = catch_unwind(AssertUnwindSafe(|| {
        Store::builder().multi_process(true).open(&path)
    }))
    .expect("no panic");
    assert!(
        kinds.contains(&r.unwrap_err().kind()),
        "{name} (multi-process)"
    );
    assert!(fs::read(&path).unwrap() == content, "{name} was modified");
}

#[test]
fn files_that_are_not_stores_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x5eed);
    let mut random = vec![0u8; 64 * 1024];
    rng.fill(&mut random);
    random[0] = b'x'; // cannot start with the redb magic by chance
    assert_not_a_store(dir.path(), "random.bin", &random, &[ErrorKind::NotAStore]);
    assert_not_a_store(
        dir.path(),
        "empty.postbox",
        b"",
        &[ErrorKind::NotAStore, ErrorKind::Corrupted],
    );
    assert_not_a_store(
        dir.path(),
        "notes.txt",
        b"these are my notes\nnot a message queue\n",
        &[ErrorKind::NotAStore],
    );
    assert_not_a_store(dir.path(), "tiny", b"re", &[ErrorKind::NotAStore]);
    // The redb magic followed by garbage.
    let mut fake = b"redb".to_vec();
    fake.extend_from_slice(&random[..8192]);
    assert_not_a_store(
        dir.path(),
        "fake.redb",
        &fake,
        &[ErrorKind::NotAStore, ErrorKind::Corrupted],
    );
    assert_fresh_store_works(dir.path());
}

#[test]
fn plain_redb_databases_are_refused_untouched() {
    use redb::TableDefinition;
    let dir = tempfile::tempdir().unwrap();

    // A redb database of some other application.
    let other = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&other).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn
                .open_table(TableDefinition::<&str, &str>::new("settings"))
                .unwrap();
            t.insert("theme", "dark").unwrap();
        }
        txn.commit().unwrap();
    }
    let before = fs::read(&other).unwrap();
    let e = open_err(&other);
    assert_eq!(e.kind(), ErrorKind::NotAStore, "{e:?}");
    assert!(
        fs::read(&other).unwrap() == before,
        "a foreign database was modified"
    );
    // Its data is intact.
    {
        use redb::ReadableDatabase;
        let db = redb::Database::open(&other).unwrap();
        let txn = db.begin_read().unwrap();
        let t = txn
            .open_table(TableDefinition::<&str, &str>::new("settings"))
            .unwrap();
        assert_eq!(t.get("theme").unwrap().unwrap().value(), "dark");
    }

    // A database with a table of postbox's name but another type.
    let clash = dir.path().join("clash.redb");
    {
        let db = redb::Database::create(&clash).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn
                .open_table(TableDefinition::<u64, u64>::new("postbox.meta"))
                .unwrap();
            t.insert(1, 2).unwrap();
        }
        txn.commit().unwrap();
    }
    let e = open_err(&clash);
    assert!(
        matches!(e.kind(), ErrorKind::NotAStore | ErrorKind::Corrupted),
        "{e:?}"
    );

    // A store of a future format version.
    let future = dir.path().join("future.postbox");
    {
        let db = redb::Database::create(&future).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn
                .open_table(TableDefinition::<&str, u64>::new("postbox.meta"))
                .unwrap();
            t.insert("format_version", 99).unwrap();
            // A newer postbox writes its version's check beside it.
            t.insert(
                "format_version_crc",
                u64::from(crc32c::crc32c(&99u64.to_le_bytes())),
            )
            .unwrap();
        }
        txn.commit().unwrap();
    }
    let e = open_err(&future);
    assert!(
        matches!(
            e,
            Error::IncompatibleVersion {
                found: 99,
                supported: 6
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.kind(), ErrorKind::IncompatibleVersion);
    // Still refused the second time, and its version was not rewritten.
    assert_eq!(open_err(&future).kind(), ErrorKind::IncompatibleVersion);
    assert_fresh_store_works(dir.path());
}

/// Sets the meta row `key` of the postbox store at `path` to `value`.
fn set_meta(path: &Path, key: &str, value: u64) {
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(redb::TableDefinition::<&str, u64>::new("postbox.meta"))
        .unwrap()
        .insert(key, value)
        .unwrap();
    txn.commit().unwrap();
}

#[test]
fn a_damaged_format_version_is_damage_not_a_newer_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.postbox");
    Store::open(&path).unwrap().close().unwrap();
    // A flipped bit in the version number: its checksum no longer matches.
    set_meta(&path, "format_version", 6 | 1 << 40);
    let e = open_err(&path);
    assert_eq!(e.kind(), ErrorKind::Corrupted, "{e:?}");
    set_meta(&path, "format_version", 7);
    assert_eq!(open_err(&path).kind(), ErrorKind::Corrupted);
    // A newer postbox writes its version with a matching check: that is a newer format.
    set_meta(
        &path,
        "format_version_crc",
        u64::from(crc32c::crc32c(&7u64.to_le_bytes())),
    );
    let e = open_err(&path);
    assert!(
        matches!(
            e,
            Error::IncompatibleVersion {
                found: 7,
                supported: 6
            }
        ),
        "{e:?}"
    );
    // A newer version whose check row is gone (its key damaged beside a damaged number) is
    // damage too: every newer postbox writes the check.
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<&str, u64>::new("postbox.meta"))
            .unwrap()
            .remove("format_version_crc")
            .unwrap();
        txn.commit().unwrap();
    }
    assert_eq!(open_err(&path).kind(), ErrorKind::Corrupted);
}

#[test]
fn a_directory_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("a-directory");
    fs::create_dir(&sub).unwrap();
    let e = open_err(&sub);
    assert_eq!(e.kind(), ErrorKind::NotAStore, "{e:?}");
    assert!(sub.is_dir());
    assert_eq!(fs::read_dir(&sub).unwrap().count(), 0);
    assert_fresh_store_works(dir.path());
}

#[test]
fn a_path_in_a_missing_directory_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("deeper").join("s.postbox");
    let e = open_err(&path);
    assert_eq!(e.kind(), ErrorKind::Io, "{e:?}");
    match &e {
        Error::Io(io) => assert_eq!(io.kind(), std::io::ErrorKind::NotFound),
        other => panic!("{other:?}"),
    }
    assert!(!dir.path().join("missing").exists(), "nothing was created");
    assert_fresh_store_works(dir.path());
}

/// Whether the file system refuses us writes in `dir` (it does not when running as root).
#[cfg(unix)]
fn permissions_bite(dir: &Path) -> bool {
    let probe = dir.join(".probe");
    match fs::write(&probe, b"x") {
        Ok(()) => {
            let _ = fs::remove_file(&probe);
            false
        }
        Err(_) => true,
    }
}

/// Unix only: Windows' read-only attribute on a directory does not stop files being created in
/// it (only an ACL would, which the tests do not change).
#[cfg(unix)]
#[test]
fn a_read_only_directory_is_an_io_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    fs::create_dir(&ro).unwrap();
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
    if !permissions_bite(&ro) {
        eprintln!(
            "SKIPPED a_read_only_directory_is_an_io_error: permission checks do not apply to \
             this user (root?)"
        );
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
        return;
    }
    let e = open_err(&ro.join("s.postbox"));
    assert_eq!(e.kind(), ErrorKind::Io, "{e:?}");
    assert_eq!(
        fs::read_dir(&ro).unwrap().count(),
        0,
        "no temporary file left"
    );
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
    assert_fresh_store_works(dir.path());
}

/// Read-only by its mode on Unix (0400), by its read-only attribute on Windows.
#[test]
fn a_read_only_store_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.postbox");
    {
        let store = Store::open(&path).unwrap();
        store.queue("q").unwrap().send("kept").unwrap();
    }
    let mut perms = fs::metadata(&path).unwrap().permissions();
    perms.set_readonly(true);
    fs::set_permissions(&path, perms).unwrap();
    if fs::OpenOptions::new().write(true).open(&path).is_ok() {
        eprintln!(
            "SKIPPED a_read_only_store_file_is_a_typed_error: permission checks do not apply \
             to this user (root?)"
        );
        return;
    }
    let e = open_err(&path);
    assert_eq!(e.kind(), ErrorKind::Io, "{e:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    }
    #[cfg(windows)]
    {
        let mut perms = fs::metadata(&path).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)] // Windows: clears the attribute only
        perms.set_readonly(false);
        fs::set_permissions(&path, perms).unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(counts(&store.queue("q").unwrap()), (1, 0, 0, 0, 4));
}

#[test]
fn contradictory_options_are_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let cases = [
        Store::builder()
            .multi_process(true)
            .durability(Durability::None),
        Store::builder().poll_interval(Duration::ZERO, Duration::from_millis(10)),
        Store::builder().poll_interval(Duration::from_millis(20), Duration::from_millis(10)),
    ];
    for b in cases {
        let e = b.open(&path).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e:?}");
        assert_eq!(e.kind(), ErrorKind::Config);
        assert_clear(&e);
        assert!(!path.exists(), "a refused open creates no file");
    }
    // Each setting alone is fine.
    Store::builder()
        .durability(Durability::None)
        .open(&path)
        .unwrap()
        .close()
        .unwrap();
    let store = Store::builder().multi_process(true).open(&path).unwrap();
    assert!(store.is_multi_process());
    assert_store_works(&store);
}

#[test]
fn opening_a_store_twice_in_single_process_mode_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let store = Store::open(&path).unwrap();
    store.queue("q").unwrap().send("kept").unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| Store::open(&path))).expect("no panic");
    let e = r.expect_err("a second single-process open must fail");
    assert_eq!(e.kind(), ErrorKind::AlreadyOpen, "{e:?}");
    assert!(e.to_string().contains("clone that Store"), "{e}");
    assert_clear(&e);
    // The first handle is unaffected.
    assert_eq!(counts(&store.queue("q").unwrap()), (1, 0, 0, 0, 4));
    assert_store_works(&store);
}

// ---- damaged stores -----------------------------------------------------------------------

/// A store with some messages in it, closed; returns its bytes.
fn sample_store(dir: &Path) -> Vec<u8> {
    let path = dir.join("sample.postbox");
    {
        let store = Store::open(&path).unwrap();
        let q = store.queue("orders").unwrap();
        let msgs: Vec<Message> = (0..50)
            .map(|i| Message::new(vec![i as u8; 100]).label(format!("m{i}")))
            .collect();
        q.send_batch(msgs).unwrap();
        q.try_receive()
            .unwrap()
            .unwrap()
            .dead_letter("r", "d")
            .unwrap();
        store.close().unwrap();
    }
    let bytes = fs::read(&path).unwrap();
    fs::remove_file(&path).unwrap();
    bytes
}

/// Opens a damaged copy and drains it; any outcome but a panic or a hang is acceptable, and
/// errors must be typed (not `Panic`).
fn open_damaged(path: &Path) -> Result<u64, Error> {
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<u64, Error> {
        let store = Store::builder().durability(Durability::None).open(path)?;
        let mut n = 0;
        for name in store.queues()? {
            let q = store.queue(&name)?;
            for _ in 0..200 {
                match q.try_receive()? {
                    Some(m) => {
                        m.complete()?;
                        n += 1;
                    }
                    None => break,
                }
            }
            q.stats()?;
        }
        Ok(n)
    }));
    let r = r.unwrap_or_else(|_| panic!("a panic escaped for {}", path.display()));
    if let Err(e) = &r {
        assert_ne!(e.kind(), ErrorKind::Panic, "{e:?}");
        assert_clear(e);
    }
    r
}

#[test]
fn truncated_stores_give_typed_errors() {
    let dir = common::fast_tempdir();
    let good = sample_store(dir.path());
    let len = good.len();
    for cut in [
        0,
        1,
        3,
        4,
        64,
        512,
        4096,
        len / 4,
        len / 2,
        len - 4096,
        len - 1,
    ] {
        let path = dir.path().join(format!("cut-{cut}.postbox"));
        fs::write(&path, &good[..cut]).unwrap();
        match open_damaged(&path) {
            Ok(n) => eprintln!("truncated to {cut} of {len} bytes: opened, drained {n}"),
            Err(e) => {
                eprintln!("truncated to {cut} of {len} bytes: {e}");
                // A truncated store is damaged, not an operating-system failure.
                assert!(
                    matches!(e.kind(), ErrorKind::NotAStore | ErrorKind::Corrupted),
                    "truncated to {cut}: {e:?}"
                );
            }
        }
    }
    assert_fresh_store_works(dir.path());
}

#[test]
fn damaged_headers_give_typed_errors() {
    let dir = common::fast_tempdir();
    let good = sample_store(dir.path());
    let mut rng = Rng::new(0xbad_5eed);
    // Every byte of the first page region, each in its own copy, overwritten.
    for offset in (0..512).step_by(16) {
        let mut bytes = good.clone();
        bytes[offset] ^= 1 << rng.below(8);
        let path = dir.path().join("header.postbox");
        fs::write(&path, &bytes).unwrap();
        if let Err(e) = open_damaged(&path)
            && offset < 4
        {
            assert_eq!(e.kind(), ErrorKind::NotAStore, "offset {offset}: {e:?}");
        }
    }
    assert_fresh_store_works(dir.path());
}

/// A damaged length prefix in a large typed body (bincode, which Rust's typed queues write)
/// claims far more than the body holds: decoding fails with `Codec` instead of allocating what
/// it claims, which would abort the process. Bodies past 16 MiB used to be decoded without a
/// limit.
#[test]
fn a_huge_claimed_length_in_a_large_body_is_a_codec_error() {
    for size in [100, 17 << 20, 70 << 20] {
        let mut body = vec![0u8; size];
        // bincode's varint: 253 announces a little-endian u64, here the string's length.
        body[0] = 253;
        body[1..9].copy_from_slice(&(1u64 << 50).to_le_bytes());
        let e = postbox::decode_typed_body::<String>(&body).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Codec, "{size}: {e}");
        assert_clear(&e);
    }
}

/// A `-log` file far larger than postbox ever writes (here a 4 GiB sparse file) is refused as
/// `Corrupted` before its length sizes an allocation, and the store file is left alone.
#[test]
fn a_huge_log_file_is_corrupted_not_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    {
        let store = postbox::Store::open(&path).unwrap();
        store.queue("q").unwrap().send("kept").unwrap();
        store.close().unwrap();
    }
    let log = dir.path().join("s.postbox-log");
    std::fs::File::create(&log)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let Err(err) = postbox::Store::open(&path) else {
        panic!("the open must fail");
    };
    assert_eq!(err.kind(), postbox::ErrorKind::Corrupted, "{err}");
    std::fs::remove_file(&log).unwrap();
    let store = postbox::Store::open(&path).unwrap();
    assert_eq!(store.queue("q").unwrap().len().unwrap(), 1);
    store.close().unwrap();
}
