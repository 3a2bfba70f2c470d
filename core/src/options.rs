//! Plain option data shared by the public API and the engine: how commits are made durable,
//! how a store is opened, and the options of a queue — public as [`QueueOptions`], stored as
//! [`QueueSettings`]. A leaf: it knows nothing of stores, queues or the engine.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};

mod table;
mod value;

pub use table::QueueOptions;
pub(crate) use table::QueueSettings;
pub use value::{OptionField, OptionKind, OptionValue};

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
    /// Records the log must hold before `interval` counts (0 by default: a floor of 2,000
    /// records was measured and not kept, docs/design.md § Checkpoints, *How few records*).
    pub min_records: u64,
    /// A batch whose record would be larger is committed durably to the store file instead:
    /// logging writes large bodies twice, which costs more than the sync it saves.
    pub max_record: u64,
}

impl Default for LogCheckpoints {
    fn default() -> Self {
        LogCheckpoints {
            bytes: 32 << 20,
            interval: Duration::from_millis(250),
            min_records: 0,
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
        if self.default_priority > crate::message::MAX_PRIORITY {
            return Err(Error::invalid(format!(
                "default_priority {} is out of range 0..={}",
                self.default_priority,
                crate::message::MAX_PRIORITY
            )));
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
