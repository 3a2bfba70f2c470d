//! Sessions: ordered delivery of one group of a queue that requires sessions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::clock::to_system_time;
use crate::engine::queries as read;
use crate::engine::{QueueRef, Select};
use crate::error::{Error, Result};
use crate::message::MessageId;
use crate::queue::Queue;
use crate::received::Received;

/// A session of a queue that requires sessions
/// ([`QueueOptions::requires_session`](crate::QueueOptions::requires_session)): the messages
/// of one `group`, delivered to this receiver only, in send order, one at a time — the next
/// one becomes receivable when the previous one is completed, dead-lettered or deferred. Other
/// groups go to other receivers in parallel. A held session is exclusive: no other receiver
/// takes a message of its group, not by id or correlation id either (those receives of the
/// [`Queue`] are refused on such a queue); its holder picks them with
/// [`Session::receive_by_id`] (deferred messages, at any time) and
/// [`Session::receive_by_correlation_id`].
///
/// The session lock expires like a message lock (the queue's `lock_duration`) unless renewed;
/// once it expired, another receiver may accept the session, and this handle's calls fail with
/// [`Error::SessionLockLost`]. Dropping the handle releases the lock. The session's state, a
/// small bytes value, outlives locks and deliveries: a receiver that takes the session over
/// reads where the last one left off.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
/// use postbox::{Message, QueueOptions};
/// use std::time::Duration;
/// let q = store.queue_with("orders", QueueOptions::default().requires_session(true))?;
/// for step in ["created", "paid", "shipped"] {
///     q.send(Message::new(step).group("order-7"))?;
/// }
/// let session = q.accept_session(Duration::ZERO)?.expect("a session");
/// assert_eq!(session.group(), "order-7");
/// while let Some(m) = session.receive(Duration::ZERO)? {
///     session.set_state(Some(m.body()))?;
///     m.complete()?;
/// }
/// assert_eq!(session.state()?.as_deref(), Some(&b"shipped"[..]));
/// session.release()?;
/// # Ok::<(), postbox::Error>(())
/// ```
#[derive(Debug)]
pub struct Session {
    queue: Queue,
    group: Arc<str>,
    token: u64,
    locked_until: AtomicU64,
    released: bool,
}

/// One group of a [`Queue::sessions`] listing.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The group (a message's [`group`](crate::Message::group)).
    pub group: String,
    /// The group's messages still in the queue, whatever their state (receivable, locked,
    /// scheduled or deferred).
    pub messages: u64,
    /// When the session lock expires, while a receiver holds it and it has not expired;
    /// `None` when the session is free.
    pub locked_until: Option<SystemTime>,
    /// Whether the session has a state ([`Session::set_state`] stored one, not cleared).
    pub has_state: bool,
}

impl Queue {
    /// The groups of this queue that have messages or a session record (a lock or a state), in
    /// name order, with how each stands: what a dashboard shows of session progress. A queue
    /// that does not require sessions
    /// ([`QueueOptions::requires_session`](crate::QueueOptions::requires_session)) has none:
    /// the list is empty.
    ///
    /// The list is read from one snapshot and never blocks writers; it costs a walk of the
    /// queue's session index (one entry per message of the queue) and of its session records.
    /// A lock counts as held until its expiry on the store's clock, even before a write
    /// notices it expired; a message whose deliveries or time to live ran out still counts
    /// until a write moves it to the dead-letter queue (as in [`Queue::browse_all`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::{Message, QueueOptions};
    /// use std::time::Duration;
    /// let q = store.queue_with("orders", QueueOptions::default().requires_session(true))?;
    /// q.send(Message::new("created").group("order-7"))?;
    /// q.send(Message::new("paid").group("order-7"))?;
    /// let session = q.accept_session(Duration::ZERO)?.expect("a session");
    /// let groups = q.sessions()?;
    /// assert_eq!(groups.len(), 1);
    /// assert_eq!((groups[0].group.as_str(), groups[0].messages), ("order-7", 2));
    /// assert!(groups[0].locked_until.is_some());
    /// # drop(session);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the queue was deleted; [`Error::Closed`] once the store was
    /// closed; storage errors (`Corrupted` for a damaged session record).
    pub fn sessions(&self) -> Result<Vec<SessionInfo>> {
        let now = self.engine.clock.now_ms();
        let rows = self
            .engine
            .read(|t| read::sessions(t, self.queue_ref(), now))?;
        Ok(rows
            .into_iter()
            .map(|r| SessionInfo {
                group: r.group,
                messages: r.messages,
                locked_until: r.locked_until.map(to_system_time),
                has_state: r.has_state,
            })
            .collect())
    }

