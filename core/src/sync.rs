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
//!
//! Built with `--cfg shuttle`, the same types wrap shuttle's, and so do the atomics, threads and
//! channels the in-process hand-offs use: the concurrency checks (docs/design.md § Concurrency
//! checking) then run postbox's own synchronisation under a scheduler that explores
//! interleavings. Normal builds use std and crossbeam as before.

use std::ops::{Deref, DerefMut};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

#[cfg(not(shuttle))]
use std::sync as imp;

#[cfg(shuttle)]
use shuttle::sync as imp;

/// Atomics whose accesses the concurrency checks may interleave.
pub mod atomic {
    #[cfg(shuttle)]
    pub use shuttle::sync::atomic::*;
    #[cfg(not(shuttle))]
    pub use std::sync::atomic::*;
}

/// Threads the concurrency checks schedule.
pub mod thread {
    #[cfg(shuttle)]
    pub use shuttle::thread::*;
    #[cfg(not(shuttle))]
    pub use std::thread::*;
}

/// A mutual-exclusion lock; `lock` never reports poisoning.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized> {
    inner: imp::Mutex<T>,
}

/// Holds a [`Mutex`] until dropped.
#[derive(Debug)]
pub struct MutexGuard<'a, T: ?Sized> {
    lock: &'a Mutex<T>,
    /// Always `Some` outside a condition variable's wait (which lends the guard out).
    guard: Option<imp::MutexGuard<'a, T>>,
}

