//! Running one batch on the store: [`WriterContext`]'s [`Writer`] implementation, which opens
//! the transaction, runs the jobs and the parked receives, has the batch committed and answers
//! every caller with the outcome. Apart from the commit itself (`commit.rs`), and from the
//! election, which never sees the store.

use std::sync::atomic::Ordering;
use std::time::Instant;

use std::collections::{HashMap, HashSet};

use super::behind;
use super::commit::{LogicalBatch, commit_durably, commit_logged, commit_logical};
use super::job::{Job, Ran};
use super::writer::{Round, Writer, WriterContext};
use crate::engine::batch::{Batch, DueHints, Traffic};
use crate::engine::guarded;
use crate::engine::logged::{Changes, LoggedTxn};
use crate::engine::logical;
use crate::engine::park::{self, ParkedReceive};
use crate::engine::wal::Wal;
use crate::error::Error;
use crate::options::Durability;

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

    fn run(&self, jobs: Vec<Box<dyn Job>>, parked: &mut Vec<ParkedReceive>, round: Round) {
        run_guarded(self, jobs, parked, round);
    }
}

fn run_guarded(
    ctx: &WriterContext,
    jobs: Vec<Box<dyn Job>>,
    parked: &mut Vec<ParkedReceive>,
    round: Round,
) {
    // A panic (a bug, or redb meeting a damaged page) drops the jobs' replies unsent, which
    // wakes their callers with an error instead of leaving them hanging (`sync/answers.rs`);
    // the writer thread lives on.
    let outcome = guarded::catch(|| run_batch(ctx, jobs, parked, round));
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

fn run_batch(
    ctx: &WriterContext,
    jobs: Vec<Box<dyn Job>>,
    parked: &mut Vec<ParkedReceive>,
    round: Round,
) {
    let Round {
        timer,
        durability,
        reap,
        batch_no,
    } = round;
    let n = jobs.len() as u64;
    let nothing_parked = parked.is_empty();
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
    // With a log, a batch is made durable by its record, or (a checkpoint: the closing batch,
    // or one due by the log's size or age) by a durable redb commit that marks every record so
    // far as applied.
    let checkpoint = wal
        .as_ref()
        .is_some_and(|w| batch_no == 0 || w.checkpoint_due() || ctx.space.is_short());
    let logged = wal.is_some() && !checkpoint;
    // One logical operation with nothing else to do is acknowledged once its record is
    // synced, and redb applies it behind (`behind.rs`).
    let mut jobs = jobs;
    if logged
        && nothing_parked
        && reap.is_none()
        && let Some(w) = &wal
    {
        match behind::try_run_behind(ctx, &db, w, jobs, ctx.clock.now_ms()) {
            Ok(f) => {
                drop(db);
                let unrun_error = f.outcome.as_ref().map_or_else(
                    || Error::Panic("a batch left a job unrun".into()),
                    Error::duplicate,
                );
                for job in f.unrun {
                    job.fail(&unrun_error);
                }
                return answer(
                    ctx,
                    f.outcome,
                    n,
                    f.ran,
                    Vec::new(),
                    f.traffic,
                    f.woken,
                    f.hints,
                );
            }
            Err(back) => jobs = back,
        }
    }
    let txn = match db.begin_write() {
        Ok(t) => t,
        Err(e) => return fail_all(jobs, &e.into()),
    };
    let changes = if logged {
        Changes::on(std::mem::take(&mut *ctx.log_buf.lock()))
    } else {
        Changes::off()
    };
    let started = Instant::now();
    let mut record = None;
    let mut ran = Vec::with_capacity(jobs.len());
    let mut served = Vec::new();
    let mut fatal: Option<Error> = None;
    let woken;
    let traffic;
    let dirty;
    let drew;
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
        // A batch of logical operations with nothing else to do writes its record before it
        // runs, and the record's transfer goes on while it runs (`engine::logical`).
        if logged
            && nothing_parked
            && reap.is_none()
            && !batch.changed()
            && let Some(wal) = &wal
            && jobs.len() == 1
            && jobs
                .iter_mut()
                .all(|j| j.logical().is_some_and(|op| op.loggable()))
        {
            match write_logical(ctx, &mut batch, &mut jobs, wal) {
                Ok(written) => {
                    record = written;
                    batch.forget_drawn_ids();
                }
                Err(e) => {
                    drop(batch);
                    let _ = txn.abort();
                    return fail_all(jobs, &e);
                }
            }
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
            // Before the flush, which writes the sequences the record's reservations moved.
            if let Some(r) = &mut record {
                r.idle = batch.change_count() == r.baseline;
            }
            if fatal.is_none()
                && let Err(e) = batch.flush()
            {
                fatal = Some(e);
            }
        }
        dirty = batch.changed();
        drew = batch.drew_ids();
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
        fatal if let (Some(mut written), Some(wal)) = (record, &wal) => {
            drop(db);
            written.rows = drew.then_some(body.as_slice());
            commit_logical(ctx, txn, wal, written, fatal, started)
        }
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
                        .and_then(|()| crate::engine::db::write_mark(&txn, ctx.owner, batch_no));
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
    body.clear();
    *ctx.log_buf.lock() = body;
    answer(ctx, outcome, n, ran, served, traffic, woken, final_hints);
}

/// Answers a batch's callers with its outcome (`None`: committed), and on success keeps
/// what it learnt: the sweep's hints, the traffic counts, and which queues gained messages.
#[allow(clippy::too_many_arguments)]
fn answer(
    ctx: &WriterContext,
    outcome: Option<Error>,
    n: u64,
    ran: Vec<Ran>,
    served: Vec<park::Served>,
    traffic: HashMap<u32, Traffic>,
    woken: HashSet<u32>,
    final_hints: DueHints,
) {
    if outcome
        .as_ref()
        .is_some_and(|e| matches!(e, Error::StorageFull(_)))
    {
        ctx.space.ran_out();
    }
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

/// Writes the logical record of a batch whose jobs are all logical operations (each decides
/// its ids first) and starts its transfer to the device, which goes on while the batch runs. `None` when the record is not written — it would be too big, or the write failed —
/// and the batch goes on as any other (the ids decided stay the messages' ids).
///
/// # Errors
///
/// Deciding an id failed (the id sequence is damaged): the batch cannot run.
fn write_logical<'r>(
    ctx: &WriterContext,
    batch: &mut Batch<'_>,
    jobs: &mut [Box<dyn Job>],
    wal: &Wal,
) -> crate::error::Result<Option<LogicalBatch<'r>>> {
    let ids_before = ctx.ids.as_ref().map(|i| i.load(Ordering::Acquire));
    let mut body = Vec::with_capacity(1280);
    logical::begin(&mut body, batch.now, jobs.len());
    for job in jobs.iter_mut() {
        if let Some(op) = job.logical() {
            op.prepare(&mut || batch.reserve_id(), &mut body)?;
        }
    }
    if wal.too_big(body.len()) {
        return Ok(None);
    }
    match wal.write(&body) {
        Ok(seq) => {
            wal.start_writeback();
            let reserved = ctx
                .ids
                .as_ref()
                .zip(ids_before)
                .map(|(ids, before)| (before, ids.load(Ordering::Acquire)));
            Ok(Some(LogicalBatch {
                seq,
                baseline: batch.change_count(),
                reserved,
                idle: false,
                rows: None,
            }))
        }
        // The batch runs as any other, whose record meets the same failure and settles it.
        Err(_) => Ok(None),
    }
}
