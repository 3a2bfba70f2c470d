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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sync::channel::{self, Sender};
use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Condvar, Mutex};

#[cfg(all(test, shuttle))]
mod concurrency_checking;

use super::batch::{Batch, DueHints, Traffic};
use super::db::{DbSlot, Resolved};
use super::guarded;
use super::logged::{Changes, LoggedTxn};
use super::park::{self, ParkedReceive};
use super::signal::Signals;
use super::space::SpaceWatch;
use super::wal::{self, AppendError, Wal};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::options::Durability;

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
        let (result, fatal) = match batch.attempt(self.f) {
            Ok(result) => (result, None),
            // The caller hears the error; the batch aborts because of it.
            Err(e) => {
                let fatal = e.duplicate();
                (Err(e), Some(fatal))
            }
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

enum Msg<J> {
    Job(J),
    /// A receive that waits in the writer until a batch makes a message receivable.
    Park(ParkedReceive),
    /// Finish what is queued, run the closing job durably, exit.
    Stop(J),
}

/// Counters of the pipeline, for `Store::stats`, tests and benchmarks.
#[derive(Debug, Default)]
pub struct PipelineStats {
    pub commits: AtomicU64,
    pub operations: AtomicU64,
    /// Write-ahead log records replayed when the store was opened.
    pub replayed: AtomicU64,
    pub log_records: AtomicU64,
    pub log_bytes: AtomicU64,
    pub checkpoints: AtomicU64,
    /// Where a logged batch's time goes: running its operations, committing them to redb
    /// (without a sync), writing its record, syncing the log.
    pub run_ns: AtomicU64,
    pub apply_ns: AtomicU64,
    pub log_write_ns: AtomicU64,
    pub log_sync_ns: AtomicU64,
    /// Messages this process's committed batches sent to and completed from each queue (by
    /// queue id): the traffic behind the admin endpoint's rates.
    pub traffic: Mutex<HashMap<u32, Traffic>>,
}

/// What waits to be written, and who is writing.
struct Inbox<J> {
    msgs: VecDeque<Msg<J>>,
    /// Someone leads: only the leader takes messages and runs batches.
    leading: bool,
    /// A leader passed leadership to the writer thread.
    handoff: bool,
    /// When the writer thread must run a batch of its own (a parked receive's deadline, or a
    /// scheduled message or lock expiry that may serve one). Set by each leader on leaving.
    timer_at: Option<Instant>,
    /// The writer thread found its timer due while somebody else led, and sleeps until told.
    timer_blocked: bool,
    /// No more messages are taken (a stop is queued or done).
    closed: bool,
    /// The stop has run: the writer thread exits.
    exit: bool,
}

/// What only the leader touches, carried from batch to batch.
struct Carried {
    parked: Vec<ParkedReceive>,
    /// Number of the last batch run (its commit mark; see `db`).
    batch_no: u64,
    /// Callers the next batch may expect: those the last batch answered and those that
    /// queued while it ran. A durable batch waits briefly for as many.
    expect: usize,
    last_cost: Duration,
    last_reap: Instant,
    last_checkpoint: Instant,
}

struct Shared<W: Writer> {
    ctx: W,
    inbox: Mutex<Inbox<W::Job>>,
    /// Wakes the writer thread: a handoff, an earlier timer, the exit.
    writer_cv: Condvar,
    /// Wakes a leader that gathers a batch.
    arrived: Condvar,
    /// Never contended: only the leader locks it.
    carried: Mutex<Carried>,
}

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

pub struct WriterContext {
    /// Closed once the stop has run, so that closing releases the file even while handles
    /// to the store (and so this pipeline) live on.
    pub db: Arc<DbSlot>,
    /// This process's owner id: its commit marks tell whether a failed commit landed.
    pub owner: u64,
    pub durability: Durability,
    pub clock: Arc<dyn Clock>,
    pub signals: Arc<Signals>,
    pub stats: Arc<PipelineStats>,
    /// `Some((owner, scope))` in multi-process mode: reap the locks of dead processes now and
    /// then.
    pub reap_as: Option<(u64, u64)>,
    /// Carried between batches; only in single-process mode (see [`DueHints`]).
    pub hints: Mutex<DueHints>,
    /// When this process last recorded each queue's activity (see `Batch::track_activity`).
    pub activity: Arc<Mutex<std::collections::HashMap<u32, u64>>>,
    /// Single-process stores: the shared next message id (see `Batch::share_ids`).
    pub ids: Option<Arc<AtomicU64>>,
    /// The buffer log records are built in, kept between batches.
    pub log_buf: Mutex<Vec<u8>>,
    /// Started with the first logged batch.
    pub applier: Mutex<Option<Applier>>,
    /// Set once a write failed for want of space: batches then commit durably.
    pub space: SpaceWatch,
}

/// A batch taken from the inbox: its jobs, and the closing job if a stop was queued.
type Taken<J> = (Vec<J>, Option<J>);

/// What the pipeline's batches run on: the store ([`WriterContext`]) — or, in the concurrency
/// checks, a stand-in that answers its jobs without a file, so that the checks drive this
/// pipeline's own hand-off.
pub trait Writer: Send + Sync + 'static {
    type Job: Send;
    fn durability(&self) -> Durability;
    /// See [`WriterContext::reap_as`].
    fn reap_as(&self) -> Option<(u64, u64)>;
    /// Milliseconds until time-driven work (a scheduled message, a lock expiry) may serve a
    /// parked receive.
    fn due_in_ms(&self) -> u64;
    /// Runs one batch and answers its callers.
    fn run(
        &self,
        jobs: Vec<Self::Job>,
        parked: &mut Vec<ParkedReceive>,
        timer: bool,
        durability: Durability,
        reap: Option<(u64, u64)>,
        batch_no: u64,
    );
}

