//! Atomic counters and compare-and-set on application tables: `Table::increment` and
//! `Table::put_if` (one commit each), `TxTable::increment` and `TxTable::put_if` (checked at
//! commit: a row changed by another commit since the transaction read it fails the commit with
//! `Conflict`). The cross-process count is in `tests/counters.rs`.

mod common;

use std::time::Duration;

use common::{SEC, TestStore};
use postbox::{Durability, ErrorKind, QueueOptions, Store};

#[test]
fn increment_counts_in_decimal_from_a_missing_row() {
    let t = TestStore::new();
    let c = t.store().table("c").unwrap();
    assert_eq!(c.increment(b"n", 1).unwrap(), 1);
    assert_eq!(c.increment(b"n", 41).unwrap(), 42);
    assert_eq!(c.increment(b"n", -50).unwrap(), -8);
    assert_eq!(c.get(b"n").unwrap(), Some(b"-8".to_vec()));
    assert_eq!(c.increment(b"n", 0).unwrap(), -8);

    // What other writers put there counts too, leading zeros and all.
    c.put(b"m", b"007").unwrap();
    assert_eq!(c.increment(b"m", 1).unwrap(), 8);
    assert_eq!(c.get(b"m").unwrap(), Some(b"8".to_vec()));
    c.put(b"big", i64::MAX.to_string().as_bytes()).unwrap();
    assert_eq!(c.increment(b"big", 0).unwrap(), i64::MAX);
    c.put(b"small", i64::MIN.to_string().as_bytes()).unwrap();
    assert_eq!(c.increment(b"small", 1).unwrap(), i64::MIN + 1);
}

#[test]
fn increment_refuses_a_row_that_is_not_a_counter_and_overflow_writing_nothing() {
    let t = TestStore::new();
    let c = t.store().table("c").unwrap();
    for bad in [
        &b""[..],
        b"-",
        b"+5",
        b" 5",
        b"5 ",
        b"1.0",
        b"0x10",
        b"\x01\x00\x00\x00\x00\x00\x00\x00",
        b"9223372036854775808",
    ] {
        c.put(b"x", bad).unwrap();
        let e = c.increment(b"x", 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}");
        assert!(e.to_string().contains("not a counter"), "{e}");
        assert_eq!(c.get(b"x").unwrap().as_deref(), Some(bad), "unchanged");
    }
    c.put(b"x", b"9223372036854775800").unwrap();
    let e = c.increment(b"x", 8).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("outside the range"), "{e}");
    assert_eq!(c.increment(b"x", 7).unwrap(), i64::MAX);
    assert_eq!(
        c.increment(&[0u8; 1025], 1).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );

    // In a transaction: refused at once, and the transaction goes on.
    c.put(b"x", b"abc").unwrap();
    let mut tx = t.store().begin();
    let mut tt = tx.table("c").unwrap();
    assert_eq!(
        tt.increment(b"x", 1).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(tt.increment(b"y", 2).unwrap(), 2);
    tx.commit().unwrap();
    assert_eq!(c.get(b"x").unwrap(), Some(b"abc".to_vec()));
    assert_eq!(c.get(b"y").unwrap(), Some(b"2".to_vec()));
}

