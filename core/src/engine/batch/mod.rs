//! One redb write transaction shared by every operation of a group commit.
//!
//! Each operation first validates (reads only), then mutates. The batch counts its changes —
//! every row its tables put or remove (counted by `logged::Changes`) and every change to the
//! caches `flush` writes back — so the pipeline can tell an operation that failed cleanly (its
//! error goes to its caller alone) from one that failed half way (the whole batch is aborted).
//!
//! This file holds the batch itself: the id sequences and the exact per-queue counts it writes
//! back in `flush`. Its lazily opened tables are in `slots`, generated from the list of
//! tables. The operations are split by concern, one file each:
//!
//! - `app_rows`: application tables, rows written in the same commit as sends and settles.
//! - `catalog`: the queue catalog (create, open, delete, purge) and each dead-letter queue.
//! - `checkpoints`: progress keys recorded on a held message, skipped by a redelivery.
//! - `collate`: collators, holding an out-of-order series and releasing it in sequence order.
//! - `in_use`: which queues may not be deleted while another queue or a job relies on them.
//! - `jobs`: jobs, their pieces' tracking rows and the continuation sent when the last ends.
//! - `reaping`: the processes that have the store open and the release of dead ones' locks.
//! - `receipts`: the work-complete receipt posted to a queue's `receipts_to`.
//! - `replies`: taking a request's reply from the reply queue, dropping stale replies.
//! - `send`: validation and quota planning, then the inserts.
//! - `sessions`: session queues, one group in send order to the holder of its session lock.
//! - `settle`: receiving (locking the head of a queue), settling and renewing a lock.
//! - `state`: a message's status transitions, requeueing and dead-lettering.
//! - `sweep`: time-driven work (expired locks, due and expired messages, old duplicate keys).
//! - `temporary`: queues that go away on their own (temporary and idle queues).
//! - `topics`: topics, their subscriptions and the fan-out of a publish.

mod app_rows;
mod catalog;
mod checkpoints;
mod collate;
mod in_use;
mod jobs;
mod reaping;
mod receipts;
mod replies;
mod send;
mod sessions;
mod settle;
mod slots;
mod state;
mod sweep;
mod temporary;
#[cfg(test)]
mod tests;
mod topics;
mod traffic;

pub use app_rows::{
    MAX_APP_KEY_LEN, MAX_APP_VALUE_LEN, RowReads, RowWrite, add_to_counter, validate_app_key,
    validate_app_value,
};
pub use catalog::{
    DEAD_LETTER_SUFFIX, MAX_QUEUE_NAME_LEN, dead_letter_name, journal_name, validate_queue_name,
};
pub use catalog::{SUBSCRIPTIONS_INFIX, subscription_name};
pub use in_use::{continuation_user, option_user};
pub use jobs::{JOB_SIGNAL_BASE, JobRecord, decode_piece, job_signal};
pub use send::validate_message;
pub use temporary::{TEMPORARY_PREFIX, idle_due_at};
pub use traffic::Traffic;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use redb::ReadableTable;

use super::logged::LoggedTxn;
use slots::Slots;

use super::codec::{self, DeadLetter, QueueEntry, QueueKind, QueueRecord, Subscription};
use super::tables::*;
use crate::error::{Error, Result};
use crate::message::{
    Envelope, Expiry, Message, MessageId, PropertyValue, REASON_TTL_EXPIRED, Visibility,
};
use crate::options::{QueueOptions, QueueSettings};

/// A lock held on a message: its id and the token of this delivery. Settling needs both, so
/// that a lock taken over by another receiver is told apart from ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLock {
    pub id: u64,
    pub token: u64,
}

/// A queue as a caller names it: its id, and the name it was opened under (for errors, and to
/// tell a deleted queue from a damaged id index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRef<'a> {
    pub id: u32,
    pub name: &'a str,
}

