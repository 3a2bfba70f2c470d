//! `postbox.Message`: a stored message, and — when it came from `receive` — its lock.

use std::time::SystemTime;

use parking_lot::Mutex;
use postbox::{Envelope, Received, SettleError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDateTime, PyDict, PyType};

use crate::convert;
use crate::errors::{self, IntoPy, invalid, is_forked};
use crate::tx::{self, TxLink};

/// Where a message stands with respect to its lock.
pub enum Lock {
    /// From `peek`, `browse` or `get`: never locked.
    Unlocked,
    /// Received: held under this lock until settled.
    Held(Box<Received>),
    /// Received through, or enlisted in, a transaction: settled by its commit or abort, and
    /// renewed through it.
    Transaction(TxLink),
    /// Handed to a `Processor` handler: settled by the processor when the handler returns;
    /// holds the dead letter the handler asked for.
    Processor(Option<(String, String)>),
    /// Settled (the text says how) or being settled right now.
    Settled(&'static str),
}

impl Lock {
    fn state(&self) -> &'static str {
        match self {
            Lock::Unlocked => "unlocked",
            Lock::Held(_) => "locked",
            Lock::Transaction(_) => "transaction",
            Lock::Processor(_) => "processor",
            Lock::Settled(how) => how,
        }
    }
}

/// A message read from a queue. Its properties are attributes; `complete()`, `abandon()`,
/// `dead_letter()` and `resubmit()` settle a received message exactly once.
///
/// In a forked child the settle methods and `renew_lock()` raise `ForkedError` (the lock is the
/// parent's); the message's data (body, label, properties, ...) stay readable.
#[pyclass(frozen, module = "postbox._postbox", name = "Message")]
pub struct PyMessage {
    pub env: Envelope,
    body: PyOnceLock<Py<PyBytes>>,
    pub lock: Mutex<Lock>,
    lock_token: Option<u64>,
    locked_until: Mutex<Option<SystemTime>>,
    /// The process that read the message: its mutexes are never waited for in another one.
    opened_by: u32,
}

impl PyMessage {
    pub fn unlocked(env: Envelope) -> PyMessage {
        PyMessage::new(env, Lock::Unlocked, None, None)
    }

    pub fn received(r: Received) -> PyMessage {
        let (token, until) = (r.lock_token(), r.locked_until());
        PyMessage::new(
            r.envelope().clone(),
            Lock::Held(Box::new(r)),
            Some(token),
            Some(until),
        )
    }

    pub fn for_processor(env: Envelope, locked_until: SystemTime) -> PyMessage {
        PyMessage::new(env, Lock::Processor(None), None, Some(locked_until))
    }

    pub fn in_transaction(
        env: Envelope,
        tx: TxLink,
        token: Option<u64>,
        until: Option<SystemTime>,
    ) -> PyMessage {
        PyMessage::new(env, Lock::Transaction(tx), token, until)
    }

    fn new(env: Envelope, lock: Lock, token: Option<u64>, until: Option<SystemTime>) -> PyMessage {
        PyMessage {
            env,
            body: PyOnceLock::new(),
            lock: Mutex::new(lock),
            lock_token: token,
            locked_until: Mutex::new(until),
            opened_by: std::process::id(),
        }
    }

    /// Fails with `ForkedError` in a forked child, before any mutex is taken.
    pub fn check_process(&self) -> PyResult<()> {
        errors::check_process(self.opened_by)
    }

    /// Takes the lock out to settle it, leaving `after` in its place; explains a refusal.
    pub fn take(&self, after: &'static str) -> PyResult<Received> {
        let mut lock = self.lock.lock();
        match std::mem::replace(&mut *lock, Lock::Settled(after)) {
            Lock::Held(r) => Ok(*r),
            other => {
                let why = match &other {
                    Lock::Unlocked => format!(
                        "message {} was not received (it came from peek, browse or get) and holds no lock",
                        self.env.id()
                    ),
                    Lock::Transaction(_) => format!(
                        "message {} belongs to a transaction: it is settled by the transaction's commit or abort",
                        self.env.id()
                    ),
                    Lock::Processor(_) => format!(
                        "message {} is settled by the processor when the handler returns: return to complete it, raise to retry it, or call dead_letter()",
                        self.env.id()
                    ),
                    Lock::Settled(how) => {
                        format!("message {} was already settled ({how})", self.env.id())
                    }
                    Lock::Held(_) => unreachable!(),
                };
                *lock = other;
                Err(invalid(why))
            }
        }
    }

