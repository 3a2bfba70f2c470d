//! Committing a batch that has run: to the write-ahead log with redb catching up on the applier
//! thread, or durably to the store file; and settling a commit that failed (did it land?).
//! Apart from running the batch (`run.rs`): what a commit costs and how it fails is its own
//! subject (docs/design.md § Write-ahead log, § I/O failures).

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::applier::Applier;
use super::writer::WriterContext;
use crate::engine::db::Resolved;
use crate::engine::wal::{self, AppendError, Wal};
use crate::error::{Error, Result};
use crate::options::Durability;

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
pub(super) fn commit_logged(
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
            settle_logged(ctx, &a, ran - started, applier.wait());
            None
        }
    })
}

/// A batch whose logical record was written before it ran.
pub(super) struct LogicalBatch<'r> {
    /// The record's sequence number.
    pub seq: u64,
    /// The batch's change count once the record's ids were reserved
    /// (`Batch::change_count`).
    pub baseline: u64,
    /// The shared message-id counter before and after those reservations.
    pub reserved: Option<(u64, u64)>,
    /// Set when the operations changed nothing (each failed before writing): the batch
    /// commits nothing, and replay of its record fails the same way.
    pub idle: bool,
    /// The batch's row changes, when its run drew a message id (`Batch::drew_ids`).
    pub rows: Option<&'r [u8]>,
}

/// Commits a batch whose logical record was written before it ran (see `write_logical` in
/// `run.rs`), its transfer to the device started: as [`commit_logged`], redb commits the
/// batch without a sync on the applier thread while this thread syncs the record. A batch
/// that failed (`fatal`) is aborted; its record, durable all the same, gets a void record
/// after it, so that replay skips it — and when that cannot be written the callers hear
/// `OutcomeUnknown`. A batch whose run drew a message id (`rows` given: its row changes) gets
/// a replacement record after it, synced before its callers are answered, so that replay
/// applies those rows instead of drawing again.
///
/// A failed sync leaves the outcome unknown; a failed apply leaves redb refusing further use
/// while the batch is durable in the log. Either way the store is marked for reopening, which
/// replays the log.
pub(super) fn commit_logical(
    ctx: &WriterContext,
    mut txn: redb::WriteTransaction,
    wal: &Wal,
    written: LogicalBatch<'_>,
    fatal: Option<Error>,
    started: Instant,
) -> Option<Error> {
    let LogicalBatch {
        seq,
        reserved,
        idle,
        rows,
        ..
    } = written;
    let ran = Instant::now();
    if let Some(e) = fatal {
        let _ = txn.abort();
        if e.is_io_failure() {
            ctx.db.mark_broken();
        }
        let voided = wal
            .sync_written()
            .and_then(|_| wal.append(&wal::kinds::void(seq), || {}))
            .map(drop)
            .map_err(AppendError::into_error);
        return Some(match voided {
            Ok(()) => e,
            Err(why) => {
                ctx.db.mark_broken();
                Error::OutcomeUnknown(format!(
                    "{e}; the batch was logged before it failed, and the log could not record its failure: {why}"
                ))
            }
        });
    }
    if idle {
        // Every operation failed before writing: nothing to commit, and the ids reserved for
        // it go back unless a transaction reserved one meanwhile (as a batch that changed
        // nothing never advances a sequence). Its record replays to the same refusals.
        let _ = txn.abort();
        if let (Some(ids), Some((before, after))) = (&ctx.ids, reserved) {
            let _ = ids.compare_exchange(after, before, Ordering::AcqRel, Ordering::Acquire);
        }
        return match wal.sync_written() {
            Ok(_) => None,
            Err(failed) => {
                ctx.db.mark_broken();
                Some(failed.into_error())
            }
        };
    }
    let prepared = txn
        .set_durability(redb::Durability::None)
        .map_err(|e| Error::Config(e.to_string()))
        .and_then(|()| wal::mark_applied(&txn, seq));
    if let Err(e) = prepared {
        // Nothing was applied; the record replays it (the store reopens first).
        let _ = txn.abort();
        ctx.db.mark_broken();
        return Some(match wal.sync_written() {
            Ok(_) => Error::OutcomeUnknown(format!(
                "the batch was logged, and could not be applied: {e}"
            )),
            Err(failed) => failed.into_error(),
        });
    }
    let mut applier = ctx.applier.lock();
    let applier = applier.get_or_insert_with(Applier::start);
    applier.hand(txn);
    let synced = wal.sync_written();
    let (applied, apply_ns) = applier.wait();
    let a = match synced {
        Ok(a) => a,
        Err(failed) => {
            ctx.db.mark_broken();
            return Some(failed.into_error());
        }
    };
    settle_logged(ctx, &a, ran - started, (applied, apply_ns));
    replace(ctx, wal, seq, rows?)
}

/// Appends the replacement record of logical record `seq`, whose batch drew message ids:
/// replay applies its `rows` instead of running the operations again. `OutcomeUnknown` (and
/// the store marked for reopening) when it cannot be written.
pub(super) fn replace(ctx: &WriterContext, wal: &Wal, seq: u64, rows: &[u8]) -> Option<Error> {
    let mut body = Vec::new();
    wal::kinds::replacement(&mut body, seq, rows);
    match wal.append(&body, || {}) {
        Ok(a) => {
            ctx.stats.log_records.fetch_add(1, Ordering::Relaxed);
            ctx.stats.log_bytes.fetch_add(a.bytes, Ordering::Relaxed);
            None
        }
        Err(e) => {
            // The record stands: replay would run the batch again, drawing its ids afresh.
            // Nobody learnt them, but nobody learns whether it happened either.
            ctx.db.mark_broken();
            Some(Error::OutcomeUnknown(format!(
                "the batch was logged, but the log could not record the ids it drew: {}",
                e.into_error()
            )))
        }
    }
}

/// A logged batch whose record is durable: counts it (and where its time went), and marks the
/// store for reopening when redb could not apply it — the reopen replays it from the log.
fn settle_logged(
    ctx: &WriterContext,
    a: &wal::Appended,
    run: std::time::Duration,
    (applied, apply_ns): (Result<()>, u64),
) {
    let s = &ctx.stats;
    s.commits.fetch_add(1, Ordering::Relaxed);
    s.log_records.fetch_add(1, Ordering::Relaxed);
    s.log_bytes.fetch_add(a.bytes, Ordering::Relaxed);
    s.run_ns.fetch_add(run.as_nanos() as u64, Ordering::Relaxed);
    s.apply_ns.fetch_add(apply_ns, Ordering::Relaxed);
    s.log_write_ns.fetch_add(a.write_ns, Ordering::Relaxed);
    s.log_sync_ns.fetch_add(a.sync_ns, Ordering::Relaxed);
    if let Err(e) = applied {
        tracing::warn!(error = %e, "applying a logged batch failed; the store reopens");
        ctx.db.mark_broken();
    }
}

/// Commits a batch durably to the store file: with a log, as a checkpoint (every record so
/// far is then applied, and the log starts a new cycle; the closing batch, `batch_no` 0,
/// records that the store needs no log); without, as asked by `durability`.
pub(super) fn commit_durably(
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
