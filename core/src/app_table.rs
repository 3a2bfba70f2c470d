//! Application tables: small key-value tables kept in the store, so that an application's own
//! state changes in the same commit as its sends and settles (outbox / inbox).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::engine::queries as read;
use crate::engine::{
    Engine, RowReads, RowWrite, add_to_counter, validate_app_key, validate_app_value,
};
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

    /// Adds `delta` to the counter in row `key` and returns its new value, atomically (one
    /// durable commit that reads and writes the row): concurrent increments from any threads
    /// and processes all count. A counter row holds its value as a decimal integer in ASCII
    /// (an optional `-`, then digits: what `put(key, b"42")` writes, and `str(n)` or `%lld`
    /// in the other languages); a missing row counts as 0.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let stats = store.table("stats")?;
    /// assert_eq!(stats.increment(b"orders", 1)?, 1);
    /// assert_eq!(stats.increment(b"orders", 41)?, 42);
    /// assert_eq!(stats.get(b"orders")?, Some(b"42".to_vec()));
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Table::get`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument), writing
    /// nothing, when the row holds something other than such an integer or the sum would
    /// leave the range of `i64`.
    pub fn increment(&self, key: &[u8], delta: i64) -> Result<i64> {
        validate_app_key(&self.name, key)?;
        let (name, key) = (self.name.clone(), key.to_vec());
        self.engine
            .call(move |b| b.increment_row(&name, &key, delta))
    }

    /// Sets `key` to `value` if the row holds `expected` now (`None`: if there is no such
    /// row), atomically (one durable commit); returns whether it did. A compare-and-set:
    /// `false` means another writer got there first — read the row again and decide.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let leases = store.table("leases")?;
    /// assert!(leases.put_if(b"report", None, b"worker-1")?); // claimed
    /// assert!(!leases.put_if(b"report", None, b"worker-2")?); // taken already
    /// assert!(leases.put_if(b"report", Some(b"worker-1"), b"done")?);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Table::put`].
    pub fn put_if(&self, key: &[u8], expected: Option<&[u8]>, value: &[u8]) -> Result<bool> {
        validate_app_key(&self.name, key)?;
        validate_app_value(value)?;
        let (name, key) = (self.name.clone(), key.to_vec());
        let (expected, value) = (expected.map(<[u8]>::to_vec), value.to_vec());
        self.engine
            .call(move |b| b.put_row_if(&name, &key, expected.as_deref(), &value))
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
/// Plain reads take no locks: two transactions that [`get`](TxTable::get) a row and
/// [`put`](TxTable::put) it back may both commit (the later write wins). For a row that
/// several writers update, use [`increment`](TxTable::increment) or
/// [`put_if`](TxTable::put_if): each remembers the value it read from the store, and the
/// commit applies only if the row still holds it — otherwise it fails with
/// [`Error::Conflict`](crate::Error::Conflict), applying nothing, and the transaction is run
/// again (optimistic concurrency, as a compare-and-set that covers the whole transaction).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
/// let invoices = store.queue("invoices")?;
/// let number = loop {
///     let mut tx = store.begin();
///     let n = tx.table("counters")?.increment(b"invoice", 1)?;
///     tx.send(&invoices, format!("invoice {n}").as_str())?;
///     match tx.commit() {
///         Ok(()) => break n, // the number and the message, or neither
///         Err(e) if e.is_conflict() => continue, // another commit took it: again
///         Err(e) => return Err(e),
///     }
/// };
/// assert_eq!(number, 1);
/// # Ok::<(), postbox::Error>(())
/// ```
#[derive(Debug)]
pub struct TxTable<'a> {
    pub(crate) engine: &'a Arc<Engine>,
    pub(crate) name: String,
    pub(crate) pending: &'a mut PendingRows,
    pub(crate) reads: &'a mut RowReads,
}

impl TxTable<'_> {
    /// The value of `key` as this transaction sees it.
    ///
    /// # Errors
    ///
    /// As [`Table::get`].
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        validate_app_key(&self.name, key)?;
        Ok(self.seen(key)?.0)
    }

    /// The value of `key` as this transaction sees it, and whether it was read from the store
    /// (rather than from the transaction's own writes).
    fn seen(&self, key: &[u8]) -> Result<(Option<Vec<u8>>, bool)> {
        if let Some(w) = self.pending.get(&(self.name.clone(), key.to_vec())) {
            return Ok(match w {
                RowWrite::Put(v) => (Some(v.clone()), false),
                RowWrite::Delete => (None, false),
            });
        }
        let stored = self.engine.read(|t| read::app_get(t, &self.name, key))?;
        Ok((stored, true))
    }

    /// Records `write` of `key`, made from `read`; a value read from the store becomes a
    /// condition of the commit.
    fn write_from(&mut self, key: &[u8], read: Option<Vec<u8>>, from_store: bool, write: RowWrite) {
        let k = (self.name.clone(), key.to_vec());
        if from_store {
            self.reads.entry(k.clone()).or_insert(read);
        }
        self.pending.insert(k, write);
    }

    /// Adds `delta` to the counter in row `key` as this transaction sees it and returns the
    /// new value, which the commit writes (the encoding is [`Table::increment`]'s; a missing
    /// row counts as 0). The first time the transaction reads the row from the store, the
    /// value it read becomes a condition of the commit: if another commit changes the row
    /// before this one, the commit fails with [`Error::Conflict`](crate::Error::Conflict) and
    /// applies nothing, so a returned value is never handed out twice. Several increments of a
    /// row in one transaction add up.
    ///
    /// # Errors
    ///
    /// As [`Table::increment`], at once; [`Error::Conflict`](crate::Error::Conflict) at commit.
    pub fn increment(&mut self, key: &[u8], delta: i64) -> Result<i64> {
        validate_app_key(&self.name, key)?;
        let (current, from_store) = self.seen(key)?;
        let (new, bytes) = add_to_counter(&self.name, key, current.as_deref(), delta)?;
        self.write_from(key, current, from_store, RowWrite::Put(bytes));
        Ok(new)
    }

    /// Sets `key` to `value` when the transaction commits if the row, as this transaction
    /// sees it, holds `expected` now (`None`: no such row); returns whether it will. On `true`
    /// the value the transaction read from the store (if it read one) becomes a condition of
    /// the commit, as for [`TxTable::increment`]: a row changed by another commit before this
    /// one fails the commit with [`Error::Conflict`](crate::Error::Conflict). On `false`
    /// nothing is recorded.
    ///
    /// # Errors
    ///
    /// As [`Table::put`], at once; [`Error::Conflict`](crate::Error::Conflict) at commit.
    pub fn put_if(&mut self, key: &[u8], expected: Option<&[u8]>, value: &[u8]) -> Result<bool> {
        validate_app_key(&self.name, key)?;
        validate_app_value(value)?;
        let (current, from_store) = self.seen(key)?;
        if current.as_deref() != expected {
            return Ok(false);
        }
        self.write_from(key, current, from_store, RowWrite::Put(value.to_vec()));
        Ok(true)
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
