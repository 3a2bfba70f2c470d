//! `postbox.Processor`: the Rust processor's worker threads running a Python handler.
//!
//! Workers are Rust threads: they receive, renew locks and commit without the GIL and take it
//! only to call the handler. Waiting for shutdown releases the GIL (interruptible by Ctrl-C,
//! see `wait.rs`), which is what lets in-flight handlers finish.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use postbox::binding::{finish_lent, retry_policy, take_transaction};
use postbox::sync::Mutex;
use postbox::{Autoscale, Delivery, Processor, ShutdownReport, Transaction};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::convert;
use crate::errors::{IntoPy, invalid, is_forked};
use crate::live::Live;
use crate::message::PyMessage;
use crate::queue::PyQueue;
use crate::shutdown_report::{PyShutdownReport, report_to_py};
use crate::tx::PyTransaction;
use crate::wait::wait_interruptible;

struct Inner {
    /// `None` once shut down. An `Arc` so that waits happen without holding the mutex.
    processor: Mutex<Option<Arc<Processor>>>,
    /// The same processor, reached without the mutex: in a forked child, where a parent thread
    /// may have held the mutex at the fork, `join` and `shutdown` report through it. Weak, so
    /// that dropping the handle in `processor` still shuts the processor down.
    unlocked: Weak<Processor>,
    drop_timeout: Duration,
    /// The process that started the workers. In another (a forked child) they do not exist:
    /// nothing there may wait for them or take a lock they may have held at fork time.
    opened_by: u32,
}

impl Live for Inner {
    type Inner = Mutex<Option<Arc<Processor>>>;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Mutex<Option<Arc<Processor>>> {
        &self.processor
    }
}

impl Inner {
    fn get(&self) -> PyResult<Arc<Processor>> {
        self.live()?
            .lock()
            .clone()
            .ok_or_else(|| invalid("the processor was already shut down"))
    }

    /// What `join` and `shutdown` report in a forked child, where the workers do not exist: the
    /// engine's report there (counters at the fork, `forked` set), without waiting and without
    /// taking a lock.
    fn forked_report(&self) -> PyResult<ShutdownReport> {
        self.unlocked
            .upgrade()
            .map(|p| p.join(Duration::ZERO))
            .ok_or_else(|| invalid("the processor was already shut down"))
    }

