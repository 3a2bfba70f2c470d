//! Plain option data shared by the public API and the engine: how commits are made durable,
//! how a store is opened, and the options of a queue — public as [`QueueOptions`], stored as
//! [`QueueSettings`]. A leaf: it knows nothing of stores, queues or the engine.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};

/// How hard a commit works to survive a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// Every commit is on stable storage (fsync) before the call returns. A message whose send
    /// returned `Ok` survives `kill -9` and power loss.
    #[default]
    Immediate,
    /// Commits are not synced: much faster, but **a crash or power loss loses recent work** —
    /// sends that returned `Ok` and completions alike (the store itself stays consistent and
    /// opens to an earlier committed state). Closing the store syncs once. Not available with
    /// `multi_process(true)`.
    None,
}

/// What the engine needs to open a store, as set through
/// [`StoreBuilder`](crate::StoreBuilder) (which documents the defaults).
#[derive(Debug, Clone)]
pub(crate) struct EngineConfig {
    pub durability: Durability,
    pub cache_size: usize,
    pub multi_process: bool,
    pub poll_floor: Duration,
    pub poll_ceiling: Duration,
    pub verify_on_open: bool,
    pub clock: Arc<dyn Clock>,
    /// Single-process durable stores make batches durable through the write-ahead log.
    pub write_ahead_log: bool,
    /// When the log is checkpointed into the store file.
    pub checkpoints: LogCheckpoints,
    /// Tests only: a layer between postbox and the store's files.
    pub storage_layer: Option<crate::storage::SharedLayer>,
    /// Open even when the write-ahead log the store needs is missing or damaged, giving up
    /// what only it held (see `StoreBuilder::accept_log_loss`).
    pub accept_log_loss: bool,
}

/// When the write-ahead log is checkpointed (see `engine::wal`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogCheckpoints {
    /// Bytes of records since the last checkpoint.
    pub bytes: u64,
    /// Time since the last checkpoint with records written.
    pub interval: Duration,
    /// A batch whose record would be larger is committed durably to the store file instead:
    /// logging writes large bodies twice, which costs more than the sync it saves.
    pub max_record: u64,
}

impl Default for LogCheckpoints {
    fn default() -> Self {
        LogCheckpoints {
            bytes: 32 << 20,
            interval: Duration::from_secs(1),
            max_record: 256 << 10,
        }
    }
}

impl EngineConfig {
    /// Whether batches are made durable by the write-ahead log: single-process stores with
    /// `Durability::Immediate` (a multi-process store commits durably, since redb keeps a
    /// non-durable commit in one process's memory; `Durability::None` syncs nothing).
    pub fn uses_log(&self) -> bool {
        self.write_ahead_log && !self.multi_process && self.durability == Durability::Immediate
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            durability: Durability::Immediate,
            cache_size: 64 << 20,
            multi_process: false,
            poll_floor: Duration::from_millis(1),
            poll_ceiling: Duration::from_secs(1),
            verify_on_open: true,
            clock: Arc::new(SystemClock),
            write_ahead_log: true,
            checkpoints: LogCheckpoints::default(),
            storage_layer: None,
            accept_log_loss: false,
        }
    }
}

