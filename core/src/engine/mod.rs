//! The storage engine behind the public handles: file creation and opening, the commit
//! pipeline, read snapshots, and waiting for messages.

mod batch;
mod codec;
mod compact;
mod compound;
mod db;
mod file;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod guarded;
mod janitor;
mod logged;
mod logical;
mod owners;
mod park;
mod pipeline;
mod poll;
mod probe;
mod read;
mod rules;
mod signal;
mod space;
mod tables;
mod timer;
mod tracking;
mod varint;
mod wait;
mod wait_async;
mod wal;

// The engine's face: what the public API, the transaction and the processor may use. Everything
// else stays inside.
pub(crate) use batch::{
    Batch, DEAD_LETTER_SUFFIX, HeldLock, Locked, QueueRef, Select, Settle, dead_letter_name,
    journal_name, subscription_name, validate_message, validate_queue_name,
};
pub(crate) use batch::{
    JobRecord, MAX_APP_KEY_LEN, MAX_APP_VALUE_LEN, RowReads, RowWrite, TEMPORARY_PREFIX,
    add_to_counter, validate_app_key, validate_app_value,
};
pub(crate) use codec::{QueueEntry, QueueKind, QueueRecord};
pub(crate) use signal::Signal;
pub(crate) use tracking::AwaitingReply;
pub(crate) use wait::{Cancel, IdleReceiver, thread_interrupt, with_interrupt};
pub(crate) use wait_async::AsyncReceive;

/// Read-only queries on one snapshot, run through [`Engine::read`].
pub(crate) mod queries {
    pub(crate) use super::read::{
        BrowsePosition, app_get, app_range, browse_all_next, browse_next, checkpoints, counts,
        dedup_lookup, get, idle_schedule, job, job_pieces, jobs, list_queues, list_topics,
        queue_by_id, queue_by_name, queue_records, sessions,
    };
}

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redb::{ReadTransaction, ReadableDatabase};

use self::pipeline::{Pipeline, PipelineStats, Unapplied, WriterContext};
use self::signal::Signals;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::options::{Durability, EngineConfig};

pub struct Engine {
    /// Emptied once closed, so that closing releases the file (and its lock) even while
    /// handles such as queues are still alive; reopened after a failed write.
    db: Arc<db::DbSlot>,
    /// The process that opened the store: a handle inherited across `fork()` must not touch
    /// the file (invariant 11).
    opened_by: u32,
    pipeline: Pipeline,
    pub signals: Arc<Signals>,
    pub clock: Arc<dyn Clock>,
    pub owner: u64,
    /// Where this process runs, to judge other owners' liveness (see `owners::owner_alive`).
    scope: u64,
    pub path: PathBuf,
    pub multi_process: bool,
    pub durability: Durability,
    poll_floor: Duration,
    poll_ceiling: Duration,
    closed: AtomicBool,
    pub stats: Arc<PipelineStats>,
    /// Multi-process mode: tells `look` when another process writes the file.
    watch: crate::sync::Mutex<Option<crate::os::watch::FileWatch>>,
    /// Multi-process mode: looks at the file for this process's waiters (see `poll`).
    look: Arc<poll::FileLook>,
    /// The file is open in this process, until closed (see `os::lock::holder`).
    open_mark: crate::sync::Mutex<Option<crate::os::lock::OpenMark>>,
    /// Single-process mode: the next message id (shared with the writer's batches).
    ids: Option<Arc<AtomicU64>>,
    /// Batches acknowledged before redb applied them: reads wait for them.
    unapplied: Arc<Unapplied>,
    /// Deletes queues whose `auto_delete_on_idle` period is over (started on demand).
    janitor: crate::sync::Mutex<Option<janitor::Janitor>>,
    /// The reply queue of this handle's requests, once one was made (see `reply_queue`).
    replies: crate::sync::Mutex<Option<(u32, String)>>,
    /// The correlation ids of this handle's requests that wait for their reply now (see
    /// `await_reply`).
    awaited: tracking::Awaited,
    /// Opened with `accept_log_loss`: what the store needed of its log and did not get.
    pub log_loss: Option<String>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("path", &self.path)
            .field("owner", &self.owner)
            .field("multi_process", &self.multi_process)
            .finish_non_exhaustive()
    }
}

