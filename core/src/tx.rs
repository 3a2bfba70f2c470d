//! Transactions: receives and sends (to any queues of the store) that commit together.

mod receive;
mod send;

use std::sync::Arc;

use crate::app_table::{PendingRows, TxTable};
use crate::engine::{Batch, Locked, RowReads, validate_app_key};
use crate::engine::{Engine, HeldLock, QueueRef};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::queue::Queue;
use crate::session::Session;

/// Messages to send to one queue: (queue id, queue name, messages).
type SendGroup = (u32, String, Vec<Message>);
/// (queue id, queue name, group, session token, state).
type SessionState = (u32, Arc<str>, Arc<str>, u64, Option<Vec<u8>>);

/// A transaction, begun with [`Store::begin`](crate::Store::begin).
///
/// Messages received through it are locked for it; messages sent through it are invisible to
/// everyone until [`commit`](Transaction::commit), which completes every received message and
/// stores every sent one atomically. [`abort`](Transaction::abort) — or dropping the
/// transaction — returns the received messages to their queues (their delivery counts stay
/// incremented) and discards the sends.
///
/// Received messages stay locked for their queue's `lock_duration`; a transaction that outlives
/// a lock fails to commit with [`Error::LockLost`](crate::Error::LockLost) and changes nothing.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
/// let orders = store.queue("orders")?;
/// let invoices = store.queue("invoices")?;
/// orders.send("order 7")?;
///
/// let mut tx = store.begin();
/// if let Some(order) = tx.receive(&orders, std::time::Duration::from_secs(1))? {
///     tx.send(&invoices, format!("invoice for {}", String::from_utf8_lossy(order.body())).as_str())?;
/// }
/// tx.commit()?; // the order is gone and the invoice exists, or neither
/// assert_eq!(invoices.len()?, 1);
/// # Ok::<(), postbox::Error>(())
/// ```
#[derive(Debug)]
pub struct Transaction {
    engine: Arc<Engine>,
    locks: Vec<HeldLock>,
    /// `locked_until` (ms) of each entry of `locks`.
    until: Vec<u64>,
    sends: Vec<SendGroup>,
    /// Publishes to topics, fanned out at commit (against the subscriptions of that commit).
    publishes: Vec<SendGroup>,
    /// Session states to set at commit.
    session_states: Vec<SessionState>,
    /// Application table rows to write at commit.
    rows: PendingRows,
    /// What `increment` and `put_if` read from the store: the commit requires it still.
    row_reads: RowReads,
    finished: bool,
}

impl Transaction {
    /// A new, empty transaction on the same store.
    pub(crate) fn empty_like(&self) -> Transaction {
        Transaction::new(self.engine.clone())
    }

    pub(crate) fn new(engine: Arc<Engine>) -> Transaction {
        Transaction {
            engine,
            locks: Vec::new(),
            until: Vec::new(),
            sends: Vec::new(),
            publishes: Vec::new(),
            session_states: Vec::new(),
            rows: PendingRows::new(),
            row_reads: RowReads::new(),
            finished: false,
        }
    }

