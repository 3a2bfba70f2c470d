//! The store: one file holding many queues.

mod builder;
mod catalog;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::engine::Engine;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::options::{Durability, QueueOptions};
use crate::tx::Transaction;

pub use builder::StoreBuilder;

/// Counters of this process's commit pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StoreStats {
    /// redb write transactions committed.
    pub commits: u64,
    /// Operations (sends, receives, settles, …) that went through those commits.
    pub operations: u64,
    /// Write-ahead log records the open of this store replayed (work a crash left in the log;
    /// 0 after a clean close). See [`StoreBuilder::write_ahead_log`].
    pub replayed_records: u64,
    /// Records this handle appended to the write-ahead log (one per logged commit).
    pub log_records: u64,
    /// Bytes of those records.
    pub log_bytes: u64,
    /// Checkpoints: durable commits of the store file that made the log's records redundant.
    pub checkpoints: u64,
    /// Where the time of logged commits went: running their operations, applying them to the
    /// store file without a sync, writing their records, syncing the log.
    pub log_timing: LogTiming,
}

/// Total time spent in each step of the commits made through the write-ahead log (see
/// [`StoreStats::log_timing`]); divide by [`StoreStats::log_records`] for a per-commit mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LogTiming {
    /// Running the batch's operations in a redb write transaction.
    pub run: Duration,
    /// Committing that transaction without a sync.
    pub apply: Duration,
    /// Writing the batch's record to the log (one `pwrite`).
    pub write: Duration,
    /// Syncing the log (one `fdatasync`).
    pub sync: Duration,
}

/// What [`Store::compact`] did: the store file's size just before and just after the
/// compaction itself, in bytes, so that `bytes_before - bytes_after` is what it freed.
///
/// Both are measured with the store to the compaction alone: after the write-ahead log's
/// checkpoint and, in a shared store, after waiting for other processes' reads, so what other
/// processes wrote while it waited is counted in both, not reported as a change. (In a shared
/// store a commit of another process can still land in the instant between the measurement
/// and the compaction taking the file, or right after it lets go.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactStats {
    /// The file's size when the compaction began.
    pub bytes_before: u64,
    /// The file's size when it ended: smaller when deleted queues, purged or completed
    /// messages had left free space, the same or a little larger when there was none.
    pub bytes_after: u64,
}

/// The prefix of every temporary queue's name ([`Store::temporary_queue`]); reserved: no other
/// queue's name starts with it.
pub const TEMPORARY_QUEUE_PREFIX: &str = crate::engine::TEMPORARY_PREFIX;

/// A queue as [`Store::queue_infos`] lists it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueInfo {
    /// The queue's name.
    pub name: String,
    /// Its stored options.
    pub options: QueueOptions,
    /// Created by [`Store::temporary_queue`]: it goes with its process.
    pub temporary: bool,
    /// When it last saw a send, receive, settle or lock renewal (recorded to a tenth of a
    /// second), if ever since the store was written by a version that records it.
    pub last_activity: Option<std::time::SystemTime>,
}

/// A postbox store: one file, many queues.
///
/// `Store` is a cheap handle (`Clone`, `Send`, `Sync`); the file closes when the last handle —
/// including queues, received messages and transactions — is dropped, or at [`Store::close`].
///
/// ```
/// # fn main() -> postbox::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let store = postbox::Store::open(dir.path().join("jobs.postbox"))?;
/// let queue = store.queue("orders")?;
/// queue.send("order 1")?;
/// assert_eq!(queue.len()?, 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) engine: Arc<Engine>,
}

