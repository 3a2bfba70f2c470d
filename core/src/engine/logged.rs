//! Tables whose writes are recorded as row changes, so that a batch can be made durable by
//! appending those changes to the write-ahead log (see `wal`) instead of by a durable redb
//! commit.
//!
//! A batch opens every table through [`LoggedTxn`]. [`Logged`] hands out the table for
//! reading (`Deref`, so `get` and `range` work as on a redb table) but not for writing: the
//! only writes it offers are its own `insert`, `remove` and `retain`, which record each put
//! or removal (table, key bytes, value bytes) before making it. A feature therefore cannot
//! write a row the log misses — the compiler refuses it — and the log needs to know nothing
//! of what the rows mean.

use std::borrow::Borrow;
use std::cell::{Cell, RefCell};
use std::ops::Deref;

use redb::{
    AccessGuard, Key, StorageError, Table, TableDefinition, TableHandle, Value, WriteTransaction,
};

use super::wal::rows;
use crate::error::{Error, Result};

/// The row changes of one batch, encoded as the log records them (see `wal::rows`), and
/// their number.
#[derive(Debug, Default)]
pub struct Changes {
    /// `None` when the store keeps no log (multi-process or `Durability::None`): recording
    /// costs one branch.
    buf: Option<RefCell<Vec<u8>>>,
    /// Rows put or removed so far, counted whether or not they are recorded: how the batch
    /// knows whether an operation wrote anything (see `Batch::attempt`).
    writes: Cell<u64>,
}

impl Changes {
    /// A recorder that keeps nothing.
    pub fn off() -> Changes {
        Changes {
            buf: None,
            writes: Cell::new(0),
        }
    }

    /// A recorder that keeps every change, in `buf` (emptied first).
    pub fn on(mut buf: Vec<u8>) -> Changes {
        buf.clear();
        Changes {
            buf: Some(RefCell::new(buf)),
            writes: Cell::new(0),
        }
    }

    fn put(&self, table: u8, key: &[u8], value: &[u8]) {
        if let Some(buf) = &self.buf {
            rows::encode_put(&mut buf.borrow_mut(), table, key, value);
        }
    }

    fn remove(&self, table: u8, key: &[u8]) {
        if let Some(buf) = &self.buf {
            rows::encode_remove(&mut buf.borrow_mut(), table, key);
        }
    }

    /// How many rows were put or removed so far (a removal of a missing key changes nothing
    /// and is not counted).
    pub fn writes(&self) -> u64 {
        self.writes.get()
    }

    fn wrote(&self) {
        self.writes.set(self.writes.get() + 1);
    }

    fn recording(&self) -> bool {
        self.buf.is_some()
    }

    /// The recorded changes (empty when recording is off).
    pub fn take(self) -> Vec<u8> {
        self.buf.map(RefCell::into_inner).unwrap_or_default()
    }
}

/// A write transaction whose tables record their writes into `changes`.
#[derive(Clone, Copy)]
pub struct LoggedTxn<'t> {
    pub txn: &'t WriteTransaction,
    pub changes: &'t Changes,
}

impl<'t> LoggedTxn<'t> {
    /// Opens `def` for this batch.
    ///
    /// # Errors
    ///
    /// redb's error opening the table; `Corrupted` for a table the log has no number for
    /// (a bug: every table of `tables::table_list` has one).
    pub fn open<K: Key + 'static, V: Value + 'static>(
        &self,
        def: TableDefinition<K, V>,
    ) -> Result<Logged<'t, K, V>> {
        let id = super::tables::table_id(def.name()).ok_or_else(|| {
            Error::corrupted(format!(
                "table {} has no write-ahead log number",
                def.name()
            ))
        })?;
        Ok(Logged {
            table: self.txn.open_table(def)?,
            id,
            changes: self.changes,
        })
    }
}

/// A redb table open in a batch: read through `Deref`, written through the methods below.
pub struct Logged<'t, K: Key + 'static, V: Value + 'static> {
    table: Table<'t, K, V>,
    id: u8,
    changes: &'t Changes,
}

impl<'t, K: Key + 'static, V: Value + 'static> Deref for Logged<'t, K, V> {
    type Target = Table<'t, K, V>;

    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

impl<K: Key + 'static, V: Value + 'static> Logged<'_, K, V> {
    /// `Table::insert`, recorded.
    ///
    /// # Errors
    ///
    /// redb's storage error; the batch is then aborted, log record and all.
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> std::result::Result<Option<AccessGuard<'_, V>>, StorageError> {
        if self.changes.recording() {
            self.changes.put(
                self.id,
                K::as_bytes(key.borrow()).as_ref(),
                V::as_bytes(value.borrow()).as_ref(),
            );
        }
        self.changes.wrote();
        self.table.insert(key, value)
    }

    /// `Table::remove`, recorded (a removal of a missing key replays as a no-op), and counted
    /// if it removed a row (or failed, which may have changed the table).
    ///
    /// # Errors
    ///
    /// redb's storage error.
    pub fn remove<'a>(
        &mut self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> std::result::Result<Option<AccessGuard<'_, V>>, StorageError> {
        let changes = self.changes;
        if changes.recording() {
            changes.remove(self.id, K::as_bytes(key.borrow()).as_ref());
        }
        let removed = self.table.remove(key);
        if !matches!(removed, Ok(None)) {
            changes.wrote();
        }
        removed
    }

    /// `Table::retain`, each removed row recorded and counted.
    ///
    /// # Errors
    ///
    /// redb's storage error (counted as a write: the table may have changed).
    pub fn retain<F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool>(
        &mut self,
        mut predicate: F,
    ) -> std::result::Result<(), StorageError> {
        let (changes, id) = (self.changes, self.id);
        let retained = self.table.retain(|k, v| {
            let key = changes
                .recording()
                .then(|| K::as_bytes(&k).as_ref().to_vec());
            let keep = predicate(k, v);
            if !keep {
                changes.wrote();
                if let Some(key) = key {
                    changes.remove(id, &key);
                }
            }
            keep
        });
        if retained.is_err() {
            changes.wrote();
        }
        retained
    }
}
