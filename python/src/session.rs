//! `postbox.Session`: one group of a queue that requires sessions, received in order, one
//! message at a time, with a state that outlives the session lock.

use postbox::sync::Mutex;
use postbox::{Queue, Session};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDateTime, PyType};

use crate::convert;
use crate::errors::{IntoPy, empty_because, invalid, is_forked};
use crate::live::Live;
use crate::message::PyMessage;
use crate::queue::PyQueue;
use crate::wait::wait_interruptible;

/// A session of a queue that requires sessions (`Store.queue(..., requires_session=True)`),
/// from `Queue.accept_session()`: the messages of one `group`, delivered to this holder only,
/// in send order, one at a time — the next one becomes receivable when the previous one is
/// completed, dead-lettered or deferred. Other groups go to other holders in parallel.
///
/// The session lock expires like a message lock (the queue's `lock_duration`) unless renewed
/// with `renew_lock()`; once lost, calls raise `LockLostError` (with `group` set). The state, a
/// small bytes value, outlives locks: a receiver that takes the session over reads where the
/// last one left off. A context manager: leaving the block releases the session (garbage
/// collection does too). In a forked child every call raises `ForkedError`.
#[pyclass(frozen, module = "postbox._postbox", name = "Session")]
pub struct PySession {
    /// `None` once released. Only ever locked without the GIL.
    pub(crate) session: Mutex<Option<Session>>,
    group: String,
    queue: Queue,
    /// The process that accepted it: checked before the mutex is taken (a parent thread may
    /// have held it at fork time).
    pub(crate) opened_by: u32,
}

impl Live for PySession {
    type Inner = Mutex<Option<Session>>;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Mutex<Option<Session>> {
        &self.session
    }
}

impl PySession {
    pub fn new(s: Session) -> PySession {
        PySession {
            group: s.group().to_owned(),
            queue: s.queue().clone(),
            session: Mutex::new(Some(s)),
            opened_by: postbox::binding::process_id(),
        }
    }

    pub(crate) fn released_error(&self) -> postbox::Error {
        postbox::Error::InvalidArgument(format!(
            "session {:?} of queue {:?} was already released",
            self.group,
            self.queue.name()
        ))
    }

    /// Runs `f` on the session without the GIL.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Session) -> postbox::Result<T> + Send,
    ) -> PyResult<T> {
        let session = self.live()?;
        py.detach(|| match &*session.lock() {
            Some(s) => f(s),
            None => Err(self.released_error()),
        })
        .py_err()
    }
}

impl PySession {
    /// A selective receive through the session, waiting in slices (Ctrl-C gets through);
    /// `what` starts the text of the `Empty` raised at the timeout.
    fn receive_selected(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
        what: String,
        pick: impl Fn(&Session, std::time::Duration) -> postbox::Result<Option<postbox::Received>>
        + Send
        + Sync,
    ) -> PyResult<PyMessage> {
        self.live()?;
        let deadline = convert::deadline(timeout)?;
        let got = wait_interruptible(py, deadline, |slice| match &*self.session.lock() {
            Some(s) => pick(s, slice),
            None => Err(self.released_error()),
        })?;
        match got {
            Some(r) => Ok(PyMessage::received(r)),
            None => Err(empty_because(format!(
                "{what} through session {:?} of queue {:?} in time",
                self.group,
                self.queue.name()
            ))),
        }
    }
}

#[pymethods]
impl PySession {
    /// The session's group.
    #[getter]
    fn group(&self) -> &str {
        &self.group
    }

    /// The queue.
    #[getter]
    fn queue(&self) -> PyQueue {
        PyQueue::new(self.queue.clone())
    }

