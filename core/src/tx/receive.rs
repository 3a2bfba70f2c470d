//! What a transaction receives and holds: receiving into it, its locks (renewal, checkpoints)
//! and completing messages received elsewhere.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::Transaction;
use crate::clock::to_system_time;
use crate::engine::HeldLock;
use crate::engine::queries as read;
use crate::engine::{Locked, Select};
use crate::error::{Error, Result};
use crate::message::{Envelope, MessageId};
use crate::queue::Queue;
use crate::received::Received;
#[cfg(doc)]
use crate::session::Session;

impl Transaction {
    /// Receives the next message of `queue` into this transaction, waiting up to `timeout`.
    ///
    /// # Errors
    ///
    /// As [`Queue::receive`].
    pub fn receive(&mut self, queue: &Queue, timeout: Duration) -> Result<Option<Envelope>> {
        self.same_store(queue)?;
        let deadline = Instant::now().checked_add(timeout);
        let got = self.engine.receive(queue.queue_ref(), 1, deadline)?;
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
            .receive_selected(queue.queue_ref(), select, deadline)?;
        Ok(got.map(|l| self.hold(l)))
    }

    /// Records a lock taken for the transaction; returns its message.
    fn hold(&mut self, l: Locked) -> Envelope {
        self.locks.push(l.held());
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
        let until = self.engine.call(move |b| b.renew(l))?;
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
        let until = self.engine.call(move |b| b.mark_done(l, &keys))?;
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

    /// Holds a lock taken elsewhere (a processor's), to be completed by the commit.
    pub(crate) fn enlist(&mut self, lock: HeldLock, locked_until: u64) {
        self.locks.push(lock);
        self.until.push(locked_until);
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
}
