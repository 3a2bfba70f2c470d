//! `postbox.Queue`, its statistics, and the iterators `browse()` and `consume()`.

use std::time::{Duration, Instant};

use postbox::binding::HeldMessage;
use postbox::sync::Mutex;
use postbox::{MessageId, OptionValue, Queue, QueueOptions, Received};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert;
use crate::errors::{IntoPy, empty, empty_because, invalid};
use crate::live::Live;
use crate::message::PyMessage;
use crate::session::PySession;
use crate::wait::wait_interruptible;

/// A queue of the store; cheap to copy around, safe to share between threads. In a forked
/// child every call raises `ForkedError` (see `Store`).
#[pyclass(frozen, module = "postbox._postbox", name = "Queue")]
pub struct PyQueue {
    pub q: Queue,
    /// Checked before every call into the core: some core paths take a lock of the store
    /// before their own fork check, and a parent thread may have held it at fork time.
    pub opened_by: u32,
}

impl Live for PyQueue {
    type Inner = Queue;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Queue {
        &self.q
    }
}

impl PyQueue {
    pub fn new(q: Queue) -> PyQueue {
        PyQueue {
            q,
            opened_by: postbox::binding::process_id(),
        }
    }
}

fn receive_one(py: Python<'_>, q: &Queue, deadline: Option<Instant>) -> PyResult<Option<Received>> {
    wait_interruptible(py, deadline, |slice| q.receive(slice))
}

