//! Queue handles: send, peek, browse, receive, stats, purge.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::engine::batch::{DEAD_LETTER_SUFFIX, Locked, dead_letter_name, validate_message};
use crate::engine::codec::{QueueKind, QueueRecord};
use crate::engine::read;
use crate::error::{Error, Result};
use crate::message::{Envelope, Message, MessageId};
use crate::received::Received;

/// Per-queue settings.
///
/// # Defaults
///
/// - `lock_duration`: 30 s — how long a received message stays locked before it is returned
/// - `max_deliveries`: 10 — deliveries before a message is dead-lettered
/// - `default_ttl`: none — messages live until received
/// - `max_message_size`: 4 MiB (as MSMQ)
/// - `max_messages`, `max_bytes`: none — quotas past which `send` fails with `QueueFull`
/// - `dedup_window`: none — how long a `message_key` is remembered for duplicate detection
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOptions {
    /// How long a receive holds a message before it returns to the queue.
    pub lock_duration: Duration,
    /// How many deliveries a message gets before it moves to the dead-letter queue.
    pub max_deliveries: u32,
    /// Time to live of messages that do not set their own.
    pub default_ttl: Option<Duration>,
    /// Largest accepted body, in bytes.
    pub max_message_size: usize,
    /// Most messages (receivable, locked and scheduled) the queue may hold.
    pub max_messages: Option<u64>,
    /// Most body bytes the queue may hold.
    pub max_bytes: Option<u64>,
    /// How long a `message_key` is remembered: a second send with the same key inside the window
    /// is accepted and discarded, returning the first message's id.
    pub dedup_window: Option<Duration>,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            lock_duration: Duration::from_secs(30),
            max_deliveries: 10,
            default_ttl: None,
            max_message_size: 4 << 20,
            max_messages: None,
            max_bytes: None,
            dedup_window: None,
        }
    }
}

impl QueueOptions {
    /// Sets `lock_duration`.
    pub fn lock_duration(mut self, d: Duration) -> Self {
        self.lock_duration = d;
        self
    }
    /// Sets `max_deliveries`.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = n;
        self
    }
    /// Sets `default_ttl`.
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = Some(ttl);
        self
    }
    /// Sets `max_message_size`.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }
    /// Sets `max_messages`.
    pub fn max_messages(mut self, n: u64) -> Self {
        self.max_messages = Some(n);
        self
    }
    /// Sets `max_bytes`.
    pub fn max_bytes(mut self, n: u64) -> Self {
        self.max_bytes = Some(n);
        self
    }
    /// Sets `dedup_window`.
    pub fn dedup_window(mut self, d: Duration) -> Self {
        self.dedup_window = Some(d);
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.lock_duration < Duration::from_millis(1) {
            return Err(Error::invalid("lock_duration must be at least 1 ms"));
        }
        if self.max_deliveries == 0 {
            return Err(Error::invalid("max_deliveries must be at least 1"));
        }
        if self.max_message_size > u32::MAX as usize {
            return Err(Error::invalid("max_message_size cannot exceed 4 GiB - 1"));
        }
        if self.default_ttl.is_some_and(|d| d.is_zero())
            || self.dedup_window.is_some_and(|d| d.is_zero())
        {
            return Err(Error::invalid(
                "default_ttl and dedup_window must be positive",
            ));
        }
        Ok(())
    }
}

/// Exact counts of a queue, maintained in the same commit as every change (O(1) to read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueStats {
    /// Receivable now.
    pub active: u64,
    /// Held by a receiver or transaction.
    pub locked: u64,
    /// Waiting for their `visible_at` (including abandoned-with-delay).
    pub scheduled: u64,
    /// In this queue's dead-letter queue (0 for a dead-letter queue itself).
    pub dead_lettered: u64,
    /// Body bytes held by the queue (active, locked and scheduled).
    pub bytes: u64,
}

/// A handle to one queue. Cheap to clone, `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Queue {
    pub(crate) engine: Arc<Engine>,
    pub(crate) name: Arc<str>,
    pub(crate) id: u32,
    pub(crate) peer: u32,
    pub(crate) kind: QueueKind,
    pub(crate) options: QueueOptions,
}