/// Per-queue settings: what [`Queue::options`](crate::Queue::options) reads back, and what
/// [`Store::queue_with`](crate::Store::queue_with) applies.
///
/// # Defaults
///
/// - `lock_duration`: 30 s — how long a received message stays locked before it is returned
/// - `max_deliveries`: 10 — deliveries before a message is dead-lettered
/// - `default_ttl`: none — messages live until received
/// - `max_message_size`: 4 MiB (as MSMQ) — counts the whole message: body, every text
///   property and every user property (see [`Message::size`](crate::Message::size))
/// - `max_messages`, `max_bytes`: none — quotas past which `send` fails with `QueueFull`
///   (`max_bytes` counts whole messages as `max_message_size` does)
/// - `dedup_window`: none — how long a `message_key` is remembered for duplicate detection
///
/// # Changing the options of an existing queue
///
/// Opening an existing queue with options changes **only the options mentioned**; the others
/// keep their stored values (the same rule as in C and Python). An option is mentioned when its
/// builder method was called (`.max_deliveries(5)`, `.no_default_ttl()`) or when its field holds
/// a value other than the default. To put an option back to its default, call its builder
/// method with the default value; to clear an optional one, call its `no_*` method.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
/// use postbox::QueueOptions;
/// use std::time::Duration;
/// store.queue_with("jobs", QueueOptions::default().max_deliveries(3).default_ttl(Duration::from_secs(60)))?;
/// // Later, perhaps in another process: only the lock duration changes.
/// let jobs = store.queue_with("jobs", QueueOptions::default().lock_duration(Duration::from_secs(5)))?;
/// assert_eq!(jobs.options()?.max_deliveries, 3);
/// let jobs = store.queue_with("jobs", QueueOptions::default().no_default_ttl())?;
/// assert_eq!(jobs.options()?.default_ttl, None);
/// # Ok::<(), postbox::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct QueueOptions {
    /// How long a receive holds a message before it returns to the queue.
    pub lock_duration: Duration,
    /// How many deliveries a message gets before it moves to the dead-letter queue.
    pub max_deliveries: u32,
    /// Time to live of messages that do not set their own.
    pub default_ttl: Option<Duration>,
    /// Largest accepted message, in bytes (body and properties).
    pub max_message_size: usize,
    /// Most messages (receivable, locked and scheduled) the queue may hold.
    pub max_messages: Option<u64>,
    /// Most message bytes the queue may hold.
    pub max_bytes: Option<u64>,
    /// How long a `message_key` is remembered: a second send with the same key inside the window
    /// is accepted and discarded, returning the first message's id.
    pub dedup_window: Option<Duration>,
    /// Messages must carry a `group` (their session) and are received through sessions only
    /// ([`Queue::accept_session`](crate::Queue::accept_session)): each group in send order,
    /// one message at a time. Fixed when the queue is created.
    pub requires_session: bool,
    /// Every message sent to this queue lands in this queue instead, in the same commit
    /// (Service Bus's auto-forwarding). Chains are followed; a loop is refused when set. Like
    /// every option that names a queue, the queue must exist and be a plain, non-temporary
    /// queue when the option is set, and it is *in use* while named: deleting it fails with
    /// [`Error::QueueInUse`](crate::Error::QueueInUse), and `auto_delete_on_idle` skips it.
    pub forward_to: Option<String>,
    /// Dead letters of this queue go to this queue (with their dead-letter reason and source)
    /// instead of its own dead-letter queue: dead letters of many queues collect in one place.
    /// The queue it names is in use (see `forward_to`).
    pub forward_dead_letters_to: Option<String>,
    /// Completed messages are kept in the queue's journal ([`Queue::journal`](crate::Queue::journal)),
    /// at most this many (the oldest dropped first); MSMQ's journal queue.
    pub journal: Option<u64>,
    /// The queue, its dead-letter queue and its messages are deleted after this long without
    /// activity (a send, receive, settle or lock renewal); a queue holding locked messages is
    /// never idle (Service Bus's `AutoDeleteOnIdle`). The queue goes within a second after
    /// that (usually about a tenth of a second: activity is recorded to a tenth of a second),
    /// never before; a send in the meantime starts the period again.
    pub auto_delete_on_idle: Option<Duration>,
    /// A receipt is posted to this queue, in the same commit, whenever a message of this queue
    /// is completed or dead-lettered: an empty-bodied message labelled `"receipt"` whose
    /// properties say what happened (see [`RECEIPT_LABEL`](crate::RECEIPT_LABEL)). A missing
    /// queue is refused when the option is set, as for `forward_to`, and the queue it names is
    /// in use (see `forward_to`).
    pub receipts_to: Option<String>,
    /// The options named by builder methods (bit per [`Opt`]).
    mentioned: u16,
}

