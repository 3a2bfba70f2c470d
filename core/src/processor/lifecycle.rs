//! The running processor's handle: stop, join, shutdown, stats, and shutdown on drop.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ProcessorStats, Shared, ShutdownReport, WORKER_OF};
use crate::queue::Queue;

/// Many receivers on one queue running a handler per message, with automatic lock renewal,
/// retries with backoff, dead-lettering, graceful shutdown and optional autoscaling.
///
/// Started by [`Processor::builder`]. `Send + Sync`: share it (e.g. in an `Arc`) to read its
/// counters or stop it from other threads. Dropping it shuts it down (waiting up to the
/// builder's `drop_timeout`).
///
/// # Shutdown
///
/// [`stop`](Processor::stop) makes every worker stop taking messages; [`join`](Processor::join)
/// waits on a condition variable until every running handler has returned, its commit or abort
/// is applied and every prefetched message is returned to the queue — then nothing is left
/// locked by the processor. No handler starts after `stop`. A message that a worker was
/// receiving as `stop` came is returned untouched (not counted as a failure); its delivery
/// count stays incremented, as for any abandoned delivery, so on its last allowed delivery it
/// goes to the dead-letter queue.
///
/// # Fork
///
/// A processor belongs to the process that started it (invariant 11). In a forked child its
/// threads do not exist: [`stop`](Processor::stop) does nothing, [`join`](Processor::join),
/// [`shutdown`](Processor::shutdown) and dropping return at once with
/// [`ShutdownReport::forked`] set, without waiting and without touching the store, and the
/// parent's processor runs on.
pub struct Processor {
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for Processor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processor")
            .field("queue", &self.shared.queue.name())
            .field("stats", &self.shared.stats())
            .finish_non_exhaustive()
    }
}

impl Processor {
    /// The queue being processed.
    pub fn queue(&self) -> &Queue {
        &self.shared.queue
    }

    /// How long dropping the processor waits for running handlers (the builder's
    /// `drop_timeout`, 30 s by default).
    pub fn drop_timeout(&self) -> Duration {
        self.shared.config.drop_timeout
    }

    /// Stops taking new messages, without waiting. Running handlers finish normally. Does
    /// nothing in a forked child (the processor runs in the parent).
    pub fn stop(&self) {
        if self.shared.is_forked() {
            return;
        }
        self.shared.stop();
    }

    /// Whether [`stop`](Processor::stop) was called (or the store closed).
    pub fn is_stopped(&self) -> bool {
        self.shared.is_stopping()
    }

    /// Waits up to `timeout` for the processor to finish after [`stop`](Processor::stop):
    /// every handler returned, its commit or abort applied, prefetched messages returned.
    /// Called from one of the processor's own handlers it cannot wait for itself and returns
    /// at once with `finished == false`.
    pub fn join(&self, timeout: Duration) -> ShutdownReport {
        let sh = &self.shared;
        if sh.is_forked() {
            // The workers, watchdog and autoscaler are threads of the parent: nothing here
            // would ever notify the condition variable, and the state lock may have been held
            // by one of them at the fork. Only atomics are read.
            return ShutdownReport {
                forked: true,
                ..sh.report()
            };
        }
        let own_thread = WORKER_OF.with(|w| w.get()) == sh.id;
        let deadline = Instant::now().checked_add(timeout);
        // A binding's interrupt (see `binding::interruptible`) ends the wait early.
        let interrupt = crate::engine::thread_interrupt();
        let _on_interrupt = interrupt.as_ref().map(|c| {
            let s = sh.clone();
            c.on_cancel(Arc::new(move || {
                let _st = s.state.lock();
                s.cv.notify_all();
            }))
        });
        let (finished, still_running) = sh.wait_idle(deadline, own_thread, interrupt.as_ref());
        ShutdownReport {
            still_running,
            finished,
            ..sh.report()
        }
    }

    /// [`stop`](Processor::stop), then [`join`](Processor::join) with `timeout`.
    pub fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        self.stop();
        self.join(timeout)
    }

    /// Handlers running now (including their commit or abort); 0 in a forked child.
    pub fn in_flight(&self) -> usize {
        self.shared.stats().in_flight
    }

    /// Live workers now; 0 in a forked child.
    pub fn workers(&self) -> usize {
        self.shared.stats().workers
    }

    /// The counters so far.
    pub fn stats(&self) -> ProcessorStats {
        self.shared.stats()
    }
}

impl Drop for Processor {
    fn drop(&mut self) {
        if self.shared.is_forked() {
            // The parent's threads held references to `Shared` at the fork, so in the child it
            // must never be freed: its destructors would detach thread handles of threads that
            // do not exist here and drop the parent's queue handle. One leaked reference keeps
            // it alive for the life of the child, as the engine leaks the parent's database.
            std::mem::forget(self.shared.clone());
            return;
        }
        let timeout = self.shared.config.drop_timeout;
        self.shutdown(timeout);
    }
}