/// Turns a panic caught at an internal boundary into an error. redb can panic on damaged
/// pages in debug builds; invariant 9 says the caller gets `Corrupted`, not a crash.
pub fn panic_to_error(p: Box<dyn std::any::Any + Send>) -> Error {
    let text = p
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    Error::Corrupted(format!("storage failure: {text}"))
}

impl Engine {
    pub fn open(path: &Path, b: &EngineConfig) -> Result<Engine> {
        if b.multi_process && matches!(b.durability, Durability::None) {
            return Err(Error::Config(
                "multi-process stores commit durably only: Durability::None cannot be combined with multi_process(true)".into(),
            ));
        }
        if b.poll_floor.is_zero() || b.poll_floor > b.poll_ceiling {
            return Err(Error::Config(
                "poll_interval needs 0 < floor <= ceiling".into(),
            ));
        }
        // Everything that touches the file runs under one guard: redb can panic on a damaged
        // store, and even dropping the half-opened database on an error path can.
        guarded::catch(|| Self::open_file(path, b)).map_err(panic_to_error)?
    }

    fn open_file(path: &Path, b: &EngineConfig) -> Result<Engine> {
        let opened = match file::open(path, b) {
            Ok(opened) => opened,
            Err(Error::AlreadyOpen(m)) => {
                let language = crate::error::language();
                return Err(Error::AlreadyOpen(match crate::os::lock::holder(path) {
                    None => m,
                    Some(crate::os::lock::Holder::ThisProcess) => format!(
                        "the store {} is already open in this process: {} instead of opening it twice",
                        path.display(),
                        language.share_store()
                    ),
                    // The parent's handle cannot be used here (it raises `Forked`), and the
                    // parent's lock keeps every single-process opener out.
                    Some(crate::os::lock::Holder::Parent) => format!(
                        "the store {} is open in the process this one was forked from, and a store \
                         handle does not cross fork(): open the store in every process, the \
                         parent included, with {} (here in the child with a new handle), or \
                         close it in the parent before forking",
                        path.display(),
                        language.multi_process()
                    ),
                }));
            }
            Err(e) => return Err(e),
        };
        let file::Opened { db, wal, recovered } = opened;
        let db = Arc::new(db);
        let clock = b.clock.clone();
        let signals = Arc::new(Signals::default());
        let stats = Arc::new(PipelineStats::default());

        // Register this process. In single-process mode nobody else can hold a lock, so every
        // lock in the file is stale: release them all at once.
        let (pid, start) = owners::current();
        let scope = owners::current_scope();
        let multi = b.multi_process;
        // After a replay that kept the log (`Recovered::kept_log`) the store's durable state is
        // behind the log: this commit is logged too, and the first checkpoint makes both
        // durable.
        let kept_log = recovered.kept_log && wal.is_some();
        let setup = guarded::catch(|| -> Result<(u64, u64)> {
            let mut txn = db.begin_write()?;
            let changes = if kept_log {
                logged::Changes::on(Vec::new())
            } else {
                logged::Changes::off()
            };
            let registered = {
                let ltxn = logged::LoggedTxn {
                    txn: &txn,
                    changes: &changes,
                };
                let mut batch = Batch::open(ltxn, clock.now_ms(), Default::default())?;
                if multi {
                    batch.reap_dead_owners(0, scope)?;
                } else {
                    batch.release_locks_of(None)?;
                    batch.clear_owners()?;
                }
                let owner = batch.register_owner(pid, start, scope)?;
                let next_id = batch.peek_next_id()?;
                batch.flush()?;
                (owner, next_id)
            };
            match &wal {
                Some(w) if kept_log => {
                    w.append(&changes.take(), || {})
                        .map_err(wal::AppendError::into_error)?;
                    txn.set_durability(redb::Durability::None)
                        .map_err(|e| Error::Config(e.to_string()))?;
                }
                // From this durable commit on, the store needs the log's new cycle until a
                // checkpoint or a clean close.
                Some(w) => wal::mark_started(&txn, w)?,
                None => {}
            }
            txn.commit()?;
            Ok(registered)
        });
        let (setup, next_id) = match setup.map_err(panic_to_error).and_then(|r| r) {
            Ok(v) => v,
            Err(e) => {
                // Drop the database before the error is on its way out: redb's drop can panic
                // on a store damaged under it, and a panic while a return value is in flight
                // leaks that value.
                let _ = guarded::catch(move || drop(db));
                return Err(e);
            }
        };

        let slot = Arc::new(db::DbSlot::new(db, wal, path.to_owned(), b.clone()));
        // A single-process store hands out message ids in memory, so that a transaction can
        // reserve the id of a message it sends without a commit (see `reserve_id`).
        let ids = (!multi).then(|| Arc::new(AtomicU64::new(next_id)));
        let unapplied = Arc::new(Unapplied::default());
        let pipeline = Pipeline::start(WriterContext {
            db: slot.clone(),
            owner: setup,
            durability: b.durability,
            clock: clock.clone(),
            signals: signals.clone(),
            stats: stats.clone(),
            reap_as: multi.then_some((setup, scope)),
            hints: Default::default(),
            activity: Default::default(),
            ids: ids.clone(),
            log_buf: Default::default(),
            applier: Default::default(),
            unapplied: unapplied.clone(),
            space: space::SpaceWatch::new(path),
        })?;
        stats.replayed.store(recovered.records, Ordering::Relaxed);
        let log_loss = recovered.loss;
        let look = Arc::new(poll::FileLook::new(
            Arc::downgrade(&slot),
            Arc::downgrade(&signals),
            clock.clone(),
            setup,
            scope,
        ));
        let watch = if multi {
            // Before the start: the watch may end (and say so) at once.
            look.set_watching(true);
            let l = look.clone();
            let watch = crate::os::watch::FileWatch::start(path, move |change| l.changed(change));
            if watch.is_none() {
                look.set_watching(false);
            }
            watch
        } else {
            None
        };
        Ok(Engine {
            db: slot,
            opened_by: crate::os::process::id(),
            pipeline,
            signals,
            clock,
            owner: setup,
            scope,
            path: path.to_owned(),
            multi_process: multi,
            durability: b.durability,
            poll_floor: b.poll_floor,
            poll_ceiling: b.poll_ceiling,
            closed: AtomicBool::new(false),
            stats,
            watch: crate::sync::Mutex::new(watch),
            look,
            open_mark: crate::sync::Mutex::new(Some(crate::os::lock::OpenMark::new(path))),
            ids,
            unapplied,
            janitor: crate::sync::Mutex::new(None),
            replies: crate::sync::Mutex::new(None),
            awaited: Default::default(),
            log_loss,
        })
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether this handle was inherited across `fork()` (this process did not open it).
    pub fn is_forked(&self) -> bool {
        crate::os::process::id() != self.opened_by
    }

    /// Fails in a forked child before anything else is touched: a lock that another thread of
    /// the parent held at fork time stays locked forever in the child.
    pub fn check_process(&self) -> Result<()> {
        let current = crate::os::process::id();
        if current == self.opened_by {
            Ok(())
        } else {
            Err(Error::Forked {
                opened_by: self.opened_by,
                current,
            })
        }
    }

    /// Messages this process sent to and completed from queue `q` since the store opened.
    pub fn traffic(&self, q: u32) -> (u64, u64) {
        let t = self.stats.traffic.lock();
        t.get(&q).map_or((0, 0), |t| (t.sent, t.completed))
    }

    pub fn check_open(&self) -> Result<()> {
        self.check_process()?;
        if self.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// Runs a mutation through the group-commit pipeline.
    pub fn call<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Batch<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.check_open()?;
        self.pipeline.call(f).map_err(|e| self.pipeline_error(e))
    }

    /// What a caller hears of a pipeline's error.
    pub(crate) fn pipeline_error(&self, e: Error) -> Error {
        match e {
            Error::Panic(_) if self.is_closed() => Error::Closed,
            // The writer caught a panic in this batch: redb panics on damaged pages, and
            // invariant 9 promises `Corrupted` for a damaged file, as `read` and `open` give.
            Error::Panic(m) => Error::Corrupted(format!("storage failure: {m}")),
            other => other,
        }
    }

    /// Queues a mutation without waiting for it.
    pub fn call_detached<F>(&self, f: F)
    where
        F: FnOnce(&mut Batch<'_>) -> Result<()> + Send + 'static,
    {
        if self.check_open().is_ok() {
            self.pipeline.detach(f);
        }
    }

    /// Runs a read on a fresh snapshot.
    pub fn read<T>(&self, f: impl FnOnce(&ReadTransaction) -> Result<T>) -> Result<T> {
        self.check_open()?;
        // A write acknowledged before this read began may still be on its way into redb.
        self.unapplied.wait();
        guarded::catch(|| {
            let db = self.db.get()?;
            let txn = db.begin_read()?;
            f(&txn)
        })
        .map_err(panic_to_error)?
        .inspect_err(|e| {
            if e.is_io_failure() {
                self.db.mark_broken();
            }
        })
    }

    /// Stops the pipeline after releasing this process's locks; later calls fail with `Closed`.
    /// In a forked child it only marks this handle closed: the file belongs to the parent.
    pub fn close(&self) -> Result<()> {
        if self.is_forked() {
            self.closed.store(true, Ordering::Release);
            return Ok(());
        }
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(j) = self.janitor.lock().take() {
            j.stop();
        }
        let owner = self.owner;
        // The closing job always writes (the unregistration), so it always commits durably:
        // that is also what makes `Durability::None` work durable at a clean close.
        let result = self.pipeline.stop(move |b| {
            b.release_locks_of(Some(owner))?;
            b.unregister_owner(owner)
        });
        self.signals.notify_all();
        if let Some(w) = self.watch.lock().take() {
            w.stop();
        }
        // Its pending looks (and async waiters' wake-ups, all woken above) go with the timer
        // thread, which holds them.
        self.look.close();
        self.signals.timer.stop();
        // The writer thread has exited with its handle; dropping this one closes the file.
        // redb's own drop can panic on a store damaged under it (a lock poisoned by an earlier
        // caught panic); that must not escape to the caller either.
        let (db, wal) = self.db.close();
        let dropped = guarded::catch(move || drop(db));
        *self.open_mark.lock() = None;
        // The closing batch was a checkpoint: the store file holds everything, and the log
        // goes, so that a closed store is one file. (Left behind, it would only be skipped.)
        // Closed before it is removed: on Windows the name of a file removed while open stays
        // taken until its last handle closes.
        if let Some(wal) = wal
            && result.is_ok()
            && !wal.has_failed()
        {
            let log = wal.path().to_owned();
            drop(wal);
            if let Err(e) = std::fs::remove_file(&log) {
                tracing::warn!(path = %log.display(), error = %e, "the write-ahead log could not be removed");
            }
        }
        match (result, dropped) {
            (Ok(()), Err(p)) => Err(panic_to_error(p)),
            (result, _) => result,
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.is_forked() {
            // The parent's database, writer and watch live on in the parent; here their
            // destructors would write its stale view of the file or wait for threads that do
            // not exist. Leak them.
            if let Some(db) = Arc::get_mut(&mut self.db) {
                db.leak();
            } else {
                std::mem::forget(self.db.clone());
            }
            self.pipeline.leak();
            if let Some(w) = self.watch.get_mut().take() {
                w.leak();
            }
            if let Some(j) = self.janitor.get_mut().take() {
                j.leak();
            }
            return;
        }
        let _ = self.close();
    }
}

pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
