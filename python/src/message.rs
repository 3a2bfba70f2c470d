//! `postbox.Message`: a stored message, and — when it came from `receive` — its lock.

use std::time::SystemTime;

use postbox::binding::HeldMessage;
use postbox::{Delivery, Envelope, LockWatch, MessageId, MessageState, Received, SettleError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDateTime, PyDict, PySet, PyString, PyType};

use crate::convert;
use crate::errors::{IntoPy, invalid};
use crate::live::Live;
use crate::tx::{self, TxLink};

/// A message read from a queue. Its properties are attributes; `complete()`, `abandon()`,
/// `dead_letter()`, `resubmit()` and `defer()` settle a received message exactly once.
///
/// In a forked child the settle methods and `renew_lock()` raise `ForkedError` (the lock is the
/// parent's); the message's data (body, label, properties, ...) stay readable.
#[pyclass(frozen, module = "postbox._postbox", name = "Message")]
pub struct PyMessage {
    /// The message and its lock state, as every binding keeps them.
    pub held: HeldMessage<TxLink>,
    body: PyOnceLock<Py<PyBytes>>,
}

impl Live for PyMessage {
    type Inner = HeldMessage<TxLink>;

    fn opened_by(&self) -> u32 {
        self.held.opened_by()
    }

    fn inner(&self) -> &HeldMessage<TxLink> {
        &self.held
    }
}

impl PyMessage {
    fn wrap(held: HeldMessage<TxLink>) -> PyMessage {
        PyMessage {
            held,
            body: PyOnceLock::new(),
        }
    }

    /// A message read by peek or browse: receivable (`"active"`) when read.
    pub fn peeked(env: Envelope) -> PyMessage {
        PyMessage::read(env, MessageState::Active)
    }

    /// A message read without a lock, in `state` in its queue.
    pub fn read(env: Envelope, state: MessageState) -> PyMessage {
        PyMessage::wrap(HeldMessage::read(env, state))
    }

    /// A message no longer in a queue, handed out settled as `how` (a request's reply).
    pub fn settled(env: Envelope, how: &'static str) -> PyMessage {
        PyMessage::wrap(HeldMessage::settled(env, how))
    }

    pub fn received(r: Received) -> PyMessage {
        PyMessage::wrap(HeldMessage::received(r))
    }

    pub fn for_processor(delivery: &Delivery) -> PyMessage {
        PyMessage::wrap(HeldMessage::lent(delivery))
    }

    pub fn in_transaction(
        env: Envelope,
        tx: TxLink,
        token: Option<u64>,
        until: Option<SystemTime>,
    ) -> PyMessage {
        PyMessage::wrap(HeldMessage::in_transaction(env, tx, token, until))
    }

    fn env(&self) -> &Envelope {
        self.held.envelope()
    }

    /// Settles through `f` without the GIL. A failed settle gives the message back still
    /// holding its lock (unless the lock was lost), so the call can be retried and `__exit__`
    /// or garbage collection still releases it.
    fn settle(
        &self,
        py: Python<'_>,
        after: &'static str,
        f: impl FnOnce(Received) -> Result<(), SettleError> + Send,
    ) -> PyResult<()> {
        py.detach(|| self.held.settle(after, f)).py_err()
    }
}

#[pymethods]
impl PyMessage {
    /// In a processor handler: whether the message's lock is gone (a renewal was refused, or
    /// the lock expired: renewal off or past `max_auto_renew`). The processor will not complete
    /// it then, and another receiver may already have it. Live: read it as often as needed.
    /// Always `False` for a message that did not come from a processor.
    #[getter]
    fn lock_lost(&self) -> bool {
        self.held
            .lock_watch()
            .as_ref()
            .is_some_and(LockWatch::lock_lost)
    }

    /// In a processor handler: whether the handler should give up, its lock being lost
    /// (`lock_lost`) or its `handler_timeout` passed; the processor will not complete the
    /// message either way. Live, like `lock_lost`; always `False` outside a processor.
    #[getter]
    fn cancelled(&self) -> bool {
        self.held
            .lock_watch()
            .as_ref()
            .is_some_and(LockWatch::is_cancelled)
    }

