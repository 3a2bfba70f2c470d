//! In-process wake-ups: a waiter on an empty queue sleeps on its queue's condition variable and
//! is woken by the commit that made a message receivable there. An async waiter leaves its
//! `Waker` instead, woken by the same notification.

use std::collections::HashMap;
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Condvar, Mutex};

/// One queue's wake-up: a sequence number bumped on every wake, so a waiter that read it before
/// trying to receive can never miss a wake that happened in between.
#[derive(Debug, Default)]
pub struct Signal {
    seq: Mutex<u64>,
    cv: Condvar,
    /// Threads in `wait` or holding a [`Waiting`] now: a look at the file checks only the
    /// queues somebody waits on.
    waiters: AtomicUsize,
    /// Async waiters, woken (and forgotten) by the next notification.
    wakers: Mutex<Vec<Waker>>,
}

impl Signal {
    pub fn seq(&self) -> u64 {
        *self.seq.lock()
    }

    pub fn notify(&self) {
        *self.seq.lock() += 1;
        self.cv.notify_all();
        let wakers = std::mem::take(&mut *self.wakers.lock());
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Leaves `waker` to be woken when the sequence moves past `seen`; false (and nothing left)
    /// if it has moved already.
    pub fn register(&self, seen: u64, waker: &Waker) -> bool {
        // Under the sequence's lock: a notification either came before (the check sees it) or
        // takes the waker after.
        let seq = self.seq.lock();
        if *seq != seen {
            return false;
        }
        let mut wakers = self.wakers.lock();
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
        true
    }

    /// Counts the caller as waiting on this queue until the guard drops: a look at the file
    /// (`poll::FileLook`) wakes only queues somebody waits on, and a waiter must be counted
    /// from before its first attempt, or a message committed between that attempt and its
    /// sleep would wake nobody.
    pub fn waiting(self: &Arc<Self>) -> Waiting {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        Waiting(self.clone())
    }

    fn has_waiters(&self) -> bool {
        self.waiters.load(Ordering::Acquire) > 0 || !self.wakers.lock().is_empty()
    }

    /// Waits until the sequence moves past `seen` or until `until`. Returns whether it moved.
    pub fn wait(&self, seen: u64, until: Option<Instant>) -> bool {
        let mut seq = self.seq.lock();
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let mut moved = true;
        while *seq == seen {
            match until {
                None => self.cv.wait(&mut seq),
                Some(t) => {
                    if self.cv.wait_until(&mut seq, t).timed_out() {
                        moved = *seq != seen;
                        break;
                    }
                }
            }
        }
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        moved
    }
}

/// A waiter counted by [`Signal::waiting`].
#[derive(Debug)]
pub struct Waiting(Arc<Signal>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The signals of every queue this process waits on.
#[derive(Debug, Default)]
pub struct Signals {
    map: Mutex<HashMap<u32, Arc<Signal>>>,
    /// Wakes async waiters of a shared store at their next poll or deadline.
    pub timer: super::timer::Timer,
}

impl Signals {
    pub fn get(&self, q: u32) -> Arc<Signal> {
        self.map.lock().entry(q).or_default().clone()
    }

    pub fn notify(&self, queues: impl IntoIterator<Item = u32>) {
        let map = self.map.lock();
        for q in queues {
            if let Some(s) = map.get(&q) {
                s.notify();
            }
        }
    }

    /// The queues somebody waits on now, with their signals.
    pub fn waited(&self) -> Vec<(u32, Arc<Signal>)> {
        self.map
            .lock()
            .iter()
            .filter(|(_, s)| s.has_waiters())
            .map(|(q, s)| (*q, s.clone()))
            .collect()
    }

    /// Wakes every waiter, e.g. when the store closes.
    pub fn notify_all(&self) {
        for s in self.map.lock().values() {
            s.notify();
        }
    }
}