impl Writer for WriterContext {
    type Job = Box<dyn Job>;

    fn durability(&self) -> Durability {
        // Short of space, `Durability::None` commits durably too: only a durable commit lets
        // redb reuse the pages the commits before it freed.
        match self.durability {
            Durability::None if self.space.is_short() => Durability::Immediate,
            d => d,
        }
    }

    fn reap_as(&self) -> Option<(u64, u64)> {
        self.reap_as
    }

    fn due_in_ms(&self) -> u64 {
        let due = self.hints.lock().next_receivable();
        due.saturating_sub(self.clock.now_ms())
    }

    fn run(
        &self,
        jobs: Vec<Box<dyn Job>>,
        parked: &mut Vec<ParkedReceive>,
        timer: bool,
        durability: Durability,
        reap: Option<(u64, u64)>,
        batch_no: u64,
    ) {
        run_guarded(self, jobs, parked, timer, durability, reap, batch_no);
    }
}

/// Who leads: a caller runs one batch, the writer thread runs until nothing is left.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leader {
    Caller,
    Writer,
}

impl<W: Writer> Pipeline<W> {
    pub fn start(ctx: W) -> Result<Pipeline<W>> {
        let now = Instant::now();
        let shared = Arc::new(Shared {
            ctx,
            inbox: Mutex::new(Inbox {
                msgs: VecDeque::new(),
                leading: false,
                handoff: false,
                timer_at: None,
                timer_blocked: false,
                closed: false,
                exit: false,
            }),
            writer_cv: Condvar::new(),
            arrived: Condvar::new(),
            carried: Mutex::new(Carried {
                parked: Vec::new(),
                batch_no: 0,
                expect: 1,
                last_cost: Duration::ZERO,
                last_reap: now,
                last_checkpoint: now,
            }),
        });
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
        let (reply, rx) = channel::bounded(1);
        self.enqueue(Box::new(Call { f, reply }))?;
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
        let (reply, _rx) = channel::bounded(1);
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
        let (reply, rx) = channel::bounded(1);
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
            let (reply, _rx) = channel::bounded(1);
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
        let mut inbox = self.shared.inbox.lock();
        inbox.closed = true;
        inbox.exit = true;
        self.shared.writer_cv.notify_one();
    }
}

