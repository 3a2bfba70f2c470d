//! Queue handles: send, peek, browse, receive, stats, purge.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::queries as read;
use crate::engine::{DEAD_LETTER_SUFFIX, Locked, Select, dead_letter_name, journal_name};
use crate::engine::{Engine, HeldLock};
use crate::engine::{QueueKind, QueueRecord};
use crate::error::{Error, Result};
use crate::message::{Envelope, Message, MessageId, MessageState, Sent};
use crate::options::QueueOptions;
use crate::received::Received;

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
    /// Set aside with [`Received::defer`]: receivable by id only.
    pub deferred: u64,
    /// In this queue's dead-letter queue (0 for a dead-letter queue itself).
    pub dead_lettered: u64,
    /// Message bytes held by the queue (active, locked, scheduled and deferred).
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
}

impl Queue {
    pub(crate) fn new(engine: Arc<Engine>, name: &str, rec: QueueRecord) -> Queue {
        Queue {
            engine,
            name: name.into(),
            id: rec.id,
            peer: rec.peer,
            kind: rec.kind,
        }
    }

    /// Opens existing queue `name` (not a topic or collator).
    pub(crate) fn open_existing(engine: &Arc<Engine>, name: &str) -> Result<Queue> {
        match engine.read(|t| read::queue_by_name(t, name))? {
            Some(rec)
                if matches!(
                    rec.kind,
                    QueueKind::Normal | QueueKind::DeadLetter | QueueKind::Journal
                ) =>
            {
                Ok(Queue::new(engine.clone(), name, rec))
            }
            _ => Err(Error::QueueNotFound(name.to_owned())),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The queue's options as stored now (another handle or process may have changed them
    /// since this handle was opened; every decision uses the stored ones).
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the queue was deleted; storage errors.
    pub fn options(&self) -> Result<QueueOptions> {
        let (q, name) = (self.id, self.name.clone());
        self.engine
            .read(|t| read::queue_by_id(t, q))?
            .map(|rec| QueueOptions::from(&rec.options))
            .ok_or_else(|| Error::QueueNotFound(name.to_string()))
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
        m.validate()?;
        let (q, name) = (self.id, self.name.to_string());
        let sent = self.engine.call(move |b| b.send_one(q, &name, m))?;
        Ok(sent.id)
    }

    /// [`Queue::send`], saying whether the message was a duplicate: its `message_key` was in
    /// the queue's dedup window, so nothing was stored and the id is the first message's.
    ///
    /// # Errors
    ///
    /// As [`Queue::send`].
    pub fn send_checked(&self, message: impl Into<Message>) -> Result<Sent> {
        let m = message.into();
        m.validate()?;
        let (q, name) = (self.id, self.name.to_string());
        self.engine.call(move |b| b.send_one(q, &name, m))
    }

    /// [`Queue::send_batch`], saying of each message whether it was a duplicate.
    ///
    /// # Errors
    ///
    /// As [`Queue::send`].
    pub fn send_batch_checked<I>(&self, messages: I) -> Result<Vec<Sent>>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        let msgs: Vec<Message> = messages.into_iter().map(Into::into).collect();
        for m in &msgs {
            m.validate()?;
        }
        let (q, name) = (self.id, self.name.to_string());
        self.engine.call(move |b| b.send_detailed(q, &name, msgs))
    }

    /// Sends `message` as a request and waits up to `timeout` for its reply: the message goes
    /// out with `reply_to` set to this store handle's reply queue (a temporary queue, created on
    /// first use) and a fresh correlation id (unless it has one), and the first message on the
    /// reply queue with that correlation id is received, completed and returned. Replies to
    /// other requests, from any thread, stay for their own requesters. `None` when no reply
    /// came in time. A reply that comes later is dropped: the handle's next request that looks
    /// at the reply queue removes every reply no waiting request expects, so late replies
    /// never pile up in front of later ones.
    ///
    /// The responder answers with [`Received::reply`], which sets the correlation id.
    ///
    /// # Errors
    ///
    /// As [`Queue::send`] and [`Queue::receive`].
    pub fn request(
        &self,
        message: impl Into<Message>,
        timeout: Duration,
    ) -> Result<Option<Envelope>> {
        let deadline = Instant::now().checked_add(timeout);
        let sent = self.send_request(message.into())?;
        self.receive_reply(&sent, deadline)
    }

    /// The first half of [`Queue::request`]: sends the request, registered as waiting for its
    /// reply until the result is dropped.
    pub(crate) fn send_request(&self, mut m: Message) -> Result<SentRequest> {
        let replies = self.engine.reply_queue()?;
        let correlation = m
            .props
            .correlation_id
            .get_or_insert_with(|| self.engine.new_correlation_id())
            .clone();
        // Before the send: its reply cannot come earlier, so no request drops it meanwhile.
        let awaiting = self.engine.await_reply(correlation);
        m.props.reply_to = Some(replies.1.clone());
        self.send(m)?;
        Ok(SentRequest { replies, awaiting })
    }

    /// The second half of [`Queue::request`]: waits until `deadline` for the reply of `sent`;
    /// receives, completes and returns it.
    pub(crate) fn receive_reply(
        &self,
        sent: &SentRequest,
        deadline: Option<Instant>,
    ) -> Result<Option<Envelope>> {
        let (q, name) = (sent.replies.0, &sent.replies.1);
        match self
            .engine
            .receive_reply(q, name, &sent.awaiting, deadline)?
        {
            None => Ok(None),
            Some(l) => {
                let r = self.wrap(l);
                let env = r.envelope.clone();
                r.complete()
                    .map_err(crate::received::SettleError::into_error)?;
                Ok(Some(env))
            }
        }
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
            m.validate()?;
        }
        let (q, name) = (self.id, self.name.to_string());
        self.engine.call(move |b| b.send(q, &name, msgs))
    }