/// Takes the locks of every message of `messages` (an iterable of `Message` of `queue`), all
/// or none: on an error every handle is left as it was.
fn take_all(messages: &Bound<'_, PyAny>, queue: &str, verb: &str) -> PyResult<Vec<Received>> {
    let mut bound = Vec::new();
    for item in messages.try_iter()? {
        let msg = item?.cast_into::<PyMessage>().map_err(|e| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "{verb} takes postbox.Message objects: {}",
                e.into_inner()
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        bound.push(msg);
    }
    let handles: Vec<_> = bound.iter().map(|m| &m.get().held).collect();
    HeldMessage::take_all(&handles, queue, "completed").py_err()
}

#[pymethods]
impl PyQueue {
    /// The queue's name.
    #[getter]
    fn name(&self) -> &str {
        self.q.name()
    }

    /// The queue's options as stored now (another handle or process may have changed them),
    /// durations as `timedelta`; `None` for an option that is not set.
    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let q = self.live()?;
        let o = py.detach(|| q.options()).py_err()?;
        options_to_py(py, &o)
    }

    /// Whether this is a dead-letter queue (`dead_letters` of another queue).
    #[getter]
    fn is_dead_letter_queue(&self) -> bool {
        self.q.is_dead_letter_queue()
    }

    /// For a dead-letter queue, the name of its source queue.
    #[getter]
    fn source_name(&self) -> Option<&str> {
        self.q.source_name()
    }

    /// Sends one message; returns its id once it is stored (durably by default).
    #[pyo3(signature = (body, **props))]
    fn send(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let q = self.live()?;
        let m = convert::message(body, props, "send")?;
        py.detach(|| q.send(m)).py_err().map(MessageId::get)
    }

    /// Sends several messages atomically, in one commit. Each item is a body, or a dict with a
    /// `"body"` key and any of `send`'s keywords. Returns the ids in order.
    fn send_batch(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        let q = self.live()?;
        let mut batch = Vec::new();
        for item in messages.try_iter()? {
            batch.push(convert::batch_item(&item?)?);
        }
        let ids = py.detach(|| q.send_batch(batch)).py_err()?;
        Ok(ids.into_iter().map(MessageId::get).collect())
    }

    /// `send`, saying what happened: a `Sent` with the message's id and whether it was a
    /// duplicate (its `message_key` was in the queue's `dedup_window`, so nothing was stored and
    /// the id is the original message's). Takes `send`'s keywords.
    #[pyo3(signature = (body, **props))]
    fn send_checked(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PySent> {
        let q = self.live()?;
        let m = convert::message(body, props, "send_checked")?;
        py.detach(|| q.send_checked(m)).py_err().map(PySent::from)
    }

    /// `send_batch`, saying of each message what happened (a list of `Sent`, in order).
    fn send_batch_checked(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<PySent>> {
        let q = self.live()?;
        let mut batch = Vec::new();
        for item in messages.try_iter()? {
            batch.push(convert::batch_item(&item?)?);
        }
        let sent = py.detach(|| q.send_batch_checked(batch)).py_err()?;
        Ok(sent.into_iter().map(PySent::from).collect())
    }

    /// Sends `body` as a request and waits up to `timeout` seconds (`None`: forever) for its
    /// reply, which is returned as a read-only `Message` (already completed: nothing to settle).
    /// The request goes out with `reply_to` set to the store handle's reply queue (a temporary
    /// queue) and a fresh `correlation_id` unless one is given; the responder answers with
    /// `Message.reply`. Raises `postbox.Empty` when no reply comes in time; a reply that comes
    /// later is dropped (the handle's next request removes it). Takes `send`'s keywords
    /// (`reply_to` is replaced).
    #[pyo3(signature = (body, timeout=None, **props))]
    fn request(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyMessage> {
        let q = self.live()?;
        let deadline = convert::deadline(timeout)?;
        let m = convert::message(body, props, "request")?;
        let mut pending = py
            .detach(|| postbox::binding::send_request(q, m))
            .py_err()?;
        match wait_interruptible(py, deadline, |slice| pending.receive(slice))? {
            Some(env) => Ok(PyMessage::settled(env, "completed")),
            None => Err(empty_because(format!(
                "no reply with correlation id {:?} came to the request sent to queue {:?}",
                pending.correlation_id(),
                q.name()
            ))),
        }
    }

    /// The message `receive` would take next, without locking it; `None` if there is none.
    /// With a `timeout` (seconds or a `timedelta`) it waits up to that long for one to be
    /// receivable first; by default (`None`) it does not wait.
    #[pyo3(signature = (timeout=None))]
    fn peek(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<PyMessage>> {
        let q = self.live()?;
        let env = match timeout {
            None => py.detach(|| q.peek()).py_err()?,
            Some(_) => {
                let deadline = convert::deadline(timeout)?;
                wait_interruptible(py, deadline, |slice| q.peek_wait(slice))?
            }
        };
        Ok(env.map(PyMessage::peeked))
    }

    /// Locks and returns message `id` of this queue, waiting up to `timeout` seconds (`None`:
    /// forever) for it to be receivable; other messages are left alone. Raises `postbox.Empty`
    /// when it is not receivable in time (another queue's, completed, or locked meanwhile), and
    /// `InvalidArgumentError` on a queue that requires sessions (only the holder of a group
    /// takes its messages: `Session.receive_by_id`).
    #[pyo3(signature = (id, timeout=None))]
    fn receive_by_id(
        &self,
        py: Python<'_>,
        id: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMessage> {
        let q = self.live()?;
        let deadline = convert::deadline(timeout)?;
        match wait_interruptible(py, deadline, |slice| q.receive_by_id(MessageId(id), slice))? {
            Some(r) => Ok(PyMessage::received(r)),
            None => Err(empty(q.name())),
        }
    }

    /// Locks and returns the first message (in delivery order) whose correlation id is
    /// `correlation_id`, waiting up to `timeout` seconds (`None`: forever): on a reply queue
    /// shared by several requesters, each takes only its own replies. Raises `postbox.Empty`
    /// when none arrives in time, and `InvalidArgumentError` on a queue that requires sessions
    /// (`Session.receive_by_correlation_id` picks within a held group).
    #[pyo3(signature = (correlation_id, timeout=None))]
    fn receive_by_correlation_id(
        &self,
        py: Python<'_>,
        correlation_id: &str,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMessage> {
        let q = self.live()?;
        let deadline = convert::deadline(timeout)?;
        match wait_interruptible(py, deadline, |slice| {
            q.receive_by_correlation_id(correlation_id, slice)
        })? {
            Some(r) => Ok(PyMessage::received(r)),
            None => Err(empty(q.name())),
        }
    }

    /// Iterates over the receivable messages in delivery order, without locking them: what
    /// successive receives would take. Each step reads a fresh snapshot (concurrent changes
    /// show); a step on a deleted queue raises `QueueNotFoundError`.
    fn browse(&self) -> PyResult<PyBrowse> {
        let q = self.live()?;
        Ok(PyBrowse {
            it: Mutex::new(q.browse()),
            queue: q.name().to_owned(),
            opened_by: self.opened_by,
        })
    }

    /// The message with this id in this queue, whatever its state, without locking it; `None`
    /// if there is none. Its `state` is its state in the queue: `"active"`, `"locked"` (by any
    /// receiver), `"scheduled"` or `"deferred"`.
    fn get(&self, py: Python<'_>, id: u64) -> PyResult<Option<PyMessage>> {
        let q = self.live()?;
        let got = py.detach(|| q.get_with_state(MessageId(id))).py_err()?;
        Ok(got.map(|(env, state)| PyMessage::read(env, state)))
    }

    /// Locks and returns the next message, waiting up to `timeout` seconds (`None`: forever).
    /// Raises `postbox.Empty` when nothing arrives in time.
    #[pyo3(signature = (timeout=None))]
    fn receive(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<PyMessage> {
        let q = self.live()?;
        let deadline = convert::deadline(timeout)?;
        match receive_one(py, q, deadline)? {
            Some(r) => Ok(PyMessage::received(r)),
            None => Err(empty(q.name())),
        }
    }

    /// `receive(timeout=0)`, as `queue.Queue.get_nowait`.
    fn receive_nowait(&self, py: Python<'_>) -> PyResult<PyMessage> {
        let q = self.live()?;
        match py.detach(|| q.try_receive()).py_err()? {
            Some(r) => Ok(PyMessage::received(r)),
            None => Err(empty(q.name())),
        }
    }

    /// Locks up to `max_messages` in one commit, waiting up to `timeout` for the first.
    /// Returns an empty list when nothing arrives in time.
    #[pyo3(signature = (max_messages, timeout=None))]
    fn receive_batch(
        &self,
        py: Python<'_>,
        max_messages: usize,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyMessage>> {
        let q = self.live()?;
        if max_messages == 0 {
            return Err(invalid("receive_batch needs max_messages >= 1"));
        }
        let deadline = convert::deadline(timeout)?;
        let got = wait_interruptible(py, deadline, |slice| {
            q.receive_batch(max_messages, slice)
                .map(|v| (!v.is_empty()).then_some(v))
        })?;
        Ok(got
            .unwrap_or_default()
            .into_iter()
            .map(PyMessage::received)
            .collect())
    }

    /// Completes several received messages in one commit, all or none.
    fn complete_batch(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<()> {
        let q = self.live()?;
        let received = take_all(messages, q.name(), "complete_batch")?;
        py.detach(|| q.complete_batch(received)).py_err()
    }

    /// Completes `messages` and locks up to `max_messages` more in one commit (a batched
    /// consumer's loop step: one durable commit per batch instead of two). If nothing is
    /// receivable right then, waits up to `timeout` like `receive_batch`; returns an empty list
    /// when nothing arrives in time (the messages are completed either way).
    #[pyo3(signature = (messages, max_messages, timeout=None))]
    fn complete_batch_and_receive(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        max_messages: usize,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyMessage>> {
        let q = self.live()?;
        if max_messages == 0 {
            return Err(invalid(
                "complete_batch_and_receive needs max_messages >= 1",
            ));
        }
        let deadline = convert::deadline(timeout)?;
        let received = take_all(messages, q.name(), "complete_batch_and_receive")?;
        let first = py
            .detach(|| q.complete_batch_and_receive(received, max_messages, Duration::ZERO))
            .py_err()?;
        let got = if first.is_empty() && deadline.is_none_or(|d| Instant::now() < d) {
            wait_interruptible(py, deadline, |slice| {
                q.receive_batch(max_messages, slice)
                    .map(|v| (!v.is_empty()).then_some(v))
            })?
            .unwrap_or_default()
        } else {
            first
        };
        Ok(got.into_iter().map(PyMessage::received).collect())
    }

    /// Exact counts.
    fn stats(&self, py: Python<'_>) -> PyResult<PyQueueStats> {
        let q = self.live()?;
        let s = py.detach(|| q.stats()).py_err()?;
        Ok(PyQueueStats {
            active: s.active,
            locked: s.locked,
            scheduled: s.scheduled,
            deferred: s.deferred,
            dead_lettered: s.dead_lettered,
            bytes: s.bytes,
        })
    }

    /// Messages receivable now (`stats().active`) — only those: a queue whose only message is
    /// locked by a receiver (or scheduled, or deferred) has length 0. `stats()` counts every
    /// state (locked, scheduled, deferred, dead-lettered) in one snapshot.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let q = self.live()?;
        let n = py.detach(|| q.len()).py_err()?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Removes every message of the queue (not of its dead-letter queue); returns how many.
    fn purge(&self, py: Python<'_>) -> PyResult<u64> {
        let q = self.live()?;
        py.detach(|| q.purge()).py_err()
    }

    /// The dead-letter queue of this queue.
    #[getter]
    fn dead_letters(&self, py: Python<'_>) -> PyResult<PyQueue> {
        let q = self.live()?;
        let dl = py.detach(|| q.dead_letters()).py_err()?;
        Ok(PyQueue::new(dl))
    }

    /// This queue's journal: the completed messages it keeps while its `journal` option is set
    /// (MSMQ's journal queue), at most that many, the oldest dropped first. A queue like any
    /// other to browse, peek, get, receive and purge. Raises `InvalidArgumentError` when the
    /// queue never had a journal.
    #[getter]
    fn journal(&self, py: Python<'_>) -> PyResult<PyQueue> {
        let q = self.live()?;
        let j = py.detach(|| q.journal()).py_err()?;
        Ok(PyQueue::new(j))
    }

    /// Accepts a session of this queue (one that requires sessions), waiting up to `timeout`
    /// seconds (`None`: forever): with `group` `None`, the next available one (a group whose
    /// next message is receivable and that no other receiver holds); with a `group`, that
    /// session, waiting while another receiver holds it. Raises `postbox.Empty` when none comes
    /// in time. Use it as `with queue.accept_session() as session:` to release it on exit.
    #[pyo3(signature = (timeout=None, *, group=None))]
    fn accept_session(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
        group: Option<String>,
    ) -> PyResult<PySession> {
        let q = self.live()?;
        let deadline = convert::deadline(timeout)?;
        let got = wait_interruptible(py, deadline, |slice| match &group {
            None => q.accept_session(slice),
            Some(g) => q.accept_named_session(g, slice),
        })?;
        match got {
            Some(s) => Ok(PySession::new(s)),
            None => Err(empty_because(match group {
                None => format!("no session of queue {:?} became available", q.name()),
                Some(g) => format!(
                    "session {g:?} of queue {:?} stayed held by another receiver",
                    q.name()
                ),
            })),
        }
    }

    /// Iterates over received (locked) messages; stops when none arrives within `timeout`
    /// (`None`: never stops). Settle each one, e.g. `with msg: ...`.
    #[pyo3(signature = (timeout=None))]
    fn consume(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<PyConsumer> {
        self.live()?;
        Ok(PyConsumer {
            opened_by: self.opened_by,
            q: self.q.clone(),
            timeout: convert::opt_duration(timeout, "timeout")?,
        })
    }

    fn __repr__(&self) -> String {
        format!("<postbox.Queue {:?}>", self.q.name())
    }
}

/// A queue's options as the dict `Queue.options` returns: every option of
/// `QueueOptions::FIELDS`, `None` for one not set.
pub fn options_to_py<'py>(py: Python<'py>, o: &QueueOptions) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (f, v) in o.values() {
        match v {
            OptionValue::Duration(t) => d.set_item(f.name, convert::timedelta(py, t)?)?,
            OptionValue::Number(n) => d.set_item(f.name, n)?,
            OptionValue::Flag(b) => d.set_item(f.name, b)?,
            OptionValue::Text(s) => d.set_item(f.name, s)?,
            _ => d.set_item(f.name, py.None())?,
        }
    }
    Ok(d)
}

/// Exact counts of a queue.
#[pyclass(frozen, get_all, eq, module = "postbox._postbox", name = "QueueStats")]
#[derive(PartialEq, Eq)]
pub struct PyQueueStats {
    /// Receivable now.
    active: u64,
    /// Held by a receiver or a transaction.
    locked: u64,
    /// Waiting for their delivery time.
    scheduled: u64,
    /// Set aside with `Message.defer()`: receivable only by id (`receive_by_id`).
    deferred: u64,
    /// In the dead-letter queue.
    dead_lettered: u64,
    /// Message bytes held (active, locked, scheduled and deferred).
    bytes: u64,
}

#[pymethods]
impl PyQueueStats {
    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("active", self.active)?;
        d.set_item("locked", self.locked)?;
        d.set_item("scheduled", self.scheduled)?;
        d.set_item("deferred", self.deferred)?;
        d.set_item("dead_lettered", self.dead_lettered)?;
        d.set_item("bytes", self.bytes)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "QueueStats(active={}, locked={}, scheduled={}, deferred={}, dead_lettered={}, \
             bytes={})",
            self.active, self.locked, self.scheduled, self.deferred, self.dead_lettered, self.bytes
        )
    }
}

/// What became of one message of a send: its id, and whether it was a duplicate.
#[pyclass(frozen, get_all, eq, hash, module = "postbox._postbox", name = "Sent")]
#[derive(PartialEq, Eq, Hash)]
pub struct PySent {
    /// The message's id; for a duplicate, the id of the message first sent with its key.
    id: u64,
    /// The queue's dedup window already held the message's `message_key`: nothing was stored.
    duplicate: bool,
}

impl From<postbox::Sent> for PySent {
    fn from(s: postbox::Sent) -> PySent {
        PySent {
            id: s.id.get(),
            duplicate: s.duplicate,
        }
    }
}

#[pymethods]
impl PySent {
    #[new]
    #[pyo3(signature = (id, duplicate=false))]
    fn new(id: u64, duplicate: bool) -> PySent {
        PySent { id, duplicate }
    }

    fn _asdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("id", self.id)?;
        d.set_item("duplicate", self.duplicate)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Sent(id={}, duplicate={})",
            self.id,
            if self.duplicate { "True" } else { "False" }
        )
    }
}

/// Iterator of `Queue.browse()`.
#[pyclass(frozen, module = "postbox._postbox", name = "Browse")]
pub struct PyBrowse {
    it: Mutex<postbox::Browse>,
    /// The browsed queue's name, for `repr()`.
    queue: String,
    opened_by: u32,
}

impl Live for PyBrowse {
    type Inner = Mutex<postbox::Browse>;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Mutex<postbox::Browse> {
        &self.it
    }
}

#[pymethods]
impl PyBrowse {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyMessage>> {
        let it = self.live()?;
        let next = py.detach(|| it.lock().next());
        match next {
            None => Ok(None),
            Some(env) => Ok(Some(PyMessage::peeked(env.py_err()?))),
        }
    }

    fn __repr__(&self) -> String {
        format!("<postbox.Browse of queue {:?}>", self.queue)
    }
}

/// Iterator of `Queue.consume()`.
#[pyclass(frozen, module = "postbox._postbox", name = "Consumer")]
pub struct PyConsumer {
    opened_by: u32,
    q: Queue,
    timeout: Option<Duration>,
}

impl Live for PyConsumer {
    type Inner = Queue;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &Queue {
        &self.q
    }
}

#[pymethods]
impl PyConsumer {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyMessage>> {
        let q = self.live()?;
        let deadline = self.timeout.and_then(|t| Instant::now().checked_add(t));
        Ok(receive_one(py, q, deadline)?.map(PyMessage::received))
    }

    fn __repr__(&self) -> String {
        let timeout = self
            .timeout
            .map_or_else(|| "None".to_owned(), |t| format!("{}", t.as_secs_f64()));
        format!(
            "<postbox.Consumer of queue {:?} timeout={timeout}>",
            self.q.name()
        )
    }
}
