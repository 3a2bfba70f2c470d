//! Processors: many receivers on one queue, automatic lock renewal, retries, graceful shutdown
//! and autoscaling — the receive loop users should not have to write.
//!
//! Layout, bottom up (each file imports only files before it, `.ci/layers.py` checks it):
//! `delivery` is what a handler is given; `retry`, `autoscale`, `events` and `handler` hold the
//! retry policy, the autoscaling settings, the callbacks' types and the user's handler; `gate`
//! admits handler runs and waits for threads; `config` is the builder's settings; `shared` is
//! the state the threads share (with its counters); `report` reads the counters, `notify`
//! tells the callbacks; `renewal` renews locks and enforces handler time limits; `worker`
//! runs one receiver; `scaling` autoscales; `lifecycle` is the running processor's handle
//! (stop, join, drop); `builder` configures and starts a processor.

mod autoscale;
mod builder;
mod config;
mod delivery;
mod events;
mod gate;
mod handler;
mod lifecycle;
mod notify;
mod renewal;
mod report;
mod retry;
mod scaling;
mod shared;
mod worker;

#[cfg(all(test, shuttle))]
mod concurrency_checking;

pub use crate::message::REASON_DECODE_FAILED;
pub use autoscale::{Autoscale, MAX_PROCESSOR_WORKERS};
pub use builder::ProcessorBuilder;
pub(crate) use delivery::Lease;
use delivery::Track;
pub use delivery::{Delivery, LockWatch};
pub use events::{EventCallback, ProcessorEvent, ScaleCallback};
use gate::{Gate, State, Watched};
use handler::{Failure, Handler, panic_text};
pub use lifecycle::Processor;
pub use report::{ProcessorStats, ShutdownReport};
pub use retry::RetryPolicy;
use shared::{Shared, WORKER_OF, spawn_background};
