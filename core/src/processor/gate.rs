//! The gate: the processor's state of threads and handler runs, and the condition variable
//! every change of it is announced on.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Track;
use crate::engine::Cancel;
use crate::error::Result;
use crate::sync::thread::JoinHandle;
use crate::sync::{Condvar, Mutex};

/// A watched lock: renewal schedule and handler deadline.
pub(super) struct Watched {
    pub(super) track: Arc<Track>,
    pub(super) next_renew: Option<Instant>,
    pub(super) renew_until: Option<Instant>,
    pub(super) deadline: Option<Instant>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) stopping: bool,
    /// Workers that have not exited (or retired).
    pub(super) live: usize,
    /// Workers wanted (autoscaling); idle workers above it retire.
    pub(super) target: usize,
    pub(super) in_flight: usize,
    /// Watchdog and autoscaler threads still running.
    pub(super) background: usize,
    pub(super) threads: Vec<JoinHandle<()>>,
    pub(super) watched: HashMap<u64, Watched>,
}

/// The part of a processor that starts threads, admits handler runs and waits for them: its
/// state and the condition variable every change of it is announced on. It knows nothing of
/// the store, so that the concurrency checks drive it as the workers and `join` do.
pub(super) struct Gate {
    /// Mirrors `State::stopping` for lock-free checks; set under the state lock.
    pub(super) stopping: crate::sync::atomic::AtomicBool,
    pub(super) state: Mutex<State>,
    /// Notified on every change of `State`: join, the watchdog and the autoscaler wait on it.
    pub(super) cv: Condvar,
}

impl Gate {
    pub(super) fn new(target: usize) -> Gate {
        Gate {
            stopping: crate::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                target,
                ..State::default()
            }),
            cv: Condvar::new(),
        }
    }

    pub(super) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// No handler is admitted and no worker started from now on.
    pub(super) fn stop(&self) {
        {
            let mut st = self.state.lock();
            st.stopping = true;
            self.stopping.store(true, Ordering::Release);
        }
        self.cv.notify_all();
    }

    /// Starts a worker with `spawn` unless stopping; returns the live workers then.
    pub(super) fn add_worker(
        &self,
        spawn: impl FnOnce() -> std::io::Result<JoinHandle<()>>,
    ) -> Result<Option<usize>> {
        let mut st = self.state.lock();
        if st.stopping {
            return Ok(None);
        }
        st.threads.push(spawn()?);
        st.live += 1;
        Ok(Some(st.live))
    }

    /// Starts a thread counted in `State::background` with `spawn`; the thread calls
    /// [`Gate::background_exited`] last.
    pub(super) fn add_background(
        &self,
        spawn: impl FnOnce() -> std::io::Result<JoinHandle<()>>,
    ) -> Result<()> {
        // Holding the lock while spawning keeps the thread's exit from being counted before its
        // start.
        let mut st = self.state.lock();
        st.threads.push(spawn()?);
        st.background += 1;
        Ok(())
    }

    pub(super) fn background_exited(&self) {
        self.state.lock().background -= 1;
        self.cv.notify_all();
    }

    /// A worker leaves (a retired one has left `live` already); returns the live workers.
    pub(super) fn worker_exited(&self, retired: bool) -> usize {
        let live = {
            let mut st = self.state.lock();
            if !retired {
                st.live -= 1;
            }
            st.live
        };
        self.cv.notify_all();
        live
    }

    /// Admits one handler run of the lock `token`, unless stopping, starting its time limit.
    /// Stop and admission take the same lock, so no handler starts after `stop` returned.
    pub(super) fn begin(&self, token: u64, limit: Option<Duration>) -> bool {
        let mut st = self.state.lock();
        if st.stopping {
            return false;
        }
        st.in_flight += 1;
        if let Some(limit) = limit
            && let Some(w) = st.watched.get_mut(&token)
        {
            w.deadline = Instant::now().checked_add(limit);
            drop(st);
            self.cv.notify_all();
        }
        true
    }

    /// Ends a handler run: its lock is no longer watched and `join` may see zero in flight.
    pub(super) fn end(&self, token: u64) {
        {
            let mut st = self.state.lock();
            st.watched.remove(&token);
            st.in_flight -= 1;
        }
        self.cv.notify_all();
    }

    /// Waits until every worker and background thread has exited, or until `deadline` or
    /// `interrupt` (whose cancel must notify `cv` under the state lock), and reaps the threads
    /// once all have. `own_thread`: called from a worker, which cannot wait for itself.
    /// Returns whether all had exited, and the handlers running then.
    pub(super) fn wait_idle(
        &self,
        deadline: Option<Instant>,
        own_thread: bool,
        interrupt: Option<&Cancel>,
    ) -> (bool, usize) {
        let mut st = self.state.lock();
        if !own_thread {
            while (st.live > 0 || st.background > 0) && !interrupt.is_some_and(Cancel::is_cancelled)
            {
                match deadline {
                    Some(d) => {
                        if self.cv.wait_until(&mut st, d).timed_out() {
                            break;
                        }
                    }
                    None => self.cv.wait(&mut st),
                }
            }
        }
        let finished = st.live == 0 && st.background == 0;
        let still_running = st.in_flight;
        let threads = if finished {
            std::mem::take(&mut st.threads)
        } else {
            Vec::new()
        };
        drop(st);
        for t in threads {
            // Every thread has announced its exit; this only reaps it.
            let _ = t.join();
        }
        (finished, still_running)
    }
}