    /// Stops, waits up to `timeout`, and forgets the processor once it has finished.
    fn shutdown(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<ShutdownReport> {
        let p = self.get()?;
        let report = shutdown_interruptible(py, &p, timeout)?;
        if report.finished {
            let last = self.processor.lock().take();
            // Dropping the last handle joins the worker threads: never with the GIL held.
            py.detach(move || drop((last, p)));
        }
        Ok(report)
    }
}

/// Every processor alive, so that interpreter exit can shut them down while Python still runs
/// (a worker calling into a finalizing interpreter would hang).
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// Shuts down every processor still running (registered with `atexit` by the package).
#[pyfunction]
pub fn _shutdown_all(py: Python<'_>) -> PyResult<()> {
    let live: Vec<Arc<Inner>> = LIVE.lock().drain(..).filter_map(|w| w.upgrade()).collect();
    for inner in live {
        if is_forked(inner.opened_by) {
            // A parent's processor: its workers are not in this process.
            continue;
        }
        if inner.processor.lock().is_some() {
            let timeout = inner.drop_timeout;
            inner.shutdown(py, Some(timeout))?;
        }
    }
    Ok(())
}

/// Runs `handler(message)` on `workers` threads for every message of `queue`. A handler that
/// returns completes its message; one that raises abandons it for a retry with backoff (after
/// `max_deliveries` it is dead-lettered with the exception text). The exception is logged to
/// the `postbox` logger at WARNING with its traceback, and given to `on_error(message,
/// exception)` if set. `msg.dead_letter(reason)`
/// inside the handler dead-letters it instead, whether the handler then returns or raises.
///
/// Workers are native threads with the stack size Python gives its own threads
/// (`threading.stack_size()` if set, else the platform's default for Python threads), so a
/// handler may recurse as deeply as it could in a `threading.Thread`.
///
/// `sessions=True` is session mode, for a queue that requires sessions: each worker accepts
/// one session at a time and handles its messages in send order, one by one, until none is
/// receivable, then releases it and takes the next; `workers` groups are handled in parallel,
/// never one group by two workers. The mode must match the queue (`InvalidArgumentError`
/// otherwise); `prefetch` does not apply to it.
///
/// `autoscale=(min_workers, max_workers)` resizes the pool every `check_interval` to the
/// backlog divided by `messages_per_worker`, plus `reserve` spare workers, within the bounds.
///
/// A handler's message records checkpoints (`mark_done`, `done_keys`), renews the processor's
/// lock (`renew_lock`) and answers a request (`reply`, sent with the completion) under the
/// processor's lock, which the processor keeps renewing.
///
/// In a forked child the workers do not exist: `join` and `shutdown` return at once a report
/// with `forked=True`, every other call raises `ForkedError`; leaving a `with` block and
/// garbage collection let go of the handle without waiting.
#[pyclass(frozen, module = "postbox._postbox", name = "Processor")]
pub struct PyProcessor {
    inner: Arc<Inner>,
    queue: Py<PyQueue>,
}

impl Drop for PyProcessor {
    fn drop(&mut self) {
        if is_forked(self.inner.opened_by) {
            // Dropping the processor would stop and wait for workers that are not in this
            // process (and could take a lock that one of them held at fork time): leak it.
            std::mem::forget(self.inner.clone());
            return;
        }
        let last = self.inner.processor.lock().take();
        if let Some(p) = last {
            // Processor::drop waits for running handlers, which need the GIL.
            Python::attach(|py| py.detach(move || drop(p)));
        }
    }
}

fn failure_text(py: Python<'_>, e: &PyErr) -> String {
    let name = e
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    format!("{name}: {}", e.value(py))
}

/// A Python handler and what its failures go to.
struct PyHandler {
    handler: Py<PyAny>,
    /// `on_error(message, exception)`, called when the handler raises.
    on_error: Option<Py<PyAny>>,
    queue: String,
}

fn run_handler(h: &PyHandler, d: &Delivery) -> Result<(), String> {
    let (msg, result) = Python::attach(|py| {
        let msg = Bound::new(py, PyMessage::for_processor(d)).map_err(|e| failure_text(py, &e))?;
        let result = h
            .handler
            .bind(py)
            .call1((&msg,))
            .map(drop)
            .map_err(|e| h.raised(py, &msg, &e));
        Ok::<_, String>((msg.unbind(), result))
    })?;
    finish_lent(&msg.get().held, result)
}

/// A transactional handler call: `handler(message, tx)` with the processor's transaction lent
/// as a `postbox.Transaction` for the call, taken back (and closed to Python) when it returns.
fn run_tx_handler(h: &PyHandler, d: &Delivery, tx: &mut Transaction) -> Result<(), String> {
    let lent = Python::attach(|py| {
        Py::new(py, PyTransaction::lent(take_transaction(tx))).map_err(|e| failure_text(py, &e))
    })?;
    let called = Python::attach(|py| {
        let msg = Bound::new(py, PyMessage::for_processor(d)).map_err(|e| failure_text(py, &e))?;
        let result = h
            .handler
            .bind(py)
            .call1((&msg, lent.bind(py)))
            .map(drop)
            .map_err(|e| h.raised(py, &msg, &e));
        Ok::<_, String>((msg.unbind(), result))
    });
    // Taken back whatever happened: the processor commits it with the completion, or aborts it.
    if let Some(t) = Python::attach(|py| py.detach(|| lent.get().reclaim())) {
        *tx = t;
    }
    let (msg, result) = called?;
    finish_lent(&msg.get().held, result)
}

/// The exception of `e`, its traceback attached (`__traceback__`), as Python's `except` would
/// see it: what the logging module prints and what `on_error` gets.
fn exception<'py>(py: Python<'py>, e: &PyErr) -> Bound<'py, pyo3::exceptions::PyBaseException> {
    let value = e.value(py).clone();
    if let Some(tb) = e.traceback(py) {
        let _ = value.setattr("__traceback__", tb);
    }
    value
}

