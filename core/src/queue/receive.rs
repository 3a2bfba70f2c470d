//! Receiving: with and without waiting, selectively, in batches, and completing them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Queue;
use crate::engine::HeldLock;
use crate::engine::{Locked, Select};
use crate::error::{Error, Result};
use crate::message::{Envelope, MessageId};
use crate::received::Received;

impl Queue {
    /// Locks the head message if there is one, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the queue was deleted;
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) on a queue that requires
    /// sessions (accept a session instead); storage errors.
    pub fn try_receive(&self) -> Result<Option<Received>> {
        self.receive_deadline(Instant::now())
    }

    /// Locks the next message, waiting up to `timeout` for one to arrive. The message stays in
    /// the queue, invisible to other receivers, until it is completed, abandoned,
    /// dead-lettered, or its lock expires (peek-lock).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// # let q = store.queue("jobs")?;
    /// q.send("work")?;
    /// if let Some(msg) = q.receive(std::time::Duration::from_secs(1))? {
    ///     assert_eq!(msg.body(), b"work");
    ///     msg.complete()?;
    /// }
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Queue::try_receive`].
    pub fn receive(&self, timeout: Duration) -> Result<Option<Received>> {
        self.receive_deadline_opt(Instant::now().checked_add(timeout))
    }

    /// Like [`Queue::receive`] with an absolute deadline.
    ///
    /// # Errors
    ///
    /// As [`Queue::try_receive`].
    pub fn receive_deadline(&self, deadline: Instant) -> Result<Option<Received>> {
        self.receive_deadline_opt(Some(deadline))
    }

    /// Waits without limit for the next message.
    ///
    /// # Errors
    ///
    /// As [`Queue::try_receive`]; [`Error::Closed`] when the store closes meanwhile.
    pub fn receive_blocking(&self) -> Result<Received> {
        loop {
            if let Some(r) = self.receive_deadline_opt(None)? {
                return Ok(r);
            }
        }
    }

    fn receive_deadline_opt(&self, deadline: Option<Instant>) -> Result<Option<Received>> {
        let got = self.engine.receive(self.queue_ref(), 1, deadline)?;
        Ok(got.into_iter().next().map(|l| self.wrap(l)))
    }

    /// Locks message `id` of this queue, waiting up to `timeout` for it to be receivable (sent,
    /// its scheduled time come, its lock released by another receiver). Other messages are
    /// left alone. MSMQ's `ReceiveById`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// # let q = store.queue("jobs")?;
    /// q.send("first")?;
    /// let id = q.send("second")?;
    /// let msg = q.receive_by_id(id, std::time::Duration::ZERO)?.unwrap();
    /// assert_eq!(msg.body(), b"second");
    /// msg.complete()?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Queue::try_receive`]. A message that is in another queue, or was completed, is
    /// never receivable here: the wait ends with `None` at the timeout.
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) on a queue that requires
    /// sessions, whose messages only the holder of their group takes: use
    /// [`Session::receive_by_id`](crate::Session::receive_by_id).
    pub fn receive_by_id(&self, id: MessageId, timeout: Duration) -> Result<Option<Received>> {
        self.receive_selected(Select::Id(id.0), timeout)
    }

    /// Locks the first message (in delivery order) whose correlation id is `correlation_id`,
    /// waiting up to `timeout` for one: on a reply queue shared by several requesters, each
    /// takes only its own replies. MSMQ's `ReceiveByCorrelationId`.
    ///
    /// The pick reads the queue's receivable messages in delivery order until one matches, so
    /// its cost grows with the number of receivable messages ahead of the match; a reply queue
    /// that its requesters keep drained stays cheap.
    ///
    /// # Errors
    ///
    /// As [`Queue::try_receive`]. [`Error::InvalidArgument`](crate::Error::InvalidArgument) on
    /// a queue that requires sessions: use
    /// [`Session::receive_by_correlation_id`](crate::Session::receive_by_correlation_id).
    pub fn receive_by_correlation_id(
        &self,
        correlation_id: &str,
        timeout: Duration,
    ) -> Result<Option<Received>> {
        self.receive_selected(Select::CorrelationId(correlation_id.to_owned()), timeout)
    }

    fn receive_selected(&self, select: Select, timeout: Duration) -> Result<Option<Received>> {
        let deadline = Instant::now().checked_add(timeout);
        let got = self
            .engine
            .receive_selected(self.queue_ref(), select, deadline)?;
        Ok(got.map(|l| self.wrap(l)))
    }

    /// Waits up to `timeout` for a receivable message and returns the head of the queue without
    /// locking it (a blocking [`Queue::peek`]): another receiver may take it meanwhile.
    ///
    /// # Errors
    ///
    /// As [`Queue::peek`].
    pub fn peek_wait(&self, timeout: Duration) -> Result<Option<Envelope>> {
        self.engine.check_open()?;
        let deadline = Instant::now().checked_add(timeout);
        self.engine
            .wait_for(self.id, deadline, None, || self.peek())
    }

    /// Locks up to `max` messages in one commit, waiting up to `timeout` for the first.
    ///
    /// # Errors
    ///
    /// As [`Queue::try_receive`]; [`Error::InvalidArgument`] when `max` is 0.
    pub fn receive_batch(&self, max: usize, timeout: Duration) -> Result<Vec<Received>> {
        if max == 0 {
            return Err(Error::invalid("receive_batch needs max >= 1"));
        }
        let deadline = Instant::now().checked_add(timeout);
        let got = self.engine.receive(self.queue_ref(), max, deadline)?;
        Ok(got.into_iter().map(|l| self.wrap(l)).collect())
    }

    pub(crate) fn wrap(&self, l: Locked) -> Received {
        Received::new(self.engine.clone(), l)
    }

    /// Completes several received messages in one commit, atomically: if any lock was lost,
    /// none is completed and the error names it.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] for the first message whose lock is gone; [`Error::InvalidArgument`]
    /// when a message was received from another queue or store (nothing is completed then, and
    /// the messages go back to their queues).
    pub fn complete_batch(&self, messages: Vec<Received>) -> Result<()> {
        self.check_own(&messages)?;
        crate::received::complete_all(&self.engine, messages)
    }

    /// Refuses messages received from another queue (or store) than this one.
    fn check_own(&self, messages: &[Received]) -> Result<()> {
        if let Some(m) = messages
            .iter()
            .find(|m| !Arc::ptr_eq(&m.engine, &self.engine) || m.queue() != &*self.name)
        {
            return Err(Error::invalid(format!(
                "message {} was received from queue {:?}, not from {:?}",
                m.id(),
                m.queue(),
                self.name
            )));
        }
        Ok(())
    }

    /// Completes `done` and locks up to `max` more messages of this queue in **one** commit —
    /// the batched consumer's loop step, paying one durable commit per batch instead of two.
    /// If nothing is receivable right then, waits up to `timeout` like
    /// [`Queue::receive_batch`] (the completion is already durable by then).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let q = store.queue("jobs")?;
    /// q.send_batch(["a", "b", "c", "d"])?;
    /// let mut batch = q.receive_batch(2, std::time::Duration::ZERO)?;
    /// while !batch.is_empty() {
    ///     // ... work on `batch` ...
    ///     batch = q.complete_batch_and_receive(batch, 2, std::time::Duration::ZERO)?;
    /// }
    /// assert_eq!(q.stats()?.locked + q.stats()?.active, 0);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if any lock of `done` was lost: then nothing was completed or
    /// received, and the rest of `done` is returned to the queue. [`Error::InvalidArgument`]
    /// when `max` is 0 or a message was received from another queue or store.
    pub fn complete_batch_and_receive(
        &self,
        done: Vec<Received>,
        max: usize,
        timeout: Duration,
    ) -> Result<Vec<Received>> {
        if max == 0 {
            return Err(Error::invalid("complete_batch_and_receive needs max >= 1"));
        }
        self.check_own(&done)?;
        let deadline = Instant::now().checked_add(timeout);
        let locks: Vec<HeldLock> = done.into_iter().map(Received::take_lock).collect();
        let (completed, got) =
            self.engine
                .complete_then_receive(locks.clone(), self.queue_ref(), max);
        if let Err(e) = completed {
            // Nothing was completed: the rest of `done`, and whatever the same commit locked,
            // go back to the queue now.
            let mut back = locks;
            back.extend(got.into_iter().flatten().map(|l| l.held()));
            let _ = self.engine.abandon_all(back);
            return Err(e);
        }
        let got = got?;
        if !got.is_empty() || timeout.is_zero() {
            return Ok(got.into_iter().map(|l| self.wrap(l)).collect());
        }
        let got = self.engine.receive(self.queue_ref(), max, deadline)?;
        Ok(got.into_iter().map(|l| self.wrap(l)).collect())
    }
}
