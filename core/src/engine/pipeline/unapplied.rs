//! What reads wait for: the batches handed to the applier thread to run and commit after their
//! callers were answered (`behind.rs`). Apart so that the store's context (`writer.rs`) and
//! the runner share it without depending on each other.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many batches were handed to the applier to run and how many it has committed since:
/// a read waits until every batch acknowledged before it began is in redb.
///
/// std's lock and condition variable, not `crate::sync`'s: the applier is a std thread even
/// under `--cfg shuttle` (see `applier.rs`), where shuttle's would refuse it.
#[derive(Default)]
pub struct Unapplied {
    handed: AtomicU64,
    applied: AtomicU64,
    lock: std::sync::Mutex<()>,
    done: std::sync::Condvar,
}

impl Unapplied {
    /// Returns once every batch handed over so far is committed to redb (or has failed, in
    /// which case the store is marked for reopening and the reopen replays it). At most one
    /// batch is ever behind (the leader waits for each run before it leads the next batch), so
    /// the wait is at most one redb commit without a sync.
    pub fn wait(&self) {
        let target = self.handed.load(Ordering::Acquire);
        if self.applied.load(Ordering::Acquire) >= target {
            return;
        }
        let mut guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while self.applied.load(Ordering::Acquire) < target {
            guard = self
                .done
                .wait(guard)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Counts one more batch handed over; the [`Applying`] given back counts it applied when
    /// dropped.
    pub(super) fn hand(this: &Arc<Unapplied>) -> Applying {
        this.handed.fetch_add(1, Ordering::AcqRel);
        Applying(this.clone())
    }

    fn applied_one(&self) {
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.applied.fetch_add(1, Ordering::AcqRel);
        self.done.notify_all();
    }
}

/// Counts a handed batch as applied when dropped: after its commit, or when its run never
/// happens or panics, so that no reader waits for it forever.
pub(super) struct Applying(Arc<Unapplied>);

impl Drop for Applying {
    fn drop(&mut self) {
        self.0.applied_one();
    }
}