/// Logs `e` with its traceback to the `postbox` logger at `level` (`"warning"`, `"error"`);
/// `args` gives the message and its `%` arguments. A failure to log is reported as
/// unraisable, never raised: this runs on a worker thread, outside any Python caller.
fn log_exception<'py>(
    py: Python<'py>,
    level: &str,
    args: impl FnOnce() -> PyResult<Bound<'py, PyTuple>>,
    e: &PyErr,
) {
    let logged = (|| {
        let log = py
            .import("logging")?
            .call_method1("getLogger", ("postbox",))?;
        let kw = PyDict::new(py);
        kw.set_item("exc_info", exception(py, e))?;
        log.call_method(level, args()?, Some(&kw))
    })();
    if let Err(e) = logged {
        e.write_unraisable(py, None);
    }
}

impl PyHandler {
    /// The handler raised `e` on `msg`: logs it to the `postbox` logger at WARNING with the
    /// traceback, then calls `on_error(msg, exception)` while the message is still the
    /// handler's (an exception of the hook's own is logged at ERROR, never raised). Returns
    /// the failure text the message is retried (or dead-lettered) with.
    fn raised(&self, py: Python<'_>, msg: &Bound<'_, PyMessage>, e: &PyErr) -> String {
        log_exception(
            py,
            "warning",
            || {
                PyTuple::new(
                    py,
                    [
                        "postbox.Processor handler raised on message %d of queue %r (delivery %d)"
                            .into_pyobject(py)?
                            .into_any(),
                        msg.getattr("id")?,
                        self.queue.as_str().into_pyobject(py)?.into_any(),
                        msg.getattr("delivery_count")?,
                    ],
                )
            },
            e,
        );
        if let Some(f) = &self.on_error
            && let Err(hook) = f.bind(py).call1((msg, exception(py, e)))
        {
            log_exception(
                py,
                "error",
                || {
                    PyTuple::new(
                        py,
                        [
                            "postbox.Processor on_error raised on message %d of queue %r"
                                .into_pyobject(py)?
                                .into_any(),
                            msg.getattr("id")?,
                            self.queue.as_str().into_pyobject(py)?.into_any(),
                        ],
                    )
                },
                &hook,
            );
        }
        failure_text(py, e)
    }
}

/// Calls the `on_scale` callback with the live worker count, on whichever native thread
/// changed it. An exception is logged to the `postbox` logger, never raised.
fn call_on_scale(f: &Py<PyAny>, workers: usize) {
    Python::attach(|py| {
        if let Err(e) = f.bind(py).call1((workers,)) {
            log_exception(
                py,
                "error",
                || {
                    PyTuple::new(
                        py,
                        [
                            "postbox.Processor on_scale(%d) raised"
                                .into_pyobject(py)?
                                .into_any(),
                            workers.into_pyobject(py)?.into_any(),
                        ],
                    )
                },
                &e,
            );
        }
    });
}

/// Rust's default stack for spawned threads: workers never get less.
const RUST_DEFAULT_STACK: usize = 2 << 20;
/// CPython's thread stack on macOS (`THREAD_STACK_SIZE` in `thread_pthread.h`).
const MACOS_PYTHON_STACK: usize = 16 << 20;
/// The stack of a Linux thread when `RLIMIT_STACK` is unlimited (and elsewhere, a safe size).
const FALLBACK_STACK: usize = 8 << 20;

