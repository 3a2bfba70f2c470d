//! Batches acknowledged before redb applies them. A batch of small logical operations (sends,
//! the consume loop's settle-then-receive; see [`worth_running_behind`]), one caller's or
//! several concurrent callers', with nothing else to do writes its record and syncs it on the
//! leader's thread while the applier thread runs the batch; the
//! caller is answered once both are done, and redb commits the batch (without a sync) after
//! that, on the applier thread, while the next caller goes on. So a single caller waits for
//! one write and one sync, not for the B-tree. Reads wait for those commits
//! ([`Unapplied::wait`]): a read issued after an acknowledged write sees it.
//!
//! Apart from `run.rs` because the batch runs on another thread here, with its own failure
//! cases (docs/design.md § Write-ahead log, *Acknowledged before applied*).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use redb::Database;

use super::applier::Applier;
use super::commit::replace;
use super::job::{Job, Ran};
use super::unapplied::Unapplied;
use super::writer::WriterContext;
use crate::engine::batch::{Batch, DueHints, Traffic};
use crate::engine::db::DbSlot;
use crate::engine::logged::{Changes, LoggedTxn};
use crate::engine::logical::{self, First, LogicalOp};
use crate::engine::wal::{self, AppendError, Wal};
use crate::error::Error;

/// What a batch run behind its acknowledgement gives back to `run.rs`, which answers its
/// callers as for any batch.
pub(super) struct Finished {
    /// The batch's outcome as its callers hear it (`None`: done and durable).
    pub outcome: Option<Error>,
    /// The jobs that ran (answer them with `deliver`), and those that did not (the batch
    /// failed before they ran).
    pub ran: Vec<Ran>,
    pub unrun: Vec<Box<dyn Job>>,
    pub woken: HashSet<u32>,
    pub traffic: HashMap<u32, Traffic>,
    pub hints: DueHints,
}

/// What the applier's run reports to the leader before it commits.
struct Run {
    ran: Vec<Ran>,
    unrun: Vec<Box<dyn Job>>,
    /// The batch failed after writing (or could not start): aborted, its record needs a void.
    fatal: Option<Error>,
    /// The batch ran but could not be prepared for its commit: the store reopens.
    not_applied: Option<Error>,
    idle: bool,
    /// The batch's rows when its run drew a message id (see `engine::logical`).
    rows: Option<Vec<u8>>,
    woken: HashSet<u32>,
    traffic: HashMap<u32, Traffic>,
    hints: DueHints,
    run_ns: u64,
}

/// What the applier's run needs of the store.
struct Apply {
    db: Arc<Database>,
    slot: Arc<DbSlot>,
    activity: Arc<crate::sync::Mutex<HashMap<u32, u64>>>,
    ids: Arc<AtomicU64>,
    stats: Arc<super::PipelineStats>,
    now: u64,
    hints: DueHints,
    seq: u64,
}

/// Runs `jobs` behind their acknowledgement when they are one logical operation, nothing is
/// due for the sweep, and the applier thread runs; gives them back otherwise (`Err`), before
/// anything was written, for the batch to run as any other.
pub(super) fn try_run_behind(
    ctx: &WriterContext,
    db: &Arc<Database>,
    wal: &Wal,
    mut jobs: Vec<Box<dyn Job>>,
    now: u64,
) -> std::result::Result<Finished, Vec<Box<dyn Job>>> {
    let Some(ids) = ctx.ids.clone() else {
        return Err(jobs);
    };
    let hints = *ctx.hints.lock();
    if !hints.nothing_due(now) {
        return Err(jobs);
    }
    let mut slot = ctx.applier.lock();
    let applier = slot.get_or_insert_with(Applier::start);
    if !applier.threaded() {
        return Err(jobs);
    }
    if !jobs.iter_mut().all(|j| {
        j.logical()
            .is_some_and(|op| op.loggable() && worth_running_behind(op))
    }) {
        return Err(jobs);
    }
    let before = ids.load(Ordering::Acquire);
    let mut body = Vec::with_capacity(1280 * jobs.len());
    logical::begin(&mut body, now, jobs.len());
    for job in jobs.iter_mut() {
        if let Some(op) = job.logical() {
            // Reserving from the counter cannot fail.
            let _ = op.prepare(&mut || Ok(ids.fetch_add(1, Ordering::AcqRel)), &mut body);
        }
    }
    // A batch declined after reserving ids keeps them: they stay the messages' ids.
    if wal.too_big(body.len()) {
        return Err(jobs);
    }
    let Ok(seq) = wal.stage(&body) else {
        // The batch runs as any other, whose record meets the same failure and settles it.
        return Err(jobs);
    };
    let after = ids.load(Ordering::Acquire);
    let (tx, rx) = crossbeam_channel::bounded::<Run>(1);
    let applying = Unapplied::hand(&ctx.unapplied);
    let apply = Apply {
        db: db.clone(),
        slot: ctx.db.clone(),
        activity: ctx.activity.clone(),
        ids,
        stats: ctx.stats.clone(),
        now,
        hints,
        seq,
    };
    let handed = applier.hand_run(Box::new(move || {
        run_and_apply(apply, jobs, &tx);
        drop(applying);
    }));
    drop(slot);
    let synced = wal.sync_written();
    // A run that never started or panicked dropped its job (whose caller hears the channel
    // close): the record is durable and nothing applied it.
    let run = match handed.map(|()| rx.recv()) {
        Ok(Ok(run)) => run,
        _ => Run::lost(hints),
    };
    Ok(settle(ctx, wal, seq, (before, after), synced, run))
}

