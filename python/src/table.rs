//! `postbox.Table` and `postbox.TransactionTable`: application key-value rows kept in the store,
//! written on their own or in the same commit as a transaction's messages (outbox / inbox).

use postbox::Table;
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::convert;
use crate::errors::{IntoPy, invalid};
use crate::live::Live;
use crate::tx::{TxLink, with_link};

type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// A key or value: bytes-like, or a `str` (stored as UTF-8), as message bodies are. A `str`
/// that UTF-8 cannot hold (lone surrogates) raises `UnicodeEncodeError`, as a queue name or a
/// body does; only another type is a `TypeError`.
fn bytes_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if obj.cast::<pyo3::types::PyString>().is_ok() {
        return convert::body(obj);
    }
    convert::body(obj).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "a table {what} must be bytes, bytearray, memoryview or str, not {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

/// `range`'s bounds: `end` `None` runs to the end of the table, `limit` `None` takes every row.
fn range_args(
    start: Option<&Bound<'_, PyAny>>,
    end: Option<&Bound<'_, PyAny>>,
    limit: Option<usize>,
) -> PyResult<(Vec<u8>, Option<Vec<u8>>, usize)> {
    let start = start.map(|s| bytes_arg(s, "key")).transpose()?;
    let end = end.map(|e| bytes_arg(e, "key")).transpose()?;
    Ok((start.unwrap_or_default(), end, limit.unwrap_or(usize::MAX)))
}

fn rows_to_py<'py>(py: Python<'py>, rows: Rows) -> Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    rows.into_iter()
        .map(|(k, v)| (PyBytes::new(py, &k), PyBytes::new(py, &v)))
        .collect()
}

fn key_error(key: &[u8]) -> PyErr {
    Python::attach(|py| PyKeyError::new_err(PyBytes::new(py, key).unbind()))
}

/// An application table of the store, from `Store.table(name)`: bytes keys (at most 1 KiB)
/// to bytes values (at most 1 MiB), kept in key order. Each write is its own durable commit;
/// `Transaction.table(name)` writes rows in the same commit as messages. `str` keys and values
/// are stored as UTF-8; reads return `bytes`. Also a mapping: `table[key]` (`KeyError` if
/// missing), `table[key] = value`, `del table[key]`, `key in table`. In a forked child every
/// call raises `ForkedError`.
#[pyclass(frozen, module = "postbox._postbox", name = "Table")]
pub struct PyTable {
    t: Table,
    opened_by: u32,
}

impl Live for PyTable {
    type Inner = Table;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Table {
        &self.t
    }
}

impl PyTable {
    pub fn new(t: Table) -> PyTable {
        PyTable {
            t,
            opened_by: postbox::binding::process_id(),
        }
    }

    fn read(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<Vec<u8>>> {
        let t = self.live()?;
        py.detach(|| t.get(key)).py_err()
    }
}

#[pymethods]
impl PyTable {
    /// The table's name.
    #[getter]
    fn name(&self) -> &str {
        self.t.name()
    }

    /// The value of `key`, or `default` when the table has no such row.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = bytes_arg(key, "key")?;
        Ok(match self.read(py, &key)? {
            Some(v) => Some(PyBytes::new(py, &v).into_any()),
            None => default,
        })
    }

    /// Sets `key` to `value`, durably, in a commit of its own.
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let t = self.live()?;
        let (key, value) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        py.detach(|| t.put(&key, &value)).py_err()
    }

    /// Removes `key` in a commit of its own; removing a missing key is not an error.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let t = self.live()?;
        let key = bytes_arg(key, "key")?;
        py.detach(|| t.delete(&key)).py_err()
    }

    /// Adds `delta` to the counter in row `key` and returns the new value, atomically, in a
    /// commit of its own: concurrent increments from any threads and processes all count. The
    /// row holds the value as a decimal integer in ASCII (`str(n).encode()`: read it back with
    /// `int(table[key])`); a missing row counts as 0. Raises `InvalidArgumentError` (writing
    /// nothing) when the row holds anything else or the sum leaves the 64-bit signed range.
    #[pyo3(signature = (key, delta=1))]
    fn increment(&self, py: Python<'_>, key: &Bound<'_, PyAny>, delta: i64) -> PyResult<i64> {
        let t = self.live()?;
        let key = bytes_arg(key, "key")?;
        py.detach(|| t.increment(&key, delta)).py_err()
    }

    /// Sets `key` to `value` if the row holds `expected` now (`None`: if there is no such
    /// row), atomically, in a commit of its own; returns whether it did (a compare-and-set).
    fn put_if(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        expected: Option<&Bound<'_, PyAny>>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let t = self.live()?;
        let key = bytes_arg(key, "key")?;
        let expected = expected.map(|e| bytes_arg(e, "value")).transpose()?;
        let value = bytes_arg(value, "value")?;
        py.detach(|| t.put_if(&key, expected.as_deref(), &value))
            .py_err()
    }

    /// The rows with `start <= key < end` (`end` `None`: to the end of the table) in key
    /// order, at most `limit` (`None`: all), as `(key, value)` pairs read from one snapshot.
    #[pyo3(signature = (start=None, end=None, limit=None))]
    fn range<'py>(
        &self,
        py: Python<'py>,
        start: Option<&Bound<'py, PyAny>>,
        end: Option<&Bound<'py, PyAny>>,
        limit: Option<usize>,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let t = self.live()?;
        let (start, end, limit) = range_args(start, end, limit)?;
        let rows = py
            .detach(|| t.range(&start, end.as_deref(), limit))
            .py_err()?;
        Ok(rows_to_py(py, rows))
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let key = bytes_arg(key, "key")?;
        match self.read(py, &key)? {
            Some(v) => Ok(PyBytes::new(py, &v)),
            None => Err(key_error(&key)),
        }
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value)
    }

    /// Removes `key`; raises `KeyError` if the table had no such row when looked up (use
    /// `delete` to remove without looking).
    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = bytes_arg(key, "key")?;
        if self.read(py, &k)?.is_none() {
            return Err(key_error(&k));
        }
        self.delete(py, key)
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = bytes_arg(key, "key")?;
        Ok(self.read(py, &key)?.is_some())
    }

    fn __repr__(&self) -> String {
        format!("<postbox.Table {:?}>", self.t.name())
    }
}

