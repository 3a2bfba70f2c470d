//! `postbox.Transaction`: receives and sends that commit together.

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use postbox::binding::Hold;
use postbox::sync::Mutex;
use postbox::{Envelope, MessageId, Transaction};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

use crate::convert;
use crate::errors::{IntoPy, empty, invalid, is_forked};
use crate::job::PyJob;
use crate::live::Live;
use crate::message::PyMessage;
use crate::queue::{PyQueue, PySent};
use crate::session::PySession;
use crate::table::PyTxTable;
use crate::topic::PyTopic;
use crate::wait::wait_interruptible;

pub enum State {
    Open(Transaction),
    Finished(&'static str),
}

/// The transaction behind a `Transaction` object.
type SharedState = Arc<Mutex<State>>;

/// How the messages a transaction received or enlisted reach it to renew their locks. Weak:
/// a message does not keep a dropped transaction alive (dropping it aborts it).
pub type TxLink = Weak<Mutex<State>>;

/// Extends the lock on message `id` held by the transaction behind `link`; called without the
/// GIL. `Err` explains why the transaction cannot renew it.
pub fn renew_lock(link: &TxLink, id: MessageId) -> Result<postbox::Result<SystemTime>, String> {
    let Some(state) = link.upgrade() else {
        return Err(format!(
            "message {id} belongs to a transaction that was dropped (and so aborted)"
        ));
    };
    let mut state = state.lock();
    match &mut *state {
        State::Open(tx) => Ok(tx.renew_lock(id)),
        State::Finished(how) => Err(format!(
            "message {id} belongs to a transaction that was already {how}"
        )),
    }
}

/// What became of the messages of the transaction behind `link`, for `Message.state`: `None`
/// while it is open (or busy: its mutex is only tried, so this never blocks, not even in a
/// forked child), else `"completed"` (committed), `"abandoned"` (aborted, dropped, or its
/// commit failed), `"outcome unknown"`, or `"settled by the processor"` (a transactional
/// processor's, whose handler returned).
pub fn finished(link: &TxLink) -> Option<&'static str> {
    let Some(state) = link.upgrade() else {
        return Some("abandoned");
    };
    let state = state.try_lock()?;
    match &*state {
        State::Open(_) => None,
        State::Finished(how) => Some(match *how {
            COMMITTED => "completed",
            ABORTED => "abandoned",
            UNKNOWN => "outcome unknown",
            _ => "settled by the processor",
        }),
    }
}

/// How a transaction finished (`Transaction.state`).
const COMMITTED: &str = "committed";
const ABORTED: &str = "aborted";
const UNKNOWN: &str = "outcome unknown";

/// Runs `f` on the open transaction behind `link`; called without the GIL. `Err` explains why
/// there is none (dropped, committed or aborted).
pub fn with_link<T>(
    link: &TxLink,
    f: impl FnOnce(&mut Transaction) -> postbox::Result<T>,
) -> Result<postbox::Result<T>, String> {
    let Some(state) = link.upgrade() else {
        return Err("the transaction was dropped (and so aborted)".into());
    };
    let mut state = state.lock();
    match &mut *state {
        State::Open(tx) => Ok(f(tx)),
        State::Finished(how) => Err(format!("the transaction was already {how}")),
    }
}

/// A transaction: `with store.transaction() as tx:` commits on a clean exit and aborts on an
/// exception. Messages it receives are completed by the commit; messages it sends appear only
/// then. In a forked child every call raises `ForkedError` (the transaction is the parent's).
#[pyclass(frozen, module = "postbox._postbox", name = "Transaction")]
pub struct PyTransaction {
    state: SharedState,
    /// The process that began it: its state mutex is never taken in another (a parent thread
    /// may have held it at fork time).
    opened_by: u32,
    /// A transactional processor's, lent to one handler call: the processor commits or aborts
    /// it, never the handler.
    lent: bool,
}

impl Live for PyTransaction {
    type Inner = SharedState;

    fn opened_by(&self) -> u32 {
        self.opened_by
    }

    fn inner(&self) -> &SharedState {
        &self.state
    }
}

