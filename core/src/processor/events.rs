//! What a running processor tells its callbacks: worker-count changes and [`ProcessorEvent`]s.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use super::ProcessorBuilder;
use super::{Shared, worker};
use crate::message::MessageId;

/// A callback told the live worker count whenever it changes (see
/// [`ProcessorBuilder::on_scale`]).
pub type ScaleCallback = Arc<dyn Fn(usize) + Send + Sync>;

/// Something a running processor did that a dashboard, a bridge or a log may want to see (see
/// [`ProcessorBuilder::on_event`]). The same events also go to `tracing`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessorEvent {
    /// A handler failed; the message will be delivered again after its retry delay.
    RetryScheduled {
        /// The message.
        id: MessageId,
        /// Deliveries so far, this one included.
        delivery_count: u32,
        /// How long until it is receivable again.
        delay: Duration,
        /// The handler's error text.
        error: String,
    },
    /// The message went to the dead-letter queue.
    DeadLettered {
        /// The message.
        id: MessageId,
        /// The dead-letter reason (e.g. `MaxDeliveryCountExceeded`, `DecodeFailed`).
        reason: String,
    },
    /// The message's lock was lost before it could be settled: it will be delivered again.
    LockLost {
        /// The message.
        id: MessageId,
    },
    /// The message could not be settled for another reason (e.g. the store closed).
    Unsettled {
        /// The message.
        id: MessageId,
        /// Why.
        error: String,
    },
    /// The number of live workers changed (autoscaling, stop).
    Scaled {
        /// Live workers now.
        workers: usize,
    },
}

/// A callback told every [`ProcessorEvent`] (see [`ProcessorBuilder::on_event`]).
pub type EventCallback = Arc<dyn Fn(&ProcessorEvent) + Send + Sync>;

impl Shared {
    /// Tells the `on_event` callback, if any, about `event`.
    pub(super) fn emit(&self, event: ProcessorEvent) {
        if let Some(f) = &self.config.on_event
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| f(&event)))
        {
            tracing::error!(
                queue = %self.queue.name(),
                panic = %worker::panic_text(p.as_ref()),
                "processor on_event callback panicked"
            );
        }
    }

    /// Tells `on_scale` and `on_event` the live worker count after a change. Reports are made
    /// one at a time, each with the count at its making (not the count its caller saw): workers
    /// retiring together then report in order and the last report is the final count.
    pub(super) fn report_scale(&self) {
        let mut last = self.last_scale.lock();
        let live = self.state.lock().live;
        if *last == Some(live) {
            return;
        }
        *last = Some(live);
        self.emit(ProcessorEvent::Scaled { workers: live });
        if let Some(f) = &self.config.on_scale
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| f(live)))
        {
            tracing::error!(
                queue = %self.queue.name(),
                workers = live,
                panic = %worker::panic_text(p.as_ref()),
                "processor on_scale callback panicked"
            );
        }
    }
}