/// One bit per option, for [`QueueOptions::mentioned`].
#[derive(Clone, Copy)]
enum Opt {
    LockDuration = 1,
    MaxDeliveries = 2,
    DefaultTtl = 4,
    MaxMessageSize = 8,
    MaxMessages = 16,
    MaxBytes = 32,
    DedupWindow = 64,
    RequiresSession = 128,
    ForwardTo = 256,
    ForwardDeadLettersTo = 512,
    Journal = 1024,
    AutoDeleteOnIdle = 2048,
    ReceiptsTo = 4096,
}

impl PartialEq for QueueOptions {
    /// Compares the settings only, not which of them were mentioned.
    fn eq(&self, o: &Self) -> bool {
        self.lock_duration == o.lock_duration
            && self.max_deliveries == o.max_deliveries
            && self.default_ttl == o.default_ttl
            && self.max_message_size == o.max_message_size
            && self.max_messages == o.max_messages
            && self.max_bytes == o.max_bytes
            && self.dedup_window == o.dedup_window
            && self.requires_session == o.requires_session
            && self.forward_to == o.forward_to
            && self.forward_dead_letters_to == o.forward_dead_letters_to
            && self.journal == o.journal
            && self.auto_delete_on_idle == o.auto_delete_on_idle
            && self.receipts_to == o.receipts_to
    }
}

impl Eq for QueueOptions {}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            lock_duration: Duration::from_secs(30),
            max_deliveries: 10,
            default_ttl: None,
            max_message_size: 4 << 20,
            max_messages: None,
            max_bytes: None,
            dedup_window: None,
            requires_session: false,
            forward_to: None,
            forward_dead_letters_to: None,
            journal: None,
            auto_delete_on_idle: None,
            receipts_to: None,
            mentioned: 0,
        }
    }
}

impl QueueOptions {
    fn mention(mut self, o: Opt) -> Self {
        self.mentioned |= o as u16;
        self
    }