    /// Accepts the next available session: a group whose next message is receivable and that
    /// no other receiver holds, waiting up to `timeout` for one.
    ///
    /// A session lock lasts the queue's `lock_duration` unless renewed, and goes with its
    /// holder's process: a clean close releases it, and so does the process's death (noticed
    /// by a shared store's next writer, or by the next single-process open), with its message
    /// locks. The group can then be accepted at once, its state kept.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if the queue does not require sessions;
    /// [`Error::QueueNotFound`] if it was deleted; storage errors.
    pub fn accept_session(&self, timeout: Duration) -> Result<Option<Session>> {
        self.accept(None, timeout)
    }

    /// Accepts session `group`, waiting up to `timeout` while another receiver holds it. A
    /// session with no messages can be accepted too (to read or set its state).
    ///
    /// # Errors
    ///
    /// As [`Queue::accept_session`].
    pub fn accept_named_session(&self, group: &str, timeout: Duration) -> Result<Option<Session>> {
        if group.is_empty() || group.len() > crate::MAX_TEXT_PROPERTY_LEN {
            return Err(Error::invalid("a session's group is 1 to 1024 bytes"));
        }
        self.accept(Some(group.to_owned()), timeout)
    }

    fn accept(&self, group: Option<String>, timeout: Duration) -> Result<Option<Session>> {
        self.engine.check_open()?;
        let deadline = Instant::now().checked_add(timeout);
        let (q, name, owner) = (self.id, self.name.clone(), self.engine.owner);
        let got = self.engine.wait_for(q, deadline, None, || {
            let (name, group) = (name.clone(), group.clone());
            self.engine
                .call(move |b| b.accept_session(QueueRef::new(q, &name), group.as_deref(), owner))
        })?;
        Ok(got.map(|(group, s)| Session {
            queue: self.clone(),
            group: group.into(),
            token: s.token,
            locked_until: AtomicU64::new(s.locked_until),
            released: false,
        }))
    }
}

impl Session {
    /// The session's group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The queue.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// When the session lock expires unless renewed.
    pub fn locked_until(&self) -> SystemTime {
        to_system_time(self.locked_until.load(Ordering::Acquire))
    }

    fn ids(&self) -> (u32, Arc<str>, Arc<str>, u64) {
        (
            self.queue.id,
            self.queue.name.clone(),
            self.group.clone(),
            self.token,
        )
    }

    /// Locks the session's next message, waiting up to `timeout` for it to be receivable (the
    /// previous one settled, or a new one sent). Settle it as any received message.
    ///
    /// # Errors
    ///
    /// [`Error::SessionLockLost`] once the session lock expired or was released;
    /// [`Error::QueueNotFound`] if the queue was deleted; storage errors.
    pub fn receive(&self, timeout: Duration) -> Result<Option<Received>> {
        let engine = &self.queue.engine;
        engine.check_open()?;
        let deadline = Instant::now().checked_add(timeout);
        let (q, name, group, token) = self.ids();
        let owner = engine.owner;
        let got = engine.wait_for(q, deadline, None, || {
            let (name, group) = (name.clone(), group.clone());
            engine.call(move |b| b.session_receive(QueueRef::new(q, &name), &group, token, owner))
        })?;
        Ok(got.map(|l| self.queue.wrap(l)))
    }

    /// Locks message `id` of the session's group, waiting up to `timeout` for it to be
    /// receivable through the session: its deferred messages (set aside with
    /// [`Received::defer`](crate::Received::defer)) at any time, also while another message
    /// of the group is in hand (as a Service Bus session receiver takes its deferred messages
    /// by sequence number), and otherwise only the group's next message, as
    /// [`Session::receive`] would lock it (one at a time, in send order). On a queue that
    /// requires sessions this is the one way to a message by id:
    /// [`Queue::receive_by_id`] is refused there.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::{Message, QueueOptions};
    /// use std::time::Duration;
    /// let q = store.queue_with("orders", QueueOptions::default().requires_session(true))?;
    /// q.send(Message::new("shipped").group("order-7"))?; // came first, but is the last step
    /// q.send(Message::new("paid").group("order-7"))?;
    /// let session = q.accept_session(Duration::ZERO)?.expect("a session");
    /// let early = session.receive(Duration::ZERO)?.unwrap();
    /// let shipped = early.id();
    /// early.defer()?; // not yet: set it aside
    /// let paid = session.receive(Duration::ZERO)?.unwrap();
    /// paid.complete()?;
    /// let later = session.receive_by_id(shipped, Duration::ZERO)?.unwrap();
    /// assert_eq!(later.body(), b"shipped");
    /// later.complete()?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Session::receive`]. A message of another group or queue, or one that was
    /// completed, is never receivable here: the wait ends with `None` at the timeout.
    pub fn receive_by_id(&self, id: MessageId, timeout: Duration) -> Result<Option<Received>> {
        self.receive_selected(Select::Id(id.0), timeout)
    }