    /// The message at the head of the queue (the next one `receive` would take), without
    /// locking it. A message whose lock expired or whose scheduled time came counts as
    /// receivable, as it does for `receive`, even before any write has put it back.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the queue was deleted; storage errors.
    pub fn peek(&self) -> Result<Option<Envelope>> {
        let (q, name) = (self.id, self.name.clone());
        let now = self.engine.clock.now_ms();
        self.engine
            .read(|t| read::browse_next(t, q, &name, None, now))
            .map(|next| next.map(|(env, _)| env))
    }

    /// Iterates over the receivable messages in delivery order (priority, then send order),
    /// without locking them: what successive receives would take. Each step reads a fresh
    /// snapshot, so the iteration reflects concurrent changes (a message completed or purged
    /// meanwhile is not returned) and never blocks writers. A step on a deleted queue yields
    /// [`Error::QueueNotFound`].
    pub fn browse(&self) -> Browse {
        Browse {
            engine: self.engine.clone(),
            q: self.id,
            name: self.name.clone(),
            after: None,
            done: false,
        }
    }

    /// Iterates over every message of the queue, whatever its state, in id order (send order;
    /// a dead letter keeps the id it had in its source queue), each with its
    /// [`MessageState`]: receivable, locked, scheduled and deferred ones alike, for an export
    /// or an inspection that must see everything. Nothing is locked or changed. Like
    /// [`Queue::browse`], each step reads a fresh snapshot and resumes after the last id
    /// returned, so the iteration reflects concurrent changes and never blocks writers: a
    /// message settled before the iteration reaches it is not returned, one sent meanwhile is
    /// (ids grow). Each state is the one [`Queue::stats`] counts the message in (see
    /// [`MessageState`]); a message whose deliveries or time to live ran out is still listed
    /// until a write moves it to the dead-letter queue. A dead-letter queue
    /// ([`Queue::dead_letters`]) lists its dead letters with their state there.
    ///
    /// Each step costs a read of the ids after the last one up to the next message of this
    /// queue: the messages of other queues in between are skipped, so a whole iteration reads
    /// every message id of the store once.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::MessageState;
    /// let q = store.queue("jobs")?;
    /// q.send("a")?;
    /// q.send("b")?;
    /// let held = q.try_receive()?.expect("a message");
    /// let states: Vec<_> = q
    ///     .browse_all()
    ///     .map(|m| m.map(|(env, state)| (env.body().to_vec(), state)))
    ///     .collect::<postbox::Result<_>>()?;
    /// assert_eq!(
    ///     states,
    ///     [(b"a".to_vec(), MessageState::Locked), (b"b".to_vec(), MessageState::Active)]
    /// );
    /// # drop(held);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// A step yields [`Error::QueueNotFound`] once the queue was deleted, [`Error::Closed`]
    /// once the store was closed, and storage errors (`Corrupted` for a damaged record); the
    /// iteration ends after an error.
    pub fn browse_all(&self) -> BrowseAll {
        BrowseAll {
            engine: self.engine.clone(),
            q: self.id,
            name: self.name.clone(),
            after: None,
            done: false,
        }
    }

