//! Application tables: small key-value tables kept in the store, so that an application's own
//! state changes in the same commit as its sends and settles (outbox / inbox).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::engine::queries as read;
use crate::engine::{Engine, RowWrite, validate_app_key, validate_app_value};
use crate::error::Result;

/// The longest application table name and key, in bytes.
pub const MAX_TABLE_KEY_LEN: usize = crate::engine::MAX_APP_KEY_LEN;
/// The largest application table value, in bytes.
pub const MAX_TABLE_VALUE_LEN: usize = crate::engine::MAX_APP_VALUE_LEN;

/// Rows of one application table read or written outside a transaction, from
/// [`Store::table`](crate::Store::table). Each write is its own durable commit; use
/// [`Transaction::table`](crate::Transaction::table) to write rows together with messages.
/// Keys and values are bytes (keys up to 1 KiB, values up to 1 MiB), kept in key order.
#[derive(Debug, Clone)]
pub struct Table {
    pub(crate) engine: Arc<Engine>,
    pub(crate) name: Arc<str>,
}

impl Table {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value of `key`, if the table has it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an oversized key; storage
    /// errors.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        validate_app_key(&self.name, key)?;
        self.engine.read(|t| read::app_get(t, &self.name, key))
    }

    /// Sets `key` to `value` (one durable commit).
    ///
    /// # Errors
    ///
    /// As [`Table::get`], and for an oversized value.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        validate_app_key(&self.name, key)?;
        validate_app_value(value)?;
        let w = vec![(
            self.name.to_string(),
            key.to_vec(),
            RowWrite::Put(value.to_vec()),
        )];
        self.engine.call(move |b| b.write_rows(&w))
    }

    /// Removes `key` (one durable commit); removing a missing key is not an error.
    ///
    /// # Errors
    ///
    /// As [`Table::get`].
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        validate_app_key(&self.name, key)?;
        let w = vec![(self.name.to_string(), key.to_vec(), RowWrite::Delete)];
        self.engine.call(move |b| b.write_rows(&w))
    }

    /// Rows with `start <= key < end` (`end` `None`: to the end of the table), in key order, at
    /// most `limit`.
    ///
    /// # Errors
    ///
    /// As [`Table::get`].
    pub fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        validate_app_key(&self.name, start)?;
        self.engine
            .read(|t| read::app_range(t, &self.name, start, end, limit))
    }
}

/// The rows a transaction will write, by (table, key); the last write of a key wins.
pub(crate) type PendingRows = BTreeMap<(String, Vec<u8>), RowWrite>;

/// One application table seen through a transaction, from
/// [`Transaction::table`](crate::Transaction::table): reads see the store's committed rows with
/// the transaction's own writes laid over them; writes are applied at commit, atomically with
/// the transaction's receives and sends, or not at all.
///
/// Reads take no locks: two transactions that read a row and write it back may both commit
/// (the later write wins). Keep a row that several writers update behind a message they
/// receive (one holder at a time), or let one writer own it.
#[derive(Debug)]
pub struct TxTable<'a> {
    pub(crate) engine: &'a Arc<Engine>,
    pub(crate) name: String,
    pub(crate) pending: &'a mut PendingRows,
}

impl TxTable<'_> {
    /// The value of `key` as this transaction sees it.
    ///
    /// # Errors
    ///
    /// As [`Table::get`].
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        validate_app_key(&self.name, key)?;
        if let Some(w) = self.pending.get(&(self.name.clone(), key.to_vec())) {
            return Ok(match w {
                RowWrite::Put(v) => Some(v.clone()),
                RowWrite::Delete => None,
            });
        }
        self.engine.read(|t| read::app_get(t, &self.name, key))
    }

    /// Sets `key` to `value` when the transaction commits.
    ///
    /// # Errors
    ///
    /// As [`Table::put`].
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        validate_app_key(&self.name, key)?;
        validate_app_value(value)?;
        self.pending.insert(
            (self.name.clone(), key.to_vec()),
            RowWrite::Put(value.to_vec()),
        );
        Ok(())
    }

    /// Removes `key` when the transaction commits.
    ///
    /// # Errors
    ///
    /// As [`Table::get`].
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        validate_app_key(&self.name, key)?;
        self.pending
            .insert((self.name.clone(), key.to_vec()), RowWrite::Delete);
        Ok(())
    }

    /// Rows with `start <= key < end` as this transaction sees them, in key order, at most
    /// `limit`.
    ///
    /// # Errors
    ///
    /// As [`Table::get`].
    pub fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        validate_app_key(&self.name, start)?;
        let pending_here = self
            .pending
            .iter()
            .filter(|((t, k), _)| {
                *t == self.name && k.as_slice() >= start && end.is_none_or(|e| k.as_slice() < e)
            })
            .count();
        // Deleted rows may hide some of the stored ones: read enough to fill `limit` anyway.
        let stored = self.engine.read(|t| {
            read::app_range(
                t,
                &self.name,
                start,
                end,
                limit.saturating_add(pending_here),
            )
        })?;
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = stored.into_iter().collect();
        for ((t, k), w) in self.pending.iter() {
            if *t != self.name || k.as_slice() < start || end.is_some_and(|e| k.as_slice() >= e) {
                continue;
            }
            match w {
                RowWrite::Put(v) => {
                    merged.insert(k.clone(), v.clone());
                }
                RowWrite::Delete => {
                    merged.remove(k);
                }
            }
        }
        Ok(merged.into_iter().take(limit).collect())
    }
}