/// The stack size of the threads Python starts itself: `threading.stack_size()` if a program
/// set one, else the platform's default for them — on Linux (glibc) a new thread gets the
/// `RLIMIT_STACK` soft limit, or 8 MiB when that is unlimited. Handlers run Python code on the
/// workers, and Python's recursion limit assumes such a stack; the Rust default of 2 MiB turns
/// a deep recursion into a crash of the process instead of a `RecursionError`.
fn python_thread_stack_size(py: Python<'_>) -> usize {
    let set: usize = py
        .import("threading")
        .and_then(|t| t.call_method0("stack_size"))
        .and_then(|n| n.extract())
        .unwrap_or(0);
    let size = if set != 0 {
        set
    } else if cfg!(target_os = "macos") {
        MACOS_PYTHON_STACK
    } else {
        rlimit_stack(py).unwrap_or(FALLBACK_STACK)
    };
    size.max(RUST_DEFAULT_STACK)
}

/// The soft `RLIMIT_STACK`, when the platform has one and it is finite (read through Python's
/// `resource` module, Unix only).
fn rlimit_stack(py: Python<'_>) -> Option<usize> {
    let resource = py.import("resource").ok()?;
    let which = resource.getattr("RLIMIT_STACK").ok()?;
    let (soft, _hard): (i64, i64) = resource
        .call_method1("getrlimit", (which,))
        .ok()?
        .extract()
        .ok()?;
    let infinity: i64 = resource.getattr("RLIM_INFINITY").ok()?.extract().ok()?;
    (soft > 0 && soft != infinity)
        .then(|| usize::try_from(soft).ok())
        .flatten()
}

/// Waits up to `timeout` (`None`: until done) for `p` to finish, with the GIL released;
/// Ctrl-C interrupts it on the main thread (see `wait.rs`).
fn join_interruptible(
    py: Python<'_>,
    p: &Processor,
    timeout: Option<Duration>,
) -> PyResult<ShutdownReport> {
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut last = None;
    let finished = wait_interruptible(py, deadline, |left| {
        let report = p.join(left);
        let done = report.finished.then_some(report);
        last = Some(report);
        Ok(done)
    })?;
    match finished.or(last) {
        Some(report) => Ok(report),
        // Not reached: the wait makes at least one attempt.
        None => Ok(py.detach(|| p.join(Duration::ZERO))),
    }
}

fn shutdown_interruptible(
    py: Python<'_>,
    p: &Processor,
    timeout: Option<Duration>,
) -> PyResult<ShutdownReport> {
    p.stop();
    join_interruptible(py, p, timeout)
}

