//! The group-commit pipeline: every operation pending at one moment goes into one redb write
//! transaction and one fsync, and each caller gets its own result.
//!
//! redb admits one write transaction at a time and a durable commit costs an fsync, so this is
//! where concurrency turns into throughput: a lone caller pays one commit, a hundred concurrent
//! callers share one. Operations validate before they write, so an invalid operation fails
//! alone; a storage failure part way through an operation aborts the whole batch and every
//! caller in it gets that error.
//!
//! Who runs a batch is decided by leader election rather than by a fixed writer thread: a
//! caller that finds nobody writing runs the batch itself (on its own thread, with no hand-off),
//! and whatever queues up behind it is handed to the writer thread. See [`Pipeline`].
//!
//! The files, one concern each: `leader.rs` is the inbox and the election (who runs the next
//! batch); `job.rs` a caller's operation as the batch sees it; `writer.rs` what a batch runs on
//! (the `Writer` trait, and the store's `WriterContext`); `run.rs` running one batch on the
//! store and answering its callers; `commit.rs` committing it (logged, or durably to redb) and
//! settling a failed commit; `applier.rs` the thread that applies logged batches to redb;
//! `behind.rs` batches of small logical operations, run on that thread and acknowledged
//! before redb commits them; `unapplied.rs` what reads wait for meanwhile; `stats.rs` the
//! counters. This file is the handle the store holds.

mod applier;
mod behind;
mod commit;
#[cfg(all(test, shuttle))]
mod concurrency_checking;
mod job;
mod leader;
mod run;
mod stats;
mod unapplied;
mod writer;

pub use stats::PipelineStats;
pub use unapplied::Unapplied;
pub use writer::{Writer, WriterContext};

use std::sync::Arc;

use crate::sync::Mutex;
use crate::sync::thread::{self, JoinHandle};

use self::job::{Call, LogicalCall};
use self::leader::{Leader, Msg, Shared};
use super::batch::Batch;
use super::logical::{LogicalOp, LogicalOut};
use super::park::ParkedReceive;
use crate::error::{Error, Result};

/// The group-commit pipeline of one store.
///
/// Callers queue their operations in an inbox. If nobody is writing, the caller itself leads:
/// it runs one batch with everything queued, on its own thread, so a lone caller pays no
/// thread hand-off (two context switches, a third of the CPU of a small commit). Whatever
/// arrives while a batch runs is left to the writer thread, which leads until the inbox is
/// empty; the writer thread also runs the time-driven batches parked receives need.
pub struct Pipeline<W: Writer = WriterContext> {
    shared: Arc<Shared<W>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set by [`Pipeline::leak`]: `Drop` must not touch the shared state.
    leaked: bool,
}

impl<W: Writer> Pipeline<W> {
    pub fn start(ctx: W) -> Result<Pipeline<W>> {
        let shared = Arc::new(Shared::new(ctx));
        let writer = shared.clone();
        let thread = thread::Builder::new()
            .name("postbox-writer".into())
            .spawn(move || writer.writer_loop())?;
        Ok(Pipeline {
            shared,
            thread: Mutex::new(Some(thread)),
            leaked: false,
        })
    }

    /// Queues `job` for the next batch, and runs that batch on this thread if nobody else is
    /// writing.
    fn enqueue(&self, job: W::Job) -> Result<()> {
        if self.shared.submit(Msg::Job(job), true)? {
            self.shared.lead(Leader::Caller, false);
        }
        Ok(())
    }

    /// Leaves a receive with the writer (see `park`); it is tried at once, on this thread if
    /// nobody else is writing.
    ///
    /// # Errors
    ///
    /// `Closed` when the pipeline has stopped.
    pub fn park(&self, request: ParkedReceive) -> Result<()> {
        if self.shared.submit(Msg::Park(request), true)? {
            self.shared.lead(Leader::Caller, false);
        }
        Ok(())
    }

    /// [`Pipeline::park`] for a caller that must not block (an async receive): the request is
    /// always left to the writer thread, which tries it at once.
    ///
    /// # Errors
    ///
    /// `Closed` when the pipeline has stopped.
    pub fn park_detached(&self, request: ParkedReceive) -> Result<()> {
        self.shared.submit(Msg::Park(request), false).map(drop)
    }