impl PyTransaction {
    pub fn new(tx: Transaction) -> PyTransaction {
        PyTransaction {
            state: Arc::new(Mutex::new(State::Open(tx))),
            opened_by: postbox::binding::process_id(),
            lent: false,
        }
    }

    /// The transaction of a transactional processor, lent to one handler call.
    pub fn lent(tx: Transaction) -> PyTransaction {
        PyTransaction {
            lent: true,
            ..PyTransaction::new(tx)
        }
    }

    /// Takes a lent transaction back when its handler returned; later calls on the Python
    /// object raise (the transaction is "closed"). `None` if the handler somehow finished it.
    pub fn reclaim(&self) -> Option<Transaction> {
        match std::mem::replace(&mut *self.state.lock(), State::Finished("closed")) {
            State::Open(tx) => Some(tx),
            State::Finished(_) => None,
        }
    }

    fn refuse_lent(&self) -> PyResult<()> {
        if self.lent {
            return Err(invalid(
                "this transaction belongs to the processor: it commits when the handler \
                 returns and aborts when it raises",
            ));
        }
        Ok(())
    }

    /// Runs `f` on the open transaction. The mutex is only ever taken without the GIL.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Transaction) -> postbox::Result<T> + Send,
    ) -> PyResult<T> {
        let state = self.live()?;
        let r = py.detach(|| match &mut *state.lock() {
            State::Open(tx) => Ok(f(tx)),
            State::Finished(how) => Err(*how),
        });
        match r {
            Ok(r) => r.py_err(),
            Err(how) => Err(invalid(format!("the transaction was already {how}"))),
        }
    }

    fn finish(&self, py: Python<'_>, commit: bool) -> PyResult<()> {
        self.live()?;
        self.refuse_lent()?;
        let r = py.detach(|| {
            // Held through the commit, so that the state says how it really ended: a failed
            // commit aborted the transaction (its messages went back), unless its outcome is
            // unknown. Messages only try this mutex, so they read "transaction" meanwhile.
            let mut state = self.state.lock();
            match std::mem::replace(&mut *state, State::Finished(ABORTED)) {
                State::Open(tx) if commit => {
                    let r = tx.commit();
                    *state = State::Finished(match &r {
                        Ok(()) => COMMITTED,
                        Err(e) if e.kind() == postbox::ErrorKind::OutcomeUnknown => UNKNOWN,
                        Err(_) => ABORTED,
                    });
                    Ok(r)
                }
                State::Open(tx) => Ok(tx.abort()),
                State::Finished(earlier) => {
                    *state = State::Finished(earlier);
                    Err(earlier)
                }
            }
        });
        match r {
            Ok(r) => r.py_err(),
            Err(how) => Err(invalid(format!("the transaction was already {how}"))),
        }
    }
}

impl PyTransaction {
    /// One receive into the transaction through `f`, waiting in slices until `timeout`.
    fn receive_with(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        timeout: Option<&Bound<'_, PyAny>>,
        f: impl Fn(&mut Transaction, &postbox::Queue, Duration) -> postbox::Result<Option<Envelope>>
        + Send
        + Sync,
    ) -> PyResult<PyMessage> {
        let state = self.live()?;
        let deadline = convert::deadline(timeout)?;
        let q = &queue.get().q;
        let got = wait_interruptible(py, deadline, |slice| match &mut *state.lock() {
            State::Open(tx) => Ok(f(tx, q, slice)?.map(|env| {
                let id = env.id();
                (env, tx.lock_token(id), tx.locked_until(id))
            })),
            State::Finished(how) => Err(postbox::Error::InvalidArgument(format!(
                "the transaction was already {how}"
            ))),
        })?;
        match got {
            Some((env, token, until)) => Ok(PyMessage::in_transaction(
                env,
                Arc::downgrade(state),
                token,
                until,
            )),
            None => Err(empty(q.name())),
        }
    }
}

