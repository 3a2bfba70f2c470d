//! A message handle as a binding holds it: the envelope, and where its lock stands. Settles
//! run under the handle's mutex, so a concurrent settle of the same handle waits for the
//! outcome instead of seeing a half-settled state; a settle that fails for any reason but a
//! lost lock gives the lock back to the handle.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::sync::Mutex;

use super::lent::LentDelivery;
use crate::clock::{from_system_time, to_system_time};
use crate::error::{Error, Result};
use crate::message::{Envelope, Message, MessageId, MessageState};
use crate::processor::{Delivery, LockWatch};
use crate::received::{Received, SettleError};

/// Where a message handle stands with respect to its lock. `T` is what a binding keeps to reach
/// the transaction a message belongs to (nothing, in C).
#[derive(Debug)]
pub enum Hold<T> {
    /// Read by peek, browse or get: no lock, nothing to settle. Its state reads as the
    /// message's state in its queue when it was read ([`HeldMessage::read_state`]).
    Unlocked,
    /// Received with peek-lock: this handle holds the lock and settles it once.
    Held(Box<Received>),
    /// Received through, or enlisted in, a transaction: its commit or abort settles it.
    Transaction(T),
    /// Lent to a processor handler: the processor holds the lock and settles the message when
    /// the handler returns; the handle's processor calls (checkpoints, renewal, reply,
    /// dead-letter request) go to its [`LentDelivery`].
    Processor,
    /// Settled; the text says how ("completed", "lock lost", ...).
    Settled(&'static str),
}

impl<T> Hold<T> {
    /// A short name of the state, as bindings report it.
    pub fn state(&self) -> &'static str {
        self.state_with(|_| None)
    }

    /// [`state`](Self::state), asking `finished` whether the transaction behind a link has
    /// finished, and so what became of its messages (`"completed"`, `"abandoned"`, ...):
    /// `None` while it may still settle them. It must not block.
    pub fn state_with(&self, finished: impl FnOnce(&T) -> Option<&'static str>) -> &'static str {
        match self {
            Hold::Unlocked => "unlocked",
            Hold::Held(_) => "locked",
            Hold::Transaction(link) => finished(link).unwrap_or("transaction"),
            Hold::Processor => "processor",
            Hold::Settled(how) => how,
        }
    }
}

/// A message and its lock state, shared by the C and Python message handles.
///
/// Thread-safe. The envelope never changes, so readers never wait for a settle in progress;
/// the lock's expiry is an atomic for the same reason.
#[derive(Debug)]
pub struct HeldMessage<T> {
    envelope: Envelope,
    hold: Mutex<Hold<T>>,
    lock_token: Option<u64>,
    /// Milliseconds since the Unix epoch while a lock is known, 0 otherwise.
    locked_until_ms: AtomicU64,
    opened_by: u32,
    /// The delivery of a handle lent to a processor handler.
    lent: Option<LentDelivery>,
    /// The message's state in its queue when this handle read it (`None`: it was not read
    /// from a queue, e.g. a reply already completed for its requester).
    read_state: Option<MessageState>,
}

impl<T> HeldMessage<T> {
    fn new(
        envelope: Envelope,
        hold: Hold<T>,
        token: Option<u64>,
        until: Option<SystemTime>,
    ) -> Self {
        // Every way a handle holds a lock read the message locked.
        let read_state = Some(match hold {
            Hold::Unlocked => MessageState::Active,
            _ => MessageState::Locked,
        });
        HeldMessage {
            envelope,
            hold: Mutex::new(hold),
            lock_token: token,
            locked_until_ms: AtomicU64::new(until.map_or(0, from_system_time)),
            opened_by: crate::os::process::id(),
            lent: None,
            read_state,
        }
    }

    /// A message read without a lock, in state `state` in its queue: peek and browse read
    /// [`MessageState::Active`] messages, a lookup by id whatever it finds
    /// ([`Queue::get_with_state`](crate::Queue::get_with_state)).
    pub fn read(envelope: Envelope, state: MessageState) -> Self {
        HeldMessage {
            read_state: Some(state),
            ..Self::new(envelope, Hold::Unlocked, None, None)
        }
    }