/// An application table seen through a transaction, from `Transaction.table(name)`: reads see
/// the store's committed rows with the transaction's own writes laid over them; writes are
/// applied by the commit, atomically with the transaction's receives and sends, or not at all.
/// The same methods and mapping sugar as `Table`. Plain reads take no locks: two transactions
/// that `get` a row and `put` it back may both commit (the later write wins); `increment` and
/// `put_if` make what they read a condition of the commit (`ConflictError` if another commit
/// changed it first). Once the transaction is finished (or dropped, which aborts it) every call
/// raises `InvalidArgumentError`.
#[pyclass(frozen, module = "postbox._postbox", name = "TransactionTable")]
pub struct PyTxTable {
    tx: TxLink,
    name: String,
    opened_by: u32,
}

impl Live for PyTxTable {
    type Inner = TxLink;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &TxLink {
        &self.tx
    }
}

impl PyTxTable {
    pub fn new(tx: TxLink, name: String, opened_by: u32) -> PyTxTable {
        PyTxTable {
            tx,
            name,
            opened_by,
        }
    }

    /// Runs `f` on the table through the transaction, without the GIL.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut postbox::TxTable<'_>) -> postbox::Result<T> + Send,
    ) -> PyResult<T> {
        self.live()?;
        let name = &self.name;
        let r = py.detach(|| with_link(&self.tx, |tx| f(&mut tx.table(name)?)));
        match r {
            Ok(r) => r.py_err(),
            Err(why) => Err(invalid(why)),
        }
    }

    fn read(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<Vec<u8>>> {
        self.with(py, |t| t.get(key))
    }
}

#[pymethods]
impl PyTxTable {
    /// The table's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The value of `key` as this transaction sees it, or `default` when there is no such row.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = bytes_arg(key, "key")?;
        Ok(match self.read(py, &key)? {
            Some(v) => Some(PyBytes::new(py, &v).into_any()),
            None => default,
        })
    }

    /// Sets `key` to `value` when the transaction commits.
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (key, value) = (bytes_arg(key, "key")?, bytes_arg(value, "value")?);
        self.with(py, |t| t.put(&key, &value))
    }

    /// Removes `key` when the transaction commits; removing a missing key is not an error.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_arg(key, "key")?;
        self.with(py, |t| t.delete(&key))
    }

    /// Adds `delta` to the counter in row `key` as this transaction sees it and returns the
    /// new value, which the commit writes (encoded as by `Table.increment`). The value the
    /// transaction first read from the store becomes a condition of the commit: if another
    /// commit changed the row before this one, the commit raises `ConflictError` and applies
    /// nothing, so run the transaction again. Increments of one row in one transaction add up.
    #[pyo3(signature = (key, delta=1))]
    fn increment(&self, py: Python<'_>, key: &Bound<'_, PyAny>, delta: i64) -> PyResult<i64> {
        let key = bytes_arg(key, "key")?;
        self.with(py, |t| t.increment(&key, delta))
    }

    /// Sets `key` to `value` when the transaction commits if the row, as this transaction
    /// sees it, holds `expected` now (`None`: no such row); returns whether it will. On `True`
    /// the value read from the store becomes a condition of the commit, as for `increment`
    /// (`ConflictError` at commit if another commit changed the row); on `False` nothing is
    /// recorded.
    fn put_if(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        expected: Option<&Bound<'_, PyAny>>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let key = bytes_arg(key, "key")?;
        let expected = expected.map(|e| bytes_arg(e, "value")).transpose()?;
        let value = bytes_arg(value, "value")?;
        self.with(py, |t| t.put_if(&key, expected.as_deref(), &value))
    }

    /// The rows with `start <= key < end` as this transaction sees them, in key order, at most
    /// `limit` (`None`: all).
    #[pyo3(signature = (start=None, end=None, limit=None))]
    fn range<'py>(
        &self,
        py: Python<'py>,
        start: Option<&Bound<'py, PyAny>>,
        end: Option<&Bound<'py, PyAny>>,
        limit: Option<usize>,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let (start, end, limit) = range_args(start, end, limit)?;
        let rows = self.with(py, |t| t.range(&start, end.as_deref(), limit))?;
        Ok(rows_to_py(py, rows))
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let key = bytes_arg(key, "key")?;
        match self.read(py, &key)? {
            Some(v) => Ok(PyBytes::new(py, &v)),
            None => Err(key_error(&key)),
        }
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value)
    }

    /// Removes `key` when the transaction commits; raises `KeyError` if the transaction sees
    /// no such row.
    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_arg(key, "key")?;
        self.with(py, |t| {
            if t.get(&key)?.is_none() {
                return Ok(false);
            }
            t.delete(&key).map(|()| true)
        })?
        .then_some(())
        .ok_or_else(|| key_error(&key))
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = bytes_arg(key, "key")?;
        Ok(self.read(py, &key)?.is_some())
    }

    fn __repr__(&self) -> String {
        format!("<postbox.TransactionTable {:?}>", self.name)
    }
}
