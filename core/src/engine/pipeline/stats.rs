//! The pipeline's counters. Apart because the store reads them (`Store::stats`, the admin
//! endpoint's traffic) while the pipeline writes them.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

use crate::engine::batch::Traffic;
use crate::sync::Mutex;

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