impl Store {
    /// Opens (or creates) the store at `path` with default options.
    ///
    /// # Errors
    ///
    /// See [`StoreBuilder::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<Store> {
        StoreBuilder::default().open(path)
    }

    /// Options for opening a store.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::default()
    }

    /// The path of the store file.
    pub fn path(&self) -> &Path {
        &self.engine.path
    }

    /// Whether this handle shares the file with other processes.
    pub fn is_multi_process(&self) -> bool {
        self.engine.multi_process
    }

    /// Whether [`Store::close`] was called on this store (through any of its handles).
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }

    /// Whether this handle was inherited across `fork()`: a store belongs to the process that
    /// opened it, and in a child every call fails with [`Error::Forked`] and writes nothing
    /// (closing or dropping it there only lets go of the handle). The child opens the store
    /// itself.
    pub fn is_forked(&self) -> bool {
        self.engine.is_forked()
    }

    /// The durability of this handle's commits.
    pub fn durability(&self) -> Durability {
        self.engine.durability
    }

    /// Begins a transaction: receives and sends that commit together or not at all. On a
    /// closed store (or in a forked child) its first call fails with [`Error::Closed`]
    /// ([`Error::Forked`]); [`Store::try_begin`] reports that at once.
    pub fn begin(&self) -> Transaction {
        Transaction::new(self.engine.clone())
    }

    /// Begins a transaction, failing at once when the store cannot take one.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] after [`Store::close`]; [`Error::Forked`] in a forked child.
    pub fn try_begin(&self) -> Result<Transaction> {
        self.engine.check_open()?;
        Ok(self.begin())
    }

    /// What this handle's open could not recover, when it was opened with
    /// [`StoreBuilder::accept_log_loss`] and the write-ahead log the store needed was missing
    /// or damaged: which log, what was wrong with it, which records were replayed. `None`
    /// when nothing was lost (always, without that option: such an open fails instead).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = postbox::Store::builder()
    ///     .accept_log_loss(true)
    ///     .open(dir.path().join("app.postbox"))?;
    /// assert_eq!(store.log_loss(), None);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    pub fn log_loss(&self) -> Option<&str> {
        self.engine.log_loss.as_deref()
    }

    /// Counters of this process's commit pipeline (how many commits carried how many
    /// operations: the effect of group commit).
    pub fn stats(&self) -> StoreStats {
        let s = &self.engine.stats;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        StoreStats {
            commits: load(&s.commits),
            operations: load(&s.operations),
            replayed_records: load(&s.replayed),
            log_records: load(&s.log_records),
            log_bytes: load(&s.log_bytes),
            checkpoints: load(&s.checkpoints),
            log_timing: LogTiming {
                run: Duration::from_nanos(load(&s.run_ns)),
                apply: Duration::from_nanos(load(&s.apply_ns)),
                write: Duration::from_nanos(load(&s.log_write_ns)),
                sync: Duration::from_nanos(load(&s.log_sync_ns)),
            },
        }
    }

    /// Gives the space of deleted queues and purged, completed or expired messages back to
    /// the file system: the store file is rewritten in place with its live data at the front
    /// and truncated. Nothing the store holds changes: messages, their locks (a message
    /// received before can be completed after), counts, dead letters and options stay as they
    /// were, and so does every handle. The file never shrinks on its own: freed space is only
    /// reused by later writes.
    ///
    /// While it runs, every other operation on this store waits (sends, receives, reads, from
    /// every thread); operations already in progress finish first. With the write-ahead log
    /// the log is checkpointed first, so the compacted file is complete on its own. In a
    /// store shared with other processes ([`StoreBuilder::multi_process`]) their operations on
    /// the file wait too; a compaction that finds another process reading the file tries again
    /// until it gives up. The time it takes grows with the size of the live data.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let q = store.queue("scratch")?;
    /// q.send_batch(vec![vec![0u8; 64 * 1024]; 64])?;
    /// store.delete_queue("scratch")?;
    /// let stats = store.compact()?;
    /// assert!(stats.bytes_after < stats.bytes_before);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] after [`Store::close`]; [`Error::Forked`] in a forked child;
    /// [`Error::AlreadyOpen`] when the store could not be had alone within a few seconds
    /// (operations of this process still running, or another process of a shared store
    /// reading the file all along; nothing changed, try again, or compact with the other
    /// processes closed); [`Error::StorageFull`] and [`Error::Io`] for the file system's
    /// failures (the store reopens its file on the next call, as after any failed write),
    /// [`Error::Corrupted`] for a damaged file.
    pub fn compact(&self) -> Result<CompactStats> {
        let (bytes_before, bytes_after) = self.engine.compact()?;
        Ok(CompactStats {
            bytes_before,
            bytes_after,
        })
    }

    /// Closes the store: waits for pending commits, releases this process's locks, syncs.
    /// Every handle of this store fails with [`Error::Closed`] afterwards. Dropping the last
    /// handle does the same implicitly.
    ///
    /// # Errors
    ///
    /// The final commit's storage error, if any.
    pub fn close(self) -> Result<()> {
        self.engine.close()
    }
}