/// At most this many messages sent, settled or received by an operation run behind.
const SMALL: usize = 4;

/// Whether an operation gains by running behind its acknowledgement: a small send, or a small
/// settle-then-receive (the consume loop, the processor's next receive). Its redb commit then
/// lands on whatever the leader runs next; when that is the next such operation, the applier
/// runs it after the commit with no hand-over, but anything else — a plain receive after a
/// settle, a big batch — waits for the commit it used to overlap with the sync. Measured with
/// criterion against the previous head (`benches/compare/heads.sh`): running every logical
/// operation behind made a lone sender 1.36× faster, but receive + complete 0.84×, 100-message
/// batches 0.82–0.85× and eight concurrent receive + complete callers 0.78×.
fn worth_running_behind(op: &LogicalOp) -> bool {
    match op {
        LogicalOp::Send { msgs, .. } => msgs.len() <= SMALL,
        LogicalOp::ThenReceive { first, want, .. } => {
            *want <= SMALL
                && match first {
                    First::CompleteAll(locks) => locks.len() <= SMALL,
                    First::Settle(..) => true,
                }
        }
        LogicalOp::Settle { .. } | LogicalOp::Renew { .. } => false,
    }
}

impl Run {
    /// A run that has done nothing yet.
    fn new(hints: DueHints) -> Run {
        Run {
            ran: Vec::new(),
            unrun: Vec::new(),
            fatal: None,
            not_applied: None,
            idle: false,
            rows: None,
            woken: HashSet::new(),
            traffic: HashMap::new(),
            hints,
            run_ns: 0,
        }
    }

    fn lost(hints: DueHints) -> Run {
        Run {
            fatal: Some(Error::Panic(
                "the apply thread stopped while running a batch".into(),
            )),
            ..Run::new(hints)
        }
    }
}

