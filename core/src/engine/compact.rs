//! Compaction: giving the space of deleted queues and purged messages back to the file system
//! (`docs/design.md` § Compaction).
//!
//! redb frees pages for reuse but never shrinks the file on its own; `Database::compact` moves
//! the live pages to the front and truncates the rest. It needs the database to itself: no
//! read or write transaction of this handle may be live, which the slot arranges
//! ([`DbSlot::exclusive`](super::db::DbSlot::exclusive)). The write-ahead log is checkpointed
//! first, so that the compacted file is complete on its own and the log starts a fresh cycle.
//! The log holds rows, not pages, so moving pages could not invalidate it anyway.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redb::{CompactionError, Database};

use super::Engine;
use super::wal::{self, Wal};
use crate::error::{Error, Result};

/// How long compaction waits for this process's operations in progress to end, and in a
/// shared store for other processes' reads of the file to end, before it gives up.
const WAIT: Duration = Duration::from_secs(5);

impl Engine {
    /// Compacts the store file; returns its size just before and just after the compaction
    /// itself, in bytes (see [`compact_file`]).
    ///
    /// # Errors
    ///
    /// `Closed`, `Forked`; `AlreadyOpen` when the store could not be had to itself within
    /// [`WAIT`]; storage errors of the checkpoint or the compaction.
    pub fn compact(&self) -> Result<(u64, u64)> {
        self.check_open()?;
        let path = self.path.clone();
        let stats = self.stats.clone();
        let started = Instant::now();
        self.db.exclusive(WAIT, |db, log| {
            if let Some(log) = log {
                checkpoint(db, log)?;
                stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            let deadline = started.checked_add(WAIT);
            let (before, after) = compact_file(db, &path, deadline)?;
            tracing::info!(
                path = %path.display(),
                before,
                after,
                took_ms = started.elapsed().as_millis() as u64,
                "compacted the store file"
            );
            Ok((before, after))
        })
    }
}

/// Makes the store file hold everything the log holds, durably, and starts a new log cycle:
/// the checkpoint a batch makes when the log is due for one, without the batch.
fn checkpoint(db: &Database, log: &Wal) -> Result<()> {
    let txn = db.begin_write()?;
    wal::checkpoint(&txn, log, false)?;
    txn.commit()?;
    log.reset();
    Ok(())
}

/// Runs redb's compaction, again while another process is reading the file (a shared store),
/// until `deadline`. Returns the file's size just before the attempt that ran and just after
/// it: what the compaction freed, not what the checkpoint wrote before it, nor what other
/// processes of a shared store wrote while it waited for their reads to end.
fn compact_file(db: &mut Database, path: &Path, deadline: Option<Instant>) -> Result<(u64, u64)> {
    let mut pause = Duration::from_millis(1);
    loop {
        let before = file_size(path)?;
        match attempt(db, path) {
            ControlFlow::Break(result) => {
                return result.and_then(|()| Ok((before, file_size(path)?)));
            }
            ControlFlow::Continue(busy) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(busy);
                }
                tracing::debug!(
                    path = %path.display(),
                    "compaction waits: another process is reading the store file"
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        }
    }
}

/// One compaction: `Continue` with the error to report when a transaction in progress
/// refused it (worth retrying), `Break` with the outcome otherwise.
fn attempt(db: &mut Database, path: &Path) -> ControlFlow<Result<()>, Error> {
    match db.compact() {
        Ok(_) => ControlFlow::Break(Ok(())),
        // Every transaction of this handle has ended (the slot saw to it), so the one in
        // progress is another process's read of a shared store.
        Err(CompactionError::TransactionInProgress) => {
            ControlFlow::Continue(Error::AlreadyOpen(format!(
                "{} is busy: another process kept reading the store file, and compaction needs the file to itself; try again, or compact with every other process closed",
                path.display()
            )))
        }
        // postbox makes no savepoints: one in the file was made by another program.
        Err(
            e @ (CompactionError::PersistentSavepointExists
            | CompactionError::EphemeralSavepointExists),
        ) => ControlFlow::Break(Err(Error::Io(std::io::Error::other(format!(
            "{} cannot be compacted: {e} (postbox makes none; another program wrote it)",
            path.display()
        ))))),
        Err(CompactionError::Storage(e)) => ControlFlow::Break(Err(e.into())),
        Err(e) => ControlFlow::Break(Err(Error::Io(std::io::Error::other(e.to_string())))),
    }
}

fn file_size(path: &Path) -> Result<u64> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| crate::error::io_at(e, "reading the size of", path))
}