#[test]
fn put_if_sets_only_what_it_expected() {
    let t = TestStore::new();
    let leases = t.store().table("leases").unwrap();
    assert!(leases.put_if(b"r", None, b"w1").unwrap());
    assert!(!leases.put_if(b"r", None, b"w2").unwrap());
    assert!(!leases.put_if(b"r", Some(b"w2"), b"w3").unwrap());
    assert_eq!(leases.get(b"r").unwrap(), Some(b"w1".to_vec()));
    assert!(leases.put_if(b"r", Some(b"w1"), b"").unwrap());
    assert!(leases.put_if(b"r", Some(b""), b"done").unwrap()); // empty is a value, not absent
    assert!(!leases.put_if(b"r", None, b"again").unwrap());
    assert_eq!(
        leases
            .put_if(b"r", Some(b"done"), &vec![0u8; (1 << 20) + 1])
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(leases.get(b"r").unwrap(), Some(b"done".to_vec()));
}

#[test]
fn a_transaction_increments_what_it_sees_and_commits_it() {
    let t = TestStore::new();
    let s = t.store();
    let q = s.queue("invoices").unwrap();
    s.table("c").unwrap().put(b"n", b"10").unwrap();
    let mut tx = s.begin();
    let mut c = tx.table("c").unwrap();
    assert_eq!(c.increment(b"n", 1).unwrap(), 11);
    assert_eq!(
        c.increment(b"n", 1).unwrap(),
        12,
        "its own increments add up"
    );
    assert_eq!(c.get(b"n").unwrap(), Some(b"12".to_vec()));
    c.delete(b"gone").unwrap();
    assert_eq!(
        c.increment(b"gone", 5).unwrap(),
        5,
        "a deleted row counts as 0"
    );
    tx.send(&q, "invoice 12").unwrap();
    assert_eq!(
        s.table("c").unwrap().get(b"n").unwrap(),
        Some(b"10".to_vec())
    );
    tx.commit().unwrap();
    assert_eq!(
        s.table("c").unwrap().get(b"n").unwrap(),
        Some(b"12".to_vec())
    );
    assert_eq!(
        s.table("c").unwrap().get(b"gone").unwrap(),
        Some(b"5".to_vec())
    );

    // Aborted: nothing.
    let mut tx = s.begin();
    assert_eq!(tx.table("c").unwrap().increment(b"n", 1).unwrap(), 13);
    tx.abort().unwrap();
    assert_eq!(
        s.table("c").unwrap().get(b"n").unwrap(),
        Some(b"12".to_vec())
    );
}

/// The heart of it: a transaction whose increment read a row that another commit changed
/// before its own fails with `Conflict`, and nothing of it is applied — not the row, not its
/// sends, not its receives.
#[test]
fn a_row_changed_since_the_transaction_read_it_fails_the_commit() {
    let t = TestStore::new();
    let s = t.store();
    let work = s.queue("work").unwrap();
    let out = s.queue("out").unwrap();
    work.send("job").unwrap();
    let counters = s.table("c").unwrap();

    let mut tx = s.begin();
    let job = tx.receive(&work, SEC).unwrap().unwrap();
    assert_eq!(tx.table("c").unwrap().increment(b"n", 1).unwrap(), 1);
    tx.send(&out, "n = 1").unwrap();
    assert_eq!(
        counters.increment(b"n", 1).unwrap(),
        1,
        "another writer got there first"
    );
    let e = tx.commit().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert!(e.is_conflict());
    assert!(e.to_string().contains("table \"c\""), "{e}");
    assert!(matches!(&e, postbox::Error::Conflict { table, key } if table == "c" && key == b"n"));
    assert_eq!(counters.get(b"n").unwrap(), Some(b"1".to_vec()));
    assert_eq!(out.len().unwrap(), 0);
    let again = work.try_receive().unwrap().expect("the job is back");
    assert_eq!((again.id(), again.delivery_count()), (job.id(), 2));
    again.abandon().unwrap();

    // Run again, it commits.
    let mut tx = s.begin();
    tx.receive(&work, SEC).unwrap().unwrap();
    assert_eq!(tx.table("c").unwrap().increment(b"n", 1).unwrap(), 2);
    tx.commit().unwrap();
    assert_eq!(counters.get(b"n").unwrap(), Some(b"2".to_vec()));

    // A row that appeared, or disappeared, since it was read counts as changed too.
    let mut tx = s.begin();
    tx.table("c").unwrap().increment(b"new", 1).unwrap();
    counters.put(b"new", b"0").unwrap();
    assert_eq!(tx.commit().unwrap_err().kind(), ErrorKind::Conflict);
    let mut tx = s.begin();
    tx.table("c").unwrap().increment(b"new", 1).unwrap();
    counters.delete(b"new").unwrap();
    assert_eq!(tx.commit().unwrap_err().kind(), ErrorKind::Conflict);
    // A change back to the value read is no change.
    let mut tx = s.begin();
    tx.table("c").unwrap().increment(b"n", 1).unwrap();
    counters.put(b"n", b"7").unwrap();
    counters.put(b"n", b"2").unwrap();
    tx.commit().unwrap();
    assert_eq!(counters.get(b"n").unwrap(), Some(b"3".to_vec()));
    // A blind write before the increment reads nothing from the store: no condition.
    let mut tx = s.begin();
    let mut c = tx.table("c").unwrap();
    c.put(b"n", b"100").unwrap();
    assert_eq!(c.increment(b"n", 1).unwrap(), 101);
    counters.put(b"n", b"50").unwrap();
    tx.commit().unwrap();
    assert_eq!(counters.get(b"n").unwrap(), Some(b"101".to_vec()));
}

#[test]
fn put_if_in_a_transaction_is_checked_at_commit_when_it_wrote() {
    let t = TestStore::new();
    let s = t.store();
    let leases = s.table("leases").unwrap();
    leases.put(b"r", b"w1").unwrap();

    let mut tx = s.begin();
    let mut l = tx.table("leases").unwrap();
    assert!(!l.put_if(b"r", None, b"mine").unwrap());
    assert!(l.put_if(b"other", None, b"mine").unwrap());
    leases.put(b"r", b"w2").unwrap(); // the false one read r: no condition on it
    tx.commit().unwrap();
    assert_eq!(leases.get(b"other").unwrap(), Some(b"mine".to_vec()));

    let mut tx = s.begin();
    assert!(
        tx.table("leases")
            .unwrap()
            .put_if(b"r", Some(b"w2"), b"w3")
            .unwrap()
    );
    assert_eq!(
        tx.table("leases").unwrap().get(b"r").unwrap(),
        Some(b"w3".to_vec())
    );
    leases.put(b"r", b"stolen").unwrap();
    assert_eq!(tx.commit().unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(leases.get(b"r").unwrap(), Some(b"stolen".to_vec()));
}

/// Seed 000's count: four threads, fifty increments each, in transactions that also receive a
/// message. Read-modify-write with get and put loses updates there (the later write wins);
/// `increment` in a transaction that runs again after a conflict counts exactly, and so does
/// `Table::increment`.
#[test]
fn four_threads_fifty_increments_each_count_to_two_hundred() {
    let dir = common::fast_tempdir();
    let s = Store::builder()
        .durability(Durability::None)
        .open(dir.path().join("s"))
        .unwrap();
    // A conflict returns the received tick like an abort (counted): room for many.
    let q = s
        .queue_with("ticks", QueueOptions::default().max_deliveries(10_000))
        .unwrap();
    for _ in 0..200 {
        q.send("tick").unwrap();
    }
    let conflicts = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|sc| {
        for _ in 0..4 {
            sc.spawn(|| {
                for _ in 0..50 {
                    loop {
                        let mut tx = s.begin();
                        tx.receive(&q, Duration::from_secs(5)).unwrap().unwrap();
                        tx.table("c").unwrap().increment(b"tx", 1).unwrap();
                        match tx.commit() {
                            Ok(()) => break,
                            Err(e) if e.is_conflict() => {
                                conflicts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    s.table("c").unwrap().increment(b"auto", 1).unwrap();
                }
            });
        }
    });
    let c = s.table("c").unwrap();
    assert_eq!(c.get(b"tx").unwrap(), Some(b"200".to_vec()));
    assert_eq!(c.get(b"auto").unwrap(), Some(b"200".to_vec()));
    assert_eq!(q.len().unwrap(), 0);
    eprintln!(
        "{} conflicts",
        conflicts.load(std::sync::atomic::Ordering::Relaxed)
    );
}