impl Queue {
    pub(crate) fn new(engine: Arc<Engine>, name: &str, rec: QueueRecord) -> Queue {
        Queue {
            engine,
            name: name.into(),
            id: rec.id,
            peer: rec.peer,
            kind: rec.kind,
            options: rec.options,
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The options in force when this handle was opened.
    pub fn options(&self) -> &QueueOptions {
        &self.options
    }

    /// Whether this is a dead-letter queue.
    pub fn is_dead_letter_queue(&self) -> bool {
        self.kind == QueueKind::DeadLetter
    }

    /// Sends one message; returns its id once it is durable.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let q = store.queue("jobs")?;
    /// let id = q.send(postbox::Message::new("payload").priority(6))?;
    /// assert_eq!(q.peek()?.unwrap().id(), id);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::MessageTooLarge`], [`Error::QueueFull`], [`Error::InvalidArgument`] (priority
    /// above 7, or a dead-letter queue), [`Error::QueueNotFound`] if the queue was deleted,
    /// [`Error::OutcomeUnknown`] when the commit failed after it may have reached the disk.
    pub fn send(&self, message: impl Into<Message>) -> Result<MessageId> {
        let m = message.into();
        validate_message(&m, self.options.max_message_size)?;
        let (q, name) = (self.id, self.name.to_string());
        let mut ids = self.engine.call(move |b| b.send(q, &name, vec![m]))?;
        ids.pop()
            .ok_or_else(|| Error::Panic("send returned no id".into()))
    }

    /// Sends several messages atomically (all or none, one commit); returns their ids in order.
    ///
    /// # Errors
    ///
    /// As [`Queue::send`]; on error none of the messages was stored.
    pub fn send_batch<I>(&self, messages: I) -> Result<Vec<MessageId>>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        let msgs: Vec<Message> = messages.into_iter().map(Into::into).collect();
        for m in &msgs {
            validate_message(m, self.options.max_message_size)?;
        }
        let (q, name) = (self.id, self.name.to_string());
        self.engine.call(move |b| b.send(q, &name, msgs))
    }

    /// The message at the head of the queue (the next one `receive` would take), without
    /// locking it.
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn peek(&self) -> Result<Option<Envelope>> {
        let q = self.id;
        self.engine
            .read(|t| read::browse_page(t, q, None, 1))
            .map(|(mut v, _)| v.pop())
    }

    /// Iterates over the receivable messages in delivery order (priority, then send order),
    /// without locking them. Each step reads a fresh snapshot, so the iteration reflects
    /// concurrent changes and never blocks writers.
    pub fn browse(&self) -> Browse {
        Browse {
            engine: self.engine.clone(),
            q: self.id,
            after: None,
            buffer: VecDeque::new(),
            done: false,
        }
    }

    /// Looks a message of this queue up by id, whatever its status.
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn get(&self, id: MessageId) -> Result<Option<Envelope>> {
        let name = self.name.clone();
        self.engine
            .read(|t| read::get(t, id.0))
            .map(|e| e.filter(|e| *e.queue() == *name))
    }

    /// Locks the head message if there is one, without waiting.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the queue was deleted; storage errors.
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
        let got = self.engine.receive(self.id, &self.name, 1, deadline)?;
        Ok(got.into_iter().next().map(|l| self.wrap(l)))
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
        let got = self.engine.receive(self.id, &self.name, max, deadline)?;
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
    /// [`Error::LockLost`] for the first message whose lock is gone.
    pub fn complete_batch(&self, messages: Vec<Received>) -> Result<()> {
        crate::received::complete_all(&self.engine, messages)
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
    /// when `max` is 0 or a message belongs to another store.
    pub fn complete_batch_and_receive(
        &self,
        done: Vec<Received>,
        max: usize,
        timeout: Duration,
    ) -> Result<Vec<Received>> {
        if max == 0 {
            return Err(Error::invalid("complete_batch_and_receive needs max >= 1"));
        }
        if done.iter().any(|r| !Arc::ptr_eq(&r.engine, &self.engine)) {
            return Err(Error::invalid(
                "a message belongs to another store than this queue",
            ));
        }
        let deadline = Instant::now().checked_add(timeout);
        let locks: Vec<(u64, u64)> = done.into_iter().map(Received::take_lock).collect();
        let (q, name, owner) = (self.id, self.name.to_string(), self.engine.owner);
        let result = self.engine.call({
            let locks = locks.clone();
            move |b| {
                for &(id, token) in &locks {
                    b.check_lock(id, token)?;
                }
                for &(id, token) in &locks {
                    b.settle(id, token, &crate::engine::batch::Settle::Complete)?;
                }
                b.receive(q, &name, owner, max)
            }
        });
        let got = match result {
            Ok(got) => got,
            Err(e) => {
                let _ = crate::received::abandon_locks(&self.engine, locks);
                return Err(e);
            }
        };
        if !got.is_empty() || timeout.is_zero() {
            return Ok(got.into_iter().map(|l| self.wrap(l)).collect());
        }
        let got = self.engine.receive(self.id, &self.name, max, deadline)?;
        Ok(got.into_iter().map(|l| self.wrap(l)).collect())
    }

    /// Exact counts. Time-driven changes (expired locks and messages, due scheduled messages)
    /// are applied first, so the counts are true as of this call.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the queue was deleted.
    pub fn stats(&self) -> Result<QueueStats> {
        let (q, peer, kind, name) = (self.id, self.peer, self.kind, self.name.to_string());
        self.engine.call(move |b| {
            if b.queue(q)?.is_none() {
                return Err(Error::QueueNotFound(name));
            }
            let c = b.counters(q)?;
            let dead_lettered = match kind {
                QueueKind::Normal => b.counters(peer)?.total(),
                QueueKind::DeadLetter => 0,
            };
            Ok(QueueStats {
                active: c.active,
                locked: c.locked,
                scheduled: c.scheduled,
                dead_lettered,
                bytes: c.bytes,
            })
        })
    }

    /// Messages receivable now (`stats().active`).
    ///
    /// # Errors
    ///
    /// As [`Queue::stats`].
    pub fn len(&self) -> Result<u64> {
        Ok(self.stats()?.active)
    }

    /// Whether no message is receivable now.
    ///
    /// # Errors
    ///
    /// As [`Queue::stats`].
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Removes every message of this queue (receivable, scheduled and locked; holders of locks
    /// get `LockLost`). The dead-letter queue is left alone. Returns how many were removed.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the queue was deleted.
    pub fn purge(&self) -> Result<u64> {
        let (q, name) = (self.id, self.name.to_string());
        self.engine.call(move |b| {
            if b.queue(q)?.is_none() {
                return Err(Error::QueueNotFound(name));
            }
            b.purge(q)
        })
    }

    /// This queue's dead-letter queue: receivable like any queue; its messages carry
    /// [`DeadLetterInfo`](crate::DeadLetterInfo) and can be resubmitted with
    /// [`Received::resubmit`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] on a dead-letter queue (they have none).
    pub fn dead_letters(&self) -> Result<Queue> {
        if self.kind == QueueKind::DeadLetter {
            return Err(Error::invalid(
                "a dead-letter queue has no dead-letter queue",
            ));
        }
        let name = dead_letter_name(&self.name);
        let rec = self
            .engine
            .read(|t| read::queue_by_name(t, &name))?
            .ok_or_else(|| Error::QueueNotFound(name.clone()))?;
        Ok(Queue::new(self.engine.clone(), &name, rec))
    }

    /// The name of the source queue, for a dead-letter queue.
    pub fn source_name(&self) -> Option<&str> {
        self.name
            .strip_suffix(DEAD_LETTER_SUFFIX)
            .filter(|_| self.is_dead_letter_queue())
    }
}

/// Iterator over a queue's receivable messages; see [`Queue::browse`].
#[derive(Debug)]
pub struct Browse {
    engine: Arc<Engine>,
    q: u32,
    after: Option<(u8, u64)>,
    buffer: VecDeque<Envelope>,
    done: bool,
}

const BROWSE_PAGE: usize = 64;

impl Iterator for Browse {
    type Item = Result<Envelope>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buffer.is_empty() && !self.done {
            let (q, after) = (self.q, self.after);
            match self
                .engine
                .read(|t| read::browse_page(t, q, after, BROWSE_PAGE))
            {
                Ok((page, last)) => {
                    self.done = page.len() < BROWSE_PAGE;
                    self.after = last;
                    self.buffer.extend(page);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        self.buffer.pop_front().map(Ok)
    }
}
