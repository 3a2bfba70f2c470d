//! What a handler holds: its message, and the processor's lock on it with the calls a handler
//! makes under that lock while it runs — checkpoints, a renewal, a reply, a dead-letter request.
//!
//! The lock stays the processor's: one token, renewed by the watchdog and by the handler's own
//! `mark_done` and `renew_lock` alike (the engine keeps the token on both), and settled by the
//! worker when the handler returns. A handler's asks are collected in a [`Lease`] that the
//! worker closes when the handler returns, so that nothing a handler (or a thread it started,
//! or a binding's message handle it kept) does afterwards can touch the message.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use serde::de::DeserializeOwned;

use crate::clock::{Clock, to_system_time};
use crate::engine::{Engine, HeldLock, queries};
use crate::error::{Error, Result};
use crate::message::{Envelope, MAX_REASON_LEN, Message, MessageId};
use crate::sync::{Mutex, MutexGuard};
use crate::tx::Transaction;

/// The lock state of one locked message, shared by its worker, its [`Delivery`] and the
/// watchdog that renews it.
#[derive(Debug)]
pub(super) struct Track {
    pub(super) lock: HeldLock,
    /// Store-clock milliseconds.
    pub(super) locked_until: AtomicU64,
    pub(super) lock_lost: AtomicBool,
    pub(super) timed_out: AtomicBool,
}

impl Track {
    pub(super) fn new(lock: HeldLock, locked_until: u64) -> Track {
        Track {
            lock,
            locked_until: AtomicU64::new(locked_until),
            lock_lost: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
        }
    }

    /// Notes what a renewal of the lock (the watchdog's, or the handler's own `mark_done` and
    /// `renew_lock`) returned; returns whether the lock is gone. The last result noted wins: a
    /// handler's renewal racing the watchdog's may leave the earlier of two expiries here
    /// until the watchdog's next renewal, which only makes `lock_lost` err early for a moment,
    /// never a settle (the store checks the lock itself).
    pub(super) fn note(&self, r: &Result<u64>) -> bool {
        match r {
            Ok(until) => {
                self.locked_until.store(*until, Ordering::Release);
                false
            }
            Err(Error::LockLost(_) | Error::Closed | Error::Forked { .. }) => {
                self.lock_lost.store(true, Ordering::Release);
                true
            }
            Err(_) => false,
        }
    }
}

/// What a handler asked for, until it returned.
#[derive(Default)]
struct Asks {
    dead_letter: Option<(String, String)>,
    /// The reply's own transaction (a send, nothing held), committed with the completion.
    reply: Option<Transaction>,
}

/// The processor's lock on one delivery, as its handler may use it while it runs. Shared by the
/// worker, the [`Delivery`] and a binding's lent message handle (`binding::LentDelivery`);
/// closed by the worker when the handler returns.
pub(crate) struct Lease {
    envelope: Envelope,
    track: Arc<Track>,
    clock: Arc<dyn Clock>,
    engine: Arc<Engine>,
    /// Held during each call, so that once `close` returned no call is still under way.
    asks: Mutex<Asks>,
    /// Set (under `asks`) when the handler returned: the processor settles the message from
    /// then on. Readable without waiting for a call under way.
    closed: AtomicBool,
}

impl Lease {
    pub(super) fn new(
        envelope: Envelope,
        track: Arc<Track>,
        clock: Arc<dyn Clock>,
        engine: Arc<Engine>,
    ) -> Lease {
        Lease {
            envelope,
            track,
            clock,
            engine,
            asks: Mutex::new(Asks::default()),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The asks, while the handler runs. The store is checked first: in a forked child nothing
    /// here may be locked (a parent thread may have held the mutex at the fork).
    fn open(&self) -> Result<MutexGuard<'_, Asks>> {
        self.engine.check_open()?;
        let asks = self.asks.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!(
                "message {} was handed back to the processor: its handler has returned, and the processor settles it",
                self.envelope.id()
            )));
        }
        Ok(asks)
    }

    /// Ends the handler's part: returns its dead-letter request and its reply.
    pub(super) fn close(&self) -> (Option<(String, String)>, Option<Transaction>) {
        let mut asks = self.asks.lock();
        self.closed.store(true, Ordering::Release);
        (asks.dead_letter.take(), asks.reply.take())
    }

    /// Whether the handler has returned.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn mark_done(&self, keys: Vec<String>) -> Result<SystemTime> {
        let _open = self.open()?;
        let lock = self.track.lock;
        let r = self.engine.call(move |b| b.mark_done(lock, &keys));
        self.track.note(&r);
        r.map(to_system_time)
    }

    pub(crate) fn done_keys(&self) -> Result<BTreeSet<String>> {
        let _open = self.open()?;
        let id = self.track.lock.id;
        let keys = self.engine.read(|t| queries::checkpoints(t, id))?;
        Ok(keys.into_iter().collect())
    }

    pub(crate) fn renew_lock(&self) -> Result<SystemTime> {
        let _open = self.open()?;
        let lock = self.track.lock;
        let r = self.engine.call(move |b| b.renew(lock));
        self.track.note(&r);
        r.map(to_system_time)
    }

    pub(crate) fn reply(&self, reply: Message) -> Result<MessageId> {
        let mut asks = self.open()?;
        if asks.reply.is_some() {
            return Err(Error::InvalidArgument(format!(
                "message {} was already answered: a delivery takes one reply",
                self.envelope.id()
            )));
        }
        let mut tx = Transaction::new(self.engine.clone());
        let id = tx.reply(&self.envelope, reply)?;
        asks.reply = Some(tx);
        Ok(id)
    }

    pub(crate) fn dead_letter(&self, reason: &str, description: &str) -> Result<()> {
        // Refused now rather than when the handler returned, where nobody would see it.
        if reason.len() > MAX_REASON_LEN {
            return Err(Error::InvalidArgument(format!(
                "a dead-letter reason is at most {MAX_REASON_LEN} bytes, got {}",
                reason.len()
            )));
        }
        let mut asks = self.open()?;
        if asks.dead_letter.is_some() {
            return Err(Error::InvalidArgument(format!(
                "message {} is already marked for the dead-letter queue",
                self.envelope.id()
            )));
        }
        asks.dead_letter = Some((reason.to_owned(), description.to_owned()));
        Ok(())
    }

    pub(crate) fn lock_watch(&self) -> LockWatch {
        LockWatch {
            track: self.track.clone(),
            clock: self.clock.clone(),
        }
    }

    pub(crate) fn locked_until(&self) -> SystemTime {
        to_system_time(self.track.locked_until.load(Ordering::Acquire))
    }
}