impl<'a> QueueRef<'a> {
    /// Queue `id`, opened under `name`.
    pub fn new(id: u32, name: &'a str) -> QueueRef<'a> {
        QueueRef { id, name }
    }
}

/// The message a receive locked, with its lock.
#[derive(Debug)]
pub struct Locked {
    pub envelope: Envelope,
    pub token: u64,
    pub locked_until: u64,
}

impl Locked {
    /// The lock this receive took.
    pub fn held(&self) -> HeldLock {
        HeldLock {
            id: self.envelope.id().get(),
            token: self.token,
        }
    }
}

/// Which message a selective receive takes.
#[derive(Debug, Clone)]
pub enum Select {
    /// The message with this id.
    Id(u64),
    /// The first message, in delivery order, with this correlation id.
    CorrelationId(String),
}

/// How a lock ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Settle {
    Complete,
    Abandon {
        delay_ms: u64,
    },
    /// A failed attempt: abandoned with `delay_ms`, or dead-lettered with `description` when
    /// it was the last delivery the queue allows (decided against the options stored in the
    /// settling commit, which another handle may have changed since the receive).
    Fail {
        delay_ms: u64,
        description: String,
    },
    DeadLetter {
        reason: String,
        description: String,
    },
    Resubmit,
    /// Sets the message aside: never delivered by a normal receive again, only by id; a lock
    /// on it later ends in the deferred state again. It keeps its TTL and delivery count.
    Defer,
}

/// The earliest time at which each time index may hold due work; 0 means "unknown: look".
///
/// Valid only while this process is the store's one writer (single-process mode): every insert
/// into an index lowers its hint, so a sweep can skip indexes with nothing due without opening
/// them. Multi-process stores always look, since other processes insert too.
#[derive(Debug, Clone, Copy, Default)]
pub struct DueHints {
    lock: u64,
    scheduled: u64,
    expiring: u64,
    dedup: u64,
}

impl DueHints {
    /// When the earliest scheduled message or lock expiry may fall due (ms; 0 = unknown).
    pub fn next_receivable(&self) -> u64 {
        self.lock.min(self.scheduled)
    }

    /// Whether a sweep at `now` would find nothing due in any index.
    pub fn nothing_due(&self, now: u64) -> bool {
        self.lock > now && self.scheduled > now && self.expiring > now && self.dedup > now
    }
}

/// How finely a queue's last activity is recorded (ms): the recorded time is less than this
/// behind the true last activity. Idle deletion waits this much longer (`idle_due_at`).
pub const ACTIVITY_RESOLUTION_MS: u64 = 100;

pub struct Batch<'t> {
    /// The batch's transaction and the tables it has opened.
    tables: Slots<'t>,
    /// Carried from batch to batch by the pipeline; see [`DueHints`].
    pub hints: DueHints,
    pub now: u64,
    /// Changes to the caches below that `flush` writes back (counts, sequences, jobs): with
    /// the rows the tables count, what tells whether the batch changed anything.
    cache_changes: u64,
    /// Queues that gained receivable messages; their waiters are woken after the commit.
    pub woken: HashSet<u32>,
    /// Sends and completions per queue, added to the store's counters if the batch commits.
    pub traffic: HashMap<u32, Traffic>,
    /// The sequences, once read in this batch; written back by `flush`.
    seqs: Option<[u64; 4]>,
    /// Each queue's counts as this batch changed them, with its extra counts as loaded (the
    /// extra counts row is written only when they changed).
    counter_cache: HashMap<u32, (QueueCounts, (u64, u64, u64))>,
    /// When this process last wrote each queue's `last_activity` (shared by its batches).
    activity: Option<Arc<crate::sync::Mutex<HashMap<u32, u64>>>>,
    /// Jobs changed in this batch, written back by `flush`.
    job_cache: HashMap<u64, jobs::JobRecord>,
    /// Single-process stores: the next message id, shared with transactions (see `share_ids`).
    shared_ids: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// Whether a message id was drawn from the sequence since [`Batch::forget_drawn_ids`]:
    /// such an id depends on what transactions reserved meanwhile, so a batch logged as its
    /// operations (`engine::logical`) that drew one must be logged as rows after all.
    drew_ids: bool,
    /// Queues deleted in this batch.
    deleted: HashSet<u32>,
    queue_cache: HashMap<u32, Option<Arc<QueueEntry>>>,
}