#[pymethods]
impl PyTransaction {
    /// Receives the next message of `queue` into the transaction, waiting up to `timeout`
    /// (`None`: forever); raises `postbox.Empty` when nothing arrives in time. The message is
    /// locked until the transaction finishes: its `lock_token` and `locked_until` are set and
    /// `msg.renew_lock()` extends the lock through the transaction.
    #[pyo3(signature = (queue, timeout=None))]
    fn receive(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMessage> {
        self.receive_with(py, queue, timeout, |tx, q, slice| tx.receive(q, slice))
    }

    /// Receives message `id` of `queue` into the transaction, waiting up to `timeout` seconds
    /// (`None`: forever) for it to be receivable; raises `postbox.Empty` otherwise, and
    /// `InvalidArgumentError` on a queue that requires sessions (receive through the session,
    /// then `complete` the message into the transaction).
    #[pyo3(signature = (queue, id, timeout=None))]
    fn receive_by_id(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        id: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMessage> {
        self.receive_with(py, queue, timeout, |tx, q, slice| {
            tx.receive_by_id(q, MessageId(id), slice)
        })
    }

    /// Receives the first message of `queue` whose correlation id is `correlation_id` into the
    /// transaction, waiting up to `timeout` seconds (`None`: forever); raises `postbox.Empty`
    /// when none arrives in time, and `InvalidArgumentError` on a queue that requires sessions.
    #[pyo3(signature = (queue, correlation_id, timeout=None))]
    fn receive_by_correlation_id(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        correlation_id: &str,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMessage> {
        self.receive_with(py, queue, timeout, |tx, q, slice| {
            tx.receive_by_correlation_id(q, correlation_id, slice)
        })
    }

    /// Sends a message to `queue` when the transaction commits (same keywords as
    /// `Queue.send`); returns the id it will have. The id is reserved now, so it can go into an
    /// application row or another message of the same transaction; if the transaction aborts,
    /// it is never used. A duplicate (its `message_key` in the queue's dedup window) returns the
    /// original message's id (`send_checked` says so).
    #[pyo3(signature = (queue, body, **props))]
    fn send(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let m = convert::message(body, props, "send")?;
        let q = &queue.get().q;
        self.with(py, |tx| tx.send(q, m)).map(MessageId::get)
    }

    /// `send`, saying what happened: a `Sent` with the id the message will have and whether it
    /// is a duplicate (its `message_key` is in the queue's dedup window now, or was sent earlier
    /// in this transaction: nothing will be stored and the id is the original's). The window is
    /// checked again at commit: a key another sender stores in between makes the message a
    /// duplicate then, and its reserved id stays unused. Takes `Queue.send`'s keywords.
    #[pyo3(signature = (queue, body, **props))]
    fn send_checked(
        &self,
        py: Python<'_>,
        queue: &Bound<'_, PyQueue>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PySent> {
        let m = convert::message(body, props, "send_checked")?;
        let q = &queue.get().q;
        self.with(py, |tx| tx.send_checked(q, m)).map(PySent::from)
    }

    /// Sends a message to `queue` as a piece of `job` when the transaction commits (see
    /// `Job.send`); returns the id it will have. Takes `Queue.send`'s keywords. A deleted or
    /// sealed job fails the commit (`NotFoundError`, `InvalidArgumentError`).
    #[pyo3(signature = (job, queue, body, **props))]
    fn send_piece(
        &self,
        py: Python<'_>,
        job: &Bound<'_, PyJob>,
        queue: &Bound<'_, PyQueue>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let m = convert::message(body, props, "send_piece")?;
        let (j, q) = (&job.get().job, &queue.get().q);
        self.with(py, |tx| tx.send_piece(j, q, m))
            .map(MessageId::get)
    }

    /// Application table `name` seen through this transaction (a `TransactionTable`): reads see
    /// the store's committed rows with this transaction's own writes laid over them; writes are
    /// applied by the commit, atomically with its receives and sends, or not at all. Raises
    /// `InvalidArgumentError` for a finished transaction or a name that is empty or over 1 KiB.
    fn table(&self, py: Python<'_>, name: String) -> PyResult<PyTxTable> {
        self.with(py, |tx| tx.table(&name).map(drop))?;
        Ok(PyTxTable::new(
            Arc::downgrade(&self.state),
            name,
            self.opened_by,
        ))
    }

    /// Publishes a message to `topic` when the transaction commits (same keywords as
    /// `Queue.send`): it reaches the subscriptions the topic has at that commit, or none if
    /// the transaction aborts. A deleted topic or a full subscription fails the commit.
    #[pyo3(signature = (topic, body, **props))]
    fn publish(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyTopic>,
        body: &Bound<'_, PyAny>,
        props: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let m = convert::message(body, props, "publish")?;
        let t = &topic.get().t;
        self.with(py, |tx| tx.publish(t, m))
    }

    /// Enlists a message received outside the transaction: the commit completes it, an abort
    /// returns it to its queue.
    fn complete(&self, py: Python<'_>, message: &Bound<'_, PyMessage>) -> PyResult<()> {
        let state = self.live()?;
        let msg = &message.get().held;
        let r = msg.take("enlisted").py_err()?;
        let back = py.detach(|| match &mut *state.lock() {
            State::Open(tx) => Ok(tx.complete(r)),
            State::Finished(how) => Err((Box::new(r), *how)),
        });
        match back {
            Ok(Ok(())) => {
                msg.set(Hold::Transaction(Arc::downgrade(state)));
                Ok(())
            }
            Ok(Err(e)) => {
                // A message of another store: refused, and returned to its queue.
                msg.set(Hold::Settled("abandoned"));
                Err(crate::errors::to_py(e))
            }
            Err((r, how)) => {
                msg.give_back(*r);
                Err(invalid(format!("the transaction was already {how}")))
            }
        }
    }

    /// Sets the state of `session` (a `Session` of a queue of this store) when the transaction
    /// commits, atomically with its settles and sends; an abort leaves the state as it was.
    /// `None` clears it; at most 64 KiB. A later call for the same session replaces this one.
    /// A session lock lost by the commit fails it with `LockLostError`.
    fn set_session_state(
        &self,
        py: Python<'_>,
        session: &Bound<'_, PySession>,
        state: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let state = state.map(convert::body).transpose()?;
        let session = session.get();
        session.live()?;
        // The transaction's mutex, then the session's: no path takes them the other way round.
        self.with(py, |tx| match &*session.session.lock() {
            Some(s) => tx.set_session_state(s, state.as_deref()),
            None => Err(session.released_error()),
        })
    }

    /// Applies every receive, send and table write atomically, in one durable commit. Raises
    /// `LockLostError` when a received message's lock expired and `ConflictError` when a row
    /// that `TransactionTable.increment` or `put_if` read was changed by another commit since;
    /// on any error nothing was applied.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, true)
    }

    /// Discards the sends and returns the received messages to their queues.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, false)
    }

    /// `"open"`, `"committed"` or `"aborted"` (by `abort()`, by leaving a `with` block with
    /// an exception, or by a commit that failed: nothing was applied); `"outcome unknown"`
    /// when the commit's outcome is unknown (`OutcomeUnknownError`); `"closed"` for a
    /// transactional processor's once its handler returned.
    #[getter]
    fn state(&self, py: Python<'_>) -> PyResult<&'static str> {
        let state = self.live()?;
        Ok(py.detach(|| match &*state.lock() {
            State::Open(_) => "open",
            State::Finished(how) => how,
        }))
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        let py = slf.py();
        let this = slf.get();
        this.live()?;
        this.refuse_lent()?;
        let finished = py.detach(|| match &*this.state.lock() {
            State::Open(_) => None,
            State::Finished(how) => Some(*how),
        });
        match finished {
            None => Ok(slf),
            Some(how) => Err(invalid(format!(
                "the transaction was already {how}: start a new one with store.transaction()"
            ))),
        }
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if is_forked(self.opened_by) {
            // Nothing to abort here (the transaction is the parent's); a clean exit meant to
            // commit, which cannot happen in this process.
            return match exc_type {
                None => self.live().map(|_| false),
                Some(_) => Ok(false),
            };
        }
        let open = py.detach(|| matches!(&*self.state.lock(), State::Open(_)));
        if !open {
            // Committed or aborted inside the block.
            return Ok(false);
        }
        if exc_type.is_none() {
            self.finish(py, true)?;
        } else {
            // The block's exception is what the caller needs to see.
            let _ = self.finish(py, false);
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.state(py) {
            Ok(state) => format!("<postbox.Transaction {state}>"),
            Err(_) => "<postbox.Transaction of another process>".into(),
        }
    }
}
