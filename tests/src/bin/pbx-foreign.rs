//! Leaves behind a redb database that is not a postbox store and whose writer "crashed": it
//! opens the file, commits a table of its own, and exits without closing it, so redb finds the
//! file in need of repair. `pbx-foreign PATH`.

use redb::TableDefinition;

const OTHER: TableDefinition<&str, u64> = TableDefinition::new("someone.else");

fn main() {
    let path = std::env::args().nth(1).expect("usage: pbx-foreign PATH");
    let db = redb::Database::create(&path).expect("create");
    let txn = db.begin_write().expect("begin");
    txn.open_table(OTHER)
        .expect("table")
        .insert("answer", 42)
        .expect("insert");
    txn.commit().expect("commit");
    println!("WRITTEN");
    // Exit without dropping the database: its "clean shutdown" mark is never written.
    std::mem::forget(db);
    std::process::exit(0);
}