    /// The lock's state. In a forked child the mutex is only tried: a parent thread may have
    /// held it at fork time (while renewing), and then it stays locked there.
    fn lock_state(&self) -> &'static str {
        if is_forked(self.opened_by) {
            return self.lock.try_lock().map_or("locked", |l| l.state());
        }
        self.lock.lock().state()
    }

    /// Settles through `f`. A failed settle gives the message back still holding its lock
    /// (unless the lock was lost), so the call can be retried and `__exit__` or garbage
    /// collection still releases it.
    fn settle(
        &self,
        py: Python<'_>,
        after: &'static str,
        f: impl FnOnce(Received) -> Result<(), SettleError> + Send,
    ) -> PyResult<()> {
        self.check_process()?;
        let r = self.take(after)?;
        match py.detach(move || f(r)) {
            Ok(()) => Ok(()),
            Err(failed) => {
                let (error, message) = failed.into_parts();
                *self.lock.lock() = if error.is_lock_lost() {
                    // Nothing is left to settle: the handle is spent.
                    Lock::Settled("lock lost")
                } else {
                    Lock::Held(Box::new(message))
                };
                Err(errors::to_py(error))
            }
        }
    }
}

#[pymethods]
impl PyMessage {
    /// The store-wide id.
    #[getter]
    fn id(&self) -> u64 {
        self.env.id().get()
    }
    /// The name of the queue the message is in.
    #[getter]
    fn queue(&self) -> &str {
        self.env.queue()
    }
    /// The body.
    #[getter]
    fn body(&self, py: Python<'_>) -> Py<PyBytes> {
        self.body
            .get_or_init(py, || PyBytes::new(py, self.env.body()).unbind())
            .clone_ref(py)
    }
    /// The body decoded as UTF-8.
    #[getter]
    fn text(&self, py: Python<'_>) -> PyResult<String> {
        match std::str::from_utf8(self.env.body()) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(PyErr::from_value(
                pyo3::exceptions::PyUnicodeDecodeError::new_utf8(py, self.env.body(), e)?
                    .into_any(),
            )),
        }
    }
    #[getter]
    fn label(&self) -> Option<&str> {
        self.env.label()
    }
    #[getter]
    fn content_type(&self) -> Option<&str> {
        self.env.content_type()
    }
    #[getter]
    fn correlation_id(&self) -> Option<&str> {
        self.env.correlation_id()
    }
    #[getter]
    fn reply_to(&self) -> Option<&str> {
        self.env.reply_to()
    }
    #[getter]
    fn message_key(&self) -> Option<&str> {
        self.env.message_key()
    }
    #[getter]
    fn group(&self) -> Option<&str> {
        self.env.group()
    }
    #[getter]
    fn sequence(&self) -> Option<u64> {
        self.env.sequence()
    }
    #[getter]
    fn priority(&self) -> u8 {
        self.env.priority()
    }
    #[getter]
    fn delivery_count(&self) -> u32 {
        self.env.delivery_count()
    }
    #[getter]
    fn enqueued_at<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDateTime>> {
        convert::datetime(py, self.env.enqueued_at())
    }
    #[getter]
    fn visible_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        convert::opt_datetime(py, self.env.visible_at())
    }
    #[getter]
    fn expires_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        convert::opt_datetime(py, self.env.expires_at())
    }
    /// User properties (a new dict each time).
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        convert::properties_to_py(py, self.env.properties())
    }
    #[getter]
    fn dead_letter_reason(&self) -> Option<&str> {
        self.env.dead_letter_info().map(|d| d.reason.as_str())
    }
    #[getter]
    fn dead_letter_description(&self) -> Option<&str> {
        self.env.dead_letter_info().map(|d| d.description.as_str())
    }
    #[getter]
    fn dead_letter_source(&self) -> Option<&str> {
        self.env.dead_letter_info().map(|d| d.source_queue.as_str())
    }
    #[getter]
    fn dead_lettered_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        convert::opt_datetime(py, self.env.dead_letter_info().map(|d| d.at))
    }
    /// The lock token of this delivery (`None` for a peeked message or a processor's).
    #[getter]
    fn lock_token(&self) -> Option<u64> {
        self.lock_token
    }
    /// When the lock expires unless renewed (`None` for a peeked message).
    #[getter]
    fn locked_until<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        let until = *self.locked_until.lock();
        convert::opt_datetime(py, until)
    }
    /// `"unlocked"` (peeked), `"locked"`, `"transaction"`, `"completed"`, `"abandoned"`,
    /// `"dead-lettered"`, `"resubmitted"`, `"enlisted"`, `"processor"`, `"lock lost"` (a settle
    /// failed because the lock was lost: the handle is spent) or `"settled by the processor"`.
    #[getter]
    fn state(&self) -> &'static str {
        self.lock_state()
    }

    /// Removes the message for good.
    fn complete(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, "completed", Received::complete)
    }

    /// Returns the message to its queue, receivable again at once or after `delay`.
    #[pyo3(signature = (delay=None))]
    fn abandon(&self, py: Python<'_>, delay: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        match convert::opt_duration(delay, "delay")? {
            None => self.settle(py, "abandoned", Received::abandon),
            Some(d) => self.settle(py, "abandoned", move |r| r.abandon_after(d)),
        }
    }

    /// Moves the message to the dead-letter queue with `reason` (at most 256 bytes of UTF-8;
    /// longer is refused with `InvalidArgumentError`) and `description` (cut to 4096 bytes).
    /// A refused or failed call leaves the message locked, so it can still be settled.
    #[pyo3(signature = (reason, description=""))]
    fn dead_letter(&self, py: Python<'_>, reason: String, description: &str) -> PyResult<()> {
        self.check_process()?;
        if reason.len() > postbox::MAX_REASON_LEN {
            // Refused now rather than when the processor applies it after the handler.
            return Err(invalid(format!(
                "a dead-letter reason is at most {} bytes, got {}",
                postbox::MAX_REASON_LEN,
                reason.len()
            )));
        }
        let description = description.to_owned();
        if let Lock::Processor(slot) = &mut *self.lock.lock() {
            if slot.is_some() {
                return Err(invalid(format!(
                    "message {} is already marked for the dead-letter queue",
                    self.env.id()
                )));
            }
            *slot = Some((reason, description));
            return Ok(());
        }
        self.settle(py, "dead-lettered", move |r| {
            r.dead_letter(&reason, &description)
        })
    }

    /// Moves a message received from a dead-letter queue back to its source queue.
    fn resubmit(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, "resubmitted", Received::resubmit)
    }

    /// Extends the lock by the queue's lock_duration from now; returns the new expiry. A
    /// message received through a transaction renews through it (as long as it is open).
    fn renew_lock<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDateTime>> {
        self.check_process()?;
        let id = self.env.id();
        // The message mutex is taken without the GIL, so it never waits on a thread that holds
        // the GIL and wants this mutex; the transaction's mutex is taken after it is let go.
        let until = py.detach(|| {
            let mut lock = self.lock.lock();
            match &mut *lock {
                Lock::Held(r) => Ok(r.renew_lock()),
                Lock::Transaction(link) => {
                    let link = link.clone();
                    drop(lock);
                    tx::renew_lock(&link, id)
                }
                Lock::Unlocked | Lock::Processor(_) => Err(format!(
                    "message {id} holds no lock to renew ({})",
                    lock.state()
                )),
                Lock::Settled(how) => Err(format!("message {id} was already settled ({how})")),
            }
        });
        // Errors become exceptions with the GIL back and no mutex held.
        let until = until.map_err(invalid)?.py_err()?;
        *self.locked_until.lock() = Some(until);
        convert::datetime(py, until)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Completes on a clean exit, abandons on an exception (which propagates). A message the
    /// block already settled is left alone.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if is_forked(self.opened_by) {
            // The lock is the parent's: a clean exit cannot complete it here, an exception
            // leaves it to the parent (or to its expiry).
            return match exc_type {
                None => self.check_process().map(|()| false),
                Some(_) => Ok(false),
            };
        }
        if !matches!(*self.lock.lock(), Lock::Held(_)) {
            return Ok(false);
        }
        if exc_type.is_none() {
            self.settle(py, "completed", Received::complete)?;
        } else {
            // The block's exception matters more than a failure to release the lock, which
            // expires anyway.
            let _ = self.settle(py, "abandoned", Received::abandon);
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let body = self.env.body();
        let shown = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
        format!(
            "<postbox.Message id={} queue={:?} state={} delivery_count={} body={:?}{}>",
            self.env.id(),
            self.env.queue(),
            self.lock_state(),
            self.env.delivery_count(),
            shown,
            if body.len() > 40 { "…" } else { "" }
        )
    }
}