    /// Locks the first message of the session's group, in send order, whose correlation id is
    /// `correlation_id`, among those receivable through the session (see
    /// [`Session::receive_by_id`]: its deferred messages and its next message), waiting up to
    /// `timeout` for one. Unlike [`Queue::receive_by_correlation_id`] (refused on a queue that
    /// requires sessions), deferred messages count: a session sets a message aside to pick it
    /// up at a later step, and a step often waits for the reply to a request.
    ///
    /// # Errors
    ///
    /// As [`Session::receive`].
    pub fn receive_by_correlation_id(
        &self,
        correlation_id: &str,
        timeout: Duration,
    ) -> Result<Option<Received>> {
        self.receive_selected(Select::CorrelationId(correlation_id.to_owned()), timeout)
    }

    fn receive_selected(&self, select: Select, timeout: Duration) -> Result<Option<Received>> {
        let engine = &self.queue.engine;
        engine.check_open()?;
        let deadline = Instant::now().checked_add(timeout);
        let (q, name, group, token) = self.ids();
        let owner = engine.owner;
        let got = engine.wait_for(q, deadline, None, || {
            let (name, group, select) = (name.clone(), group.clone(), select.clone());
            engine.call(move |b| {
                b.session_receive_selected(QueueRef::new(q, &name), &group, token, owner, &select)
            })
        })?;
        Ok(got.map(|l| self.queue.wrap(l)))
    }

    /// Extends the session lock by the queue's `lock_duration` from now; returns the new
    /// expiry.
    ///
    /// # Errors
    ///
    /// [`Error::SessionLockLost`]; storage errors.
    pub fn renew_lock(&self) -> Result<SystemTime> {
        let (q, name, group, token) = self.ids();
        let until = self
            .queue
            .engine
            .call(move |b| b.renew_session(QueueRef::new(q, &name), &group, token))?;
        self.locked_until.store(until, Ordering::Release);
        Ok(to_system_time(until))
    }

    /// The session's state (`None` if never set or cleared).
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`]; storage errors.
    pub fn state(&self) -> Result<Option<Vec<u8>>> {
        let (q, name, group, _) = self.ids();
        self.queue
            .engine
            .call(move |b| b.session_state(QueueRef::new(q, &name), &group))
    }

    /// Sets the session's state (at most 64 KiB; `None` clears it). To set it in the same
    /// commit as settles and sends, use [`Transaction::set_session_state`](crate::Transaction::set_session_state).
    ///
    /// # Errors
    ///
    /// [`Error::SessionLockLost`]; [`Error::InvalidArgument`] for a state over 64 KiB.
    pub fn set_state(&self, state: Option<&[u8]>) -> Result<()> {
        let (q, name, group, token) = self.ids();
        let state = state.map(<[u8]>::to_vec);
        self.queue
            .engine
            .call(move |b| b.set_session_state(QueueRef::new(q, &name), &group, token, state))
    }

    /// Lets go of the session lock now (its state is kept); another receiver may accept it.
    ///
    /// # Errors
    ///
    /// [`Error::SessionLockLost`] if it was already lost; storage errors.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        let (q, name, group, token) = self.ids();
        self.queue
            .engine
            .call(move |b| b.release_session(QueueRef::new(q, &name), &group, token))
    }

    pub(crate) fn parts(&self) -> (u32, Arc<str>, Arc<str>, u64) {
        self.ids()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.released || self.queue.engine.is_forked() || self.queue.engine.is_closed() {
            return;
        }
        let (q, name, group, token) = self.ids();
        // Best effort: the lock expires anyway.
        let _ = self
            .queue
            .engine
            .call(move |b| b.release_session(QueueRef::new(q, &name), &group, token));
    }
}