/// One message handed to a handler, locked for it while the handler runs.
///
/// Dereferences to the [`Envelope`]. The processor settles it from the handler's result (and
/// keeps renewing its lock meanwhile); the handler may ask for a dead letter
/// ([`dead_letter`](Self::dead_letter)), record checkpoints
/// ([`mark_done`](Self::mark_done), [`done_keys`](Self::done_keys)), renew the lock itself
/// ([`renew_lock`](Self::renew_lock)) and answer a request ([`reply`](Self::reply)), all on
/// the processor's lock. These calls work while the handler runs; once it has returned they
/// fail with [`Error::InvalidArgument`].
pub struct Delivery {
    lease: Arc<Lease>,
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.envelope().id())
            .field("delivery_count", &self.envelope().delivery_count())
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Deref for Delivery {
    type Target = Envelope;
    fn deref(&self) -> &Envelope {
        self.lease.envelope()
    }
}

impl Delivery {
    pub(super) fn new(lease: Arc<Lease>) -> Delivery {
        Delivery { lease }
    }

    /// The lease behind this delivery, for a binding's lent message handle.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The message.
    pub fn envelope(&self) -> &Envelope {
        self.lease.envelope()
    }

    /// Whether the handler should give up: its lock was lost (renewal failed, or the lock
    /// expired with renewal off or past `max_auto_renew`), or its time limit passed. The
    /// processor will not complete the message in either case, so further work is wasted.
    pub fn is_cancelled(&self) -> bool {
        self.lease.lock_watch().is_cancelled()
    }

    /// Whether the lock is gone: a renewal was refused, or the lock's expiry passed.
    pub fn lock_lost(&self) -> bool {
        self.lease.lock_watch().lock_lost()
    }

    /// When the lock expires unless renewed again (by the processor, or by
    /// [`renew_lock`](Self::renew_lock) and [`mark_done`](Self::mark_done)).
    pub fn locked_until(&self) -> SystemTime {
        self.lease.locked_until()
    }

    /// A handle that answers [`lock_lost`](Self::lock_lost) and
    /// [`is_cancelled`](Self::is_cancelled) for this delivery from anywhere, for as long as it
    /// is kept: for a binding whose handler outlives the borrow of the `Delivery`, or a thread
    /// the handler started.
    pub fn lock_watch(&self) -> LockWatch {
        self.lease.lock_watch()
    }

