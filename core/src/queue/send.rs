//! Sending: one message, a batch, and a request awaiting its reply.

use std::time::{Duration, Instant};

use super::Queue;
use crate::engine::QueueRef;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::message::{Envelope, Message, MessageId, Sent};
#[cfg(doc)]
use crate::received::Received;

impl Queue {
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
        Ok(self.send_logical(vec![m], true)?.id)
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
        self.send_logical(vec![m], true)
    }

    /// Sends one message through the pipeline as a logical operation: its one result.
    fn send_logical(&self, m: Vec<Message>, one: bool) -> Result<Sent> {
        self.engine
            .send_logged(QueueRef::new(self.id, &self.name), m, one)?
            .into_iter()
            .next()
            .ok_or_else(|| crate::error::Error::Panic("a send returned no result".into()))
    }

    /// Sends messages through the pipeline as one logical operation: one result each.
    fn send_logical_many(&self, msgs: Vec<Message>) -> Result<Vec<Sent>> {
        self.engine
            .send_logged(QueueRef::new(self.id, &self.name), msgs, false)
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
        self.send_logical_many(msgs)
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
            .receive_reply(QueueRef::new(q, name), &sent.awaiting, deadline)?
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
        Ok(self
            .send_logical_many(msgs)?
            .into_iter()
            .map(|s| s.id)
            .collect())
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
