//! Looking without locking: peek, browse, get.

use std::sync::Arc;

use super::Queue;
use crate::engine::queries as read;
use crate::engine::{Engine, QueueRef};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::message::{Envelope, MessageId, MessageState};

impl Queue {
    /// The message at the head of the queue (the next one `receive` would take), without
    /// locking it. A message whose lock expired or whose scheduled time came counts as
    /// receivable, as it does for `receive`, even before any write has put it back.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] if the queue was deleted; storage errors.
    pub fn peek(&self) -> Result<Option<Envelope>> {
        let now = self.engine.clock.now_ms();
        self.engine
            .read(|t| read::browse_next(t, self.queue_ref(), None, now))
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
        let queue = QueueRef::new(self.q, &self.name);
        let now = self.engine.clock.now_ms();
        match self
            .engine
            .read(|t| read::browse_next(t, queue, self.after, now))
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
        let queue = QueueRef::new(self.q, &self.name);
        let now = self.engine.clock.now_ms();
        match self
            .engine
            .read(|t| read::browse_all_next(t, queue, self.after, now))
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
