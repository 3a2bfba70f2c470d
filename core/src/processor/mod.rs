//! Processors: many receivers on one queue, automatic lock renewal, retries, graceful shutdown
//! and autoscaling — the receive loop users should not have to write.
//!
//! Layout: `builder` configures and starts a processor, `lifecycle` is the running
//! processor's handle (stop, join, drop); `shared` is the state its threads share and `gate`
//! the part of it that admits handler runs and waits for threads; `worker` runs one receiver;
//! `renewal` renews locks and enforces handler time limits; `scaling` autoscales; `retry`,
//! `events`, `report` and `handler` hold the policy, the callbacks, the counters and the
//! user's handler; `delivery` is what a handler is given.

mod builder;
mod delivery;
mod events;
mod gate;
mod handler;
mod lifecycle;
mod renewal;
mod report;
mod retry;
mod scaling;
mod shared;
mod worker;

#[cfg(all(test, shuttle))]
mod concurrency_checking;

pub use crate::message::REASON_DECODE_FAILED;
pub use builder::ProcessorBuilder;
pub(crate) use delivery::Lease;
use delivery::Track;
pub use delivery::{Delivery, LockWatch};
pub use events::{EventCallback, ProcessorEvent, ScaleCallback};
use gate::{Gate, State, Watched};
use handler::{Failure, Handler};
pub use lifecycle::Processor;
pub use report::{ProcessorStats, ShutdownReport};
pub use retry::RetryPolicy;
pub use scaling::{Autoscale, MAX_PROCESSOR_WORKERS};
use shared::{Shared, WORKER_OF, spawn_background};