/// With `Durability::None`, a durable commit at least this often bounds what a crash can lose
/// and lets redb reclaim pages that only a durable commit frees.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// The longest a durable batch waits for the callers of the previous batch to come back.
const MAX_GATHER: Duration = Duration::from_micros(500);

impl<W: Writer> Shared<W> {
    /// Queues `msg`. `Ok(true)`: nobody was writing and the caller must now lead. A caller
    /// that may not block (`may_lead == false`) hands the lead to the writer thread instead.
    fn submit(&self, msg: Msg<W::Job>, may_lead: bool) -> Result<bool> {
        let mut inbox = self.inbox.lock();
        if inbox.closed {
            return Err(Error::Closed);
        }
        if matches!(msg, Msg::Stop(_)) {
            inbox.closed = true;
        }
        inbox.msgs.push_back(msg);
        if inbox.leading {
            self.arrived.notify_one();
            return Ok(false);
        }
        inbox.leading = true;
        if may_lead {
            return Ok(true);
        }
        inbox.handoff = true;
        self.writer_cv.notify_one();
        Ok(false)
    }

    /// The writer thread: leads when handed the lead, and runs the time-driven batches.
    fn writer_loop(&self) {
        loop {
            let timer = {
                let mut inbox = self.inbox.lock();
                loop {
                    if inbox.exit {
                        return;
                    }
                    if inbox.handoff {
                        inbox.handoff = false;
                        break false;
                    }
                    match inbox.timer_at {
                        Some(at) if !inbox.leading => {
                            if Instant::now() >= at {
                                inbox.leading = true;
                                inbox.timer_at = None;
                                break true;
                            }
                            self.writer_cv.wait_until(&mut inbox, at);
                        }
                        Some(_) => {
                            // Whoever leads sets a new timer when it leaves, and wakes us.
                            inbox.timer_blocked = true;
                            self.writer_cv.wait(&mut inbox);
                        }
                        None => self.writer_cv.wait(&mut inbox),
                    }
                }
            };
            if self.lead(Leader::Writer, timer) {
                return;
            }
        }
    }

    /// Runs batches as the leader (the caller has set `inbox.leading`). Returns true once
    /// the stop has run.
    fn lead(&self, who: Leader, timer: bool) -> bool {
        let mut carried = self.carried.lock();
        let c = &mut *carried;
        let mut timer = timer;
        loop {
            let Some((jobs, stop)) = self.take(c, timer) else {
                return false;
            };
            // Callers answered by this batch come back together (its jobs, and the parked
            // receives it serves or answers at their deadline); so do the ones that queued up
            // while it ran, answered by the next. Waiting for both keeps two halves of the
            // callers from settling into alternate commits of half the size.
            let answered = jobs.len();
            let parked_before = c.parked.len();
            let reap = match self.ctx.reap_as() {
                Some(owner) if c.last_reap.elapsed() >= Duration::from_millis(100) => {
                    c.last_reap = Instant::now();
                    Some(owner)
                }
                _ => None,
            };
            if !jobs.is_empty() || !c.parked.is_empty() {
                let durability = match self.ctx.durability() {
                    Durability::None if c.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL => {
                        c.last_checkpoint = Instant::now();
                        Durability::Immediate
                    }
                    other => other,
                };
                let started = Instant::now();
                c.batch_no += 1;
                self.ctx
                    .run(jobs, &mut c.parked, timer, durability, reap, c.batch_no);
                c.last_cost = started.elapsed();
            }
            timer = false;
            if let Some(last) = stop {
                // Parked receives are dropped unanswered: their callers see the store closed.
                c.parked.clear();
                // Batch 0 writes no commit mark: the closing batch unregisters this owner.
                self.ctx.run(
                    vec![last],
                    &mut c.parked,
                    false,
                    Durability::Immediate,
                    None,
                    0,
                );
                let mut inbox = self.inbox.lock();
                inbox.exit = true;
                self.writer_cv.notify_one();
                return true;
            }
            let mut inbox = self.inbox.lock();
            c.expect =
                (answered + parked_before.saturating_sub(c.parked.len()) + inbox.msgs.len()).max(1);
            if who == Leader::Caller {
                // The caller's own operation is done: what came meanwhile goes to the writer
                // thread, so this caller returns now.
                if inbox.msgs.is_empty() {
                    self.step_down(&mut inbox, c);
                } else {
                    inbox.handoff = true;
                    self.writer_cv.notify_one();
                }
                return false;
            }
        }
    }