    /// A message that is no longer in any queue, handed out settled as `how` (a request's
    /// reply, completed for its requester): nothing to settle, and no queue state.
    pub fn settled(envelope: Envelope, how: &'static str) -> Self {
        HeldMessage {
            read_state: None,
            ..Self::new(envelope, Hold::Settled(how), None, None)
        }
    }

    /// The message's state in its queue when this handle read it: peek and browse read active
    /// messages, receives locked ones, a lookup by id whatever it found. `None` for a message
    /// not read from a queue ([`settled`](Self::settled)).
    pub fn read_state(&self) -> Option<MessageState> {
        self.read_state
    }

    /// A message received with peek-lock; the handle holds its lock.
    ///
    /// The lock handed on by [`take`](Self::take) keeps the envelope without its body: the
    /// handle keeps the body, and no settle reads it.
    pub fn received(mut r: Received) -> Self {
        let (token, until) = (r.lock_token(), r.locked_until());
        // The envelope moves into the handle so that views handed out stay valid after a
        // settle consumes the `Received`, which keeps a copy of the rest (its id, queue and
        // properties are what settles and replies read). Copying the body too cost C's
        // batched receive loop an allocation, a copy and a free per message.
        let body = std::mem::take(&mut r.envelope.body);
        let envelope = Envelope {
            body,
            ..r.envelope.clone()
        };
        Self::new(envelope, Hold::Held(Box::new(r)), Some(token), Some(until))
    }

    /// A message received through a transaction reached with `link`.
    pub fn in_transaction(
        envelope: Envelope,
        link: T,
        token: Option<u64>,
        until: Option<SystemTime>,
    ) -> Self {
        Self::new(envelope, Hold::Transaction(link), token, until)
    }

    /// The message of `delivery`, lent to a processor handler for one call.
    pub fn lent(delivery: &Delivery) -> Self {
        HeldMessage {
            lent: Some(LentDelivery::of(delivery)),
            ..Self::new(
                delivery.envelope().clone(),
                Hold::Processor,
                None,
                Some(delivery.locked_until()),
            )
        }
    }

    /// The message.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    /// The lock token of the delivery, for a message that was received with a lock.
    pub fn lock_token(&self) -> Option<u64> {
        self.lock_token
    }

    /// When the lock expires, while one is known. For a handle lent to a processor handler,
    /// while the handler runs: the processor's lock, as renewed so far.
    pub fn locked_until(&self) -> Option<SystemTime> {
        let ms = self.locked_until_ms.load(Ordering::Acquire);
        if let Some(l) = &self.lent {
            // `end_loan` forgets the lock before the processor settles the message.
            return (ms != 0 && !l.has_returned()).then(|| l.locked_until());
        }
        match ms {
            0 => None,
            ms => Some(to_system_time(ms)),
        }
    }

    /// Records a new lock expiry (after a renewal through a transaction).
    pub fn note_locked_until(&self, until: SystemTime) {
        self.locked_until_ms
            .store(from_system_time(until), Ordering::Release);
    }

    fn forget_lock(&self) {
        self.locked_until_ms.store(0, Ordering::Release);
    }

    /// Whether this process is not the one that read the message (it was inherited across
    /// `fork()`).
    pub fn is_forked(&self) -> bool {
        crate::os::process::id() != self.opened_by
    }

    /// The process that read the message (a binding's fork guard checks it).
    pub fn opened_by(&self) -> u32 {
        self.opened_by
    }

    /// Fails with [`Error::Forked`] in a forked child, before any mutex is taken.
    pub fn check_process(&self) -> Result<()> {
        super::check_process(self.opened_by)
    }

    /// The state's short name. In a forked child the mutex is only tried: a parent thread may
    /// have held it at fork time, and then it stays locked there.
    pub fn state(&self) -> &'static str {
        self.state_with(|_| None)
    }

