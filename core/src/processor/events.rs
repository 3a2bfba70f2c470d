//! What a running processor tells its callbacks: worker-count changes and [`ProcessorEvent`]s.
//! The telling is `notify.rs`, which needs the shared state that holds these callbacks.

use std::sync::Arc;
use std::time::Duration;

use crate::message::MessageId;

/// A callback told the live worker count whenever it changes (see
/// [`ProcessorBuilder::on_scale`](crate::ProcessorBuilder::on_scale)).
pub type ScaleCallback = Arc<dyn Fn(usize) + Send + Sync>;

/// Something a running processor did that a dashboard, a bridge or a log may want to see (see
/// [`ProcessorBuilder::on_event`](crate::ProcessorBuilder::on_event)). The same events also go to `tracing`.
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

/// A callback told every [`ProcessorEvent`] (see [`ProcessorBuilder::on_event`](crate::ProcessorBuilder::on_event)).
pub type EventCallback = Arc<dyn Fn(&ProcessorEvent) + Send + Sync>;
