//! What a transaction sends: messages, pieces of a job, replies and topic publishes, all
//! applied by its commit.

use super::Transaction;
use crate::engine::QueueKind;
use crate::engine::queries as read;
use crate::engine::validate_message;
use crate::error::{Error, Result};
use crate::job::Job;
use crate::message::{Envelope, Message, MessageId, Sent};
use crate::queue::Queue;
#[cfg(doc)]
use crate::received::Received;
use crate::topic::Topic;

impl Transaction {
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
}