    /// Looks a message of this queue up by id, whatever its state, without locking it; `None`
    /// when the queue has no such message. [`Queue::get_with_state`] also says its state.
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn get(&self, id: MessageId) -> Result<Option<Envelope>> {
        Ok(self.get_with_state(id)?.map(|(env, _)| env))
    }

    /// [`Queue::get`], with the message's state in the queue: active, locked (by any
    /// receiver), scheduled or deferred — the count of [`Queue::stats`] it is in, by the rule
    /// [`Queue::browse_all`] applies (an expired lock or a due scheduled message is already
    /// `Active`; a dead letter is `Active` in its dead-letter queue, or `Locked` while held).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::MessageState;
    /// let q = store.queue("jobs")?;
    /// let id = q.send("work")?;
    /// let held = q.receive(std::time::Duration::ZERO)?.expect("a message");
    /// assert_eq!(q.get_with_state(id)?.map(|(_, s)| s), Some(MessageState::Locked));
    /// held.defer()?;
    /// assert_eq!(q.get_with_state(id)?.map(|(_, s)| s), Some(MessageState::Deferred));
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn get_with_state(&self, id: MessageId) -> Result<Option<(Envelope, MessageState)>> {
        let name = self.name.clone();
        let now = self.engine.clock.now_ms();
        self.engine
            .read(|t| read::get(t, id.0, now))
            .map(|e| e.filter(|(e, _)| *e.queue() == *name))
    }

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
        let got = self.engine.receive(self.id, &self.name, 1, deadline)?;
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
            .receive_selected(self.id, &self.name, select, deadline)?;
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
        let (completed, got) = self.engine.then_receive(
            {
                let locks = locks.clone();
                move |b| b.complete_all(&locks)
            },
            self.id,
            &self.name,
            max,
        );
        if let Err(e) = completed {
            // Nothing was completed: the rest of `done`, and whatever the same commit locked,
            // go back to the queue now.
            let mut back = locks;
            back.extend(got.into_iter().flatten().map(|l| HeldLock {
                id: l.envelope.id().get(),
                token: l.token,
            }));
            let _ = self.engine.abandon_all(back);
            return Err(e);
        }
        let got = got?;
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
            // A batch sweeps a bounded number of due entries; counts must not lag behind a
            // large backlog of expiries.
            b.sweep_all()?;
            let c = b.counters(q)?;
            let dead_lettered = match kind {
                QueueKind::Normal => b.counters(peer)?.total(),
                QueueKind::DeadLetter
                | QueueKind::Topic
                | QueueKind::Collator
                | QueueKind::Journal => 0,
            };
            Ok(QueueStats {
                active: c.active,
                locked: c.locked,
                scheduled: c.scheduled,
                deferred: c.deferred,
                dead_lettered,
                bytes: c.bytes,
            })
        })
    }

    /// Messages receivable now ([`QueueStats::active`]) — only those: a queue whose only
    /// message is locked by a receiver (or scheduled, or deferred) has length 0.
    /// [`Queue::stats`] counts every state in one snapshot.
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
        let (q, own) = (self.id, self.name.clone());
        let (source, rec) = self
            .engine
            .read(|t| Ok((read::queue_by_id(t, q)?, read::queue_by_name(t, &name)?)))?;
        match (source, rec) {
            (None, _) => Err(Error::QueueNotFound(own.to_string())),
            (Some(_), Some(rec)) => Ok(Queue::new(self.engine.clone(), &name, rec)),
            // A queue and its dead-letter queue are created and deleted together.
            (Some(_), None) => Err(Error::corrupted(format!(
                "queue {own:?} has no dead-letter queue"
            ))),
        }
    }

    /// This queue's journal: the completed messages it keeps when the `journal` option is set
    /// (MSMQ's journal queue), oldest first within a priority. Browse, peek, get, receive and
    /// purge it like any queue.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::QueueOptions;
    /// let q = store.queue_with("orders", QueueOptions::default().journal(1000))?;
    /// q.send("order 1")?;
    /// q.receive(std::time::Duration::ZERO)?.unwrap().complete()?;
    /// assert_eq!(q.journal()?.len()?, 1);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the queue never had journaling turned on;
    /// [`Error::QueueNotFound`] if it was deleted.
    pub fn journal(&self) -> Result<Queue> {
        let name = journal_name(&self.name);
        let (q, own) = (self.id, self.name.clone());
        let (source, rec) = self
            .engine
            .read(|t| Ok((read::queue_by_id(t, q)?, read::queue_by_name(t, &name)?)))?;
        match (source, rec) {
            (None, _) => Err(Error::QueueNotFound(own.to_string())),
            (Some(_), Some(rec)) => Ok(Queue::new(self.engine.clone(), &name, rec)),
            (Some(_), None) => Err(Error::invalid(format!(
                "queue {own:?} has no journal: set its journal option first"
            ))),
        }
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
    name: Arc<str>,
    after: Option<read::BrowsePosition>,
    done: bool,
}

