//! A message locked by a receiver (peek-lock) and the calls that settle it.

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::clock::{duration_ms, to_system_time};
use crate::engine::{Engine, HeldLock};
use crate::engine::{Locked, Settle};
use crate::error::{Error, Result};
use crate::message::{Envelope, Message, MessageId};

/// A received message, locked for this receiver until it is settled or its lock expires.
///
/// Settle it exactly once: [`complete`](Received::complete) removes it for good;
/// [`abandon`](Received::abandon) returns it to the queue; [`dead_letter`](Received::dead_letter)
/// moves it to the dead-letter queue. Dropping it unsettled abandons it (not done, deliver
/// again). Its delivery count was already incremented and persisted when it was handed out.
///
/// Settling after the lock expired or was taken over fails with [`Error::LockLost`] and changes
/// nothing. Dereferences to the [`Envelope`] for the body and properties.
#[derive(Debug)]
pub struct Received {
    pub(crate) engine: Arc<Engine>,
    pub(crate) envelope: Envelope,
    pub(crate) token: u64,
    pub(crate) locked_until: u64,
    pub(crate) settled: bool,
}

impl Deref for Received {
    type Target = Envelope;
    fn deref(&self) -> &Envelope {
        &self.envelope
    }
}

impl Received {
    pub(crate) fn new(engine: Arc<Engine>, l: Locked) -> Received {
        Received {
            engine,
            envelope: l.envelope,
            token: l.token,
            locked_until: l.locked_until,
            settled: false,
        }
    }

    /// The message (body and properties).
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The lock token: unique in the store for this delivery.
    pub fn lock_token(&self) -> u64 {
        self.token
    }

    /// The lock this receiver holds on the message.
    fn held(&self) -> HeldLock {
        HeldLock {
            id: self.envelope.id.0,
            token: self.token,
        }
    }

    /// When the lock expires unless renewed.
    pub fn locked_until(&self) -> SystemTime {
        to_system_time(self.locked_until)
    }

    fn settle(self, how: Settle) -> Result<(), SettleError> {
        let lock = self.held();
        let r = self.engine.settle_logged(lock, how);
        self.conclude(r.map(drop))
    }

    /// Ends a settle attempt: the message is settled on success, and given back on failure.
    fn conclude<T>(mut self, result: Result<T>) -> Result<T, SettleError> {
        match result {
            Ok(v) => {
                self.settled = true;
                Ok(v)
            }
            Err(error) => {
                // A lost lock has nothing left to release; any other failure (a refused
                // request, a full disk, a closed store) changed nothing, or may not have, and
                // the message comes back so the caller can retry or drop it (which abandons).
                self.settled = error.is_lock_lost();
                Err(SettleError {
                    error,
                    message: Box::new(self),
                })
            }
        }
    }

    /// Removes the message for good (it never reappears).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if the lock expired or was released; nothing changed then. Every
    /// error gives the message back ([`SettleError::into_message`]) still holding its lock
    /// (unless the lock was lost), so a transient failure (`StorageFull`, `Io`) can be retried.
    pub fn complete(self) -> Result<(), SettleError> {
        self.settle(Settle::Complete)
    }

    /// Returns the message to the queue for another delivery (or to the dead-letter queue if it
    /// has used up `max_deliveries`).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`].
    pub fn abandon(self) -> Result<(), SettleError> {
        self.settle(Settle::Abandon { delay_ms: 0 })
    }

    /// Returns the message to the head of its queue *without* counting this delivery: for a
    /// forwarder that took the message and never handed it on (a bridge stopping before its
    /// broker confirmed), so that stopping and starting again never uses up `max_deliveries`.
    /// A handler that looked at the message and failed should [`abandon`](Self::abandon).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if the lock is already gone (the message is back anyway).
    pub fn release(self) -> Result<(), SettleError> {
        let lock = self.held();
        let r = self.engine.call(move |b| b.release_lock(lock));
        self.conclude(r)
    }

