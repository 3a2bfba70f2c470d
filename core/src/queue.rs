//! Queue handles: send, peek, browse, receive, stats, purge.

mod browse;
mod receive;
mod send;

use std::sync::Arc;

use crate::engine::Engine;
use crate::engine::queries as read;
use crate::engine::{DEAD_LETTER_SUFFIX, dead_letter_name, journal_name};
use crate::engine::{QueueKind, QueueRecord, QueueRef};
use crate::error::{Error, Result};
use crate::options::QueueOptions;
#[cfg(doc)]
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

    /// This queue as the engine names it: id, and the name it was opened under.
    pub(crate) fn queue_ref(&self) -> QueueRef<'_> {
        QueueRef::new(self.id, &self.name)
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

pub use browse::{Browse, BrowseAll};
pub(crate) use send::SentRequest;