/// The applier's part: runs the batch, reports to the leader, then commits it without a sync.
fn run_and_apply(a: Apply, jobs: Vec<Box<dyn Job>>, tx: &crossbeam_channel::Sender<Run>) {
    let started = Instant::now();
    let mut run = Run::new(a.hints);
    let mut txn = match a.db.begin_write() {
        Ok(t) => t,
        Err(e) => {
            run.fatal = Some(e.into());
            run.unrun = jobs;
            let _ = tx.send(run);
            return;
        }
    };
    let changes = Changes::on(Vec::new());
    let mut drew = false;
    let opened = {
        let ltxn = LoggedTxn {
            txn: &txn,
            changes: &changes,
        };
        Batch::open(ltxn, a.now, a.hints).map(|mut batch| {
            batch.track_activity(a.activity);
            batch.share_ids(a.ids);
            let mut rest = jobs.into_iter();
            for job in rest.by_ref() {
                let r = job.run(&mut batch);
                run.fatal = r.fatal.as_ref().map(Error::duplicate);
                run.ran.push(r);
                if run.fatal.is_some() {
                    break;
                }
            }
            // After a failure that wrote, the batch aborts: the jobs after it never run.
            run.unrun = rest.collect();
            run.idle = !batch.changed();
            if run.fatal.is_none()
                && !run.idle
                && let Err(e) = batch.flush()
            {
                run.fatal = Some(e);
            }
            drew = batch.drew_ids();
            run.woken = std::mem::take(&mut batch.woken);
            run.traffic = std::mem::take(&mut batch.traffic);
            run.hints = batch.hints;
        })
    };
    if let Err(e) = opened {
        // The job went into the closure that never ran: its caller hears the channel close.
        run.fatal = Some(e);
        let _ = txn.abort();
        let _ = tx.send(run);
        return;
    }
    run.rows = drew.then(|| changes.take());
    run.run_ns = started.elapsed().as_nanos() as u64;
    if run.fatal.is_some() || run.idle {
        let _ = txn.abort();
        let _ = tx.send(run);
        return;
    }
    let prepared = txn
        .set_durability(redb::Durability::None)
        .map_err(|e| Error::Config(e.to_string()))
        .and_then(|()| wal::mark_applied(&txn, a.seq));
    if let Err(e) = prepared {
        let _ = txn.abort();
        run.not_applied = Some(e);
        let _ = tx.send(run);
        return;
    }
    // The leader answers the caller while redb commits, without a sync: the record is being
    // written and synced meanwhile (`Wal::stage`). If that fails, this commit holds a batch
    // the log lacks; the store reopens and recovery commits durably and starts a new log
    // cycle for that case (`wal::recover`'s `restarts_log`). A crash meanwhile loses both.
    let _ = tx.send(run);
    let t = Instant::now();
    let committed = txn.commit();
    a.stats
        .apply_ns
        .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    // The database goes before the store is marked for reopening: the reopen opens the file
    // again, which redb refuses while this handle lives.
    drop(a.db);
    if let Err(e) = committed {
        tracing::warn!(error = %e, "applying a logged batch failed; the store reopens");
        a.slot.mark_broken();
    }
}

/// The leader's part once the record's sync returned and the run reported: the batch's
/// outcome, with a void record after a failed batch, its reserved ids given back after an
/// idle one, and a replacement record after one that drew ids (as `commit::commit_logical`).
fn settle(
    ctx: &WriterContext,
    wal: &Wal,
    seq: u64,
    (before, after): (u64, u64),
    synced: std::result::Result<wal::Appended, AppendError>,
    run: Run,
) -> Finished {
    let Run {
        ran,
        unrun,
        fatal,
        not_applied,
        idle,
        rows,
        woken,
        traffic,
        hints,
        run_ns,
    } = run;
    let s = &ctx.stats;
    let outcome = match (synced, fatal, not_applied) {
        (Err(failed), _, _) => {
            ctx.db.mark_broken();
            Some(failed.into_error())
        }
        (Ok(_), Some(e), _) => {
            if e.is_io_failure() || matches!(e, Error::Panic(_)) {
                ctx.db.mark_broken();
            }
            match wal.append(&wal::kinds::void(seq), || {}) {
                Ok(_) => Some(e),
                Err(why) => {
                    ctx.db.mark_broken();
                    Some(Error::OutcomeUnknown(format!(
                        "{e}; the batch was logged before it failed, and the log could not record its failure: {}",
                        why.into_error()
                    )))
                }
            }
        }
        (Ok(_), None, Some(e)) => {
            ctx.db.mark_broken();
            Some(Error::OutcomeUnknown(format!(
                "the batch was logged, and could not be applied: {e}"
            )))
        }
        (Ok(_), None, None) if idle => {
            // Every operation failed before writing: the ids reserved for it go back unless a
            // transaction reserved one meanwhile. Its record replays to the same refusals.
            if let Some(ids) = &ctx.ids {
                let _ = ids.compare_exchange(after, before, Ordering::AcqRel, Ordering::Acquire);
            }
            None
        }
        (Ok(a), None, None) => {
            s.commits.fetch_add(1, Ordering::Relaxed);
            s.log_records.fetch_add(1, Ordering::Relaxed);
            s.log_bytes.fetch_add(a.bytes, Ordering::Relaxed);
            s.run_ns.fetch_add(run_ns, Ordering::Relaxed);
            s.log_write_ns.fetch_add(a.write_ns, Ordering::Relaxed);
            s.log_sync_ns.fetch_add(a.sync_ns, Ordering::Relaxed);
            rows.and_then(|rows| replace(ctx, wal, seq, &rows))
        }
    };
    if outcome.is_some() {
        // The applier may still hold the database; a reopen must find it closed.
        ctx.unapplied.wait();
    }
    Finished {
        outcome,
        ran,
        unrun,
        woken,
        traffic,
        hints,
    }
}
