//! Opening a redb database that is not a postbox store refuses it without changing a byte, even
//! when its last writer crashed and redb would repair it first (invariant 10).

use std::process::Command;

use postbox::{ErrorKind, Store};

#[test]
fn a_crashed_foreign_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.redb");
    let out = Command::new(env!("CARGO_BIN_EXE_pbx-foreign"))
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The writer really left it in need of repair: a read-only open is refused.
    assert!(matches!(
        redb::ReadOnlyDatabase::open(&path),
        Err(redb::DatabaseError::RepairAborted)
    ));
    let before = std::fs::read(&path).unwrap();
    for multi in [false, true] {
        let e = Store::builder()
            .multi_process(multi)
            .open(&path)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotAStore, "{e}");
        assert!(
            std::fs::read(&path).unwrap() == before,
            "the file was modified"
        );
    }
}
