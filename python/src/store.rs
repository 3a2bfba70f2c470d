//! `postbox.Store`: opening the file, queues, transactions.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use postbox::{Durability, JobOptions, OptionKind, OptionValue, QueueInfo, QueueOptions, Store};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDateTime, PyDict, PyType};

use crate::collator::PyCollator;
use crate::convert;
use crate::errors::{IntoPy, invalid};
use crate::job::PyJob;
use crate::live::Live;
use crate::queue::{PyQueue, options_to_py};
use crate::table::PyTable;
use crate::topic::PyTopic;
use crate::tx::PyTransaction;

/// One store file holding many queues. A context manager: leaving the block closes it.
///
/// A store belongs to the process that opened it. In a child made by `fork()` (the "fork"
/// start method of `multiprocessing`, prefork servers) every call on it — and on its queues,
/// messages, transactions and processors — raises `ForkedError` and writes nothing; `close()`,
/// leaving a `with` block and garbage collection only let go of the handle. The child opens the
/// store itself (with `multi_process=True` to share it with a parent that keeps it open).
#[pyclass(frozen, module = "postbox._postbox", name = "Store")]
pub struct PyStore {
    pub store: Store,
    closed: AtomicBool,
    /// The process that opened the store (the engine's record of it, taken at the same
    /// moment): checked before any call into the core (see `PyQueue::opened_by`).
    opened_by: u32,
}

impl Live for PyStore {
    type Inner = Store;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Store {
        &self.store
    }
}

/// A non-negative integer option (never a bool, which Python would accept as 0 or 1).
fn int_option(v: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, not bool"
        )));
    }
    let n: i128 = v.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be an int, not {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    u64::try_from(n).map_err(|_| invalid(format!("{what} must be from 0 to 2**64-1, got {n}")))
}