    /// Decodes the body written by a [`TypedQueue`](crate::TypedQueue), as
    /// [`decode_typed_body`](crate::decode_typed_body) does (JSON or bincode envelopes, legacy
    /// bincode bodies).
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] when the body is not a valid encoding of `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        crate::typed_body::decode_typed_body(self.envelope().body())
    }

    /// Asks the processor to move the message to the dead-letter queue when the handler
    /// returns, whatever it returns, with `reason` (at most
    /// [`MAX_REASON_LEN`](crate::MAX_REASON_LEN) bytes) and `description` (cut to
    /// [`MAX_DESCRIPTION_LEN`](crate::MAX_DESCRIPTION_LEN) bytes). A [`reply`](Self::reply) is
    /// then not sent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when a dead letter was already requested (single use), the
    /// reason is too long, or the handler has returned.
    pub fn dead_letter(&self, reason: &str, description: &str) -> Result<()> {
        self.lease.dead_letter(reason, description)
    }

    /// Records progress keys on the message (work items done: "recipient 17 notified"), as
    /// [`Received::mark_done`](crate::Received::mark_done) does, under the processor's lock:
    /// the keys and a renewal of the lock are written at once, in one commit, and the
    /// processor goes on renewing the same lock. A redelivery — after the handler failed, the
    /// lock was lost, or the process died — reads them with [`done_keys`](Self::done_keys) and
    /// skips that work. For a transactional handler too the keys are written at once, not with
    /// the handler's transaction: they record work done outside it, which its abort cannot
    /// take back. The completion removes them with the message. Returns the new lock expiry.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// # let fanout = store.queue("fanout")?;
    /// # fanout.send("notify 3 users")?;
    /// # let (finished, handled) = std::sync::mpsc::channel();
    /// let p = postbox::Processor::builder(&fanout).start(move |d| -> postbox::Result<()> {
    ///     let done = d.done_keys()?;                 // what an earlier delivery finished
    ///     for user in ["ann", "bob", "eve"].into_iter().filter(|u| !done.contains(*u)) {
    ///         // notify(user) ...
    ///         d.mark_done([user])?;                  // persisted at once
    ///     }
    /// #   let _ = finished.send(());
    ///     Ok(())                                     // the completion removes the keys
    /// })?;
    /// # handled.recv().unwrap();
    /// p.shutdown(std::time::Duration::from_secs(5));
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] (nothing recorded; [`lock_lost`](Self::lock_lost) says true from
    /// then on); [`Error::InvalidArgument`] for a key that is empty or over 1 KiB, or when the
    /// handler has returned; storage errors.
    pub fn mark_done<I>(&self, keys: I) -> Result<SystemTime>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.lease
            .mark_done(keys.into_iter().map(Into::into).collect())
    }

    /// The progress keys recorded on the message by [`mark_done`](Self::mark_done) (or by any
    /// receiver's `mark_done`), in this delivery or earlier ones, read in one lookup.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the handler has returned; storage errors.
    pub fn done_keys(&self) -> Result<BTreeSet<String>> {
        self.lease.done_keys()
    }

    /// Extends the processor's lock by the queue's `lock_duration` from now, at once (the
    /// processor renews it anyway, up to `max_auto_renew` after the receive: this is for a
    /// handler that runs longer); returns the new expiry.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`]; [`Error::InvalidArgument`] when the handler has returned; storage
    /// errors.
    pub fn renew_lock(&self) -> Result<SystemTime> {
        self.lease.renew_lock()
    }

    /// Answers the message when the processor completes it: `reply` goes to the queue named by
    /// the message's `reply_to`, with its correlation id set to the message's correlation id
    /// (or, if it has none, to its id in decimal) — what [`Queue::request`](crate::Queue::request)
    /// waits for — in the commit that completes the message (for a transactional handler, the
    /// handler's transaction: as [`Transaction::reply`]). Nothing is sent if the handler fails,
    /// asks for a dead letter, passes its time limit or loses the lock: the message is retried
    /// and answered by its next delivery. Returns the id the reply will have. One reply per
    /// delivery.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let service = store.queue("resize")?;
    /// let p = postbox::Processor::builder(&service).start(|d| -> postbox::Result<()> {
    ///     d.reply(format!("resized {}", String::from_utf8_lossy(d.body())).as_str())?;
    ///     Ok(())
    /// })?;
    /// let reply = service.request("42.png", std::time::Duration::from_secs(5))?.unwrap();
    /// assert_eq!(reply.body(), b"resized 42.png");
    /// p.shutdown(std::time::Duration::from_secs(5));
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the message has no `reply_to`, the reply is invalid, a
    /// reply was already given, or the handler has returned; [`Error::QueueNotFound`] when the
    /// `reply_to` queue does not exist; [`Error::MessageTooLarge`] against that queue's limit.
    /// A reply queue deleted or full by the time of the commit fails the completion: the
    /// message is returned to its queue and delivered again.
    pub fn reply(&self, reply: impl Into<Message>) -> Result<MessageId> {
        self.lease.reply(reply.into())
    }
}

/// The lock state of one [`Delivery`], readable apart from it (see [`Delivery::lock_watch`]).
#[derive(Clone)]
pub struct LockWatch {
    track: Arc<Track>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for LockWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockWatch")
            .field("lock_lost", &self.lock_lost())
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl LockWatch {
    /// As [`Delivery::is_cancelled`].
    pub fn is_cancelled(&self) -> bool {
        self.lock_lost() || self.track.timed_out.load(Ordering::Acquire)
    }

    /// As [`Delivery::lock_lost`].
    pub fn lock_lost(&self) -> bool {
        self.track.lock_lost.load(Ordering::Acquire)
            || self.clock.now_ms() >= self.track.locked_until.load(Ordering::Acquire)
    }
}
