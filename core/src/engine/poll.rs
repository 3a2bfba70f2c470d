//! When a waiter of a shared store looks at the file (multi-process mode; docs/design.md
//! § Waiting). Another process's commit reaches this one through the store file only, and an
//! idle process must not wake to look at it (invariant 15).
//!
//! With a change notification on the file (`watch`), waiters sleep until they are woken, their
//! deadline passes or time-driven work falls due; one [`FileLook`] per store looks at the file
//! for them: when the watch reports a change (waking the waiters of the queues that gained a
//! receivable message, and all of them when time-driven work moved earlier), again
//! [`RELOOK`] after a change (a dying process closes the file a moment before it can be seen
//! dead), and every [`SAFETY_LOOK`] while anybody waits (a dead process whose file a forked
//! child of it still holds open closes nothing). A look that finds a dead process's locks
//! wakes every waiter, and the first to wake releases them (`Engine::reap_if_flagged`).
//!
//! Without one (a platform without a notification, no inotify instance left, the watch ended)
//! each waiter polls: it reads the file after the store's `poll_interval` floor, doubling the
//! interval per look that finds nothing up to the ceiling (1 s by default), so an idle waiter
//! wakes about once a second and a message from another process waits up to the ceiling.

use std::sync::{Arc, Weak};
use std::task::{Wake, Waker};
use std::time::{Duration, Instant};

use redb::ReadableDatabase;

use super::batch::JOB_SIGNAL_BASE;
use super::signal::Signals;
use super::{Engine, db, guarded, read};
use crate::clock::Clock;
use crate::error::Result;
use crate::os::watch::Change;
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, Ordering};

/// How soon after a change the file is looked at again (see the module's notes).
pub const RELOOK: Duration = Duration::from_millis(100);

/// How often the file is looked at while anybody waits and nothing changes.
pub const SAFETY_LOOK: Duration = Duration::from_secs(5);

/// The looks at a shared store's file on behalf of this process's waiters.
pub struct FileLook {
    db: Weak<db::DbSlot>,
    signals: Weak<Signals>,
    clock: Arc<dyn Clock>,
    owner: u64,
    scope: u64,
    /// Whether a change notification is running: waiters then need not poll.
    watching: AtomicBool,
    /// A look found a dead process's locks; the next waiter to wake releases them.
    dead_owner: AtomicBool,
    /// The store closed: nothing more goes on the timer.
    closed: AtomicBool,
    state: Mutex<LookState>,
}

#[derive(Default)]
struct LookState {
    /// The store's next time-driven work (store-clock ms) at the last look; `None` before the
    /// first.
    last_due: Option<Option<u64>>,
    /// The earliest look waiting on the store's timer.
    next: Option<Instant>,
}

impl FileLook {
    pub fn new(
        db: Weak<db::DbSlot>,
        signals: Weak<Signals>,
        clock: Arc<dyn Clock>,
        owner: u64,
        scope: u64,
    ) -> FileLook {
        FileLook {
            db,
            signals,
            clock,
            owner,
            scope,
            watching: AtomicBool::new(false),
            dead_owner: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            state: Mutex::new(LookState::default()),
        }
    }

    /// Set when the watch starts, cleared when it ends.
    pub fn set_watching(&self, on: bool) {
        self.watching.store(on, Ordering::Release);
    }

    pub fn is_watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    /// The watch's callback.
    pub fn changed(self: &Arc<Self>, change: Change) {
        match change {
            Change::Written => {
                self.look(false);
                self.schedule(Instant::now() + RELOOK);
            }
            Change::Ended => {
                self.set_watching(false);
                // Sleeping waiters start polling.
                if let Some(signals) = self.signals.upgrade() {
                    signals.notify_all();
                }
            }
        }
    }

    /// A waiter goes to sleep without polling: makes sure a safety look is on the timer.
    pub fn keep_looking(self: &Arc<Self>) {
        self.schedule(Instant::now() + SAFETY_LOOK);
    }

    /// The store closes: no look is put on the timer any more (the close then empties it).
    pub fn close(&self) {
        let _st = self.state.lock();
        self.closed.store(true, Ordering::Release);
    }

    /// Takes the mark a look left on finding a dead process's locks.
    pub fn take_dead_owner(&self) -> bool {
        self.dead_owner.swap(false, Ordering::AcqRel)
    }

    /// Puts a look on the store's timer at `at`, unless one is there already by then.
    fn schedule(self: &Arc<Self>, at: Instant) {
        let Some(signals) = self.signals.upgrade() else {
            return;
        };
        // Entered under the state lock, as `close` is, so that nothing goes on the timer after
        // the close (whose `stop` of the timer follows). The timer calls `wake` outside its own
        // lock, so the two locks are always taken in this order.
        let mut st = self.state.lock();
        if self.closed.load(Ordering::Acquire) || st.next.is_some_and(|n| n <= at) {
            return;
        }
        match signals.timer.wake_at(at, Waker::from(self.clone())) {
            Ok(()) => st.next = Some(at),
            Err(e) => tracing::warn!(
                error = %e,
                "no timer thread: dead processes' locks are released at their expiry"
            ),
        }
    }

