//! The group-commit pipeline: one writer thread per store gathers every operation pending at
//! that moment into one redb write transaction and one fsync, then hands each caller its own
//! result.
//!
//! redb admits one write transaction at a time and a durable commit costs an fsync, so this is
//! where concurrency turns into throughput: a lone caller pays one commit, a hundred concurrent
//! callers share one. Operations validate before they write, so an invalid operation fails
//! alone; a storage failure part way through an operation aborts the whole batch and every
//! caller in it gets that error.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use redb::Database;

use super::batch::{Batch, DueHints};
use super::clock::Clock;
use super::park::{self, ParkedReceive};
use super::signal::Signals;
use crate::error::{Error, Result};
use crate::store::Durability;

/// The most operations one batch takes; more wait for the next batch, which bounds the latency
/// a single huge burst can add.
const MAX_BATCH: usize = 4096;

/// One caller's operation, type-erased.
pub trait Job: Send {
    /// Runs inside the batch's transaction.
    fn run(self: Box<Self>, batch: &mut Batch<'_>) -> Ran;
    /// The batch failed before the job ran.
    fn fail(self: Box<Self>, error: &Error);
}

/// Hands a job's result to its caller once the batch's outcome (`Some` = failed) is known.
type Deliver = Box<dyn FnOnce(Option<&Error>) + Send>;

/// A job that has run and waits for the batch's outcome.
pub struct Ran {
    /// Set when the job failed after writing: the batch cannot commit.
    fatal: Option<Error>,
    deliver: Deliver,
}

struct Call<F, T> {
    f: F,
    reply: Sender<Result<T>>,
}

impl<F, T> Job for Call<F, T>
where
    F: FnOnce(&mut Batch<'_>) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    fn run(self: Box<Self>, batch: &mut Batch<'_>) -> Ran {
        let before = batch.mutations;
        let result = (self.f)(batch);
        let fatal = match &result {
            Err(e) if batch.mutations != before => Some(e.duplicate()),
            _ => None,
        };
        let reply = self.reply;
        Ran {
            fatal,
            deliver: Box::new(move |batch_error| {
                let out = match (result, batch_error) {
                    (Ok(_), Some(e)) => Err(e.duplicate()),
                    (r, _) => r,
                };
                let _ = reply.send(out);
            }),
        }
    }

    fn fail(self: Box<Self>, error: &Error) {
        let _ = self.reply.send(Err(error.duplicate()));
    }
}

enum Msg {
    Job(Box<dyn Job>),
    /// A receive that waits in the writer until a batch makes a message receivable.
    Park(ParkedReceive),
    /// Finish what is queued, run the closing job durably, exit.
    Stop(Box<dyn Job>),
}

/// Counters of the pipeline, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct PipelineStats {
    pub commits: AtomicU64,
    pub operations: AtomicU64,
}

pub struct Pipeline {
    tx: Sender<Msg>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

pub struct WriterContext {
    pub db: Arc<Database>,
    pub durability: Durability,
    pub clock: Arc<dyn Clock>,
    pub signals: Arc<Signals>,
    pub stats: Arc<PipelineStats>,
    /// `Some(owner)` in multi-process mode: reap the locks of dead processes now and then.
    /// `Some((owner, scope))` in multi-process mode: reap the locks of dead processes now and then.
    pub reap_as: Option<(u64, u64)>,
    /// Carried between batches; only in single-process mode (see [`DueHints`]).
    pub hints: Mutex<DueHints>,
}

impl Pipeline {
    pub fn start(ctx: WriterContext) -> Result<Pipeline> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("postbox-writer".into())
            .spawn(move || writer_loop(&ctx, &rx))?;
        Ok(Pipeline {
            tx,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Runs `f` in the next batch and waits for its durable result.
    pub fn call<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Batch<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, rx) = crossbeam_channel::bounded(1);
        self.tx
            .send(Msg::Job(Box::new(Call { f, reply })))
            .map_err(|_| Error::Closed)?;
        rx.recv().unwrap_or_else(|_| {
            Err(Error::Panic(
                "the commit pipeline stopped before answering (see the log for a panic)".into(),
            ))
        })
    }

    /// Leaves a receive with the writer (see `park`).
    ///
    /// # Errors
    ///
    /// `Closed` when the writer has stopped.
    pub fn park(&self, request: ParkedReceive) -> Result<()> {
        self.tx.send(Msg::Park(request)).map_err(|_| Error::Closed)
    }

