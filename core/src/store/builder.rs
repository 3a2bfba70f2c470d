//! Options for opening a store.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::Store;
#[cfg(doc)]
use super::StoreStats;
use crate::clock::Clock;
use crate::engine::Engine;
use crate::engine::queries as read;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::options::{Durability, EngineConfig};

/// Options for opening a [`Store`].
///
/// # Defaults
///
/// - `durability`: [`Durability::Immediate`]
/// - `cache_size`: 64 MiB
/// - `multi_process`: `false` (one process has the file; fastest, and opening releases every
///   stale lock at once)
/// - `poll_interval`: 1 ms floor, 1 s ceiling (multi-process stores on a platform without a
///   change notification only: how quickly a waiting receiver sees a message another process
///   sent, and how often an idle one wakes)
/// - `verify_on_open`: `true` (checksums every page on open, so a damaged file is reported as
///   [`Error::Corrupted`] at open rather than by the operation that reads the damage)
/// - `write_ahead_log`: `true` (single-process durable stores append each commit to a log
///   beside the store file; see [`StoreBuilder::write_ahead_log`])
#[derive(Debug, Clone, Default)]
pub struct StoreBuilder {
    config: EngineConfig,
}

impl StoreBuilder {
    /// Sets the durability of every commit.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.config.durability = durability;
        self
    }

    /// Sets the page cache size in bytes (64 MiB by default). With the write-ahead log, the
    /// pages the log's background commits change stay in this cache, up to its size, until a
    /// checkpoint writes them: a smaller cache shortens the send during which a checkpoint
    /// lands, while reads of a backlog larger than the cache come from the operating system's
    /// page cache instead.
    pub fn cache_size(mut self, bytes: usize) -> Self {
        self.config.cache_size = bytes;
        self
    }

    /// Lets several processes open the store at once (redb's multi-writer mode). Requires
    /// [`Durability::Immediate`].
    pub fn multi_process(mut self, enabled: bool) -> Self {
        self.config.multi_process = enabled;
        self
    }

    /// Sets the truncated exponential backoff with which a waiting receiver of a multi-process
    /// store polls the file for messages sent by other processes where no change notification
    /// tells it: it starts at `floor`, doubles on every empty poll up to `ceiling`, and returns
    /// to `floor` on activity. A message another process sends is then seen within `ceiling`
    /// (1 s by default), and an idle waiter wakes about once per `ceiling`.
    ///
    /// On Linux (inotify) waiters do not poll: a change to the file wakes them at once, and an
    /// idle process is not woken at all (besides one look at the file every few seconds while
    /// something waits, for a dead process that no change reports). Elsewhere, and on Linux
    /// when the kernel refuses another inotify instance (`fs.inotify.max_user_instances`) or
    /// the file was replaced under the store, they poll as set here.
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir().unwrap();
    /// let store = postbox::Store::builder()
    ///     .multi_process(true)
    ///     .poll_interval(Duration::from_millis(1), Duration::from_millis(200))
    ///     .open(dir.path().join("shared.postbox"))?;
    /// # Ok::<(), postbox::Error>(())
    /// ```
    pub fn poll_interval(mut self, floor: Duration, ceiling: Duration) -> Self {
        self.config.poll_floor = floor;
        self.config.poll_ceiling = ceiling;
        self
    }

    /// Whether to verify every page's checksum when opening (default `true`).
    ///
    /// Every record postbox stores — a message's envelope and body, its state, a queue's
    /// options — carries its own checksum, verified every time it is read. So with
    /// `verify_on_open(false)` a damaged record is still never returned as if it were sound:
    /// the damage is reported as [`Error::Corrupted`] by the operation that reads it.
    /// `verify_on_open` additionally checks every page of the file at open (redb's page
    /// checksums, which cover redb's own structures as well), so that damage anywhere is found
    /// at once, at a cost that grows with the size of the file. Messages written before store
    /// format 2 keep their unchecksummed envelopes (the upgrade rewrites only states and queue
    /// records).
    ///
    /// Damage to redb's own structures is what only this check finds. Without it, such damage
    /// can also surface as a message or queue that is not found, or — in the free-page lists
    /// redb reads while it commits — as a panic inside redb's clean-up, which aborts the
    /// process (a panic during unwinding cannot be caught). Turn the check off only for files
    /// that cannot have been damaged since they were last verified.
    pub fn verify_on_open(mut self, enabled: bool) -> Self {
        self.config.verify_on_open = enabled;
        self
    }

    /// Whether a single-process store with [`Durability::Immediate`] makes its commits durable
    /// through a write-ahead log (default `true`).
    ///
    /// With the log, each group commit is one record appended to the file `<store>-log` and
    /// one `fdatasync`; the store file is brought up to date in the background by checkpoints
    /// (at least every 250 ms while writes go on, every 32 MiB of log, and at close). After a
    /// clean close the log is gone and the store file alone is a complete copy; after a crash
    /// the next open replays the log ([`StoreStats::replayed_records`]). A batch with more
    /// than 256 KiB of changes (large bodies, many at once) is committed durably to the store
    /// file directly: logging would write it twice, which costs more than it saves. Without
    /// the log, every commit is a durable commit of the store file, which costs more syncs and
    /// scattered writes. Multi-process stores and [`Durability::None`] never use the log.
    pub fn write_ahead_log(mut self, enabled: bool) -> Self {
        self.config.write_ahead_log = enabled;
        self
    }

    /// Opens the store even when the write-ahead log it needs is missing or damaged (default
    /// `false`).
    ///
    /// A store that was not closed cleanly needs the records its log holds since the last
    /// checkpoint, and opening it without them would lose acknowledged work silently; so by
    /// default such an open fails with [`Error::Corrupted`], naming the log and what was
    /// wrong with it: missing, shorter than it was written, its header zeroed or damaged,
    /// another store's log, a log of another cycle (a copy from an earlier time), or a damaged
    /// record followed by valid ones. With `accept_log_loss(true)` the store opens anyway: it
    /// replays the records it can still verify as its own, moves the damaged log aside
    /// (`<store>-log.damaged-<time>`) and reports what could not be replayed in
    /// [`Store::log_loss`]. `postbox recover STORE` does the same from the command line.
    ///
    /// A torn last record — one whose write a crash interrupted, so that its sync never
    /// returned and nobody was told it succeeded — is dropped either way, as in every log.
    pub fn accept_log_loss(mut self, accept: bool) -> Self {
        self.config.accept_log_loss = accept;
        self
    }

    /// Tests only: when the write-ahead log is checkpointed (log bytes, time with records
    /// written, whatever their number; [`StoreBuilder::log_checkpoint_records`] sets a least
    /// number after this).
    #[doc(hidden)]
    pub fn log_checkpoints(mut self, bytes: u64, interval: Duration) -> Self {
        self.config.checkpoints.bytes = bytes;
        self.config.checkpoints.interval = interval;
        self.config.checkpoints.min_records = 0;
        self
    }

    /// Tests only: the records the write-ahead log must hold before its checkpoint interval
    /// counts (none by default).
    #[doc(hidden)]
    pub fn log_checkpoint_records(mut self, records: u64) -> Self {
        self.config.checkpoints.min_records = records;
        self
    }

    /// Tests only: puts `layer` between postbox and the store's files (see
    /// [`storage`](crate::storage)).
    #[doc(hidden)]
    pub fn storage_layer(mut self, layer: crate::storage::SharedLayer) -> Self {
        self.config.storage_layer = Some(layer);
        self
    }

    /// Replaces the wall clock, so tests can cross lock expiries and TTLs without sleeping.
    #[doc(hidden)]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.config.clock = clock;
        self
    }

    /// Opens the store at `path`, creating it if it does not exist.
    ///
    /// # Errors
    ///
    /// [`Error::NotAStore`] for a file that is not a postbox store, [`Error::Corrupted`] for a
    /// damaged one, [`Error::AlreadyOpen`] when another process holds it in single-process mode,
    /// [`Error::Config`] for contradictory options, [`Error::Io`] for the operating system's
    /// refusals (missing directory, permissions).
    pub fn open(self, path: impl AsRef<Path>) -> Result<Store> {
        let engine = Arc::new(Engine::open(path.as_ref(), &self.config)?);
        // Queues that delete themselves when idle need someone watching the clock.
        if engine.read(read::idle_schedule)?.any {
            engine.ensure_janitor();
        }
        Ok(Store { engine })
    }
}