    /// Takes the next batch from the inbox: its jobs, and the stop if one is queued (parked
    /// receives go straight to `c.parked`). `None` (and leadership given up) when there is
    /// nothing to do.
    fn take(&self, c: &mut Carried, timer: bool) -> Option<Taken<W::Job>> {
        let mut inbox = self.inbox.lock();
        // Callers of a batch are answered together and come back together, but a woken
        // thread takes a while to run: without waiting, the first one back would get a commit
        // of its own and the rest would queue behind its fsync. So a durable batch waits
        // briefly (a quarter of the last commit's cost, at most MAX_GATHER) for as many
        // callers as the last batch had. A lone caller (expect == 1) never waits.
        if matches!(self.ctx.durability(), Durability::Immediate) && c.expect > 1 {
            let deadline = Instant::now() + (c.last_cost / 4).min(MAX_GATHER);
            while inbox.msgs.len() < c.expect && !inbox.closed {
                if self.arrived.wait_until(&mut inbox, deadline).timed_out() {
                    break;
                }
            }
        }
        if inbox.msgs.is_empty() && !timer {
            self.step_down(&mut inbox, c);
            return None;
        }
        let mut jobs = Vec::with_capacity(inbox.msgs.len().min(MAX_BATCH));
        let mut stop = None;
        while jobs.len() < MAX_BATCH {
            match inbox.msgs.pop_front() {
                Some(Msg::Job(j)) => jobs.push(j),
                Some(Msg::Park(p)) => c.parked.push(p),
                Some(Msg::Stop(j)) => {
                    stop = Some(j);
                    break;
                }
                None => break,
            }
        }
        Some((jobs, stop))
    }