    /// In a forked child: keeps the shared state alive forever, so that dropping this handle
    /// neither locks the inbox (another thread of the parent may have held it at fork time)
    /// nor drops the database the parent's writer thread owned.
    pub fn leak(&mut self) {
        std::mem::forget(self.shared.clone());
        if let Some(t) = self.thread.get_mut().take() {
            std::mem::forget(t);
        }
        self.leaked = true;
    }

    /// Queues `last` to run after everything queued, then waits for the writer thread to
    /// stop; `answer` waits for `last`'s result once it is queued.
    fn close<R>(&self, last: W::Job, answer: impl FnOnce() -> Result<R>) -> Result<R> {
        let result = match self.shared.submit(Msg::Stop(last), false) {
            Ok(_) => answer(),
            Err(e) => Err(e),
        };
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        result
    }
}

impl Pipeline {
    /// Runs `f` in the next batch and waits for its durable result.
    pub fn call<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Batch<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, rx) = self.shared.answers.pair();
        self.enqueue(Box::new(Call { f, reply }))?;
        rx.recv().unwrap_or_else(|_| {
            Err(Error::Panic(
                "the commit pipeline stopped before answering (see the log for a panic)".into(),
            ))
        })
    }

    /// Runs `op` in the next batch and waits for its durable result: as [`Pipeline::call`],
    /// but a batch of such operations is logged as the operations (see `engine::logical`).
    pub fn call_logical(&self, op: LogicalOp) -> Result<LogicalOut> {
        let (reply, rx) = self.shared.answers.pair();
        self.enqueue(Box::new(LogicalCall { op, reply }))?;
        rx.recv().unwrap_or_else(|_| {
            Err(Error::Panic(
                "the commit pipeline stopped before answering (see the log for a panic)".into(),
            ))
        })
    }

    /// Queues `f` without waiting for it (used by `Drop` implementations).
    pub fn detach<F>(&self, f: F)
    where
        F: FnOnce(&mut Batch<'_>) -> Result<()> + Send + 'static,
    {
        let (reply, _rx) = self.shared.answers.pair();
        let _ = self
            .shared
            .submit(Msg::Job(Box::new(Call { f, reply })), false);
    }

    /// A handle that queues jobs like [`Pipeline::detach`] without keeping the pipeline alive:
    /// usable from the writer thread itself (an async receive's answer hook), where the last
    /// handle to the store must not be dropped.
    pub fn detacher(&self) -> Detacher {
        Detacher(Arc::downgrade(&self.shared))
    }

    /// Runs `last` durably after everything queued, then stops the writer thread.
    pub fn stop<F>(&self, last: F) -> Result<()>
    where
        F: FnOnce(&mut Batch<'_>) -> Result<()> + Send + 'static,
    {
        let (reply, rx) = self.shared.answers.pair();
        self.close(Box::new(Call { f: last, reply }), || {
            // A reply dropped unanswered means the writer caught a panic in the closing batch:
            // redb failing on a damaged page, which invariant 9 reports as `Corrupted` (the
            // corruption sweep found this answered `Closed`, which says nothing of the file).
            rx.recv().unwrap_or_else(|_| {
                Err(Error::Corrupted(
                    "storage failure: the commit pipeline stopped before answering the close"
                        .into(),
                ))
            })
        })
    }
}

/// See [`Pipeline::detacher`].
pub struct Detacher(std::sync::Weak<Shared<WriterContext>>);

impl Detacher {
    /// Queues `f` for a later batch, if the pipeline still runs.
    pub fn detach<F>(&self, f: F)
    where
        F: FnOnce(&mut Batch<'_>) -> Result<()> + Send + 'static,
    {
        if let Some(shared) = self.0.upgrade() {
            let (reply, _rx) = shared.answers.pair();
            let _ = shared.submit(Msg::Job(Box::new(Call { f, reply })), false);
        }
    }
}

impl std::fmt::Debug for Detacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Detacher")
    }
}

impl<W: Writer> Drop for Pipeline<W> {
    fn drop(&mut self) {
        if self.leaked {
            return;
        }
        // After `stop` this changes nothing; without it (opening failed half-way) it lets the
        // writer thread go.
        self.shared.release();
    }
}