/// A bool option (an int is refused: `requires_session=1` is most likely a mistake for a count).
fn bool_option(v: &Bound<'_, PyAny>, what: &str) -> PyResult<bool> {
    v.cast::<PyBool>().map(|b| b.is_true()).map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a bool, not {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

/// A queue-name option: a `str`, or a `Queue` (its name).
fn str_option(v: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    if let Ok(q) = v.cast::<PyQueue>() {
        return Ok(q.get().q.name().to_owned());
    }
    v.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what} must be a queue name (str) or a Queue, not {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

/// The options of `Store.queue(name, **options)` as a `QueueOptions` that mentions exactly the
/// keywords given: a keyword left out keeps the stored value, `None` clears an optional option
/// and puts a required one back to its default. The keywords are the names of
/// `QueueOptions::FIELDS`, each converted by its kind. `method` names the method in the error
/// for an unknown keyword.
pub fn queue_options(options: Option<&Bound<'_, PyDict>>, method: &str) -> PyResult<QueueOptions> {
    let mut o = QueueOptions::default();
    let Some(options) = options else {
        return Ok(o);
    };
    for (k, v) in options.iter() {
        let key: String = k.extract()?;
        let Some(f) = QueueOptions::FIELDS.iter().find(|f| f.name == key) else {
            let names: Vec<_> = QueueOptions::FIELDS.iter().map(|f| f.name).collect();
            return Err(PyTypeError::new_err(format!(
                "{method}() got an unexpected keyword argument {key:?} (options are {})",
                names.join(", ")
            )));
        };
        let value = if v.is_none() {
            if f.optional {
                OptionValue::Unset
            } else {
                f.default_value()
            }
        } else {
            match f.kind {
                OptionKind::Duration => OptionValue::Duration(convert::duration(&v, f.name)?),
                OptionKind::Flag => OptionValue::Flag(bool_option(&v, f.name)?),
                OptionKind::QueueName => OptionValue::Text(str_option(&v, f.name)?),
                _ => OptionValue::Number(int_option(&v, f.name)?),
            }
        };
        o.set(f.name, value).map_err(crate::errors::to_py)?;
    }
    Ok(o)
}

/// A queue as `Store.queue_infos()` lists it.
#[pyclass(frozen, module = "postbox._postbox", name = "QueueInfo")]
pub struct PyQueueInfo(QueueInfo);

#[pymethods]
impl PyQueueInfo {
    /// The queue's name.
    #[getter]
    fn name(&self) -> &str {
        &self.0.name
    }

    /// Its stored options, as `Queue.options` reads them.
    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        options_to_py(py, &self.0.options)
    }

    /// Created by `Store.temporary_queue`: it goes with its store handle.
    #[getter]
    fn temporary(&self) -> bool {
        self.0.temporary
    }

    /// When it last saw a send, receive, settle or lock renewal (to a tenth of a second), as an
    /// aware UTC `datetime`; `None` if never recorded.
    #[getter]
    fn last_activity<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        convert::opt_datetime(py, self.0.last_activity)
    }

    fn __repr__(&self) -> String {
        format!(
            "<postbox.QueueInfo {:?}{}>",
            self.0.name,
            if self.0.temporary { " temporary" } else { "" }
        )
    }
}

#[pymethods]
impl PyStore {
    /// Opens (creating if needed) the store at `path`.
    #[new]
    #[pyo3(signature = (path, durability="immediate", multi_process=false, *, cache_size=None,
        poll_interval=None, verify_on_open=true, write_ahead_log=true, accept_log_loss=false))]
    // One argument per keyword of Python's signature.
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        durability: &str,
        multi_process: bool,
        cache_size: Option<usize>,
        poll_interval: Option<(Bound<'_, PyAny>, Bound<'_, PyAny>)>,
        verify_on_open: bool,
        write_ahead_log: bool,
        accept_log_loss: bool,
    ) -> PyResult<PyStore> {
        let durability = match durability {
            "immediate" => Durability::Immediate,
            "none" => Durability::None,
            other => {
                return Err(PyValueError::new_err(format!(
                    "durability must be \"immediate\" or \"none\", not {other:?}"
                )));
            }
        };
        let mut b = Store::builder()
            .durability(durability)
            .multi_process(multi_process)
            .verify_on_open(verify_on_open)
            .write_ahead_log(write_ahead_log)
            .accept_log_loss(accept_log_loss);
        if let Some(bytes) = cache_size {
            b = b.cache_size(bytes);
        }
        if let Some((floor, ceiling)) = poll_interval {
            b = b.poll_interval(
                convert::duration(&floor, "poll_interval floor")?,
                convert::duration(&ceiling, "poll_interval ceiling")?,
            );
        }
        let store = py.detach(|| b.open(&path)).py_err()?;
        Ok(PyStore {
            store,
            closed: AtomicBool::new(false),
            opened_by: postbox::binding::process_id(),
        })
    }

    /// What the open could not recover (opened with ``accept_log_loss=True`` while the
    /// write-ahead log it needed was missing or damaged), or ``None``.
    #[getter]
    fn log_loss(&self) -> Option<String> {
        self.store.log_loss().map(str::to_owned)
    }

    /// The path of the store file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.store.path().to_owned()
    }

    /// `"immediate"` or `"none"`.
    #[getter]
    fn durability(&self) -> &'static str {
        match self.store.durability() {
            Durability::None => "none",
            _ => "immediate",
        }
    }

    /// Whether the store was opened with `multi_process=True` (shared with other processes).
    #[getter]
    fn multi_process(&self) -> bool {
        self.store.is_multi_process()
    }

    /// Whether `close()` was called (on this object or on another handle of the same store).
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.store.is_closed()
    }

    /// Opens queue `name`, creating it if missing; an existing queue keeps its messages.
    ///
    /// Options (keyword-only): `lock_duration`, `max_deliveries`, `default_ttl`,
    /// `max_message_size`, `max_messages`, `max_bytes`, `dedup_window`, `requires_session`,
    /// `forward_to`, `forward_dead_letters_to`, `journal`, `auto_delete_on_idle`,
    /// `receipts_to`, `default_priority`. Only the options given change an existing queue; the others keep their
    /// stored values. `None` clears an optional one (`default_ttl`, `max_messages`,
    /// `max_bytes`, `dedup_window`, `forward_to`, `forward_dead_letters_to`, `journal`,
    /// `auto_delete_on_idle`, `receipts_to`) and puts a required one (`lock_duration`,
    /// `max_deliveries`, `max_message_size`, `requires_session`, `default_priority`) back to
    /// its default. The same rule holds in Rust and C, in every process.
    #[pyo3(signature = (name, **options))]
    fn queue(
        &self,
        py: Python<'_>,
        name: &str,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyQueue> {
        let store = self.live()?;
        let o = queue_options(options, "queue")?;
        let q = py.detach(|| store.queue_with(name, o)).py_err()?;
        Ok(PyQueue::new(q))
    }

    /// Opens queue `name` only if it exists, never creating it; raises `QueueNotFoundError`
    /// otherwise (a late reply cannot re-create a deleted queue, a typo creates nothing).
    fn open_queue(&self, py: Python<'_>, name: &str) -> PyResult<PyQueue> {
        let store = self.live()?;
        let q = py.detach(|| store.open_queue(name)).py_err()?;
        Ok(PyQueue::new(q))
    }

    /// The names of all queues (dead-letter queues are reached through `Queue.dead_letters`).
    fn queues(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let store = self.live()?;
        py.detach(|| store.queues()).py_err()
    }

    /// Opens topic `name`, creating it if missing; an existing topic keeps its subscriptions.
    /// A topic and a queue (or collator) cannot share a name.
    fn topic(&self, py: Python<'_>, name: &str) -> PyResult<PyTopic> {
        let store = self.live()?;
        let t = py.detach(|| store.topic(name)).py_err()?;
        Ok(PyTopic::new(t))
    }

    /// Opens topic `name` only if it exists; raises `QueueNotFoundError` otherwise.
    fn open_topic(&self, py: Python<'_>, name: &str) -> PyResult<PyTopic> {
        let store = self.live()?;
        let t = py.detach(|| store.open_topic(name)).py_err()?;
        Ok(PyTopic::new(t))
    }

    /// The names of all topics (`queues()` lists subscription queues, not topics).
    fn topics(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let store = self.live()?;
        py.detach(|| store.topics()).py_err()
    }

    /// Opens collator `name`, which releases into `destination`, creating it if missing; an
    /// existing collator keeps what it holds and must release into `destination` (unless that
    /// queue is gone: then it takes `destination`). The destination is in use while the
    /// collator exists.
    fn collator(
        &self,
        py: Python<'_>,
        name: &str,
        destination: &Bound<'_, PyQueue>,
    ) -> PyResult<PyCollator> {
        let store = self.live()?;
        let dest = &destination.get().q;
        let c = py.detach(|| store.collator(name, dest)).py_err()?;
        Ok(PyCollator::new(c))
    }

    /// Creates a temporary queue, with the options of `queue` (keyword-only): it belongs to this
    /// store handle and is deleted with its messages when the store is closed, when this
    /// process dies (noticed by the next process that opens the store, or by a shared store's
    /// next writer), or when the store is next opened in single-process mode. Its name
    /// (`$temporary/…`, which cannot be created by hand) is unique: give it out as a
    /// `reply_to`; a responder opens it with `open_queue`. A temporary queue cannot require
    /// sessions or keep a journal (`InvalidArgumentError`).
    #[pyo3(signature = (**options))]
    fn temporary_queue(
        &self,
        py: Python<'_>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyQueue> {
        let store = self.live()?;
        let o = match options.filter(|o| !o.is_empty()) {
            None => None,
            Some(o) => Some(queue_options(Some(o), "temporary_queue")?),
        };
        let q = py.detach(|| store.temporary_queue(o)).py_err()?;
        Ok(PyQueue::new(q))
    }

    /// Every queue (as `queues()` lists them) with its options, whether it is temporary, and
    /// its last activity, read from one snapshot: a list of `QueueInfo`.
    fn queue_infos(&self, py: Python<'_>) -> PyResult<Vec<PyQueueInfo>> {
        let store = self.live()?;
        let infos = py.detach(|| store.queue_infos()).py_err()?;
        Ok(infos.into_iter().map(PyQueueInfo).collect())
    }

    /// Creates a job (see `Job`). `continuation=(queue, message)` sends `message` to `queue`
    /// once the job is done, in the commit that ends its last piece (or seals it), exactly
    /// once; `message` is a body or a dict with a `"body"` key and `Queue.send`'s keywords (as
    /// a `send_batch` item), `queue` a `Queue` or the name of an existing queue. Raises
    /// `QueueNotFoundError`, `MessageTooLargeError`, `InvalidArgumentError` for a bad
    /// continuation.
    #[pyo3(signature = (*, continuation=None))]
    fn create_job(
        &self,
        py: Python<'_>,
        continuation: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyJob> {
        let store = self.live()?;
        let mut o = JobOptions::default();
        if let Some(c) = continuation {
            let (queue, item): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                c.extract().map_err(|_| {
                    PyTypeError::new_err(
                        "continuation must be a (queue, message) tuple: a Queue or a queue \
                         name, and a body or a dict of send's keywords with a \"body\" key",
                    )
                })?;
            let m = convert::batch_item(&item)?;
            let q = match queue.cast::<PyQueue>() {
                Ok(q) => q.get().q.clone(),
                Err(_) => {
                    let name: String = queue.extract().map_err(|_| {
                        PyTypeError::new_err("the continuation's queue must be a Queue or a str")
                    })?;
                    py.detach(|| store.open_queue(&name)).py_err()?
                }
            };
            o = o.continuation(&q, m);
        }
        let job = py.detach(|| store.create_job(o)).py_err()?;
        Ok(PyJob::new(job))
    }

    /// Opens job `id`, created by `create_job` in this or another process; raises
    /// `NotFoundError` (with `job_id` set) when there is no such job.
    fn job(&self, py: Python<'_>, id: u64) -> PyResult<PyJob> {
        let store = self.live()?;
        let job = py.detach(|| store.job(id)).py_err()?;
        Ok(PyJob::new(job))
    }

    /// Application table `name` (a `Table`): bytes keys to bytes values kept in the store,
    /// each write its own commit (`Transaction.table` writes rows with messages). It exists once
    /// a row is written. Raises `InvalidArgumentError` for a name that is empty or over 1 KiB.
    fn table(&self, name: &str) -> PyResult<PyTable> {
        let store = self.live()?;
        store.table(name).py_err().map(PyTable::new)
    }

    /// Deletes a queue, its dead-letter queue and their messages; returns whether it existed.
    /// The name of a topic deletes it with every subscription; the name of a collator deletes
    /// it with the messages it holds. Raises `InUseError` when something names the queue
    /// (another queue's `forward_to`, `forward_dead_letters_to` or `receipts_to`, a collator, a
    /// job that is not done): nothing is deleted.
    fn delete_queue(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        let store = self.live()?;
        py.detach(|| store.delete_queue(name)).py_err()
    }

    /// A new transaction; use it as `with store.transaction() as tx:`. Raises `ClosedError`
    /// at once on a closed store (`ForkedError` in a forked child).
    fn transaction(&self) -> PyResult<PyTransaction> {
        self.store.try_begin().py_err().map(PyTransaction::new)
    }

    /// Commit-pipeline counters of this handle, as a dict: `commits` and `operations` (redb
    /// write transactions and the operations they carried), `replayed_records` (write-ahead log
    /// records the open replayed: work a crash left in the log, 0 after a clean close),
    /// `log_records` and `log_bytes` (records this handle appended to the log), `checkpoints`
    /// (durable store-file commits that made the log redundant), and `log_run_seconds`,
    /// `log_apply_seconds`, `log_write_seconds`, `log_sync_seconds` (floats: total time of
    /// logged commits in each step). A closed store keeps answering with its final counters;
    /// raises `ForkedError` in a forked child.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let store = self.live()?;
        let s = store.stats();
        let d = PyDict::new(py);
        d.set_item("commits", s.commits)?;
        d.set_item("operations", s.operations)?;
        d.set_item("replayed_records", s.replayed_records)?;
        d.set_item("log_records", s.log_records)?;
        d.set_item("log_bytes", s.log_bytes)?;
        d.set_item("checkpoints", s.checkpoints)?;
        let t = s.log_timing;
        d.set_item("log_run_seconds", t.run.as_secs_f64())?;
        d.set_item("log_apply_seconds", t.apply.as_secs_f64())?;
        d.set_item("log_write_seconds", t.write.as_secs_f64())?;
        d.set_item("log_sync_seconds", t.sync.as_secs_f64())?;
        Ok(d)
    }

    /// Gives the space of deleted queues and purged, completed or expired messages back to the
    /// file system and returns the file's size just before and just after the compaction itself,
    /// in bytes (what others wrote while it waited is in both). Nothing the store
    /// holds changes (messages, locks, counts, dead letters), and every handle stays valid.
    /// Every other operation on the store waits while it runs; the GIL is released meanwhile.
    /// Raises `AlreadyOpenError` when the store could not be had alone within a few seconds
    /// (try again, or compact with the other processes of a shared store closed),
    /// `ClosedError`, `ForkedError` in a forked child, and storage errors.
    fn compact(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        let store = self.live()?;
        let stats = py.detach(|| store.compact()).py_err()?;
        Ok((stats.bytes_before, stats.bytes_after))
    }

    /// Serves the admin endpoint of this store on `addr` (``"host:port"``, port 0 for any free
    /// one) from threads of its own: the live dashboard page, ``/metrics`` in Prometheus text
    /// format, and the commands of ``postbox --admin URL``, so that the ``postbox`` command
    /// reaches a store this process holds in single-process mode. Requests must name it in
    /// ``Host`` (its address, a loopback address or ``localhost``: DNS rebinding is refused).
    /// Counts are open; dead letters and every ``postbox --admin`` command need the token
    /// (``X-Postbox-Token``): `token`, or a random one when it is ``None``
    /// (``AdminServer.token``). With ``allow_actions=True`` the page's resubmit button and
    /// commands that change the store are allowed too. Returns the running ``AdminServer``;
    /// ``stop()`` it (or use ``with``). Raises `InvalidArgumentError` for an address that does
    /// not parse or a token that is empty or not printable ASCII without spaces, `IoError`
    /// when it cannot listen there, `ClosedError`, `ForkedError`, and `UnsupportedError`
    /// (naming the build option) in a module built without the ``admin`` feature.
    #[pyo3(signature = (addr="127.0.0.1:0", *, allow_actions=false, token=None))]
    fn serve_admin(
        &self,
        py: Python<'_>,
        addr: &str,
        allow_actions: bool,
        token: Option<String>,
    ) -> PyResult<crate::admin::PyAdminServer> {
        let store = self.live()?;
        crate::admin::serve(py, store, addr, allow_actions, token)
    }

    /// Starts a bridge between this store's queues and RabbitMQ quorum queues from `config`,
    /// the TOML text of a bridge configuration (the format of ``postbox bridge --config``;
    /// its ``store`` and ``bind`` keys are ignored here). Returns the running ``Bridge``;
    /// ``stop()`` it (or use ``with``) before closing the store. Raises `ConfigError` for a
    /// configuration that does not parse or cannot work, `ClosedError`, `ForkedError`, and
    /// `UnsupportedError` (naming the build option) in a module built without the ``bridge``
    /// feature.
    fn bridge(&self, py: Python<'_>, config: &str) -> PyResult<crate::bridge::PyBridge> {
        let store = self.live()?;
        crate::bridge::start(py, store, config)
    }

    /// Closes the store: waits for pending commits and releases this process's locks. Every
    /// handle of the store raises `ClosedError` afterwards. Closing twice is harmless.
    ///
    /// In a forked child (a store inherited across `fork()`) it only lets go of this handle:
    /// it returns at once without touching the file, which stays the parent's.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let store = self.store.clone();
        py.detach(move || store.close()).py_err()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<postbox.Store {:?} durability={} multi_process={}{}>",
            self.store.path(),
            self.durability(),
            self.store.is_multi_process(),
            if self.closed() { " closed" } else { "" }
        )
    }
}
