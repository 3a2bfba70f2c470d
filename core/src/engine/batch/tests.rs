//! The abort rule of `Batch::attempt`: an operation that fails before writing leaves the batch
//! to the other operations; one that fails after writing (a row, or a cache `flush` writes)
//! aborts it. The batch counts its writes itself, so these hold for every operation.

use redb::{Database, ReadableDatabase, ReadableTable};

use super::*;
use crate::engine::logged::Changes;

/// A store file with the tables a batch needs and its id sequences.
fn store() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("s.postbox")).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut counters = txn.open_table(COUNTERS).unwrap();
        counters
            .insert(SEQUENCES_KEY, encode_sequences(&[1, 1, 1, 1]))
            .unwrap();
        txn.open_table(APP_ROWS).unwrap();
    }
    txn.commit().unwrap();
    (dir, db)
}

fn refused() -> Error {
    Error::invalid("refused")
}

/// Puts application row `key` through the batch's tables.
fn put_row(b: &mut Batch<'_>, key: &[u8]) -> Result<()> {
    b.tables.app_rows()?.insert(("t", key), &b"v"[..])?;
    Ok(())
}

fn rows(db: &Database) -> Vec<Vec<u8>> {
    let txn = db.begin_read().unwrap();
    let t = txn.open_table(APP_ROWS).unwrap();
    t.iter()
        .unwrap()
        .map(|e| e.unwrap().0.value().1.to_vec())
        .collect()
}

/// Runs `body` in a batch over `db`, with the log recording on and off (the count must not
/// depend on it), and commits the batch if it changed anything, as the pipeline does.
fn each_recording(db: &Database, body: impl Fn(&mut Batch<'_>)) {
    for recording in [false, true] {
        let changes = if recording {
            Changes::on(Vec::new())
        } else {
            Changes::off()
        };
        let txn = db.begin_write().unwrap();
        let dirty = {
            let ltxn = LoggedTxn {
                txn: &txn,
                changes: &changes,
            };
            let mut b = Batch::open(ltxn, 1_000, DueHints::default()).unwrap();
            body(&mut b);
            b.flush().unwrap();
            b.changed()
        };
        if dirty {
            txn.commit().unwrap();
        } else {
            txn.abort().unwrap();
        }
    }
}

#[test]
fn a_failure_before_writing_is_its_callers_alone() {
    let (_dir, db) = store();
    each_recording(&db, |b| {
        let r = b.attempt(|_| -> Result<()> { Err(refused()) });
        assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{r:?}");
        assert!(!b.changed());
        // The batch goes on: the next operation's write commits.
        b.attempt(|b| put_row(b, b"after")).unwrap().unwrap();
        assert!(b.changed());
    });
    assert_eq!(rows(&db), [b"after".to_vec()]);
}

#[test]
fn a_failure_after_writing_a_row_aborts_the_batch() {
    let (_dir, db) = store();
    each_recording(&db, |b| {
        let r = b.attempt(|b| {
            put_row(b, b"half")?;
            Err::<(), _>(refused())
        });
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    });
}

#[test]
fn removing_a_missing_row_writes_nothing() {
    let (_dir, db) = store();
    each_recording(&db, |b| {
        let r = b.attempt(|b| {
            b.tables.app_rows()?.remove(("t", &b"none"[..]))?;
            Err::<(), _>(refused())
        });
        assert!(matches!(r, Ok(Err(_))), "{r:?}");
        assert!(!b.changed());
    });
}

#[test]
fn a_failure_after_changing_a_cache_aborts_the_batch() {
    let (_dir, db) = store();
    each_recording(&db, |b| {
        let r = b.attempt(|b| {
            b.counters_mut(7)?.active += 1;
            Err::<(), _>(refused())
        });
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        assert!(b.changed());
    });
}

#[test]
fn a_batch_that_changed_nothing_flushes_nothing() {
    let (_dir, db) = store();
    each_recording(&db, |b| {
        // An operation that takes an id and then fails cleanly advances the cached sequence;
        // that alone is no reason to commit.
        let r = b.attempt(|b| {
            b.next_seq(Seq::Message)?;
            Err::<(), _>(refused())
        });
        assert!(matches!(r, Ok(Err(_))), "{r:?}");
        b.flush().unwrap();
        assert!(!b.changed());
    });
    // A reserved id is a change: the sequence is written.
    each_recording(&db, |b| {
        b.reserve_id().unwrap();
        assert!(b.changed());
    });
    let txn = db.begin_read().unwrap();
    let seqs = txn
        .open_table(COUNTERS)
        .unwrap()
        .get(SEQUENCES_KEY)
        .unwrap();
    // Reserved twice (once per recording mode), each batch committed.
    assert_eq!(
        decode_sequences(&seqs.unwrap().value())[Seq::Message as usize],
        3
    );
}