fn corrupted(what: &str, e: String) -> Error {
    Error::Corrupted(format!("{what}: {e}"))
}

impl<'t> Batch<'t> {
    /// Runs one operation of a job and tells what its failure means. `Ok(result)`: the
    /// operation's own result — an error there wrote nothing (operations validate before they
    /// write), so the job may go on and report it to its caller. `Err(e)`: it failed after
    /// writing, so the batch holds half an operation and must be aborted as a whole.
    pub fn attempt<T>(&mut self, op: impl FnOnce(&mut Self) -> Result<T>) -> Result<Result<T>> {
        let before = self.change_count();
        match op(self) {
            Err(e) if self.change_count() != before => Err(e),
            r => Ok(r),
        }
    }

    /// Whether the batch changed anything so far: if not, it has nothing to commit.
    pub fn changed(&self) -> bool {
        self.change_count() != 0
    }

    /// Rows written and cache changes so far.
    pub fn change_count(&self) -> u64 {
        self.tables.writes() + self.cache_changes
    }

    /// Counts a change to a cache that `flush` writes back (it writes no row until then).
    fn cache_changed(&mut self) {
        self.cache_changes += 1;
    }

    pub fn open(txn: LoggedTxn<'t>, now: u64, hints: DueHints) -> Result<Batch<'t>> {
        Ok(Batch {
            tables: Slots::new(txn),
            hints,
            now,
            cache_changes: 0,
            woken: HashSet::new(),
            traffic: HashMap::new(),
            seqs: None,
            counter_cache: HashMap::new(),
            activity: None,
            shared_ids: None,
            drew_ids: false,
            job_cache: HashMap::new(),
            deleted: HashSet::new(),
            queue_cache: HashMap::new(),
        })
    }

    /// Writes the cached sequences and counters. Called once, before the commit. A batch
    /// that changed nothing writes nothing, not even sequences an operation that failed
    /// cleanly advanced: it is not committed.
    pub fn flush(&mut self) -> Result<()> {
        if !self.changed() {
            return Ok(());
        }
        self.flush_jobs()?;
        if let Some(seqs) = self.seqs.take() {
            self.tables
                .counters()?
                .insert(SEQUENCES_KEY, encode_sequences(&seqs))?;
        }
        let now = self.now;
        let activity = self.activity.clone();
        let mut written = activity.as_ref().map(|a| a.lock());
        for (q, (mut c, loaded_extra)) in std::mem::take(&mut self.counter_cache) {
            // A queue deleted in this batch lost its counters; do not resurrect them.
            if self.deleted.contains(&q) {
                continue;
            }
            // Activity is recorded at most once per `ACTIVITY_RESOLUTION_MS` per queue, so a
            // busy queue pays for it in a few batches a second, not in every one.
            if let Some(w) = written.as_mut() {
                let last = w.entry(q).or_insert(0);
                if now >= last.saturating_add(ACTIVITY_RESOLUTION_MS) || c.last_activity == 0 {
                    *last = now;
                    c.last_activity = now;
                }
            }
            self.tables.counters()?.insert(q, c.encode())?;
            if c.extra() != loaded_extra {
                let key = EXTRA_COUNTS_BASE + q;
                if c.has_extra() {
                    self.tables.counters()?.insert(key, c.encode_extra())?;
                } else {
                    self.tables.counters()?.remove(key)?;
                }
            }
        }
        Ok(())
    }

    /// Records queue activity (for `auto_delete_on_idle` and listings) through `log`, which
    /// remembers when this process last wrote each queue's activity.
    pub fn track_activity(&mut self, log: Arc<crate::sync::Mutex<HashMap<u32, u64>>>) {
        self.activity = Some(log);
    }

    /// Hands out message ids from `ids`, which transactions share to reserve ids when they
    /// send (single-process stores only: this process is the only writer).
    pub fn share_ids(&mut self, ids: Arc<std::sync::atomic::AtomicU64>) {
        self.shared_ids = Some(ids);
    }

    fn load_seqs(&mut self) -> Result<[u64; 4]> {
        match self.seqs {
            Some(s) => Ok(s),
            None => match self.tables.counters()?.get(SEQUENCES_KEY)? {
                Some(g) => Ok(decode_sequences(&g.value())),
                None => Err(Error::corrupted("the id sequences are missing")),
            },
        }
    }

    /// Whether a message id was drawn from the sequence since [`Batch::forget_drawn_ids`].
    pub fn drew_ids(&self) -> bool {
        self.drew_ids
    }

    /// Starts looking for drawn message ids afresh (after the ids a logical record carries
    /// were reserved).
    pub fn forget_drawn_ids(&mut self) {
        self.drew_ids = false;
    }

    fn next_seq(&mut self, seq: Seq) -> Result<u64> {
        use std::sync::atomic::Ordering;
        if matches!(seq, Seq::Message) {
            self.drew_ids = true;
        }
        let mut seqs = self.load_seqs()?;
        let slot = &mut seqs[seq as usize];
        let current = match (&self.shared_ids, seq) {
            (Some(ids), Seq::Message) => {
                ids.fetch_max((*slot).max(1), Ordering::AcqRel);
                ids.fetch_add(1, Ordering::AcqRel)
            }
            _ => (*slot).max(1),
        };
        *slot = (*slot).max(current + 1);
        self.seqs = Some(seqs);
        Ok(current)
    }

    /// Moves the message sequence past `id`, an id reserved earlier (see
    /// `Engine::reserve_id`). A reserved id is never handed out twice, so it must be new.
    fn pass_reserved(&mut self, id: u64) -> Result<()> {
        if self.tables.state()?.get(id)?.is_some() {
            return Err(Error::corrupted(format!(
                "reserved message id {id} is already in use"
            )));
        }
        let mut seqs = self.load_seqs()?;
        let slot = &mut seqs[Seq::Message as usize];
        *slot = (*slot).max(id.saturating_add(1));
        self.seqs = Some(seqs);
        Ok(())
    }

    /// Reserves a message id in the file (for a multi-process store, where no process can
    /// reserve one in memory).
    pub fn reserve_id(&mut self) -> Result<u64> {
        self.cache_changed();
        self.next_seq(Seq::Message)
    }

    /// The next message id the sequence would hand out.
    pub fn peek_next_id(&mut self) -> Result<u64> {
        Ok(self.load_seqs()?[Seq::Message as usize].max(1))
    }

    fn counters_mut(&mut self, q: u32) -> Result<&mut QueueCounts> {
        if !self.counter_cache.contains_key(&q) {
            let c = self.load_counts(q)?;
            self.counter_cache.insert(q, (c, c.extra()));
        }
        self.cache_changed();
        Ok(&mut self.counter_cache.entry(q).or_default().0)
    }

    pub fn counters(&mut self, q: u32) -> Result<QueueCounts> {
        if let Some((c, _)) = self.counter_cache.get(&q) {
            return Ok(*c);
        }
        self.load_counts(q)
    }

    /// Queue `q`'s counts as stored: its counts row and, if it has one, its extra counts row.
    fn load_counts(&mut self, q: u32) -> Result<QueueCounts> {
        let t = self.tables.counters()?;
        let mut c = t
            .get(q)?
            .map(|g| QueueCounts::decode(&g.value()))
            .unwrap_or_default();
        if let Some(extra) = t.get(EXTRA_COUNTS_BASE + q)? {
            c.set_extra(&extra.value());
        }
        Ok(c)
    }
}
