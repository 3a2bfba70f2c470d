//! Locks and condition variables that a `fork()` child can use.
//!
//! parking_lot parks contended threads in one process-wide hash table whose buckets have locks
//! of their own. A child forked while any thread of the parent held such a bucket lock (a
//! thread parking or waking in a `Condvar` with a timeout, say) inherits it locked, and the
//! child's first contended lock — on a store it opened itself, as invariant 11 tells it to —
//! waits forever. The standard library's locks keep their whole state in their own futex word,
//! so a lock the child creates is sound whatever the parent was doing.
//!
//! The API is parking_lot's shape (no poisoning: postbox catches panics at its boundaries and
//! its state stays consistent), so callers read the same.

use std::ops::{Deref, DerefMut};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

/// A mutual-exclusion lock; `lock` never reports poisoning.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized> {
    inner: std::sync::Mutex<T>,
}

/// Holds a [`Mutex`] until dropped.
#[derive(Debug)]
pub struct MutexGuard<'a, T: ?Sized> {
    lock: &'a Mutex<T>,
    /// Always `Some` outside a condition variable's wait (which lends the guard out).
    guard: Option<std::sync::MutexGuard<'a, T>>,
}

impl<T> Mutex<T> {
    /// A new unlocked mutex.
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            inner: std::sync::Mutex::new(value),
        }
    }

    /// The value, consuming the mutex.
    pub fn into_inner(self) -> T {
        self.inner
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, waiting as long as it takes.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        MutexGuard {
            lock: self,
            guard: Some(self.inner.lock().unwrap_or_else(PoisonError::into_inner)),
        }
    }

    /// Locks if nobody holds the lock now.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let guard = match self.inner.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(MutexGuard {
            lock: self,
            guard: Some(guard),
        })
    }

    /// The value, through exclusive access (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    /// Runs `f` with the lock released, and takes it again before returning.
    pub fn unlocked<R>(this: &mut MutexGuard<'a, T>, f: impl FnOnce() -> R) -> R {
        drop(this.guard.take());
        let r = f();
        this.guard = Some(
            this.lock
                .inner
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        r
    }

    fn inner(&self) -> &std::sync::MutexGuard<'a, T> {
        match &self.guard {
            Some(g) => g,
            // Only a condition variable takes the guard, and it puts it back before returning.
            None => unreachable!("a mutex guard used while lent to a condition variable"),
        }
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.inner()
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        match &mut self.guard {
            Some(g) => g,
            None => unreachable!("a mutex guard used while lent to a condition variable"),
        }
    }
}

/// Whether a timed wait ended because its time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// The wait ended because its time ran out (not because it was notified).
    pub fn timed_out(self) -> bool {
        self.0
    }
}

/// A condition variable used with [`Mutex`].
#[derive(Debug, Default)]
pub struct Condvar {
    inner: std::sync::Condvar,
}

impl Condvar {
    /// A new condition variable.
    pub const fn new() -> Condvar {
        Condvar {
            inner: std::sync::Condvar::new(),
        }
    }

    /// Wakes one waiter.
    pub fn notify_one(&self) {
        self.inner.notify_one();
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.inner.notify_all();
    }

    /// Releases the lock, waits for a notification (or a spurious wake-up), takes it again.
    pub fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        if let Some(g) = guard.guard.take() {
            guard.guard = Some(self.inner.wait(g).unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// As [`Condvar::wait`], ending at `deadline` at the latest.
    pub fn wait_until<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        self.wait_for(guard, deadline.saturating_duration_since(Instant::now()))
    }

    /// As [`Condvar::wait`], ending after `timeout` at the latest.
    pub fn wait_for<T>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        let Some(g) = guard.guard.take() else {
            return WaitTimeoutResult(true);
        };
        let (g, r) = self
            .inner
            .wait_timeout(g, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        guard.guard = Some(g);
        WaitTimeoutResult(r.timed_out())
    }
}

/// A reader-writer lock; never reports poisoning.
#[derive(Debug, Default)]
pub struct RwLock<T> {
    inner: std::sync::RwLock<T>,
}

impl<T> RwLock<T> {
    /// A new unlocked lock.
    pub const fn new(value: T) -> RwLock<T> {
        RwLock {
            inner: std::sync::RwLock::new(value),
        }
    }

    /// Shared access.
    pub fn read(&self) -> std::sync::RwLockReadGuard<'_, T> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive access.
    pub fn write(&self) -> std::sync::RwLockWriteGuard<'_, T> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value, through exclusive access.
    pub fn get_mut(&mut self) -> &mut T {
        self.inner.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_notified_waiter_wakes_and_a_timed_one_times_out() {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let p = pair.clone();
        let t = std::thread::spawn(move || {
            *p.0.lock() = true;
            p.1.notify_all();
        });
        let mut g = pair.0.lock();
        while !*g {
            pair.1.wait(&mut g);
        }
        t.join().unwrap();
        let r = pair.1.wait_for(&mut g, Duration::from_millis(5));
        assert!(r.timed_out());
        assert!(*g);
        let v = MutexGuard::unlocked(&mut g, || pair.0.try_lock().is_some());
        assert!(v, "unlocked releases the lock while f runs");
    }
}
