//! What the pipeline's batches run on: the [`Writer`] trait, and the store's
//! [`WriterContext`]. Apart from the election, which only needs the trait, and from the batch
//! run, which is the store's implementation of it (`run.rs`).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::applier::Applier;
use super::stats::PipelineStats;
use super::unapplied::Unapplied;
use crate::clock::Clock;
use crate::engine::batch::DueHints;
use crate::engine::db::DbSlot;
use crate::engine::park::ParkedReceive;
use crate::engine::signal::Signals;
use crate::engine::space::SpaceWatch;
use crate::options::Durability;
use crate::sync::Mutex;

/// The store as its batches see it: the database, the options a batch obeys, and what is
/// carried from batch to batch.
pub struct WriterContext {
    /// Closed once the stop has run, so that closing releases the file even while handles
    /// to the store (and so this pipeline) live on.
    pub db: Arc<DbSlot>,
    /// This process's owner id: its commit marks tell whether a failed commit landed.
    pub owner: u64,
    pub durability: Durability,
    pub clock: Arc<dyn Clock>,
    pub signals: Arc<Signals>,
    pub stats: Arc<PipelineStats>,
    /// `Some((owner, scope))` in multi-process mode: reap the locks of dead processes now and
    /// then.
    pub reap_as: Option<(u64, u64)>,
    /// Carried between batches; only in single-process mode (see [`DueHints`]).
    pub hints: Mutex<DueHints>,
    /// When this process last recorded each queue's activity (see `Batch::track_activity`).
    pub activity: Arc<Mutex<std::collections::HashMap<u32, u64>>>,
    /// Single-process stores: the shared next message id (see `Batch::share_ids`).
    pub ids: Option<Arc<AtomicU64>>,
    /// The buffer log records are built in, kept between batches.
    pub log_buf: Mutex<Vec<u8>>,
    /// Started with the first logged batch.
    pub applier: Mutex<Option<Applier>>,
    /// Batches acknowledged before redb applied them; reads wait for them (`behind.rs`).
    pub unapplied: Arc<Unapplied>,
    /// Set once a write failed for want of space: batches then commit durably.
    pub space: SpaceWatch,
}

/// What the pipeline's batches run on: the store ([`WriterContext`]) — or, in the concurrency
/// checks, a stand-in that answers its jobs without a file, so that the checks drive this
/// pipeline's own hand-off.
pub trait Writer: Send + Sync + 'static {
    type Job: Send;
    fn durability(&self) -> Durability;
    /// See [`WriterContext::reap_as`].
    fn reap_as(&self) -> Option<(u64, u64)>;
    /// Milliseconds until time-driven work (a scheduled message, a lock expiry) may serve a
    /// parked receive.
    fn due_in_ms(&self) -> u64;
    /// Runs one batch and answers its callers.
    fn run(&self, jobs: Vec<Self::Job>, parked: &mut Vec<ParkedReceive>, round: Round);
}

/// How the election asks one batch to run.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    /// Woken by time-driven work (a due message, a lock expiry), not only by callers.
    pub timer: bool,
    /// How durable this batch's commit must be.
    pub durability: Durability,
    /// `Some((owner, scope))`: reap the locks of dead processes in this batch.
    pub reap: Option<(u64, u64)>,
    /// The batch's number; 0 for the closing batch, which writes no commit mark.
    pub batch_no: u64,
}