    /// Sets `lock_duration`.
    pub fn lock_duration(mut self, d: Duration) -> Self {
        self.lock_duration = d;
        self.mention(Opt::LockDuration)
    }
    /// Sets `max_deliveries`.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = n;
        self.mention(Opt::MaxDeliveries)
    }
    /// Sets `default_ttl`.
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = Some(ttl);
        self.mention(Opt::DefaultTtl)
    }
    /// Clears `default_ttl`: messages that set no TTL live until received.
    pub fn no_default_ttl(mut self) -> Self {
        self.default_ttl = None;
        self.mention(Opt::DefaultTtl)
    }
    /// Sets `max_message_size`.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self.mention(Opt::MaxMessageSize)
    }
    /// Sets `max_messages`.
    pub fn max_messages(mut self, n: u64) -> Self {
        self.max_messages = Some(n);
        self.mention(Opt::MaxMessages)
    }
    /// Clears `max_messages` (no limit).
    pub fn no_max_messages(mut self) -> Self {
        self.max_messages = None;
        self.mention(Opt::MaxMessages)
    }
    /// Sets `max_bytes`.
    pub fn max_bytes(mut self, n: u64) -> Self {
        self.max_bytes = Some(n);
        self.mention(Opt::MaxBytes)
    }
    /// Clears `max_bytes` (no limit).
    pub fn no_max_bytes(mut self) -> Self {
        self.max_bytes = None;
        self.mention(Opt::MaxBytes)
    }
    /// Sets `dedup_window`.
    pub fn dedup_window(mut self, d: Duration) -> Self {
        self.dedup_window = Some(d);
        self.mention(Opt::DedupWindow)
    }
    /// Clears `dedup_window` (no duplicate detection).
    pub fn no_dedup_window(mut self) -> Self {
        self.dedup_window = None;
        self.mention(Opt::DedupWindow)
    }
    /// Sets `forward_to`: sends to this queue land in queue `name`.
    pub fn forward_to(mut self, name: impl Into<String>) -> Self {
        self.forward_to = Some(name.into());
        self.mention(Opt::ForwardTo)
    }
    /// Clears `forward_to`.
    pub fn no_forward_to(mut self) -> Self {
        self.forward_to = None;
        self.mention(Opt::ForwardTo)
    }
    /// Sets `forward_dead_letters_to`: dead letters land in queue `name`.
    pub fn forward_dead_letters_to(mut self, name: impl Into<String>) -> Self {
        self.forward_dead_letters_to = Some(name.into());
        self.mention(Opt::ForwardDeadLettersTo)
    }
    /// Clears `forward_dead_letters_to`.
    pub fn no_forward_dead_letters_to(mut self) -> Self {
        self.forward_dead_letters_to = None;
        self.mention(Opt::ForwardDeadLettersTo)
    }
    /// Keeps completed messages in the queue's journal, at most `max_messages` of them.
    pub fn journal(mut self, max_messages: u64) -> Self {
        self.journal = Some(max_messages);
        self.mention(Opt::Journal)
    }
    /// Stops journaling (what the journal holds stays until purged).
    pub fn no_journal(mut self) -> Self {
        self.journal = None;
        self.mention(Opt::Journal)
    }
    /// Deletes the queue after `idle` without activity (see the field).
    pub fn auto_delete_on_idle(mut self, idle: Duration) -> Self {
        self.auto_delete_on_idle = Some(idle);
        self.mention(Opt::AutoDeleteOnIdle)
    }
    /// Clears `auto_delete_on_idle`: the queue stays until deleted.
    pub fn no_auto_delete_on_idle(mut self) -> Self {
        self.auto_delete_on_idle = None;
        self.mention(Opt::AutoDeleteOnIdle)
    }
    /// Posts a receipt to queue `name` for every message completed or dead-lettered here.
    pub fn receipts_to(mut self, name: impl Into<String>) -> Self {
        self.receipts_to = Some(name.into());
        self.mention(Opt::ReceiptsTo)
    }
    /// Stops posting receipts.
    pub fn no_receipts_to(mut self) -> Self {
        self.receipts_to = None;
        self.mention(Opt::ReceiptsTo)
    }
    /// Sets `requires_session` (only when the queue is created: it cannot change later).
    pub fn requires_session(mut self, on: bool) -> Self {
        self.requires_session = on;
        self.mention(Opt::RequiresSession)
    }

    /// These options applied over `stored`: each option mentioned here (or holding a value
    /// other than its default) replaces the stored one; the rest are kept.
    pub(crate) fn apply_to(&self, stored: &QueueSettings) -> QueueSettings {
        let d = QueueOptions::default();
        let take = |o: Opt, differs: bool| self.mentioned & o as u16 != 0 || differs;
        let mut out = stored.clone();
        if take(Opt::LockDuration, self.lock_duration != d.lock_duration) {
            out.lock_duration = self.lock_duration;
        }
        if take(Opt::MaxDeliveries, self.max_deliveries != d.max_deliveries) {
            out.max_deliveries = self.max_deliveries;
        }
        if take(Opt::DefaultTtl, self.default_ttl != d.default_ttl) {
            out.default_ttl = self.default_ttl;
        }
        if take(
            Opt::MaxMessageSize,
            self.max_message_size != d.max_message_size,
        ) {
            out.max_message_size = self.max_message_size;
        }
        if take(Opt::MaxMessages, self.max_messages != d.max_messages) {
            out.max_messages = self.max_messages;
        }
        if take(Opt::MaxBytes, self.max_bytes != d.max_bytes) {
            out.max_bytes = self.max_bytes;
        }
        if take(Opt::DedupWindow, self.dedup_window != d.dedup_window) {
            out.dedup_window = self.dedup_window;
        }
        if take(
            Opt::RequiresSession,
            self.requires_session != d.requires_session,
        ) {
            out.requires_session = self.requires_session;
        }
        if take(Opt::ForwardTo, self.forward_to != d.forward_to) {
            out.forward_to.clone_from(&self.forward_to);
        }
        if take(
            Opt::ForwardDeadLettersTo,
            self.forward_dead_letters_to != d.forward_dead_letters_to,
        ) {
            out.forward_dead_letters_to
                .clone_from(&self.forward_dead_letters_to);
        }
        if take(Opt::Journal, self.journal != d.journal) {
            out.journal = self.journal;
        }
        if take(
            Opt::AutoDeleteOnIdle,
            self.auto_delete_on_idle != d.auto_delete_on_idle,
        ) {
            out.auto_delete_on_idle = self.auto_delete_on_idle;
        }
        if take(Opt::ReceiptsTo, self.receipts_to != d.receipts_to) {
            out.receipts_to.clone_from(&self.receipts_to);
        }
        out
    }
}

