//! The store: one file holding many queues.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::app_table::Table;
use crate::clock::Clock;
use crate::collator::Collator;
use crate::engine::Engine;
use crate::engine::queries as read;
use crate::engine::{QueueKind, QueueRecord};
use crate::error::{Error, Result};
use crate::job::{Job, JobInfo, JobOptions};
use crate::options::{Durability, EngineConfig, QueueOptions, QueueSettings};
use crate::queue::Queue;
use crate::topic::Topic;
use crate::tx::Transaction;

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

    /// Sets the page cache size in bytes.
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
    pub fn verify_on_open(mut self, enabled: bool) -> Self {
        self.config.verify_on_open = enabled;
        self
    }

    /// Whether a single-process store with [`Durability::Immediate`] makes its commits durable
    /// through a write-ahead log (default `true`).
    ///
    /// With the log, each group commit is one record appended to the file `<store>-log` and
    /// one `fdatasync`; the store file is brought up to date in the background by checkpoints
    /// (at least once a second while writes go on, every 32 MiB of log, and at close). After a
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
    /// written).
    #[doc(hidden)]
    pub fn log_checkpoints(mut self, bytes: u64, interval: Duration) -> Self {
        self.config.checkpoints.bytes = bytes;
        self.config.checkpoints.interval = interval;
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

    /// Opens queue `name`, creating it with default options if it does not exist. An existing
    /// queue keeps its messages and its options.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name (empty, over 255 bytes, control characters, or
    /// the reserved dead-letter suffix) of a queue that does not exist.
    pub fn queue(&self, name: &str) -> Result<Queue> {
        self.open_or_create(name, None)
    }

    /// Opens queue `name` with `options`, creating it if missing. An existing queue keeps its
    /// messages and its stored options, except those `options` mention (see
    /// [`QueueOptions`]: options not mentioned keep their stored values).
    ///
    /// # Errors
    ///
    /// As [`Store::queue`], plus [`Error::InvalidArgument`] for invalid options (checked after
    /// merging with the stored ones).
    pub fn queue_with(&self, name: &str, options: QueueOptions) -> Result<Queue> {
        options.apply_to(&QueueSettings::default()).validate()?;
        self.open_or_create(name, Some(options))
    }

    /// Opens queue `name` only if it exists, never creating it: a late reply does not
    /// re-create a deleted temporary queue, and a typo does not create a new one. A
    /// dead-letter queue opens by its full name too.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// store.queue("jobs")?;
    /// assert!(store.open_queue("jobs").is_ok());
    /// let e = store.open_queue("jbos").unwrap_err();
    /// assert_eq!(e.kind(), postbox::ErrorKind::QueueNotFound);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] when no such queue exists; [`Error::InvalidArgument`] for a bad
    /// name (unless a queue has it: see [`Store::queues`]); storage errors.
    pub fn open_queue(&self, name: &str) -> Result<Queue> {
        self.check_existing_name(name)?;
        Queue::open_existing(&self.engine, name)
    }

    /// Checks a name given to find a queue that exists. Besides valid names, the name of a
    /// queue that exists passes: an older postbox let a topic subscription's queue name run
    /// past 255 bytes, and such a queue must still open, list and go.
    fn check_existing_name(&self, name: &str) -> Result<()> {
        let Err(e) = validate_queue_name(name) else {
            return Ok(());
        };
        if !name.is_empty()
            && self
                .engine
                .read(|t| read::queue_by_name(t, name))?
                .is_some()
        {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// Opens topic `name`, creating it if missing. A topic and a queue cannot share a name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, or the name of a queue; storage errors.
    pub fn topic(&self, name: &str) -> Result<Topic> {
        validate_queue_name(name)?;
        if let Some(rec) = self.engine.read(|t| read::queue_by_name(t, name))?
            && rec.kind == QueueKind::Topic
        {
            return Ok(Topic::new(self.engine.clone(), name, &rec));
        }
        let owned = name.to_owned();
        let rec = self.engine.call(move |b| b.open_topic(&owned))?;
        Ok(Topic::new(self.engine.clone(), name, &rec))
    }

    /// Opens topic `name` only if it exists.
    ///
    /// # Errors
    ///
    /// [`Error::QueueNotFound`] when there is no such topic; storage errors.
    pub fn open_topic(&self, name: &str) -> Result<Topic> {
        validate_queue_name(name)?;
        match self.engine.read(|t| read::queue_by_name(t, name))? {
            Some(rec) if rec.kind == QueueKind::Topic => {
                Ok(Topic::new(self.engine.clone(), name, &rec))
            }
            _ => Err(Error::QueueNotFound(name.to_owned())),
        }
    }

    /// Opens collator `name`, which releases into `destination`, creating it if missing. The
    /// destination is then in use (see [`Store::delete_queue`]) until the collator is deleted.
    ///
    /// A collator whose destination no longer exists — possible only in a store an older
    /// postbox wrote, since deleting a queue a collator names is refused now — refuses sends
    /// ([`Error::QueueNotFound`] naming that queue) and keeps what it holds; opening it with a
    /// `destination` makes that its destination and releases there, in order, everything that
    /// was ready.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, the name of a queue or topic, a collator that
    /// releases into another queue that still exists, or a destination that is not a plain
    /// queue or is temporary; [`Error::QueueNotFound`] if `destination` was deleted; storage
    /// errors.
    pub fn collator(&self, name: &str, destination: &Queue) -> Result<Collator> {
        validate_queue_name(name)?;
        let (owned, dest, dest_name) = (name.to_owned(), destination.id, destination.name.clone());
        let rec = self
            .engine
            .call(move |b| b.open_collator(&owned, dest, &dest_name))?;
        Ok(Collator::new(
            self.engine.clone(),
            name,
            &rec,
            destination.clone(),
        ))
    }

    /// The names of all topics.
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn topics(&self) -> Result<Vec<String>> {
        self.engine.read(read::list_topics)
    }

    /// Creates a temporary queue: it belongs to this store handle's process and is deleted,
    /// with its messages, when the store is closed, when the process dies (noticed by the next
    /// process that opens the store, or by a shared store's next writer), or when the store is
    /// next opened in single-process mode. Its name (`$temporary/…`) is unique and may be given
    /// out as a `reply_to`. Used by [`Queue::request`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for invalid options (a temporary queue cannot require
    /// sessions or keep a journal); storage errors.
    pub fn temporary_queue(&self, options: Option<QueueOptions>) -> Result<Queue> {
        if let Some(o) = &options {
            o.apply_to(&QueueSettings::default()).validate()?;
        }
        let owner = self.engine.owner;
        let (name, rec) = self
            .engine
            .call(move |b| b.create_temporary_queue(owner, options.as_ref()))?;
        if rec.options.auto_delete_on_idle.is_some() {
            self.engine.ensure_janitor();
        }
        Ok(Queue::new(self.engine.clone(), &name, rec))
    }

    /// Creates a job (see [`Job`]). The queue of its continuation is in use (see
    /// [`Store::delete_queue`]) until the job is done or deleted.
    ///
    /// # Errors
    ///
    /// For a continuation: [`Error::QueueNotFound`], [`Error::MessageTooLarge`],
    /// [`Error::InvalidArgument`] (also for a temporary queue, which goes with its process
    /// while the job outlives it); storage errors.
    pub fn create_job(&self, options: JobOptions) -> Result<Job> {
        Job::create(&self.engine, options)
    }

    /// Every job in the store (created by [`Store::create_job`] in any process and not yet
    /// [deleted](Job::delete)), in id order, each with its progress: what a dashboard shows of
    /// batch progress. Done jobs are listed until deleted.
    ///
    /// The list is read from one snapshot, so the counts of all jobs belong to the same moment
    /// and the read never blocks writers. It costs a walk of the whole job table (one record
    /// per job; pieces are not read).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::JobOptions;
    /// let q = store.queue("tiles")?;
    /// let job = store.create_job(JobOptions::default())?;
    /// job.send(&q, "tile 0")?;
    /// let jobs = store.jobs()?;
    /// assert_eq!(jobs.len(), 1);
    /// assert_eq!(jobs[0].id, job.id());
    /// assert_eq!(jobs[0].progress.pending, 1);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Closed`] once the store was closed; storage errors (`Corrupted` for a damaged
    /// job record).
    pub fn jobs(&self) -> Result<Vec<JobInfo>> {
        crate::job::list(&self.engine)
    }

    /// Opens job `id`, created by [`Store::create_job`] in this or another process.
    ///
    /// # Errors
    ///
    /// [`Error::JobNotFound`]; storage errors.
    pub fn job(&self, id: u64) -> Result<Job> {
        self.engine
            .read(|t| read::job(t, id))?
            .ok_or(Error::JobNotFound(id))?;
        Ok(Job {
            engine: self.engine.clone(),
            id,
        })
    }

    /// Application table `name` (see [`Table`]); it exists once a row is written to it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a name that is empty or over 1 KiB; [`Error::Closed`].
    pub fn table(&self, name: &str) -> Result<Table> {
        self.engine.check_open()?;
        crate::engine::validate_app_key(name, b"")?;
        Ok(Table {
            engine: self.engine.clone(),
            name: name.into(),
        })
    }

    /// Every queue (as [`Store::queues`] lists them) with its options, whether it is
    /// temporary, and its last activity, read from one snapshot.
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn queue_infos(&self) -> Result<Vec<QueueInfo>> {
        self.engine.read(|t| {
            read::queue_records(t)?
                .into_iter()
                .map(|(name, rec)| {
                    let c = read::counts(t, rec.id)?;
                    Ok(QueueInfo {
                        options: QueueOptions::from(&rec.options),
                        temporary: rec.temporary_owner != 0,
                        last_activity: (c.last_activity != 0)
                            .then(|| crate::clock::to_system_time(c.last_activity)),
                        name,
                    })
                })
                .collect()
        })
    }

    fn open_or_create(&self, name: &str, options: Option<QueueOptions>) -> Result<Queue> {
        self.check_existing_name(name)?;
        if let Some(rec) = self.engine.read(|t| read::queue_by_name(t, name))?
            && matches!(rec.kind, QueueKind::Topic | QueueKind::Collator)
        {
            return Err(Error::invalid(format!(
                "{name:?} is {}, not a queue",
                rec.kind.described()
            )));
        }
        // Opening an existing queue with nothing to change needs no write transaction.
        let existing = self.engine.read(|t| read::queue_by_name(t, name))?;
        let rec: QueueRecord = match existing {
            Some(rec)
                if options
                    .as_ref()
                    .is_none_or(|o| o.apply_to(&rec.options) == rec.options) =>
            {
                rec
            }
            _ => {
                let owned = name.to_owned();
                self.engine
                    .call(move |b| b.open_queue(&owned, options.as_ref()))?
            }
        };
        if rec.options.auto_delete_on_idle.is_some() {
            self.engine.ensure_janitor();
        }
        Ok(Queue::new(self.engine.clone(), name, rec))
    }

    /// The names of all queues, topic subscriptions included (dead-letter queues are reached
    /// through [`Queue::dead_letters`], topics through [`Store::topics`]). Every queue is
    /// listed, and every name listed opens with [`Store::open_queue`] and deletes with
    /// [`Store::delete_queue`] — also the over-long subscription names an older postbox
    /// allowed (a subscription's whole queue name is at most 255 bytes now).
    ///
    /// # Errors
    ///
    /// Storage errors only.
    pub fn queues(&self) -> Result<Vec<String>> {
        self.engine.read(read::list_queues)
    }

    /// Deletes queue `name`, its dead-letter queue, and all their messages. Returns whether it
    /// existed. Handles to the queue fail with [`Error::QueueNotFound`] afterwards. A topic's
    /// name deletes the topic with every subscription; a collator's the collator.
    ///
    /// A queue that something names is *in use* and is not deleted: another queue's
    /// `forward_to`, `forward_dead_letters_to` or `receipts_to`, a collator that releases into
    /// it, or a job that is not done and sends its continuation there. Each of those promises
    /// to deliver into the queue, so the deletion is refused instead of losing what they
    /// deliver later. Clear the option, delete the collator or the job (or let it finish)
    /// first. `auto_delete_on_idle` skips a queue in use the same way.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// use postbox::{ErrorKind, QueueOptions};
    /// store.queue("audit")?;
    /// store.queue_with("orders", QueueOptions::default().receipts_to("audit"))?;
    /// let e = store.delete_queue("audit").unwrap_err();
    /// assert_eq!(e.kind(), ErrorKind::InUse); // "… it is the receipts_to of queue \"orders\" …"
    /// store.queue_with("orders", QueueOptions::default().no_receipts_to())?;
    /// assert!(store.delete_queue("audit")?);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::QueueInUse`] when something names the queue (for a topic: one of its
    /// subscriptions), with nothing deleted; [`Error::InvalidArgument`] when `name` is a
    /// dead-letter queue or a journal.
    pub fn delete_queue(&self, name: &str) -> Result<bool> {
        self.check_existing_name(name)?;
        let owned = name.to_owned();
        self.engine.call(move |b| b.delete_queue(&owned))
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

use crate::engine::validate_queue_name;