impl<T> Mutex<T> {
    /// A new unlocked mutex.
    pub const fn new(value: T) -> Mutex<T> {
        Mutex {
            inner: imp::Mutex::new(value),
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
            Err(imp::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(imp::TryLockError::WouldBlock) => return None,
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

    fn inner(&self) -> &imp::MutexGuard<'a, T> {
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
    inner: imp::Condvar,
}

impl Condvar {
    /// A new condition variable.
    pub const fn new() -> Condvar {
        Condvar {
            inner: imp::Condvar::new(),
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
        #[cfg(not(shuttle))]
        {
            let (g, r) = self
                .inner
                .wait_timeout(g, timeout)
                .unwrap_or_else(PoisonError::into_inner);
            guard.guard = Some(g);
            WaitTimeoutResult(r.timed_out())
        }
        // shuttle's timed waits never time out, which would call a wait that a timeout ends a
        // deadlock. Here a timed wait lets the other threads run and then ends, timed out or
        // not as the scheduler's random choice says (a wake-up that is not a timeout is
        // spurious: every caller re-checks its condition). So the time runs out at a step of
        // the other threads that the scheduler picks.
        #[cfg(shuttle)]
        {
            use shuttle::rand::Rng;
            let _ = timeout;
            drop(g);
            shuttle::thread::yield_now();
            guard.guard = Some(
                guard
                    .lock
                    .inner
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            WaitTimeoutResult(shuttle::rand::thread_rng().gen_ratio(1, 4))
        }
    }
}

pub mod answers;

/// The one-shot reply channels of the in-process hand-offs (a parked receive's answer) and the
/// cancel token's: crossbeam's, or under `--cfg shuttle` a small channel on this module's
/// `Mutex` and `Condvar`, which shuttle can schedule. A pipeline job's result goes through
/// [`answers`] instead.
pub mod channel {
    use std::time::Instant;

    #[cfg(not(shuttle))]
    pub use crossbeam_channel::{Receiver, RecvError, Sender, TryRecvError, bounded};

    #[cfg(shuttle)]
    pub use checked::{Receiver, RecvError, Sender, TryRecvError, bounded};

    /// Waits for `answer` until `cancel` disconnects or `deadline` (if any) passes, which both
    /// give `None`.
    #[cfg(not(shuttle))]
    pub fn recv_until<T>(
        answer: &Receiver<T>,
        cancel: Option<&Receiver<()>>,
        deadline: Option<Instant>,
    ) -> Option<Result<T, RecvError>> {
        // A cancel token's channel never delivers: it disconnects when cancelled.
        let never = crossbeam_channel::never();
        let cancelled = cancel.unwrap_or(&never);
        // No deadline: a timer that never fires.
        let timer = deadline.map_or_else(crossbeam_channel::never, crossbeam_channel::at);
        crossbeam_channel::select! {
            recv(answer) -> r => Some(r),
            recv(cancelled) -> _ => None,
            recv(timer) -> _ => None,
        }
    }

    /// As the crossbeam version: the deadline passes when a timed wait says so, which the
    /// scheduler decides (see `Condvar::wait_for`).
    #[cfg(shuttle)]
    pub fn recv_until<T>(
        answer: &Receiver<T>,
        cancel: Option<&Receiver<()>>,
        deadline: Option<Instant>,
    ) -> Option<Result<T, RecvError>> {
        let chan = &answer.chan;
        let mut st = chan.state.lock();
        loop {
            if let Some(v) = st.items.pop_front() {
                return Some(Ok(v));
            }
            if st.senders == 0 {
                return Some(Err(RecvError));
            }
            if cancel.is_some_and(|c| c.chan.state.lock().senders == 0) {
                return None;
            }
            if cancel.is_none() && deadline.is_none() {
                chan.cv.wait(&mut st);
            } else if chan
                .cv
                .wait_for(&mut st, std::time::Duration::ZERO)
                .timed_out()
                && deadline.is_some()
            {
                return None;
            }
        }
    }

    #[cfg(shuttle)]
    mod checked {
        use std::collections::VecDeque;
        use std::fmt;
        use std::sync::Arc;

        use crate::sync::{Condvar, Mutex};

        pub(super) struct Chan<T> {
            pub(super) state: Mutex<State<T>>,
            pub(super) cv: Condvar,
        }

        pub(super) struct State<T> {
            pub(super) items: VecDeque<T>,
            pub(super) senders: usize,
            receivers: usize,
        }

        /// Every sender is gone and nothing is left.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct RecvError;

        /// Nothing to take now: `Empty`, or `Disconnected` when every sender is gone too.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum TryRecvError {
            Empty,
            Disconnected,
        }

        /// Every receiver is gone; the value comes back.
        #[derive(Debug)]
        pub struct SendError<T>(pub T);

        impl<T> SendError<T> {
            pub fn into_inner(self) -> T {
                self.0
            }
        }

        pub struct Sender<T> {
            chan: Arc<Chan<T>>,
        }

        pub struct Receiver<T> {
            pub(super) chan: Arc<Chan<T>>,
        }

        /// Capacity is not enforced: postbox sends one reply per channel, or none.
        pub fn bounded<T>(_cap: usize) -> (Sender<T>, Receiver<T>) {
            let chan = Arc::new(Chan {
                state: Mutex::new(State {
                    items: VecDeque::new(),
                    senders: 1,
                    receivers: 1,
                }),
                cv: Condvar::new(),
            });
            (Sender { chan: chan.clone() }, Receiver { chan })
        }

        impl<T> Sender<T> {
            pub fn send(&self, value: T) -> Result<(), SendError<T>> {
                let mut st = self.chan.state.lock();
                if st.receivers == 0 {
                    return Err(SendError(value));
                }
                st.items.push_back(value);
                self.chan.cv.notify_all();
                Ok(())
            }
        }

        impl<T> Receiver<T> {
            pub fn recv(&self) -> Result<T, RecvError> {
                let mut st = self.chan.state.lock();
                loop {
                    if let Some(v) = st.items.pop_front() {
                        return Ok(v);
                    }
                    if st.senders == 0 {
                        return Err(RecvError);
                    }
                    self.chan.cv.wait(&mut st);
                }
            }

            pub fn try_recv(&self) -> Result<T, TryRecvError> {
                let mut st = self.chan.state.lock();
                match st.items.pop_front() {
                    Some(v) => Ok(v),
                    None if st.senders == 0 => Err(TryRecvError::Disconnected),
                    None => Err(TryRecvError::Empty),
                }
            }
        }

        impl<T> Clone for Sender<T> {
            fn clone(&self) -> Self {
                self.chan.state.lock().senders += 1;
                Sender {
                    chan: self.chan.clone(),
                }
            }
        }

        impl<T> Clone for Receiver<T> {
            fn clone(&self) -> Self {
                self.chan.state.lock().receivers += 1;
                Receiver {
                    chan: self.chan.clone(),
                }
            }
        }

        impl<T> Drop for Sender<T> {
            fn drop(&mut self) {
                self.chan.state.lock().senders -= 1;
                self.chan.cv.notify_all();
            }
        }

        impl<T> Drop for Receiver<T> {
            fn drop(&mut self) {
                self.chan.state.lock().receivers -= 1;
            }
        }

        impl<T> fmt::Debug for Sender<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("Sender")
            }
        }

        impl<T> fmt::Debug for Receiver<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("Receiver")
            }
        }
    }
}

/// Runs a concurrency check: shuttle's random scheduler, then its PCT scheduler (which finds
/// bugs that need a few unlikely preemptions), each for `POSTBOX_SHUTTLE_ITERATIONS`
/// executions (default 500).
#[cfg(all(test, shuttle))]
pub(crate) fn check(f: impl Fn() + Send + Sync + 'static) {
    let iterations = std::env::var("POSTBOX_SHUTTLE_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let f = std::sync::Arc::new(f);
    let g = f.clone();
    shuttle::check_random(move || f(), iterations);
    shuttle::check_pct(move || g(), iterations, 3);
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