/// A queue's options as stored: what every decision reads (invariant 12), and what the
/// engine keeps in the queue record. [`QueueOptions`] is the public face: it reads these back
/// and, when opening a queue, says which of them to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueSettings {
    pub lock_duration: Duration,
    pub max_deliveries: u32,
    pub default_ttl: Option<Duration>,
    pub max_message_size: usize,
    pub max_messages: Option<u64>,
    pub max_bytes: Option<u64>,
    pub dedup_window: Option<Duration>,
    pub requires_session: bool,
    pub forward_to: Option<String>,
    pub forward_dead_letters_to: Option<String>,
    pub journal: Option<u64>,
    pub auto_delete_on_idle: Option<Duration>,
    pub receipts_to: Option<String>,
}

impl Default for QueueSettings {
    fn default() -> Self {
        let d = QueueOptions::default();
        QueueSettings {
            lock_duration: d.lock_duration,
            max_deliveries: d.max_deliveries,
            default_ttl: d.default_ttl,
            max_message_size: d.max_message_size,
            max_messages: d.max_messages,
            max_bytes: d.max_bytes,
            dedup_window: d.dedup_window,
            requires_session: d.requires_session,
            forward_to: d.forward_to,
            forward_dead_letters_to: d.forward_dead_letters_to,
            journal: d.journal,
            auto_delete_on_idle: d.auto_delete_on_idle,
            receipts_to: d.receipts_to,
        }
    }
}

impl From<&QueueSettings> for QueueOptions {
    fn from(s: &QueueSettings) -> QueueOptions {
        QueueOptions {
            lock_duration: s.lock_duration,
            max_deliveries: s.max_deliveries,
            default_ttl: s.default_ttl,
            max_message_size: s.max_message_size,
            max_messages: s.max_messages,
            max_bytes: s.max_bytes,
            dedup_window: s.dedup_window,
            requires_session: s.requires_session,
            forward_to: s.forward_to.clone(),
            forward_dead_letters_to: s.forward_dead_letters_to.clone(),
            journal: s.journal,
            auto_delete_on_idle: s.auto_delete_on_idle,
            receipts_to: s.receipts_to.clone(),
            mentioned: 0,
        }
    }
}

impl QueueSettings {
    /// Checks the settings a queue would be left with.
    pub fn validate(&self) -> Result<()> {
        if self.lock_duration < Duration::from_millis(1) {
            return Err(Error::invalid("lock_duration must be at least 1 ms"));
        }
        if self.max_deliveries == 0 {
            return Err(Error::invalid("max_deliveries must be at least 1"));
        }
        // 0 would mean "refuse every send", which C cannot tell from "unlimited" (its 0).
        if self.max_messages == Some(0) || self.max_bytes == Some(0) {
            return Err(Error::invalid(
                "max_messages and max_bytes must be at least 1 (clear them for no limit)",
            ));
        }
        // As for the quotas: C's 0 means "not set", so a journal keeps at least one message.
        if self.journal == Some(0) {
            return Err(Error::invalid(
                "a journal keeps at least 1 message (clear the option for no journal)",
            ));
        }
        if self.max_message_size > u32::MAX as usize {
            return Err(Error::invalid("max_message_size cannot exceed 4 GiB - 1"));
        }
        if self.default_ttl.is_some_and(|d| d.is_zero())
            || self.dedup_window.is_some_and(|d| d.is_zero())
            || self.auto_delete_on_idle.is_some_and(|d| d.is_zero())
        {
            return Err(Error::invalid(
                "default_ttl, dedup_window and auto_delete_on_idle must be positive",
            ));
        }
        Ok(())
    }
}