    /// The state's short name, asking `finished` about the transaction of a transaction's
    /// message (see [`Hold::state_with`]). A handle that holds no lock reads as its queue state
    /// when it was read ([`MessageState::name`]: `"active"`, `"locked"`, ...).
    pub fn state_with(&self, finished: impl FnOnce(&T) -> Option<&'static str>) -> &'static str {
        let of = |h: &Hold<T>| match h {
            Hold::Unlocked => self.read_state.map_or("unlocked", MessageState::name),
            h => h.state_with(finished),
        };
        if self.is_forked() {
            return self.hold.try_lock().map_or("locked", |h| of(&h));
        }
        of(&self.hold.lock())
    }

    /// Whether the handle holds a peek-lock it can settle.
    pub fn is_held(&self) -> bool {
        !self.is_forked() && matches!(*self.hold.lock(), Hold::Held(_))
    }

    /// Why a handle in state `hold` cannot settle.
    fn refusal(&self, hold: &Hold<T>) -> Error {
        let id = self.envelope.id();
        Error::InvalidArgument(match hold {
            Hold::Unlocked => format!(
                "message {id} was peeked, browsed or looked up, not received: it holds no lock"
            ),
            Hold::Transaction(_) => format!(
                "message {id} belongs to a transaction: it is settled by the transaction's commit or abort"
            ),
            Hold::Processor => format!(
                "message {id} is settled by the processor when the handler returns (ask for a dead letter to move it to the dead-letter queue)"
            ),
            Hold::Held(_) => format!("message {id} is being settled"),
            Hold::Settled(how) => format!("message {id} was already settled ({how})"),
        })
    }

    /// Takes the lock out of the handle to hand it on (to a transaction, a batch), leaving
    /// `after` in its place. A received message's lock comes without its body (see
    /// [`received`](Self::received)).
    ///
    /// # Errors
    ///
    /// [`Error::Forked`] in a forked child; [`Error::InvalidArgument`] when the handle holds
    /// no lock (the text says why). The handle is unchanged then.
    pub fn take(&self, after: &'static str) -> Result<Received> {
        self.check_process()?;
        let mut hold = self.hold.lock();
        match std::mem::replace(&mut *hold, Hold::Settled(after)) {
            Hold::Held(r) => {
                self.forget_lock();
                Ok(*r)
            }
            other => {
                let e = self.refusal(&other);
                *hold = other;
                Err(e)
            }
        }
    }

    /// Puts a lock taken with [`take`](Self::take) back (nothing was settled).
    pub fn give_back(&self, r: Received) {
        self.locked_until_ms
            .store(from_system_time(r.locked_until()), Ordering::Release);
        *self.hold.lock() = Hold::Held(Box::new(r));
    }

    /// Moves the handle to `hold` (a transaction took its lock, or refused it).
    pub fn set(&self, hold: Hold<T>) {
        *self.hold.lock() = hold;
    }

    /// Takes the locks of all `handles` (each a message of queue `queue`, listed once), or
    /// none: a refusal leaves every handle as it was.
    ///
    /// # Errors
    ///
    /// [`Error::Forked`]; [`Error::InvalidArgument`] naming the index of the first handle that
    /// is listed twice, of another queue, or holds no lock.
    pub fn take_all(handles: &[&Self], queue: &str, after: &'static str) -> Result<Vec<Received>> {
        // By address: a batch of many thousand handles must not cost a pass per handle.
        let mut seen = std::collections::HashSet::with_capacity(handles.len());
        for (i, m) in handles.iter().enumerate() {
            if !seen.insert(std::ptr::from_ref::<Self>(*m)) {
                return Err(Error::InvalidArgument(format!(
                    "messages[{i}] is listed twice"
                )));
            }
            if m.envelope.queue() != queue {
                return Err(Error::InvalidArgument(format!(
                    "messages[{i}] is a message of queue {:?}, not of {queue:?}",
                    m.envelope.queue()
                )));
            }
        }
        let mut taken = Vec::with_capacity(handles.len());
        for m in handles {
            match m.take(after) {
                Ok(r) => taken.push(r),
                Err(e) => {
                    for (m, r) in handles.iter().zip(taken) {
                        m.give_back(r);
                    }
                    return Err(e);
                }
            }
        }
        Ok(taken)
    }

    /// Runs one settle call on the held lock, leaving `after` in its place on success. Only
    /// success and a lost lock end the hold: any other failure (a refusal, a full disk, a
    /// closed store) gives the lock back, so the caller may retry.
    ///
    /// The handle's mutex is held during the call, so a concurrent settle of the same handle
    /// waits for the outcome.
    ///
    /// # Errors
    ///
    /// [`Error::Forked`]; [`Error::InvalidArgument`] when the handle holds no lock; whatever
    /// `f` fails with.
    pub fn settle(
        &self,
        after: &'static str,
        f: impl FnOnce(Received) -> std::result::Result<(), SettleError>,
    ) -> Result<()> {
        self.check_process()?;
        let mut hold = self.hold.lock();
        let r = match std::mem::replace(&mut *hold, Hold::Settled(after)) {
            Hold::Held(r) => *r,
            other => {
                let e = self.refusal(&other);
                *hold = other;
                return Err(e);
            }
        };
        match f(r) {
            Ok(()) => {
                self.forget_lock();
                Ok(())
            }
            Err(e) if e.is_lock_lost() => {
                *hold = Hold::Settled("lock lost");
                self.forget_lock();
                Err(e.into_error())
            }
            Err(e) => {
                let (error, r) = e.into_parts();
                *hold = Hold::Held(Box::new(r));
                Err(error)
            }
        }
    }

    /// Extends a held lock by the queue's lock duration — the handle's peek-lock, or the
    /// processor's lock of a lent handle ([`Delivery::renew_lock`]); returns the new expiry.
    ///
    /// # Errors
    ///
    /// [`Error::Forked`]; [`Error::InvalidArgument`] when the handle holds neither (a
    /// transaction's message renews through the transaction); [`Error::LockLost`] (a
    /// peek-lock handle is spent then); storage errors (the lock stays with the handle).
    pub fn renew_lock(&self) -> Result<SystemTime> {
        self.check_process()?;
        if let Some(l) = self.loan() {
            return l.renew_lock();
        }
        let mut hold = self.hold.lock();
        let Hold::Held(r) = &mut *hold else {
            return Err(match &*hold {
                Hold::Unlocked | Hold::Processor | Hold::Transaction(_) => {
                    Error::InvalidArgument(format!(
                        "message {} holds no lock to renew ({})",
                        self.envelope.id(),
                        hold.state()
                    ))
                }
                other => self.refusal(other),
            });
        };
        match r.renew_lock() {
            Ok(until) => {
                self.note_locked_until(until);
                Ok(until)
            }
            Err(e) => {
                if e.is_lock_lost() {
                    *hold = Hold::Settled("lock lost");
                    self.forget_lock();
                }
                Err(e)
            }
        }
    }

    /// Runs `f` on the held lock without settling it ([`Received::mark_done`],
    /// [`Received::done_keys`]); the handle keeps the lock and notes its expiry afterwards. A
    /// lost lock ends the hold, as in [`renew_lock`](Self::renew_lock).
    ///
    /// # Errors
    ///
    /// [`Error::Forked`]; [`Error::InvalidArgument`] when the handle holds no peek-lock;
    /// whatever `f` fails with.
    pub fn with_held<R>(&self, f: impl FnOnce(&mut Received) -> Result<R>) -> Result<R> {
        self.check_process()?;
        let mut hold = self.hold.lock();
        let Hold::Held(r) = &mut *hold else {
            return Err(match &*hold {
                Hold::Unlocked | Hold::Processor | Hold::Transaction(_) => {
                    Error::InvalidArgument(format!(
                        "message {} holds no lock of its own ({})",
                        self.envelope.id(),
                        hold.state()
                    ))
                }
                other => self.refusal(other),
            });
        };
        match f(r) {
            Ok(v) => {
                self.note_locked_until(r.locked_until());
                Ok(v)
            }
            Err(e) => {
                if e.is_lock_lost() {
                    *hold = Hold::Settled("lock lost");
                    self.forget_lock();
                }
                Err(e)
            }
        }
    }

    /// The delivery of a handle lent to a processor handler whose loan has not ended.
    fn loan(&self) -> Option<&LentDelivery> {
        let l = self.lent.as_ref()?;
        matches!(*self.hold.lock(), Hold::Processor).then_some(l)
    }

    /// Records progress keys on the message: on a held peek-lock ([`Received::mark_done`]) or
    /// on the processor's lock of a lent handle ([`Delivery::mark_done`]); returns the new lock
    /// expiry. A lost peek-lock ends the hold.
    ///
    /// # Errors
    ///
    /// [`Error::Forked`]; [`Error::InvalidArgument`] when the handle holds neither (a
    /// transaction's message records through the transaction); as the call it makes.
    pub fn mark_done(&self, keys: Vec<String>) -> Result<SystemTime> {
        self.check_process()?;
        match self.loan() {
            Some(l) => l.mark_done(keys),
            None => self.with_held(|r| r.mark_done(keys)),
        }
    }

    /// The progress keys recorded on the message, for a held peek-lock or a lent handle (see
    /// [`mark_done`](Self::mark_done)).
    ///
    /// # Errors
    ///
    /// As [`mark_done`](Self::mark_done).
    pub fn done_keys(&self) -> Result<BTreeSet<String>> {
        self.check_process()?;
        match self.loan() {
            Some(l) => l.done_keys(),
            None => self.with_held(|r| r.done_keys()),
        }
    }

    /// Answers the message: a held peek-lock replies and completes in one commit
    /// ([`Received::reply`], leaving `after` in its place); a lent handle's reply goes with the
    /// processor's completion ([`Delivery::reply`]). Returns the reply's id.
    ///
    /// # Errors
    ///
    /// As [`settle`](Self::settle) and [`Delivery::reply`].
    pub fn reply(&self, after: &'static str, reply: Message) -> Result<MessageId> {
        self.check_process()?;
        if let Some(l) = self.loan() {
            return l.reply(reply);
        }
        let mut id = None;
        self.settle(after, |r| {
            id = Some(r.reply(reply)?);
            Ok(())
        })?;
        id.ok_or_else(|| Error::invalid("the reply was not sent"))
    }

    /// Asks, from inside a processor handler, for the message to be dead-lettered when the
    /// handler returns.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a handle that was not lent to a running processor
    /// handler; as [`Delivery::dead_letter`].
    pub fn request_dead_letter(&self, reason: &str, description: &str) -> Result<()> {
        self.check_process()?;
        match self.loan() {
            Some(l) => l.dead_letter(reason, description),
            None => Err(Error::InvalidArgument(format!(
                "message {} was not lent to a running processor handler",
                self.envelope.id()
            ))),
        }
    }

    /// The lock state of the delivery behind a handle lent to a processor handler (also after
    /// the handler returned).
    pub fn lock_watch(&self) -> Option<LockWatch> {
        self.lent.as_ref().map(LentDelivery::lock_watch)
    }

    /// Whether the handle was lent to a processor handler that is still running.
    pub fn is_lent(&self) -> bool {
        matches!(*self.hold.lock(), Hold::Processor)
    }

    /// The transaction link of a message that belongs to a transaction.
    pub fn transaction(&self) -> Option<T>
    where
        T: Clone,
    {
        match &*self.hold.lock() {
            Hold::Transaction(link) => Some(link.clone()),
            _ => None,
        }
    }

    /// Ends a processor loan: the handle reads "settled by the processor" from now on.
    pub fn end_loan(&self) {
        let mut hold = self.hold.lock();
        if matches!(*hold, Hold::Processor) {
            *hold = Hold::Settled("settled by the processor");
        }
        drop(hold);
        self.forget_lock();
    }
}

/// Ends the loan of `message` after its handler returned `handler`, and passes that result on.
/// What the handler asked for through the message (a dead letter, a reply) is already with the
/// delivery; the processor applies it whatever the handler returned, as [`Delivery`] promises.
///
/// # Errors
///
/// The handler's failure text.
pub fn finish_lent<T>(message: &HeldMessage<T>, handler: Result<(), String>) -> Result<(), String> {
    message.end_loan();
    handler
}