impl Iterator for Browse {
    type Item = Result<Envelope>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (q, after, name) = (self.q, self.after, self.name.clone());
        let now = self.engine.clock.now_ms();
        match self
            .engine
            .read(|t| read::browse_next(t, q, &name, after, now))
        {
            Ok(Some((env, pos))) => {
                self.after = Some(pos);
                Some(Ok(env))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Iterator over every message of a queue with its state, in id order; see
/// [`Queue::browse_all`].
#[derive(Debug)]
pub struct BrowseAll {
    engine: Arc<Engine>,
    q: u32,
    name: Arc<str>,
    /// The id of the last message returned.
    after: Option<u64>,
    done: bool,
}

impl Iterator for BrowseAll {
    type Item = Result<(Envelope, MessageState)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let (q, after, name) = (self.q, self.after, self.name.clone());
        let now = self.engine.clock.now_ms();
        match self
            .engine
            .read(|t| read::browse_all_next(t, q, &name, after, now))
        {
            Ok(Some((env, state))) => {
                self.after = Some(env.id().get());
                Some(Ok((env, state)))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// A request sent by [`Queue::send_request`] and waiting for its reply (until dropped).
#[derive(Debug)]
pub(crate) struct SentRequest {
    /// The reply queue, `(id, name)`.
    replies: (u32, String),
    awaiting: crate::engine::AwaitingReply,
}

impl SentRequest {
    /// The correlation id the reply will carry.
    pub(crate) fn correlation_id(&self) -> &str {
        self.awaiting.correlation_id()
    }
}
