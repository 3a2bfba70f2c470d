//! The id sequences share the `COUNTERS` table and carry no checksum. A damaged sequence that
//! points back at a stored message must make sends fail as `Corrupted`, never overwrite that
//! message (found by the open_store fuzz target: a bit flip in a store opened without
//! verify_on_open made a send reuse the id of a dead letter and replace it).

use postbox::{ErrorKind, Store};
use redb::ReadableTable;

const COUNTERS: redb::TableDefinition<u32, [u8; 32]> =
    redb::TableDefinition::new("postbox.counters");

#[test]
fn a_send_never_reuses_the_id_of_a_stored_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.postbox");
    let store = Store::open(&path).unwrap();
    let q = store.queue("orders").unwrap();
    let ids: Vec<u64> = (0..3)
        .map(|i| q.send(format!("m{i}")).unwrap().get())
        .collect();
    store.close().unwrap();
    {
        // Wind the message sequence back to the second message's id.
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(COUNTERS).unwrap();
            let mut row = t.get(0).unwrap().unwrap().value();
            row[..8].copy_from_slice(&ids[1].to_le_bytes());
            t.insert(0, row).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let q = store.queue("orders").unwrap();
    let e = q.send("intruder").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupted, "{e}");
    let bodies: Vec<Vec<u8>> = q.browse().map(|e| e.unwrap().into_body()).collect();
    assert_eq!(bodies, [b"m0".to_vec(), b"m1".to_vec(), b"m2".to_vec()]);
    store.close().unwrap();
}
