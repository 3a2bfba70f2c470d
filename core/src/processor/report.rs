//! What a processor reports: the stats read from its live counters (`Counters`, in the shared
//! state) and the report of a shutdown.

use std::sync::atomic::Ordering;

use super::Shared;

/// Counters of a processor, readable at any time with
/// [`Processor::stats`](crate::Processor::stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ProcessorStats {
    /// Messages whose handler succeeded and whose completion was committed.
    pub processed: u64,
    /// Handler failures (error, panic, time limit, undecodable body, failed transaction).
    pub failed: u64,
    /// Messages this processor moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Settlements refused because the lock had been lost (the message will be delivered
    /// again).
    pub lock_lost: u64,
    /// Messages received but returned untouched because the processor was stopping.
    pub returned: u64,
    /// Messages whose settlement (completion, retry, dead letter or return) the processor could
    /// not commit for a reason other than a lost lock: the store was closed under it, or a
    /// storage error. Such a message was not lost: it is delivered again once its lock is gone
    /// (closing the store releases this process's locks at once).
    pub unsettled: u64,
    /// Handlers running now (including their commit or abort); 0 in a forked child.
    pub in_flight: usize,
    /// Live workers now; 0 in a forked child.
    pub workers: usize,
}

/// What [`Processor::shutdown`](crate::Processor::shutdown) and
/// [`Processor::join`](crate::Processor::join) report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Messages processed and completed over the processor's life.
    pub processed: u64,
    /// Handler failures over the processor's life.
    pub failed: u64,
    /// Messages dead-lettered by the processor over its life.
    pub dead_lettered: u64,
    /// Settlements refused with `LockLost` over the processor's life.
    pub lock_lost: u64,
    /// Messages returned untouched because they were received as the processor stopped.
    pub returned: u64,
    /// Messages whose settlement the processor could not commit over its life (see
    /// [`ProcessorStats::unsettled`]): typically the store was closed under a running
    /// processor. They are delivered again, not lost.
    pub unsettled: u64,
    /// Handlers still running when the timeout hit (0 after a complete shutdown).
    pub still_running: usize,
    /// Whether every worker had finished: all handlers done, their commits applied, nothing
    /// left locked by the processor.
    pub finished: bool,
    /// Whether this was asked of a handle inherited across `fork()`. The processor's threads
    /// exist only in the parent, so the child neither waited nor touched the store:
    /// `finished` is false, `still_running` 0, the counters are those copied at the fork, and
    /// the parent's processor runs on unaffected.
    pub forked: bool,
}

impl Shared {
    pub(super) fn stats(&self) -> ProcessorStats {
        let (in_flight, workers) = if self.is_forked() {
            (0, 0)
        } else {
            let st = self.state.lock();
            (st.in_flight, st.live)
        };
        let c = &self.counters;
        ProcessorStats {
            processed: c.processed.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
            lock_lost: c.lock_lost.load(Ordering::Relaxed),
            returned: c.returned.load(Ordering::Relaxed),
            unsettled: c.unsettled.load(Ordering::Relaxed),
            in_flight,
            workers,
        }
    }

    /// The life-long counters as a report; the caller fills in how the wait ended.
    pub(super) fn report(&self) -> ShutdownReport {
        let c = &self.counters;
        ShutdownReport {
            processed: c.processed.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
            lock_lost: c.lock_lost.load(Ordering::Relaxed),
            returned: c.returned.load(Ordering::Relaxed),
            unsettled: c.unsettled.load(Ordering::Relaxed),
            ..ShutdownReport::default()
        }
    }
}