    /// Returns the message to the queue, receivable again only after `delay` (retry backoff).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`].
    pub fn abandon_after(self, delay: Duration) -> Result<(), SettleError> {
        self.settle(Settle::Abandon {
            delay_ms: duration_ms(delay),
        })
    }

    /// Moves the message to the dead-letter queue with a reason (at most
    /// [`MAX_REASON_LEN`](crate::MAX_REASON_LEN) bytes) and a description (cut to
    /// [`MAX_DESCRIPTION_LEN`](crate::MAX_DESCRIPTION_LEN) bytes).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`]; [`Error::InvalidArgument`] for a message already in a dead-letter
    /// queue or a reason that is too long. As for [`Received::complete`], errors give the
    /// message back.
    pub fn dead_letter(self, reason: &str, description: &str) -> Result<(), SettleError> {
        self.settle(Settle::DeadLetter {
            reason: reason.to_owned(),
            description: description.to_owned(),
        })
    }

    /// Moves a message received from a dead-letter queue back to its source queue, with its
    /// delivery count reset and its dead-letter details cleared.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`]; [`Error::InvalidArgument`] if it was not received from a
    /// dead-letter queue.
    pub fn resubmit(self) -> Result<(), SettleError> {
        self.settle(Settle::Resubmit)
    }

    /// Defers the message: it stays in its queue, set aside, never delivered by a normal
    /// receive again, until it is received by id ([`Queue::receive_by_id`]): the Service Bus
    /// workflow-step pattern. It keeps its time to live and delivery count, counts as
    /// [`QueueStats::deferred`](crate::QueueStats::deferred), and a later lock on it that ends
    /// unsettled (abandoned, expired) leaves it deferred again.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// # let q = store.queue("orders")?;
    /// # use std::time::Duration;
    /// let id = q.send("order 7: wait for payment")?;
    /// q.receive(Duration::ZERO)?.unwrap().defer()?;
    /// assert!(q.receive(Duration::ZERO)?.is_none());           // set aside
    /// assert_eq!(q.stats()?.deferred, 1);
    /// let later = q.receive_by_id(id, Duration::ZERO)?.unwrap(); // the payment arrived
    /// later.complete()?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// [`Queue::receive_by_id`]: crate::Queue::receive_by_id
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`]; storage errors. As for [`Received::complete`], errors give the
    /// message back.
    pub fn defer(self) -> Result<(), SettleError> {
        self.settle(Settle::Defer)
    }

    /// Extends the lock by the queue's `lock_duration` from now; returns the new expiry.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] if the lock is already gone.
    pub fn renew_lock(&mut self) -> Result<SystemTime> {
        let lock = self.held();
        let until = self.engine.renew_logged(lock)?;
        self.locked_until = until;
        Ok(to_system_time(until))
    }

    /// Answers the message and completes it, in one commit: `reply` goes to the queue named by
    /// the message's `reply_to`, with its correlation id set to the message's correlation id
    /// (or, if it has none, to its id in decimal) — what [`Queue::request`] waits for. Returns
    /// the reply's id.
    ///
    /// [`Queue::request`]: crate::Queue::request
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the message has no `reply_to`;
    /// [`Error::QueueNotFound`] when that queue does not exist (any more); [`Error::LockLost`].
    /// Nothing is sent unless the completion commits; errors give the message back.
    pub fn reply(self, reply: impl Into<Message>) -> Result<MessageId, SettleError> {
        let (to, m) = match answer(&self.envelope, reply.into()) {
            Ok(pair) => pair,
            Err(error) => return self.conclude(Err(error)),
        };
        let r = self.engine.reply(self.held(), to, m);
        self.conclude(r)
    }

    /// Records progress keys on the message (work items done: "recipient 17 notified"), so that
    /// a redelivery after an abandon, a lock expiry or a crash can skip them; renews the lock in
    /// the same commit. Returns the new lock expiry. The keys go with the message when it is
    /// completed or removed.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`]; [`Error::InvalidArgument`] for a key that is empty or over 1 KiB.
    pub fn mark_done<I>(&mut self, keys: I) -> Result<SystemTime>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        let lock = self.held();
        let until = self.engine.call(move |b| b.mark_done(lock, &keys))?;
        self.locked_until = until;
        Ok(to_system_time(until))
    }

    /// The progress keys recorded on this message by [`Received::mark_done`], in this delivery
    /// or earlier ones, read in one lookup.
    ///
    /// # Errors
    ///
    /// Storage errors.
    pub fn done_keys(&self) -> Result<std::collections::BTreeSet<String>> {
        let id = self.envelope.id.0;
        let keys = self
            .engine
            .read(|t| crate::engine::queries::checkpoints(t, id))?;
        Ok(keys.into_iter().collect())
    }

    /// The id of the message.
    pub fn message_id(&self) -> MessageId {
        self.envelope.id
    }

    /// Marks the message as settled elsewhere (e.g. enlisted in a transaction) so `Drop` leaves
    /// it alone; returns its lock.
    pub(crate) fn take_lock(mut self) -> HeldLock {
        self.settled = true;
        self.held()
    }
}

