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
    /// How many readers wait on `done`: a commit with nobody waiting (the usual case) makes
    /// no system call, where std's `notify_all` would make one every time.
    lock: std::sync::Mutex<usize>,
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
        let mut waiting = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while self.applied.load(Ordering::Acquire) < target {
            *waiting += 1;
            waiting = self
                .done
                .wait(waiting)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *waiting -= 1;
        }
    }

    /// Counts one more batch handed over; the [`Applying`] given back counts it applied when
    /// dropped.
    pub(super) fn hand(this: &Arc<Unapplied>) -> Applying {
        this.handed.fetch_add(1, Ordering::AcqRel);
        Applying(this.clone())
    }

    fn applied_one(&self) {
        let waiting = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.applied.fetch_add(1, Ordering::AcqRel);
        if *waiting > 0 {
            self.done.notify_all();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_waiting_for_a_batch_is_woken_by_its_commit() {
        let unapplied = Arc::new(Unapplied::default());
        let applying = Unapplied::hand(&unapplied);
        let u = unapplied.clone();
        let reader = std::thread::spawn(move || u.wait());
        // Commit only once the reader sleeps, so that the wake-up is what it waits for.
        while *unapplied.lock.lock().unwrap() == 0 {
            std::thread::yield_now();
        }
        drop(applying);
        reader.join().unwrap();
        assert_eq!(*unapplied.lock.lock().unwrap(), 0);
    }

    #[test]
    fn a_read_after_every_commit_does_not_wait() {
        let unapplied = Arc::new(Unapplied::default());
        drop(Unapplied::hand(&unapplied));
        drop(Unapplied::hand(&unapplied));
        unapplied.wait();
        assert_eq!(*unapplied.lock.lock().unwrap(), 0);
    }
}
