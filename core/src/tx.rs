//! Transactions: receives and sends (to any queues of the store) that commit together.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::app_table::{PendingRows, TxTable};
use crate::clock::to_system_time;
use crate::engine::queries as read;
use crate::engine::{Batch, Locked, RowReads, Select, validate_app_key, validate_message};
use crate::engine::{Engine, HeldLock, QueueKind};
use crate::error::{Error, Result};
use crate::job::Job;
use crate::message::{Envelope, Message, MessageId, Sent};
use crate::queue::Queue;
use crate::received::Received;
use crate::session::Session;
use crate::topic::Topic;

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

    /// Receives the next message of `queue` into this transaction, waiting up to `timeout`.
    ///
    /// # Errors
    ///
    /// As [`Queue::receive`].
    pub fn receive(&mut self, queue: &Queue, timeout: Duration) -> Result<Option<Envelope>> {
        self.same_store(queue)?;
        let deadline = Instant::now().checked_add(timeout);
        let got = self.engine.receive(queue.id, &queue.name, 1, deadline)?;
        Ok(got.into_iter().next().map(|l| self.hold(l)))
    }

    /// Receives message `id` of `queue` into the transaction, waiting up to `timeout` for it
    /// to be receivable (see [`Queue::receive_by_id`]).
    ///
    /// # Errors
    ///
    /// As [`Transaction::receive`]: [`Error::InvalidArgument`] on a queue that requires
    /// sessions (receive through the [`Session`] and enlist the message with
    /// [`Transaction::complete`]).
    pub fn receive_by_id(
        &mut self,
        queue: &Queue,
        id: MessageId,
        timeout: Duration,
    ) -> Result<Option<Envelope>> {
        self.receive_selected(queue, Select::Id(id.0), timeout)
    }

    /// Receives the first message of `queue` whose correlation id is `correlation_id` into the
    /// transaction, waiting up to `timeout` for one (see
    /// [`Queue::receive_by_correlation_id`]).
    ///
    /// # Errors
    ///
    /// As [`Transaction::receive_by_id`].
    pub fn receive_by_correlation_id(
        &mut self,
        queue: &Queue,
        correlation_id: &str,
        timeout: Duration,
    ) -> Result<Option<Envelope>> {
        let select = Select::CorrelationId(correlation_id.to_owned());
        self.receive_selected(queue, select, timeout)
    }

    fn receive_selected(
        &mut self,
        queue: &Queue,
        select: Select,
        timeout: Duration,
    ) -> Result<Option<Envelope>> {
        self.same_store(queue)?;
        let deadline = Instant::now().checked_add(timeout);
        let got = self
            .engine
            .receive_selected(queue.id, &queue.name, select, deadline)?;
        Ok(got.map(|l| self.hold(l)))
    }

    /// Records a lock taken for the transaction; returns its message.
    fn hold(&mut self, l: Locked) -> Envelope {
        self.locks.push(HeldLock {
            id: l.envelope.id.0,
            token: l.token,
        });
        self.until.push(l.locked_until);
        l.envelope
    }

    /// The lock token of message `id`, received through this transaction.
    pub fn lock_token(&self, id: MessageId) -> Option<u64> {
        self.locks.iter().find(|l| l.id == id.0).map(|l| l.token)
    }

    /// When the lock on message `id` (received or enlisted in this transaction) expires unless
    /// renewed.
    pub fn locked_until(&self, id: MessageId) -> Option<SystemTime> {
        let i = self.locks.iter().position(|l| l.id == id.0)?;
        Some(to_system_time(self.until[i]))
    }

    /// Extends the lock on message `id` (received or enlisted in this transaction) by its
    /// queue's current `lock_duration` from now, so a long transaction keeps what it holds.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// # let q = store.queue("jobs")?;
    /// q.send("work")?;
    /// let mut tx = store.begin();
    /// let msg = tx.receive(&q, std::time::Duration::from_secs(1))?.unwrap();
    /// let until = tx.renew_lock(msg.id())?;
    /// assert_eq!(tx.locked_until(msg.id()), Some(until));
    /// tx.commit()?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if the lock already expired; [`Error::MessageNotFound`] if the
    /// message is not held by this transaction.
    pub fn renew_lock(&mut self, id: MessageId) -> Result<SystemTime> {
        let i = self
            .locks
            .iter()
            .position(|l| l.id == id.0)
            .ok_or(Error::MessageNotFound(id))?;
        let l = self.locks[i];
        let until = self.engine.call(move |b| b.renew(l.id, l.token))?;
        self.until[i] = until;
        Ok(to_system_time(until))
    }

    /// Records progress keys on message `id`, received (or enlisted) in this transaction, as
    /// [`Received::mark_done`] does: work items done ("recipient 17 notified"), so that a
    /// redelivery skips them; renews the lock in the same write. Returns the new lock expiry.
    ///
    /// The keys are written at once, under the transaction's lock on the message, not at
    /// commit: they record work done *outside* the transaction (a notification sent, a file
    /// written), which an abort cannot take back, so they must survive an abort, a lost lock
    /// or a crash of this process — the redelivery then reads them with
    /// [`done_keys`](Self::done_keys) and skips that work. Work done *through* the transaction
    /// (its sends, rows) needs no checkpoint: it commits or vanishes with it. The commit that
    /// completes the message removes its keys with it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// # let q = store.queue("fanout")?;
    /// q.send("notify users 1 to 3")?;
    /// let mut tx = store.begin();
    /// let msg = tx.receive(&q, std::time::Duration::from_secs(1))?.unwrap();
    /// tx.mark_done(msg.id(), ["user-1"])?;
    /// tx.abort()?;                                   // the key stays with the message
    /// let mut tx = store.begin();
    /// let again = tx.receive(&q, std::time::Duration::from_secs(1))?.unwrap();
    /// assert!(tx.done_keys(again.id())?.contains("user-1"));
    /// tx.commit()?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::MessageNotFound`] if the transaction holds no such message;
    /// [`Error::LockLost`] if its lock expired (nothing recorded);
    /// [`Error::InvalidArgument`] for a finished transaction or a key that is empty or over
    /// 1 KiB.
    pub fn mark_done<I>(&mut self, id: MessageId, keys: I) -> Result<SystemTime>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let i = self.held_index(id)?;
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        let l = self.locks[i];
        let until = self
            .engine
            .call(move |b| b.mark_done(l.id, l.token, &keys))?;
        self.until[i] = until;
        Ok(to_system_time(until))
    }

    /// The progress keys recorded on message `id`, held by this transaction, by
    /// [`mark_done`](Self::mark_done) or [`Received::mark_done`] in this delivery or earlier
    /// ones, read in one lookup.
    ///
    /// # Errors
    ///
    /// [`Error::MessageNotFound`] if the transaction holds no such message;
    /// [`Error::InvalidArgument`] for a finished transaction; storage errors.
    pub fn done_keys(&self, id: MessageId) -> Result<std::collections::BTreeSet<String>> {
        self.held_index(id)?;
        let keys = self.engine.read(|t| read::checkpoints(t, id.0))?;
        Ok(keys.into_iter().collect())
    }

    /// The index of message `id` in `locks`, checking that the transaction is open.
    fn held_index(&self, id: MessageId) -> Result<usize> {
        if self.finished {
            return Err(Error::invalid("the transaction has already finished"));
        }
        self.locks
            .iter()
            .position(|l| l.id == id.0)
            .ok_or(Error::MessageNotFound(id))
    }

    /// Answers `request` when the transaction commits: `reply` goes to the queue named by the
    /// request's `reply_to`, with its correlation id set to the request's correlation id (or,
    /// if it has none, to its id in decimal) — what [`Queue::request`] waits for — as
    /// [`Received::reply`] does, but as one of the transaction's sends: stored at commit,
    /// discarded by an abort. A request received through this transaction is completed by the
    /// same commit. Returns the id the reply will have.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// # let service = store.queue("resize")?;
    /// # let replies = store.queue("replies")?;
    /// service.send(postbox::Message::new("resize 42.png").reply_to("replies"))?;
    /// let mut tx = store.begin();
    /// let request = tx.receive(&service, std::time::Duration::from_secs(1))?.unwrap();
    /// tx.reply(&request, "done")?;
    /// tx.commit()?;                                  // the reply and the completion, or neither
    /// assert_eq!(replies.len()?, 1);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the request has no `reply_to`, the reply is invalid or
    /// the transaction finished; [`Error::QueueNotFound`] when the `reply_to` queue does not
    /// exist; as [`Transaction::send`] otherwise.
    pub fn reply(&mut self, request: &Envelope, reply: impl Into<Message>) -> Result<MessageId> {
        self.check_usable(&self.engine)?;
        let (to, m) = crate::received::answer(request, reply.into())?;
        let rec = self
            .engine
            .read(|t| read::queue_by_name(t, &to))?
            .filter(|r| r.kind == QueueKind::Normal)
            .ok_or_else(|| Error::QueueNotFound(to.clone()))?;
        let queue = Queue::new(self.engine.clone(), &to, rec);
        self.send(&queue, m)
    }

    /// Holds a lock taken elsewhere (a processor's), to be completed by the commit.
    pub(crate) fn enlist(&mut self, lock: HeldLock, locked_until: u64) {
        self.locks.push(lock);
        self.until.push(locked_until);
    }

    /// Moves the sends of `other` (a transaction of the same store that holds nothing else)
    /// into this one.
    pub(crate) fn absorb_sends(&mut self, mut other: Transaction) {
        for (q, name, msgs) in std::mem::take(&mut other.sends) {
            match self.sends.iter_mut().find(|(g, _, _)| *g == q) {
                Some((_, _, v)) => v.extend(msgs),
                None => self.sends.push((q, name, msgs)),
            }
        }
    }

    /// Receives without waiting.
    ///
    /// # Errors
    ///
    /// As [`Queue::try_receive`].
    pub fn try_receive(&mut self, queue: &Queue) -> Result<Option<Envelope>> {
        self.receive(queue, Duration::ZERO)
    }

    /// Enlists a message received outside the transaction: commit completes it, abort returns
    /// it to its queue.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the message comes from
    /// another store (it is then returned to its queue).
    pub fn complete(&mut self, message: Received) -> Result<()> {
        if !Arc::ptr_eq(&self.engine, &message.engine) {
            return Err(crate::Error::InvalidArgument(
                "the message was received from another store than this transaction".into(),
            ));
        }
        self.engine.check_open()?;
        let until = message.locked_until;
        self.locks.push(message.take_lock());
        self.until.push(until);
        Ok(())
    }

    /// Sends `message` to `queue` when the transaction commits; returns the id it will have.
    ///
    /// The id is reserved now, so it can go into an application row or another message of the
    /// same transaction; the message takes its place in its queue by that id (the order of the
    /// sends, not of the commits). If the transaction aborts, the id is never used. A
    /// single-process store reserves it in memory; a shared (`multi_process`) store reserves it
    /// with a small commit of its own.
    ///
    /// # Errors
    ///
    /// [`Error::MessageTooLarge`](crate::Error::MessageTooLarge) (against the queue's current
    /// options), [`Error::InvalidArgument`](crate::Error::InvalidArgument),
    /// [`Error::QueueNotFound`] and [`Error::Closed`] at once; quota errors at commit.
    pub fn send(&mut self, queue: &Queue, message: impl Into<Message>) -> Result<MessageId> {
        Ok(self.send_checked(queue, message)?.id)
    }

    /// [`Transaction::send`], saying whether the message is a duplicate: its `message_key` is
    /// in the queue's dedup window now (or was sent earlier in this transaction), so nothing
    /// will be stored and the id is the original message's. The window is checked again at
    /// commit: a message whose key another sender stores in between is dropped then as a
    /// duplicate, and its reserved id stays unused.
    ///
    /// # Errors
    ///
    /// As [`Transaction::send`].
    pub fn send_checked(&mut self, queue: &Queue, message: impl Into<Message>) -> Result<Sent> {
        self.enqueue(queue, message.into(), None)
    }

    /// Sends `message` to `queue` as a piece of `job` when the transaction commits (see
    /// [`Job::send`]); returns the id it will have.
    ///
    /// # Errors
    ///
    /// As [`Transaction::send`]; a deleted or sealed job fails the commit.
    pub fn send_piece(
        &mut self,
        job: &Job,
        queue: &Queue,
        message: impl Into<Message>,
    ) -> Result<MessageId> {
        job.check_queue(queue)?;
        Ok(self.enqueue(queue, message.into(), Some(job.id))?.id)
    }

    /// Sends several messages to `queue` when the transaction commits, all or none: if one is
    /// refused (too large, invalid), none of them joins the transaction. Returns what
    /// [`Transaction::send_checked`] returns for each, in order.
    ///
    /// # Errors
    ///
    /// As [`Transaction::send`].
    pub fn send_batch_checked<I>(&mut self, queue: &Queue, messages: I) -> Result<Vec<Sent>>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        self.enqueue_all(queue, messages.into_iter().map(Into::into).collect(), None)
    }

    /// Sends several messages to `queue` as pieces of `job` when the transaction commits, all
    /// or none (see [`Transaction::send_batch_checked`]); returns their ids.
    ///
    /// # Errors
    ///
    /// As [`Transaction::send_piece`].
    pub fn send_pieces<I>(
        &mut self,
        job: &Job,
        queue: &Queue,
        messages: I,
    ) -> Result<Vec<MessageId>>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        job.check_queue(queue)?;
        let msgs = messages.into_iter().map(Into::into).collect();
        let sent = self.enqueue_all(queue, msgs, Some(job.id))?;
        Ok(sent.into_iter().map(|s| s.id).collect())
    }

    /// Enqueues every message or none: what an error interrupts is taken back out.
    fn enqueue_all(
        &mut self,
        queue: &Queue,
        msgs: Vec<Message>,
        job: Option<u64>,
    ) -> Result<Vec<Sent>> {
        let before: Vec<usize> = self.sends.iter().map(|g| g.2.len()).collect();
        let mut out = Vec::with_capacity(msgs.len());
        for m in msgs {
            match self.enqueue(queue, m, job) {
                Ok(s) => out.push(s),
                Err(e) => {
                    self.sends.truncate(before.len());
                    for (g, n) in self.sends.iter_mut().zip(before) {
                        g.2.truncate(n);
                    }
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    fn enqueue(&mut self, queue: &Queue, mut m: Message, job: Option<u64>) -> Result<Sent> {
        self.same_store(queue)?;
        m.validate()?;
        let (q, name) = (queue.id, queue.name.clone());
        let rec = self
            .engine
            .read(|t| read::queue_by_id(t, q))?
            .ok_or_else(|| Error::QueueNotFound(name.to_string()))?;
        validate_message(&m, rec.options.max_message_size)?;
        if let (Some(key), Some(_)) = (m.props.message_key.as_deref(), rec.options.dedup_window) {
            let earlier = self
                .sends
                .iter()
                .filter(|g| g.0 == q)
                .flat_map(|g| &g.2)
                .find(|o| o.props.message_key.as_deref() == Some(key));
            if let Some(o) = earlier {
                let id = o.tags.reserved_id.unwrap_or_default();
                return Ok(Sent {
                    id: MessageId(id),
                    duplicate: true,
                });
            }
            let now = self.engine.clock.now_ms();
            if let Some(id) = self.engine.read(|t| read::dedup_lookup(t, q, key, now))? {
                return Ok(Sent {
                    id: MessageId(id),
                    duplicate: true,
                });
            }
        }
        let id = self.engine.reserve_id()?;
        m.tags.reserved_id = Some(id);
        m.tags.job = job;
        match self.sends.iter_mut().find(|(g, _, _)| *g == q) {
            Some((_, _, v)) => v.push(m),
            None => self.sends.push((q, queue.name.to_string(), vec![m])),
        }
        Ok(Sent {
            id: MessageId(id),
            duplicate: false,
        })
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

    /// Publishes `message` to `topic` when the transaction commits: it reaches the
    /// subscriptions the topic has at that commit, or none if the transaction aborts.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a finished transaction, a topic of another store, or an
    /// invalid message. Quotas and a deleted topic are checked at commit.
    pub fn publish(&mut self, topic: &Topic, message: impl Into<Message>) -> Result<()> {
        self.check_usable(&topic.engine)?;
        let m = message.into();
        m.validate()?;
        match self.publishes.iter_mut().find(|(t, _, _)| *t == topic.id) {
            Some((_, _, v)) => v.push(m),
            None => self
                .publishes
                .push((topic.id, topic.name.to_string(), vec![m])),
        }
        Ok(())
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
            queue.id,
            &queue.name,
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
        b.check_lock(l.id, l.token)?;
    }
    b.check_rows(&reads)?;
    let rows: Vec<_> = rows.into_iter().map(|((t, k), w)| (t, k, w)).collect();
    b.write_rows(&rows)?;
    b.send_many(sends)?;
    for (topic, name, msgs) in publishes {
        b.publish(topic, &name, msgs)?;
    }
    for (q, name, group, token, state) in states {
        b.set_session_state(q, &name, &group, token, state)?;
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