    /// Gives up the lead, leaving the writer thread a timer if parked receives need one.
    fn step_down(&self, inbox: &mut Inbox<W::Job>, c: &Carried) {
        inbox.leading = false;
        let at = if c.parked.is_empty() {
            None
        } else {
            let due_in = self.ctx.due_in_ms();
            let due_at = Instant::now().checked_add(Duration::from_millis(due_in.max(1)));
            [park::next_deadline(&c.parked), due_at]
                .into_iter()
                .flatten()
                .min()
        };
        let changed = at != inbox.timer_at;
        inbox.timer_at = at;
        if at.is_some() && (changed || inbox.timer_blocked) {
            inbox.timer_blocked = false;
            self.writer_cv.notify_one();
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
    batch_no: u64,
) {
    // A panic (a bug, or redb meeting a damaged page) drops the jobs' reply channels, so their
    // callers get an error instead of hanging; the writer thread lives on.
    let outcome =
        guarded::catch(|| run_batch(ctx, jobs, parked, timer, durability, reap, batch_no));
    if outcome.is_err() {
        // The parked receives this batch did not reach are still parked. A caller whose
        // deadline passed (a `try_receive`) waits for its answer, and the time-driven batch
        // that would answer it may panic on the same damaged page every time: answer those
        // callers now, as a failed batch does.
        park::expire(
            parked,
            Some(&Error::Corrupted(
                "storage failure: the commit pipeline caught a panic before answering".into(),
            )),
        );
        ctx.signals.notify_all();
    }
}

/// A commit failed: find out whether it landed, so that callers hear the truth. `None` when
/// the batch is durable after all; its error (`StorageFull` for a full disk) when it is not; a
/// commit whose outcome cannot be learnt is `OutcomeUnknown`.
fn settle_failed_commit(ctx: &WriterContext, batch_no: u64, failed: Error) -> Option<Error> {
    if batch_no == 0 {
        // The closing batch writes no mark; the next open settles what it left.
        ctx.db.mark_broken();
        return Some(failed);
    }
    match ctx.db.resolve(ctx.owner, batch_no, &failed) {
        Resolved::Applied => {
            tracing::warn!(error = %failed, "a commit reported failure but is durable");
            ctx.stats.commits.fetch_add(1, Ordering::Relaxed);
            None
        }
        Resolved::NotApplied => Some(match failed {
            Error::OutcomeUnknown(text) => Error::Io(std::io::Error::other(format!(
                "the commit failed and was not applied: {text}"
            ))),
            other => other,
        }),
        Resolved::Unknown(unknown) => Some(unknown),
    }
}

/// Commits a batch whose record goes to the log: the record is written first (a failure
/// there aborts the batch cleanly); then redb commits the batch without a sync on the applier
/// thread while this thread syncs the log, so that the apply costs no time of its own. The
/// batch is durable when the sync returns.
///
/// A failed sync leaves the outcome unknown and the log closed; a failed apply leaves redb
/// refusing further use, while the batch is durable in the log. Either way the store is
/// marked for reopening, which replays the log: the store then holds the batch exactly when
/// its record is durable. Returns the batch's error, if any — or, when the log had to grow
/// and the disk had no room, the transaction back, for a durable commit instead.
fn commit_logged(
    ctx: &WriterContext,
    mut txn: redb::WriteTransaction,
    wal: &Wal,
    body: &[u8],
    started: Instant,
) -> std::result::Result<Option<Error>, Box<redb::WriteTransaction>> {
    let ran = Instant::now();
    if let Err(e) = txn.set_durability(redb::Durability::None) {
        let _ = txn.abort();
        return Ok(Some(Error::Config(e.to_string())));
    }
    let mut applier = ctx.applier.lock();
    let applier = applier.get_or_insert_with(Applier::start);
    let mut pending = Some(txn);
    let appended = wal.append(body, || {
        if let Some(t) = pending.take() {
            applier.hand(t);
        }
    });
    let s = &ctx.stats;
    Ok(match appended {
        Err(AppendError::NoRoom(e)) => match pending {
            Some(t) => return Err(Box::new(t)),
            None => Some(e),
        },
        Err(AppendError::NotWritten(e)) => {
            if let Some(t) = pending {
                let _ = t.abort();
            }
            Some(e)
        }
        Err(AppendError::NotSynced(e)) => {
            let _ = applier.wait();
            ctx.db.mark_broken();
            Some(e)
        }
        Ok(a) => {
            let (applied, apply_ns) = applier.wait();
            s.commits.fetch_add(1, Ordering::Relaxed);
            s.log_records.fetch_add(1, Ordering::Relaxed);
            s.log_bytes.fetch_add(a.bytes, Ordering::Relaxed);
            s.run_ns
                .fetch_add((ran - started).as_nanos() as u64, Ordering::Relaxed);
            s.apply_ns.fetch_add(apply_ns, Ordering::Relaxed);
            s.log_write_ns.fetch_add(a.write_ns, Ordering::Relaxed);
            s.log_sync_ns.fetch_add(a.sync_ns, Ordering::Relaxed);
            if let Err(e) = applied {
                // Durable in the log all the same: the reopen replays it.
                tracing::warn!(error = %e, "applying a logged batch failed; the store reopens");
                ctx.db.mark_broken();
            }
            None
        }
    })
}

/// Commits a batch durably to the store file: with a log, as a checkpoint (every record so
/// far is then applied, and the log starts a new cycle; the closing batch, `batch_no` 0,
/// records that the store needs no log); without, as asked by `durability`.
fn commit_durably(
    ctx: &WriterContext,
    mut txn: redb::WriteTransaction,
    wal: Option<&Wal>,
    durability: Durability,
    batch_no: u64,
    oversized: bool,
) -> Option<Error> {
    let commit = (|| -> Result<()> {
        if let Some(w) = wal {
            // The batch is not logged: when it is durable, so is every record.
            wal::checkpoint(&txn, w, batch_no == 0)?;
        } else if matches!(durability, Durability::None) {
            txn.set_durability(redb::Durability::None)
                .map_err(|e| Error::Config(e.to_string()))?;
        }
        Ok(txn.commit()?)
    })();
    match commit {
        Ok(()) => {
            ctx.stats.commits.fetch_add(1, Ordering::Relaxed);
            if let Some(w) = wal {
                w.reset();
                ctx.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            None
        }
        Err(e) if oversized => {
            // No mark was written for this batch: a reopen tells nothing about it.
            ctx.db.mark_broken();
            Some(match e {
                e @ Error::StorageFull(_) => e,
                other => Error::OutcomeUnknown(other.to_string()),
            })
        }
        Err(failed) => settle_failed_commit(ctx, batch_no, failed),
    }
}

/// Commits logged batches' redb transactions (without a sync) on a thread of its own, so that
/// the leader can sync the log meanwhile.
///
/// It runs only with a write-ahead log, which the concurrency checks do not drive, so it keeps
/// std's threads and crossbeam's channels under `--cfg shuttle` too.
pub struct Applier {
    jobs: Option<crossbeam_channel::Sender<redb::WriteTransaction>>,
    done: crossbeam_channel::Receiver<(Result<()>, u64)>,
    /// Set when the thread could not be started: commits run on the leader's thread.
    inline: Option<redb::WriteTransaction>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Applier {
    fn start() -> Applier {
        let (jobs, rx) = crossbeam_channel::bounded::<redb::WriteTransaction>(1);
        let (tx, done) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name("postbox-apply".into())
            .spawn(move || {
                for txn in rx {
                    let t = Instant::now();
                    let r = guarded::catch(|| txn.commit().map_err(Error::from))
                        .map_err(super::panic_to_error)
                        .and_then(|r| r);
                    if tx.send((r, t.elapsed().as_nanos() as u64)).is_err() {
                        return;
                    }
                }
            })
            .ok();
        Applier {
            jobs: thread.as_ref().map(|_| jobs),
            done,
            inline: None,
            thread,
        }
    }

    fn hand(&mut self, txn: redb::WriteTransaction) {
        match &self.jobs {
            Some(jobs) => {
                if let Err(e) = jobs.send(txn) {
                    self.inline = Some(e.into_inner());
                }
            }
            None => self.inline = Some(txn),
        }
    }

    /// The outcome of the transaction last handed over, and the nanoseconds its commit took.
    fn wait(&mut self) -> (Result<()>, u64) {
        if let Some(txn) = self.inline.take() {
            let t = Instant::now();
            let r = txn.commit().map_err(Error::from);
            return (r, t.elapsed().as_nanos() as u64);
        }
        self.done
            .recv()
            .unwrap_or_else(|_| (Err(Error::Panic("the apply thread stopped".into())), 0))
    }
}

impl Drop for Applier {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run_batch(
    ctx: &WriterContext,
    jobs: Vec<Box<dyn Job>>,
    parked: &mut Vec<ParkedReceive>,
    timer: bool,
    durability: Durability,
    reap: Option<(u64, u64)>,
    batch_no: u64,
) {
    let n = jobs.len() as u64;
    let mut fail_all = |jobs: Vec<Box<dyn Job>>, e: &Error| {
        if e.is_io_failure() {
            ctx.db.mark_broken();
        }
        for j in jobs {
            j.fail(e);
        }
        park::expire(parked, Some(e));
    };
    let (db, wal) = match ctx.db.get_with_log() {
        Ok(both) => both,
        Err(e) => return fail_all(jobs, &e),
    };
    let txn = match db.begin_write() {
        Ok(t) => t,
        Err(e) => return fail_all(jobs, &e.into()),
    };
    // With a log, a batch is made durable by its record, or (a checkpoint: the closing batch,
    // or one due by the log's size or age) by a durable redb commit that marks every record so
    // far as applied.
    let checkpoint = wal
        .as_ref()
        .is_some_and(|w| batch_no == 0 || w.checkpoint_due() || ctx.space.is_short());
    let logged = wal.is_some() && !checkpoint;
    let changes = if logged {
        Changes::on(std::mem::take(&mut *ctx.log_buf.lock()))
    } else {
        Changes::off()
    };
    let started = Instant::now();
    let mut ran = Vec::with_capacity(jobs.len());
    let mut served = Vec::new();
    let mut fatal: Option<Error> = None;
    let woken;
    let traffic;
    let dirty;
    let final_hints;
    {
        let hints = if ctx.reap_as.is_none() {
            std::mem::take(&mut *ctx.hints.lock())
        } else {
            DueHints::default()
        };
        let ltxn = LoggedTxn {
            txn: &txn,
            changes: &changes,
        };
        let mut batch = match Batch::open(ltxn, ctx.clock.now_ms(), hints) {
            Ok(b) => b,
            Err(e) => return fail_all(jobs, &e),
        };
        batch.track_activity(ctx.activity.clone());
        if let Some(ids) = &ctx.ids {
            batch.share_ids(ids.clone());
        }
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
        dirty = batch.changed();
        // Commit marks settle a failed durable commit (see `db`); a logged batch that fails
        // is settled by reopening, which replays the log.
        if fatal.is_none()
            && dirty
            && batch_no != 0
            && !logged
            && let Err(e) = batch.write_mark(ctx.owner, batch_no)
        {
            fatal = Some(e);
        }
        woken = std::mem::take(&mut batch.woken);
        traffic = std::mem::take(&mut batch.traffic);
        final_hints = batch.hints;
    }
    let mut body = changes.take();
    let oversized = wal
        .as_ref()
        .is_some_and(|w| logged && w.too_big(body.len()));
    let outcome = match fatal {
        Some(e) => {
            let _ = txn.abort();
            if e.is_io_failure() {
                ctx.db.mark_broken();
            }
            Some(e)
        }
        None if !dirty => {
            let _ = txn.abort();
            None
        }
        None if logged
            && !oversized
            && let Some(wal) = &wal =>
        {
            match commit_logged(ctx, txn, wal, &body, started) {
                Ok(outcome) => outcome,
                Err(txn) => {
                    let mut txn = *txn;
                    // The log could not grow for want of space: the batch commits durably
                    // instead, as a checkpoint, after which the log starts again at its first
                    // slot and needs no growth.
                    ctx.space.ran_out();
                    drop(db);
                    let marked = txn
                        .set_durability(redb::Durability::Immediate)
                        .map_err(|e| Error::Config(e.to_string()))
                        .and_then(|()| super::db::write_mark(&txn, ctx.owner, batch_no));
                    match marked {
                        Ok(()) => commit_durably(ctx, txn, Some(wal), durability, batch_no, false),
                        Err(e) => {
                            let _ = txn.abort();
                            Some(e)
                        }
                    }
                }
            }
        }
        None => {
            drop(db);
            commit_durably(ctx, txn, wal.as_deref(), durability, batch_no, oversized)
        }
    };
    if outcome
        .as_ref()
        .is_some_and(|e| matches!(e, Error::StorageFull(_)))
    {
        ctx.space.ran_out();
    }
    body.clear();
    *ctx.log_buf.lock() = body;
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
        if !traffic.is_empty() {
            let mut total = ctx.stats.traffic.lock();
            for (q, t) in traffic {
                let e = total.entry(q).or_default();
                e.sent += t.sent;
                e.completed += t.completed;
            }
        }
        ctx.signals.notify(woken);
    }
}