    /// The store-wide id.
    #[getter]
    fn id(&self) -> u64 {
        self.env().id().get()
    }
    /// The name of the queue the message is in.
    #[getter]
    fn queue(&self) -> &str {
        self.env().queue()
    }
    /// The body.
    #[getter]
    fn body(&self, py: Python<'_>) -> Py<PyBytes> {
        self.body
            .get_or_init(py, || PyBytes::new(py, self.env().body()).unbind())
            .clone_ref(py)
    }
    /// The body decoded as UTF-8.
    #[getter]
    fn text(&self, py: Python<'_>) -> PyResult<String> {
        match std::str::from_utf8(self.env().body()) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(PyErr::from_value(
                pyo3::exceptions::PyUnicodeDecodeError::new_utf8(py, self.env().body(), e)?
                    .into_any(),
            )),
        }
    }
    /// The label (a short name of what the message is), if set.
    #[getter]
    fn label(&self) -> Option<&str> {
        self.env().label()
    }
    /// The MIME-style content type of the body, if set.
    #[getter]
    fn content_type(&self) -> Option<&str> {
        self.env().content_type()
    }
    /// The correlation id (links a reply to its request), if set.
    #[getter]
    fn correlation_id(&self) -> Option<&str> {
        self.env().correlation_id()
    }
    /// The name of the queue replies go to, if set (`reply()` sends there).
    #[getter]
    fn reply_to(&self) -> Option<&str> {
        self.env().reply_to()
    }
    /// The deduplication key, if set (see the queue's `dedup_window`).
    #[getter]
    fn message_key(&self) -> Option<&str> {
        self.env().message_key()
    }
    /// The group (the session of a session queue, the series of a collator), if set.
    #[getter]
    fn group(&self) -> Option<&str> {
        self.env().group()
    }
    /// The sequence number within its group (collators), if set.
    #[getter]
    fn sequence(&self) -> Option<u64> {
        self.env().sequence()
    }
    /// The priority, `MIN_PRIORITY` to `MAX_PRIORITY`; higher is received first.
    #[getter]
    fn priority(&self) -> u8 {
        self.env().priority()
    }
    /// How many times the message has been delivered (1 on its first receive).
    #[getter]
    fn delivery_count(&self) -> u32 {
        self.env().delivery_count()
    }
    /// When the message was sent (an aware UTC `datetime`).
    #[getter]
    fn enqueued_at<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDateTime>> {
        convert::datetime(py, self.env().enqueued_at())
    }
    /// When a scheduled (delayed) message becomes receivable, if scheduled.
    #[getter]
    fn visible_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        convert::opt_datetime(py, self.env().visible_at())
    }
    /// When the message expires (from its `ttl` or the queue's `default_ttl`), if ever.
    #[getter]
    fn expires_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        convert::opt_datetime(py, self.env().expires_at())
    }
    /// User properties (a new dict each time).
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        convert::properties_to_py(py, self.env().properties())
    }
    /// Why the message was dead-lettered (`None` unless it is a dead letter).
    #[getter]
    fn dead_letter_reason(&self) -> Option<&str> {
        self.env().dead_letter_info().map(|d| d.reason.as_str())
    }
    /// The dead-lettering's description (`None` unless it is a dead letter).
    #[getter]
    fn dead_letter_description(&self) -> Option<&str> {
        self.env()
            .dead_letter_info()
            .map(|d| d.description.as_str())
    }
    /// The queue the dead letter came from (`None` unless it is a dead letter).
    #[getter]
    fn dead_letter_source(&self) -> Option<&str> {
        self.env()
            .dead_letter_info()
            .map(|d| d.source_queue.as_str())
    }
    /// When the message was dead-lettered (`None` unless it is a dead letter).
    #[getter]
    fn dead_lettered_at<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        convert::opt_datetime(py, self.env().dead_letter_info().map(|d| d.at))
    }
    /// The lock token of this delivery (`None` for a peeked message or a processor's).
    #[getter]
    fn lock_token(&self) -> Option<u64> {
        self.held.lock_token()
    }
    /// When the lock expires unless renewed (`None` for a peeked message).
    #[getter]
    fn locked_until<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDateTime>>> {
        let until = self.held.locked_until();
        convert::opt_datetime(py, until)
    }
    /// Where the message stands for this handle. Read without a lock (`peek`, `browse`,
    /// `get`): its state in its queue when it was read — `"active"`, `"locked"` (by any
    /// receiver), `"scheduled"` or `"deferred"` (peek and browse read active messages). Received:
    /// `"locked"` while this handle holds it, then how it was settled: `"completed"`,
    /// `"abandoned"`, `"dead-lettered"`, `"resubmitted"`, `"deferred"`, or `"lock lost"` (a
    /// settle failed because the lock was lost: the handle is spent). In a transaction:
    /// `"transaction"` while it is open, then `"completed"` (committed), `"abandoned"`
    /// (aborted, dropped, or its commit failed) or `"outcome unknown"` (its commit's outcome
    /// is unknown). In a processor handler: `"processor"`, then `"settled by the
    /// processor"`. A request's reply: `"completed"`.
    #[getter]
    fn state(&self) -> &'static str {
        self.held.state_with(tx::finished)
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
        let held = self.live()?;
        if held.is_lent() {
            return held.request_dead_letter(&reason, description).py_err();
        }
        if reason.len() > postbox::MAX_REASON_LEN {
            // Refused before the settle, as the processor path refuses it.
            return Err(invalid(format!(
                "a dead-letter reason is at most {} bytes, got {}",
                postbox::MAX_REASON_LEN,
                reason.len()
            )));
        }
        let description = description.to_owned();
        self.settle(py, "dead-lettered", move |r| {
            r.dead_letter(&reason, &description)
        })
    }

    /// Moves a message received from a dead-letter queue back to its source queue.
    fn resubmit(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, "resubmitted", Received::resubmit)
    }

    /// Sets the message aside in its queue: no `receive`, `peek` or `browse` returns it again,
    /// only `Queue.receive_by_id(msg.id)` does. It keeps its time to live and delivery count
    /// and counts in `stats().deferred`; a later lock on it that ends unsettled (abandon,
    /// expiry) leaves it deferred again.
    fn defer(&self, py: Python<'_>) -> PyResult<()> {
        self.settle(py, "deferred", Received::defer)
    }

    /// Extends the lock by the queue's lock_duration from now; returns the new expiry. A
    /// message received through a transaction renews through it (as long as it is open); a
    /// processor handler's message renews the processor's lock (which the processor renews
    /// anyway, up to `max_auto_renew`: this is for a handler that runs longer).
    fn renew_lock<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDateTime>> {
        let held = self.live()?;
        let id = self.env().id();
        // A transaction's message renews through it. Neither mutex is taken with the GIL, and
        // the transaction's only after the message's was let go.
        let until = match held.transaction() {
            Some(link) => py
                .detach(|| tx::renew_lock(&link, id))
                .map_err(invalid)?
                .py_err()?,
            None => py.detach(|| held.renew_lock()).py_err()?,
        };
        held.note_locked_until(until);
        convert::datetime(py, until)
    }

    /// Answers the message: `body` (with `Queue.send`'s keywords) goes to the queue named by
    /// the message's `reply_to`, with its `correlation_id` set to the message's correlation id
    /// (or, if it has none, its id in decimal) — what `Queue.request` waits for. Returns the
    /// reply's id.
    ///
    /// A received message is answered and completed in one commit; a failure other than a lost
    /// lock sends nothing and leaves it locked, so it can still be settled. A message received
    /// in a transaction is answered by that transaction: the reply is one of its sends, stored
    /// at its commit (which completes the message) and discarded by an abort. In a processor
    /// handler the reply goes in the commit that completes the message when the handler
    /// returns (with a transactional handler, in its `tx`); nothing is sent if the handler
    /// raises, asks for a dead letter or loses the lock, and a second reply raises.
    ///
    /// Raises `InvalidArgumentError` when the message has no `reply_to` (or was peeked, or the
    /// processor handler already returned), `QueueNotFoundError` when that queue is gone,
    /// `LockLostError`.
    #[pyo3(signature = (body, **props))]
    fn reply(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let held = self.live()?;
        let m = convert::message(body, props, "reply")?;
        let id = match held.transaction() {
            Some(link) => {
                let request = self.env();
                py.detach(|| tx::with_link(&link, |t| t.reply(request, m)))
                    .map_err(invalid)?
                    .py_err()?
            }
            None => py.detach(|| held.reply("completed", m)).py_err()?,
        };
        Ok(MessageId::get(id))
    }

    /// Records progress keys on the message (work items done: "recipient 17 notified"),
    /// persisted at once in one commit that also renews its lock; returns the new lock expiry.
    /// A redelivery (after an abandon, a lock expiry, a failed handler or a crash) reads them
    /// with `done_keys()` and skips that work; the completion removes them with the message.
    /// `keys` is one `str` or an iterable of them, each 1 to 1024 bytes of UTF-8
    /// (`InvalidArgumentError` otherwise).
    ///
    /// Works on a received message (its own lock), on a message received in a transaction
    /// (under the transaction's lock: the keys are written at once, not at commit, since they
    /// record work done outside the transaction, which an abort cannot take back), and on a
    /// processor handler's message (under the processor's lock, which the processor keeps
    /// renewing; in a transactional handler too). Raises `LockLostError` (a received message's
    /// handle is spent then) and `InvalidArgumentError` for a peeked or settled message, a
    /// finished transaction, or a processor handler that already returned.
    fn mark_done<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDateTime>> {
        let held = self.live()?;
        let keys: Vec<String> = if let Ok(k) = keys.cast::<PyString>() {
            vec![k.to_cow()?.into_owned()]
        } else {
            let mut v = Vec::new();
            for k in keys.try_iter()? {
                let k = k?;
                v.push(k.extract::<String>().map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(format!(
                        "progress keys must be str, not {}",
                        k.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })?);
            }
            v
        };
        let id = self.env().id();
        let until = match held.transaction() {
            Some(link) => py
                .detach(|| tx::with_link(&link, |t| t.mark_done(id, keys)))
                .map_err(invalid)?
                .py_err()?,
            None => py.detach(|| held.mark_done(keys)).py_err()?,
        };
        held.note_locked_until(until);
        convert::datetime(py, until)
    }

    /// The progress keys recorded with `mark_done()` on this message, in this delivery or
    /// earlier ones, read in one lookup (a new `set` each call). For a received message, a
    /// message received in a transaction, or a processor handler's message; raises
    /// `InvalidArgumentError` for a peeked or settled one.
    fn done_keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PySet>> {
        let held = self.live()?;
        let id = self.env().id();
        let keys = match held.transaction() {
            Some(link) => py
                .detach(|| tx::with_link(&link, |t| t.done_keys(id)))
                .map_err(invalid)?
                .py_err()?,
            None => py.detach(|| held.done_keys()).py_err()?,
        };
        PySet::new(py, keys)
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
        if self.held.is_forked() {
            // The lock is the parent's: a clean exit cannot complete it here, an exception
            // leaves it to the parent (or to its expiry).
            return match exc_type {
                None => self.live().map(|_| false),
                Some(_) => Ok(false),
            };
        }
        if !self.held.is_held() {
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
        let body = self.env().body();
        let shown = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
        let label = self
            .env()
            .label()
            .map_or_else(String::new, |l| format!(" label={l:?}"));
        format!(
            "<postbox.Message id={} queue={:?}{label} state={} delivery_count={} body={:?}{}>",
            self.env().id(),
            self.env().queue(),
            self.held.state_with(tx::finished),
            self.env().delivery_count(),
            shown,
            if body.len() > 40 { "…" } else { "" }
        )
    }
}
