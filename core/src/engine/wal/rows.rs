//! The body of a log record: a batch's row changes, and how replay writes them back.
//!
//! A change is `op (1 put, 2 remove) | table | key length | key | [value length | value]`,
//! lengths as LEB128. The bytes are redb's own encoding of each key and value (`Key::as_bytes`),
//! so replay needs only each table's types, never what a row means: any feature's writes are
//! logged and replayed alike. Table numbers are part of the log format: never reuse one.

use std::collections::HashMap;

use redb::{Key, Table, Value, WriteTransaction};

use super::super::tables::*;
use crate::error::{Error, Result};

const PUT: u8 = 1;
const REMOVE: u8 = 2;

/// Replay's opener: opens the table a change names, whatever its types.
struct Opener<'t> {
    txn: &'t WriteTransaction,
    opened: Option<Box<dyn Replay + 't>>,
}

impl<'t> TableVisitor for Opener<'t> {
    type Error = Error;

    fn visit<K: Key + 'static, V: Value + 'static>(
        &mut self,
        def: redb::TableDefinition<K, V>,
    ) -> Result<()> {
        self.opened = Some(Box::new(self.txn.open_table(def)?));
        Ok(())
    }
}

fn open_for_replay<'t>(txn: &'t WriteTransaction, id: u8) -> Result<Box<dyn Replay + 't>> {
    let mut opener = Opener { txn, opened: None };
    match visit_table(id, &mut opener) {
        Some(r) => r?,
        None => {
            return Err(Error::corrupted(format!(
                "write-ahead log: unknown table number {id}"
            )));
        }
    }
    opener
        .opened
        .ok_or_else(|| bad("table could not be opened"))
}

/// The highest table number in use.
const MAX_TABLE: usize = MAX_TABLE_ID as usize;

fn put_len(buf: &mut Vec<u8>, n: usize) {
    crate::engine::varint::put(buf, n as u64);
}

/// Appends a put of `key` → `value` in `table`.
pub fn encode_put(buf: &mut Vec<u8>, table: u8, key: &[u8], value: &[u8]) {
    buf.reserve(key.len() + value.len() + 8);
    buf.push(PUT);
    buf.push(table);
    put_len(buf, key.len());
    buf.extend_from_slice(key);
    put_len(buf, value.len());
    buf.extend_from_slice(value);
}

/// Appends a removal of `key` from `table`.
pub fn encode_remove(buf: &mut Vec<u8>, table: u8, key: &[u8]) {
    buf.push(REMOVE);
    buf.push(table);
    put_len(buf, key.len());
    buf.extend_from_slice(key);
}

/// One decoded change.
#[derive(Debug, PartialEq, Eq)]
pub enum Change<'a> {
    Put {
        table: u8,
        key: &'a [u8],
        value: &'a [u8],
    },
    Remove {
        table: u8,
        key: &'a [u8],
    },
}

fn bad(what: &str) -> Error {
    Error::corrupted(format!("write-ahead log record: {what}"))
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8> {
        let (&b, rest) = self.rest.split_first().ok_or_else(|| bad("truncated"))?;
        self.rest = rest;
        Ok(b)
    }

    fn len(&mut self) -> Result<usize> {
        use crate::engine::varint::{Bad, take};
        let n = take(&mut self.rest).map_err(|why| match why {
            Bad::Truncated => bad("truncated"),
            Bad::TooLong => bad("length too long"),
        })?;
        usize::try_from(n).map_err(|_| bad("length overflows"))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.len()?;
        if n > self.rest.len() {
            return Err(bad("a key or value runs past the record"));
        }
        let (b, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(b)
    }
}

/// Decodes every change of a record body.
///
/// # Errors
///
/// `Corrupted` for a body that is not a sequence of changes (a record whose checksum passed
/// but whose contents do not parse was written by something other than postbox).
pub fn decode(body: &[u8]) -> Result<Vec<Change<'_>>> {
    let mut r = Reader { rest: body };
    let mut out = Vec::new();
    while !r.rest.is_empty() {
        let op = r.byte()?;
        let table = r.byte()?;
        let key = r.bytes()?;
        out.push(match op {
            PUT => Change::Put {
                table,
                key,
                value: r.bytes()?,
            },
            REMOVE => Change::Remove { table, key },
            other => return Err(bad(&format!("unknown change kind {other}"))),
        });
    }
    Ok(out)
}

/// A table replay writes into, whatever its types.
trait Replay {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    fn remove(&mut self, key: &[u8]) -> Result<()>;
}

/// redb decodes fixed-width types by slicing, and would panic on a wrong length.
fn check_width(width: Option<usize>, bytes: &[u8]) -> Result<()> {
    match width {
        Some(w) if w != bytes.len() => Err(bad("a key or value has the wrong width")),
        _ => Ok(()),
    }
}

impl<K: Key + 'static, V: Value + 'static> Replay for Table<'_, K, V> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        check_width(K::fixed_width(), key)?;
        check_width(V::fixed_width(), value)?;
        self.insert(K::from_bytes(key), V::from_bytes(value))?;
        Ok(())
    }

    fn remove(&mut self, key: &[u8]) -> Result<()> {
        check_width(K::fixed_width(), key)?;
        Table::remove(self, K::from_bytes(key))?;
        Ok(())
    }
}

/// Writes changes into one write transaction, keeping each table open across records.
pub struct Applier<'t> {
    txn: &'t WriteTransaction,
    open: Vec<Option<Box<dyn Replay + 't>>>,
}