    /// Queues `f` without waiting for it (used by `Drop` implementations).
    pub fn detach<F>(&self, f: F)
    where
        F: FnOnce(&mut Batch<'_>) -> Result<()> + Send + 'static,
    {
        let (reply, _rx) = crossbeam_channel::bounded(1);
        let _ = self.tx.send(Msg::Job(Box::new(Call { f, reply })));
    }

    /// Runs `last` durably after everything queued, then stops the writer thread.
    pub fn stop<F>(&self, last: F) -> Result<()>
    where
        F: FnOnce(&mut Batch<'_>) -> Result<()> + Send + 'static,
    {
        let (reply, rx) = crossbeam_channel::bounded(1);
        let sent = self.tx.send(Msg::Stop(Box::new(Call { f: last, reply })));
        let result = match sent {
            Ok(()) => rx.recv().unwrap_or(Err(Error::Closed)),
            Err(_) => Err(Error::Closed),
        };
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
        result
    }
}

/// With `Durability::None`, a durable commit at least this often bounds what a crash can lose
/// and lets redb reclaim pages that only a durable commit frees.
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest a durable batch waits for the callers of the previous batch to come back.
const MAX_GATHER: std::time::Duration = std::time::Duration::from_micros(500);

fn writer_loop(ctx: &WriterContext, rx: &Receiver<Msg>) {
    let mut last_reap = std::time::Instant::now();
    let mut last_checkpoint = std::time::Instant::now();
    // Callers of a batch are answered together and come back together, but a woken thread
    // takes a while to run: without waiting, the first one back would get a commit of its own
    // and the rest would queue behind its fsync. So a durable batch waits briefly (a quarter
    // of the last commit's cost, at most MAX_GATHER) for as many callers as the last batch had.
    // A lone caller (expect == 1) never waits.
    let mut expect = 1usize;
    let mut last_cost = std::time::Duration::ZERO;
    let mut parked: Vec<ParkedReceive> = Vec::new();
    loop {
        // With receives parked, wake up for their deadlines and for time-driven work that can
        // make a message receivable (a scheduled message, a lock expiry).
        let wake_at = if parked.is_empty() {
            None
        } else {
            let due = ctx.hints.lock().next_receivable();
            let due_in = due.saturating_sub(ctx.clock.now_ms());
            let due_at = std::time::Instant::now()
                .checked_add(std::time::Duration::from_millis(due_in.max(1)));
            [park::next_deadline(&parked), due_at]
                .into_iter()
                .flatten()
                .min()
        };
        let first = match wake_at {
            None => match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => return,
            },
            Some(t) => match rx.recv_deadline(t) {
                Ok(m) => Some(m),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            },
        };
        let timer = first.is_none();
        let mut jobs = Vec::new();
        let mut stop = None;
        match first {
            Some(Msg::Job(j)) => jobs.push(j),
            Some(Msg::Park(p)) => parked.push(p),
            Some(Msg::Stop(j)) => stop = Some(j),
            None => {}
        }
        let gather = matches!(ctx.durability, Durability::Immediate) && expect > 1;
        let deadline = std::time::Instant::now() + (last_cost / 4).min(MAX_GATHER);
        while stop.is_none() && jobs.len() < MAX_BATCH {
            let next = if gather && jobs.len() < expect {
                rx.recv_deadline(deadline).ok()
            } else {
                rx.try_recv().ok()
            };
            match next {
                Some(Msg::Job(j)) => jobs.push(j),
                Some(Msg::Park(p)) => parked.push(p),
                Some(Msg::Stop(j)) => stop = Some(j),
                None => break,
            }
        }
        expect = jobs.len().max(1);
        let reap = match ctx.reap_as {
            Some(owner) if last_reap.elapsed() >= std::time::Duration::from_millis(100) => {
                last_reap = std::time::Instant::now();
                Some(owner)
            }
            _ => None,
        };
        if !jobs.is_empty() || !parked.is_empty() {
            let durability = match ctx.durability {
                Durability::None if last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL => {
                    last_checkpoint = std::time::Instant::now();
                    Durability::Immediate
                }
                other => other,
            };
            let started = std::time::Instant::now();
            run_guarded(ctx, jobs, &mut parked, timer, durability, reap);
            last_cost = started.elapsed();
        }
        if let Some(last) = stop {
            // Parked receives are dropped unanswered: their callers see the store closed.
            parked.clear();
            run_guarded(
                ctx,
                vec![last],
                &mut parked,
                false,
                Durability::Immediate,
                None,
            );
            // Anything sent after the stop is answered with `Closed` when `rx` is dropped.
            return;
        }
    }
}

fn run_guarded(
    ctx: &WriterContext,
    jobs: Vec<Box<dyn Job>>,
    parked: &mut Vec<ParkedReceive>,
    timer: bool,
    durability: Durability,
    reap: Option<(u64, u64)>,
) {
    // A panic (a bug, or redb meeting a damaged page) drops the jobs' reply channels, so their
    // callers get an error instead of hanging; the writer thread lives on.
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        run_batch(ctx, jobs, parked, timer, durability, reap)
    }));
    if outcome.is_err() {
        ctx.signals.notify_all();
    }
}