/// The reply to `request` and the queue it goes to: the request's `reply_to`, and the reply
/// with its correlation id set to the request's correlation id (or, if it has none, to its id
/// in decimal) — what [`Queue::request`](crate::Queue::request) waits for. The one place that
/// rule is written, for every way of answering (a received message, a transaction, a processor
/// delivery).
///
/// # Errors
///
/// [`Error::InvalidArgument`] when the request has no `reply_to`, or the reply is invalid.
pub(crate) fn answer(request: &Envelope, mut reply: Message) -> Result<(String, Message)> {
    let to = request
        .reply_to()
        .ok_or_else(|| Error::invalid("the message has no reply_to queue to answer"))?;
    let correlation = request
        .correlation_id()
        .map_or_else(|| request.id().0.to_string(), str::to_owned);
    reply.props.correlation_id = Some(correlation);
    reply.validate()?;
    Ok((to.to_owned(), reply))
}

/// A settle call ([`Received::complete`], `abandon`, `dead_letter`, …) that failed, with the
/// message given back — as crossbeam's `SendError` gives back what could not be sent.
///
/// Unless the error is [`Error::LockLost`], the message still holds its lock: retry the settle,
/// or drop the message to abandon it at once. `?` turns it into an [`Error`].
#[derive(Debug)]
pub struct SettleError {
    error: Error,
    /// Boxed: a `Result` carrying the whole message inline would be large for the `Ok` path.
    message: Box<Received>,
}

impl SettleError {
    /// Why the settle failed.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The stable classification of the error.
    pub fn kind(&self) -> crate::ErrorKind {
        self.error.kind()
    }

    /// True for [`Error::LockLost`]: the message is gone from this receiver.
    pub fn is_lock_lost(&self) -> bool {
        self.error.is_lock_lost()
    }

    /// The message, to retry the settle on (it still holds its lock unless the lock was lost).
    pub fn into_message(self) -> Received {
        *self.message
    }

    /// The error and the message.
    pub fn into_parts(self) -> (Error, Received) {
        (self.error, *self.message)
    }

    /// The error alone; the message is dropped (which abandons it if it still holds its lock).
    pub fn into_error(self) -> Error {
        self.error
    }
}

impl std::fmt::Display for SettleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for SettleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<SettleError> for Error {
    fn from(e: SettleError) -> Error {
        e.error
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        if !self.settled {
            let lock = self.held();
            // Not done: release the lock now rather than make others wait for its expiry.
            self.engine.call_detached(move |b| {
                match b.settle(lock, &Settle::Abandon { delay_ms: 0 }) {
                    Ok(_) | Err(Error::LockLost(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            });
        }
    }
}

/// Completes every message in one commit, all or none; if one lock was lost, the others are
/// returned to their queues.
pub(crate) fn complete_all(engine: &Arc<Engine>, messages: Vec<Received>) -> Result<()> {
    if messages.iter().any(|m| !Arc::ptr_eq(&m.engine, engine)) {
        return Err(Error::InvalidArgument(
            "a message belongs to another store than this queue".into(),
        ));
    }
    engine.complete_all(messages.into_iter().map(Received::take_lock).collect())
}