impl<'t> Applier<'t> {
    pub fn new(txn: &'t WriteTransaction) -> Applier<'t> {
        Applier {
            txn,
            open: (0..=MAX_TABLE).map(|_| None).collect(),
        }
    }

    fn table(&mut self, id: u8) -> Result<&mut Box<dyn Replay + 't>> {
        let slot = self
            .open
            .get_mut(usize::from(id))
            .ok_or_else(|| bad(&format!("unknown table number {id}")))?;
        if slot.is_none() {
            *slot = Some(open_for_replay(self.txn, id)?);
        }
        slot.as_mut()
            .ok_or_else(|| bad("table could not be opened"))
    }

    /// Writes the changes of record bodies as their net effect: only the last change of each
    /// row is written (a row put and then removed within the log is never written at all; a
    /// counter rewritten by every record is written once), in the order rows first appear, so
    /// that new rows still arrive in the order they were made (ascending ids, the B-tree's
    /// cheap case). The result is the same as writing every change in order, since each
    /// change replaces or removes a whole row. Returns how many changes the bodies held.
    ///
    /// # Errors
    ///
    /// `Corrupted` for a body that does not decode; redb's errors.
    pub fn apply_all<'b>(&mut self, bodies: impl IntoIterator<Item = &'b [u8]>) -> Result<usize> {
        type Row<'b> = ((u8, &'b [u8]), Option<&'b [u8]>);
        let mut at: HashMap<(u8, &'b [u8]), usize> = HashMap::new();
        let mut rows: Vec<Row<'b>> = Vec::new();
        let mut changes = 0;
        for body in bodies {
            for c in decode(body)? {
                changes += 1;
                let (row, value) = match c {
                    Change::Put { table, key, value } => ((table, key), Some(value)),
                    Change::Remove { table, key } => ((table, key), None),
                };
                match at.get(&row) {
                    Some(&i) => rows[i].1 = value,
                    None => {
                        at.insert(row, rows.len());
                        rows.push((row, value));
                    }
                }
            }
        }
        for ((table, key), value) in rows {
            match value {
                Some(value) => self.table(table)?.put(key, value)?,
                None => self.table(table)?.remove(key)?,
            }
        }
        Ok(changes)
    }
}

/// Every table of the store has a log number (checked by a test, so a new table cannot be
/// forgotten).
#[cfg(test)]
pub fn numbered(name: &str) -> bool {
    table_id(name).is_some()
}

#[cfg(test)]
mod tests {
    use redb::ReadableTable;

    use super::*;

    #[test]
    fn changes_round_trip() {
        let mut buf = Vec::new();
        encode_put(&mut buf, 5, &[1, 2, 3], &vec![7u8; 300]);
        encode_remove(&mut buf, 7, &[]);
        encode_put(&mut buf, 24, &[], &[]);
        let got = decode(&buf).unwrap();
        assert_eq!(
            got,
            vec![
                Change::Put {
                    table: 5,
                    key: &[1, 2, 3],
                    value: &vec![7u8; 300]
                },
                Change::Remove { table: 7, key: &[] },
                Change::Put {
                    table: 24,
                    key: &[],
                    value: &[]
                },
            ]
        );
    }

    #[test]
    fn replay_writes_the_net_effect_of_changes_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let db = redb::Database::create(dir.path().join("t.redb")).unwrap();
        let data = table_id(redb::TableHandle::name(&DATA)).unwrap();
        let key = |id: u64| id.to_le_bytes();
        {
            // Row 9 exists before the replay; the log removes it and puts it back.
            let txn = db.begin_write().unwrap();
            txn.open_table(DATA)
                .unwrap()
                .insert(9, &b"old"[..])
                .unwrap();
            txn.commit().unwrap();
        }
        let (mut first, mut second) = (Vec::new(), Vec::new());
        encode_put(&mut first, data, &key(1), b"a");
        encode_put(&mut first, data, &key(2), b"sent, then completed");
        encode_remove(&mut first, data, &key(9));
        encode_put(&mut second, data, &key(1), b"b");
        encode_remove(&mut second, data, &key(2));
        encode_put(&mut second, data, &key(9), b"new");
        encode_remove(&mut second, data, &key(5));
        let txn = db.begin_write().unwrap();
        let changes = Applier::new(&txn)
            .apply_all([first.as_slice(), second.as_slice()])
            .unwrap();
        assert_eq!(changes, 7);
        {
            let t = txn.open_table(DATA).unwrap();
            let rows: Vec<(u64, Vec<u8>)> = t
                .iter()
                .unwrap()
                .map(|r| {
                    let (k, v) = r.unwrap();
                    (k.value(), v.value().to_vec())
                })
                .collect();
            assert_eq!(rows, vec![(1, b"b".to_vec()), (9, b"new".to_vec())]);
        }
        txn.commit().unwrap();
    }

    #[test]
    fn damaged_bodies_are_errors_not_panics() {
        let mut buf = Vec::new();
        encode_put(&mut buf, 5, &[1, 2, 3], &[9; 40]);
        for cut in 0..buf.len() {
            let _ = decode(&buf[..cut]);
        }
        assert!(decode(&[9, 1, 0]).is_err());
        assert!(
            decode(&[
                1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ])
            .is_err()
        );
    }

    #[test]
    fn every_table_has_a_number() {
        use redb::TableHandle;
        for name in [
            META.name(),
            QUEUES.name(),
            DATA.name(),
            APP_ROWS.name(),
            DEDUP_EXPIRY.name(),
        ] {
            assert!(numbered(name), "{name}");
        }
    }
}