#[pymethods]
impl PyProcessor {
    #[new]
    #[pyo3(signature = (queue, handler, workers=4, *, retry_delay=None, max_retry_delay=None,
        handler_timeout=None, max_auto_renew=None, prefetch=0, autoscale=None, drop_timeout=None,
        sessions=false, transactional=false, codec=None, messages_per_worker=None,
        check_interval=None, on_scale=None, reserve=None, on_error=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        queue: Bound<'_, PyQueue>,
        handler: Bound<'_, PyAny>,
        workers: usize,
        retry_delay: Option<&Bound<'_, PyAny>>,
        max_retry_delay: Option<&Bound<'_, PyAny>>,
        handler_timeout: Option<&Bound<'_, PyAny>>,
        max_auto_renew: Option<&Bound<'_, PyAny>>,
        prefetch: usize,
        autoscale: Option<(usize, usize)>,
        drop_timeout: Option<&Bound<'_, PyAny>>,
        sessions: bool,
        transactional: bool,
        codec: Option<&Bound<'_, PyAny>>,
        messages_per_worker: Option<u64>,
        check_interval: Option<&Bound<'_, PyAny>>,
        on_scale: Option<Bound<'_, PyAny>>,
        reserve: Option<usize>,
        on_error: Option<Bound<'_, PyAny>>,
    ) -> PyResult<PyProcessor> {
        if !handler.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(if transactional {
                "handler must be callable: handler(message, tx) -> None"
            } else {
                "handler must be callable: handler(message) -> None"
            }));
        }
        if let Some(f) = &on_scale
            && !f.is_callable()
        {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "on_scale must be callable: on_scale(workers) -> None",
            ));
        }
        if let Some(f) = &on_error
            && !f.is_callable()
        {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "on_error must be callable: on_error(message, exception) -> None",
            ));
        }
        let check_interval = convert::opt_duration(check_interval, "check_interval")?;
        if autoscale.is_none()
            && (messages_per_worker.is_some() || check_interval.is_some() || reserve.is_some())
        {
            return Err(invalid(
                "messages_per_worker, check_interval and reserve need autoscale=(min_workers, max_workers)",
            ));
        }
        if messages_per_worker == Some(0) {
            return Err(invalid("messages_per_worker must be at least 1"));
        }
        if check_interval.is_some_and(|d| d.is_zero()) {
            return Err(invalid("check_interval must be positive"));
        }
        // Typed bodies: the handler gets a `TypedMessage`; a body that does not decode is
        // dead-lettered (`DecodeFailed`) before it could reach it, as Rust and C do.
        let handler = match codec {
            Some(c) if !c.is_none() => py
                .import("postbox._typed")?
                .getattr("_typed_handler")?
                .call1((&queue, c, &handler, transactional))?,
            _ => handler,
        };
        let retry = retry_policy(
            convert::opt_duration(retry_delay, "retry_delay")?,
            None,
            convert::opt_duration(max_retry_delay, "max_retry_delay")?,
        );
        let drop_timeout = convert::opt_duration(drop_timeout, "drop_timeout")?;
        let q = &queue.get().q;
        // A closed store (or a forked child's, or a deleted queue) fails here, at once, rather
        // than in every worker.
        py.detach(|| q.options()).py_err()?;
        let mut b = Processor::builder(q)
            .stack_size(python_thread_stack_size(py))
            .workers(workers)
            .prefetch(prefetch)
            .sessions(sessions);
        if let Some(p) = retry {
            b = b.retry(p);
        }
        if let Some(t) = drop_timeout {
            b = b.drop_timeout(t);
        }
        if let Some(t) = convert::opt_duration(handler_timeout, "handler_timeout")? {
            b = b.handler_timeout(t);
        }
        if let Some(t) = convert::opt_duration(max_auto_renew, "max_auto_renew")? {
            b = b.max_auto_renew(t);
        }
        if let Some((lo, hi)) = autoscale {
            let mut a = Autoscale::new(lo, hi);
            if let Some(n) = messages_per_worker {
                a = a.messages_per_worker(n);
            }
            if let Some(d) = check_interval {
                a = a.check_interval(d);
            }
            if let Some(n) = reserve {
                a = a.reserve(n);
            }
            b = b.autoscale(a);
        }
        if let Some(f) = on_scale {
            let f = f.unbind();
            b = b.on_scale(move |workers| call_on_scale(&f, workers));
        }
        let handler = PyHandler {
            handler: handler.unbind(),
            on_error: on_error.map(Bound::unbind),
            queue: q.name().to_owned(),
        };
        let p = py
            .detach(|| {
                if transactional {
                    b.start_transactional(move |d: &Delivery, tx: &mut Transaction| {
                        run_tx_handler(&handler, d, tx)
                    })
                } else {
                    b.start(move |d: &Delivery| run_handler(&handler, d))
                }
            })
            .py_err()?;
        let p = Arc::new(p);
        let inner = Arc::new(Inner {
            drop_timeout: p.drop_timeout(),
            unlocked: Arc::downgrade(&p),
            processor: Mutex::new(Some(p)),
            opened_by: postbox::binding::process_id(),
        });
        let mut live = LIVE.lock();
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&inner));
        drop(live);
        Ok(PyProcessor {
            inner,
            queue: queue.unbind(),
        })
    }

    /// The queue being processed.
    #[getter]
    fn queue(&self, py: Python<'_>) -> Py<PyQueue> {
        self.queue.clone_ref(py)
    }

    /// Stops taking new messages, without waiting; running handlers finish normally.
    fn stop(&self) -> PyResult<()> {
        self.inner.live()?;
        if let Ok(p) = self.inner.get() {
            p.stop();
        }
        Ok(())
    }

    /// Whether stop() or shutdown() was called.
    #[getter]
    fn is_stopped(&self) -> PyResult<bool> {
        self.inner.live()?;
        Ok(self.inner.get().map(|p| p.is_stopped()).unwrap_or(true))
    }

    /// Handlers running now.
    #[getter]
    fn in_flight(&self) -> PyResult<usize> {
        self.inner.live()?;
        Ok(self.inner.get().map(|p| p.in_flight()).unwrap_or(0))
    }

    /// Live workers now.
    #[getter]
    fn workers(&self) -> PyResult<usize> {
        self.inner.live()?;
        Ok(self.inner.get().map(|p| p.workers()).unwrap_or(0))
    }

    /// Counters: processed, failed, dead_lettered, lock_lost, returned, in_flight, workers.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.get()?.stats();
        let d = PyDict::new(py);
        d.set_item("processed", s.processed)?;
        d.set_item("failed", s.failed)?;
        d.set_item("dead_lettered", s.dead_lettered)?;
        d.set_item("lock_lost", s.lock_lost)?;
        d.set_item("returned", s.returned)?;
        d.set_item("in_flight", s.in_flight)?;
        d.set_item("workers", s.workers)?;
        Ok(d)
    }

    /// Waits up to `timeout` (`None`: until done) for the workers to finish after stop(). In a
    /// forked child it returns at once a report with `forked=True` (see `shutdown`).
    #[pyo3(signature = (timeout=None))]
    fn join(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyShutdownReport> {
        let timeout = convert::opt_duration(timeout, "timeout")?;
        if is_forked(self.inner.opened_by) {
            return self.inner.forked_report().map(report_to_py);
        }
        let p = self.inner.get()?;
        join_interruptible(py, &p, timeout).map(report_to_py)
    }

    /// Stops taking messages and waits up to `timeout` (`None`: until done) for every running
    /// handler to return and its commit or abort to be applied. Leaves nothing locked when the
    /// report says `finished`. Calling it again after it finished raises.
    ///
    /// In a forked child, where the workers do not exist, it stops nothing, waits for nothing
    /// and writes nothing: it returns at once a report with `forked=True`, `finished=False`,
    /// `still_running=0` and the counters as they were at the fork; the parent's processor runs
    /// on.
    #[pyo3(signature = (timeout=None))]
    fn shutdown(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyShutdownReport> {
        let timeout = convert::opt_duration(timeout, "timeout")?;
        if is_forked(self.inner.opened_by) {
            return self.inner.forked_report().map(report_to_py);
        }
        self.inner.shutdown(py, timeout).map(report_to_py)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Shuts down, waiting for running handlers (in a forked child: returns at once, the
    /// workers being the parent's).
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if is_forked(self.inner.opened_by) {
            return Ok(false);
        }
        if self.inner.processor.lock().is_some() {
            self.inner.shutdown(py, None)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        if is_forked(self.inner.opened_by) {
            return "<postbox.Processor of another process>".into();
        }
        match self.inner.get() {
            Ok(p) => format!(
                "<postbox.Processor queue={:?} workers={} in_flight={}{}>",
                p.queue().name(),
                p.workers(),
                p.in_flight(),
                if p.is_stopped() { " stopped" } else { "" }
            ),
            Err(_) => "<postbox.Processor shut down>".into(),
        }
    }
}