    /// Application table `name` seen through this transaction: its writes commit with the
    /// transaction's receives and sends, or not at all (see [`TxTable`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let shipping = store.queue("shipping")?;
    /// let mut tx = store.begin();
    /// tx.table("orders")?.put(b"42", b"paid")?;
    /// tx.send(&shipping, "ship order 42")?;
    /// tx.commit()?; // the row and the message, or neither
    /// assert_eq!(store.table("orders")?.get(b"42")?, Some(b"paid".to_vec()));
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a finished transaction or a name that is empty or over
    /// 1 KiB.
    pub fn table(&mut self, name: &str) -> Result<TxTable<'_>> {
        if self.finished {
            return Err(Error::invalid("the transaction has already finished"));
        }
        self.engine.check_open()?;
        validate_app_key(name, b"")?;
        Ok(TxTable {
            engine: &self.engine,
            name: name.to_owned(),
            pending: &mut self.rows,
            reads: &mut self.row_reads,
        })
    }

    /// Sets `session`'s state when the transaction commits, in the same commit as its settles
    /// and sends (`None` clears it); the session lock must still be held then.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a finished transaction, a session of another store, or a
    /// state over 64 KiB. A lost session lock fails the commit with
    /// [`Error::SessionLockLost`](crate::Error::SessionLockLost).
    pub fn set_session_state(&mut self, session: &Session, state: Option<&[u8]>) -> Result<()> {
        self.check_usable(&session.queue().engine)?;
        if state.is_some_and(|s| s.len() > 64 * 1024) {
            return Err(Error::invalid("a session state is at most 65536 bytes"));
        }
        let (q, name, group, token) = session.parts();
        self.session_states
            .retain(|s| !(s.0 == q && *s.2 == *group));
        self.session_states
            .push((q, name, group, token, state.map(<[u8]>::to_vec)));
        Ok(())
    }

    fn same_store(&self, queue: &Queue) -> Result<()> {
        self.check_usable(&queue.engine)
    }

    fn check_usable(&self, engine: &Arc<Engine>) -> Result<()> {
        if self.finished {
            return Err(Error::invalid("the transaction has already finished"));
        }
        if Arc::ptr_eq(&self.engine, engine) {
            self.engine.check_open()
        } else {
            Err(crate::Error::InvalidArgument(
                "the queue or topic belongs to another store than this transaction".into(),
            ))
        }
    }

    /// How many messages this transaction has received and will send (publishes included).
    pub fn len(&self) -> (usize, usize) {
        let out = self.sends.iter().chain(&self.publishes);
        (self.locks.len(), out.map(|s| s.2.len()).sum())
    }

    /// Whether the transaction has done nothing yet.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
            && self.rows.is_empty()
            && self.sends.is_empty()
            && self.publishes.is_empty()
            && self.session_states.is_empty()
    }

    /// Applies every receive and send atomically, in one durable commit.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost) if a received message's lock expired;
    /// [`Error::Conflict`](crate::Error::Conflict) if a row that
    /// [`TxTable::increment`] or [`TxTable::put_if`] read was changed by another commit since;
    /// [`Error::QueueFull`](crate::Error::QueueFull) or
    /// [`Error::QueueNotFound`](crate::Error::QueueNotFound) for a send. On any error nothing
    /// was applied and the received messages are returned to their queues.
    pub fn commit(mut self) -> Result<()> {
        self.finished = true;
        let locks = std::mem::take(&mut self.locks);
        let sends = std::mem::take(&mut self.sends);
        let publishes = std::mem::take(&mut self.publishes);
        let states = std::mem::take(&mut self.session_states);
        let rows = std::mem::take(&mut self.rows);
        let reads = std::mem::take(&mut self.row_reads);
        if locks.is_empty()
            && sends.is_empty()
            && publishes.is_empty()
            && states.is_empty()
            && rows.is_empty()
        {
            return self.engine.check_open();
        }
        let result = self.engine.call({
            let locks = locks.clone();
            move |b| apply_commit(b, &locks, sends, publishes, states, (rows, reads))
        });
        if result.is_err() {
            let _ = self.engine.abandon_all(locks);
        }
        result
    }

    /// Commits and, in the same durable commit, locks up to `want` messages of `queue` for
    /// `owner` — so that a busy transactional processor pays one commit per message. A commit
    /// or receive that fails before writing does not spoil the other.
    pub(crate) fn commit_then_receive(
        mut self,
        queue: &Queue,
        want: usize,
    ) -> (Result<()>, Result<Vec<Locked>>) {
        self.finished = true;
        let locks = std::mem::take(&mut self.locks);
        let sends = std::mem::take(&mut self.sends);
        let publishes = std::mem::take(&mut self.publishes);
        let states = std::mem::take(&mut self.session_states);
        let rows = std::mem::take(&mut self.rows);
        let reads = std::mem::take(&mut self.row_reads);
        let (committed, got) = self.engine.then_receive(
            {
                let locks = locks.clone();
                move |b| apply_commit(b, &locks, sends, publishes, states, (rows, reads))
            },
            queue.queue_ref(),
            want,
        );
        if committed.is_err() {
            let _ = self.engine.abandon_all(locks);
        }
        (committed, got)
    }

    /// Discards the sends and returns the received messages to their queues.
    ///
    /// # Errors
    ///
    /// Storage errors of the release.
    pub fn abort(mut self) -> Result<()> {
        self.finished = true;
        let locks = std::mem::take(&mut self.locks);
        self.engine.abandon_all(locks)
    }
}

/// Checks every lock and every row the transaction's conditional writes read, then stores
/// every send and completes every received message: validation first, so a refused commit
/// writes nothing.
fn apply_commit(
    b: &mut Batch<'_>,
    locks: &[HeldLock],
    sends: Vec<SendGroup>,
    publishes: Vec<SendGroup>,
    states: Vec<SessionState>,
    (rows, reads): (PendingRows, RowReads),
) -> Result<()> {
    for l in locks {
        b.check_lock(*l)?;
    }
    b.check_rows(&reads)?;
    let rows: Vec<_> = rows.into_iter().map(|((t, k), w)| (t, k, w)).collect();
    b.write_rows(&rows)?;
    b.send_many(sends)?;
    for (topic, name, msgs) in publishes {
        b.publish(QueueRef::new(topic, &name), msgs)?;
    }
    for (q, name, group, token, state) in states {
        b.set_session_state(QueueRef::new(q, &name), &group, token, state)?;
    }
    b.complete_all(locks)
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.finished {
            let locks = std::mem::take(&mut self.locks);
            let _ = self.engine.abandon_all(locks);
        }
    }
}