    /// Reads the file for what this process's waiters wait for and wakes them accordingly;
    /// `owners` also looks for dead processes' locks (a few reads of `/proc` per process).
    fn look(&self, owners: bool) {
        let Some(signals) = self.signals.upgrade() else {
            return;
        };
        let waited = signals.waited();
        if waited.is_empty() {
            // Whoever waits next reads the file before sleeping.
            return;
        }
        let Some(db) = self.db.upgrade().and_then(|slot| slot.peek()) else {
            return;
        };
        let now = self.clock.now_ms();
        let (me, scope) = (self.owner, self.scope);
        let found = guarded::catch(|| -> Result<(Vec<bool>, Option<u64>, bool)> {
            let txn = db.begin_read()?;
            let ready = waited
                .iter()
                .map(|(q, _)| read::has_candidate(&txn, *q, now))
                .collect::<Result<Vec<bool>>>()?;
            let due = read::next_due(&txn)?;
            let dead = owners && read::has_dead_owner(&txn, me, scope)?;
            Ok((ready, due, dead))
        });
        let Ok(Ok((ready, due, dead))) = found else {
            // Could not read: let the waiters try for themselves.
            for (_, s) in &waited {
                s.notify();
            }
            return;
        };
        let earlier = {
            let mut st = self.state.lock();
            // Waiters sleep until the due time they read; only an earlier one must wake them.
            let earlier = match st.last_due {
                None => true,
                Some(before) => due.is_some_and(|d| before.is_none_or(|b| d < b)),
            };
            st.last_due = Some(due);
            earlier
        };
        if dead {
            self.dead_owner.store(true, Ordering::Release);
        }
        let all = earlier || dead;
        for ((q, s), yes) in waited.iter().zip(ready) {
            // A job's waiters look for themselves: any change may have ended it.
            if all || yes || *q >= JOB_SIGNAL_BASE {
                s.notify();
            }
        }
    }
}

/// A look on the store's timer (a relook or a safety look).
impl Wake for FileLook {
    fn wake(self: Arc<Self>) {
        let now = Instant::now();
        {
            let mut st = self.state.lock();
            // An entry superseded by an earlier one (which ran and scheduled the next) does
            // nothing.
            if st.next.is_none_or(|n| n > now) {
                return;
            }
            st.next = None;
        }
        self.look(true);
        if self
            .signals
            .upgrade()
            .is_some_and(|s| !s.waited().is_empty())
        {
            self.schedule(now + SAFETY_LOOK);
        }
    }
}

/// A waiter's polling interval, for when there is no change notification.
#[derive(Debug, Clone, Copy)]
pub struct Backoff(Duration);

impl Engine {
    /// A waiter's polling interval at its start (the store's floor).
    pub fn backoff(&self) -> Backoff {
        Backoff(self.poll_floor)
    }

    /// Something happened: the next poll comes soon again.
    pub fn reset_backoff(&self, b: &mut Backoff) {
        b.0 = self.poll_floor;
    }

    /// When a waiter that found nothing at `now` looks at the file next: `None` when nothing
    /// needs polling (a single-process store, or a shared one whose file is watched; a safety
    /// look is then kept on the timer). Each poll doubles the next interval, up to the ceiling.
    pub fn next_poll(&self, b: &mut Backoff, now: Instant) -> Option<Instant> {
        if !self.multi_process {
            return None;
        }
        if self.look.is_watching() {
            self.look.keep_looking();
            return None;
        }
        let at = now.checked_add(b.0);
        b.0 = (b.0 * 2).min(self.poll_ceiling);
        at
    }

    /// Releases the locks of dead processes when a look found some (see the module's notes).
    pub fn reap_if_flagged(&self) -> Result<()> {
        if self.multi_process && self.look.take_dead_owner() {
            let (me, scope) = (self.owner, self.scope);
            self.call(move |b| b.reap_dead_owners(me, scope))?;
        }
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux", not(shuttle)))]
mod tests {
    use std::time::Duration;

    #[test]
    fn waiters_poll_once_the_watch_has_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let open = || {
            crate::Store::builder()
                .multi_process(true)
                .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
                .open(&path)
                .unwrap()
        };
        let (a, b) = (open(), open());
        assert!(a.engine.look.is_watching());
        let qa = a.queue("q").unwrap();
        let qb = b.queue("q").unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            ready_tx.send(()).unwrap();
            qa.receive(Duration::from_secs(60)).unwrap()
        });
        ready_rx.recv().unwrap();
        // As a deleted or replaced file ends it: the watch reports its end and is gone.
        let watch = a.engine.watch.lock().take().expect("a watch on Linux");
        watch.stop();
        assert!(!a.engine.look.is_watching());
        // Only a poll of the file can show the waiter this message now.
        qb.send("polled").unwrap();
        let m = waiter.join().unwrap().expect("found by polling");
        assert_eq!(m.body(), b"polled");
        m.complete().unwrap();
    }
}