fn run_batch(
    ctx: &WriterContext,
    jobs: Vec<Box<dyn Job>>,
    parked: &mut Vec<ParkedReceive>,
    timer: bool,
    durability: Durability,
    reap: Option<(u64, u64)>,
) {
    let n = jobs.len() as u64;
    let mut fail_all = |jobs: Vec<Box<dyn Job>>, e: &Error| {
        for j in jobs {
            j.fail(e);
        }
        park::expire(parked, Some(e));
    };
    let mut txn = match ctx.db.begin_write() {
        Ok(t) => t,
        Err(e) => return fail_all(jobs, &e.into()),
    };
    if matches!(durability, Durability::None)
        && let Err(e) = txn.set_durability(redb::Durability::None)
    {
        return fail_all(jobs, &Error::Config(e.to_string()));
    }
    let mut ran = Vec::with_capacity(jobs.len());
    let mut served = Vec::new();
    let mut fatal: Option<Error> = None;
    let woken;
    let dirty;
    let final_hints;
    {
        let hints = if ctx.reap_as.is_none() {
            std::mem::take(&mut *ctx.hints.lock())
        } else {
            DueHints::default()
        };
        let mut batch = match Batch::open(&txn, ctx.clock.now_ms(), hints) {
            Ok(b) => b,
            Err(e) => return fail_all(jobs, &e),
        };
        let mut maintenance = batch.sweep();
        if let (Ok(()), Some(me)) = (&maintenance, reap) {
            maintenance = batch.reap_dead_owners(me.0, me.1);
        }
        if let Err(e) = maintenance {
            drop(batch);
            let _ = txn.abort();
            return fail_all(jobs, &e);
        }
        let mut rest = jobs.into_iter();
        for job in rest.by_ref() {
            let r = job.run(&mut batch);
            let failed = r.fatal.as_ref().map(Error::duplicate);
            ran.push(r);
            if let Some(e) = failed {
                fatal = Some(e);
                break;
            }
        }
        if let Some(e) = &fatal {
            for j in rest {
                j.fail(e);
            }
        } else {
            match park::serve(&mut batch, parked, timer) {
                Ok(s) => served = s,
                Err(e) => fatal = Some(e),
            }
            if fatal.is_none()
                && let Err(e) = batch.flush()
            {
                fatal = Some(e);
            }
        }
        dirty = batch.mutations > 0;
        woken = std::mem::take(&mut batch.woken);
        final_hints = batch.hints;
    }
    let outcome = match fatal {
        Some(e) => {
            let _ = txn.abort();
            Some(e)
        }
        None if !dirty => {
            let _ = txn.abort();
            None
        }
        None => match txn.commit() {
            Ok(()) => {
                ctx.stats.commits.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => Some(Error::from(e)),
        },
    };
    if outcome.is_none() && ctx.reap_as.is_none() {
        // Hints taken from the store are kept only if what they describe was committed; on
        // failure the default (look everywhere) stays in place.
        *ctx.hints.lock() = final_hints;
    }
    // A parked receive served in this batch is an operation of the batch like any other.
    ctx.stats
        .operations
        .fetch_add(n + served.len() as u64, Ordering::Relaxed);
    for r in ran {
        (r.deliver)(outcome.as_ref());
    }
    for s in served {
        s.answer(outcome.as_ref());
    }
    if outcome.is_none() {
        ctx.signals.notify(woken);
    }
}