    /// When the session lock expires unless renewed; `None` once released.
    #[getter]
    fn locked_until<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        let session = self.live()?;
        let until = py.detach(|| session.lock().as_ref().map(Session::locked_until));
        convert::opt_datetime(py, until)
    }

    /// Locks the session's next message, waiting up to `timeout` seconds (`None`: forever) for
    /// it to be receivable (the previous one settled, or a new one sent); settle it as any
    /// received message. Raises `postbox.Empty` when nothing is receivable in time, and
    /// `LockLostError` once the session lock was lost.
    #[pyo3(signature = (timeout=None))]
    fn receive(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<PyMessage> {
        self.live()?;
        let deadline = convert::deadline(timeout)?;
        let got = wait_interruptible(py, deadline, |slice| match &*self.session.lock() {
            Some(s) => s.receive(slice),
            None => Err(self.released_error()),
        })?;
        match got {
            Some(r) => Ok(PyMessage::received(r)),
            None => Err(empty_because(format!(
                "no message of session {:?} of queue {:?} became receivable",
                self.group,
                self.queue.name()
            ))),
        }
    }

    /// Locks message `id` of the session's group, waiting up to `timeout` seconds (`None`:
    /// forever) for it to be receivable through the session: a deferred message of the group
    /// at any time, also while another message of the group is in hand (as a Service Bus
    /// session receiver takes its deferred messages by sequence number); any other message
    /// only when it is the group's next, as `receive` would lock it (one at a time, in send
    /// order). On a session queue this is the one way to a message by id:
    /// `Queue.receive_by_id` raises `InvalidArgumentError` there. Raises `postbox.Empty` when
    /// the message is not receivable through the session in time (also another group's or a
    /// completed one), and `LockLostError` once the session lock was lost.
    #[pyo3(signature = (id, timeout=None))]
    fn receive_by_id(
        &self,
        py: Python<'_>,
        id: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMessage> {
        let what = format!("message {id} was not receivable");
        self.receive_selected(py, timeout, what, |s, slice| {
            s.receive_by_id(postbox::MessageId(id), slice)
        })
    }

    /// Locks the first message of the session's group, in send order, whose correlation id is
    /// `correlation_id`, among those receivable through the session (its deferred messages and
    /// its next message, see `receive_by_id`), waiting up to `timeout` seconds (`None`:
    /// forever). Unlike `Queue.receive_by_correlation_id` (refused on a session queue),
    /// deferred messages count. Raises `postbox.Empty` when none is receivable in time, and
    /// `LockLostError` once the session lock was lost.
    #[pyo3(signature = (correlation_id, timeout=None))]
    fn receive_by_correlation_id(
        &self,
        py: Python<'_>,
        correlation_id: &str,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMessage> {
        let what = format!("no message with correlation id {correlation_id:?} was receivable");
        self.receive_selected(py, timeout, what, |s, slice| {
            s.receive_by_correlation_id(correlation_id, slice)
        })
    }

    /// Extends the session lock by the queue's `lock_duration` from now; returns the new
    /// expiry. (Messages received through the session renew their own locks.)
    fn renew_lock<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDateTime>> {
        let until = self.with(py, Session::renew_lock)?;
        convert::datetime(py, until)
    }

    /// The session's state: `bytes`, or `None` if never set or cleared. Readable whether or
    /// not the session lock is still held.
    #[getter]
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let state = self.with(py, Session::state)?;
        Ok(state.map(|b| PyBytes::new(py, &b)))
    }

    /// Sets the session's state now, in a commit of its own (at most 64 KiB; `None` clears
    /// it; a `str` is stored as UTF-8). To set it in the same commit as settles and sends, use
    /// `Transaction.set_session_state`.
    fn set_state(&self, py: Python<'_>, state: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let state = state.map(convert::body).transpose()?;
        self.with(py, |s| s.set_state(state.as_deref()))
    }

    /// Lets go of the session lock now (its state and messages stay): another receiver may
    /// accept it. Raises `LockLostError` if the lock was already lost; releasing again is
    /// harmless.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let session = self.live()?;
        let taken = py.detach(|| session.lock().take());
        match taken {
            Some(s) => py.detach(|| s.release()).py_err(),
            None => Ok(()),
        }
    }

    /// Whether `release()` was called (or the `with` block left).
    #[getter]
    fn released(&self, py: Python<'_>) -> PyResult<bool> {
        let session = self.live()?;
        Ok(py.detach(|| session.lock().is_none()))
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let this = slf.get();
        this.live()?;
        if slf.py().detach(|| this.session.lock().is_none()) {
            return Err(invalid(format!(
                "session {:?} was already released: accept it again",
                this.group
            )));
        }
        Ok(slf)
    }

    /// Releases the session. After an exception in the block, a failed release (a lost lock)
    /// is not raised over the block's exception.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if is_forked(self.opened_by) {
            // The session is the parent's: nothing to release here.
            return Ok(false);
        }
        match exc_type {
            None => self.release(py)?,
            Some(_) => {
                let _ = self.release(py);
            }
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = if is_forked(self.opened_by) {
            " of another process"
        } else if py.detach(|| self.session.lock().is_none()) {
            " released"
        } else {
            ""
        };
        format!(
            "<postbox.Session {:?} of queue {:?}{state}>",
            self.group,
            self.queue.name()
        )
    }
}
