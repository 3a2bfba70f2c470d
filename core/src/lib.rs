//! # postbox
//!
//! A transactional, durable message queue that lives in one local file — MSMQ or Azure Service
//! Bus semantics without a server. Built on [redb](https://docs.rs/redb).
//!
//! ## Hello, queue
//!
//! ```
//! use std::time::Duration;
//! use postbox::{Message, Store};
//!
//! # fn main() -> postbox::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().join("app.postbox"))?;
//! let jobs = store.queue("jobs")?;                 // created if missing, kept if present
//! jobs.send(Message::new("resize 42.png").label("resize").priority(5))?;
//!
//! if let Some(job) = jobs.receive(Duration::from_secs(1))? {   // peek-lock
//!     println!("working on {:?}", job.label());
//!     job.complete()?;                              // gone for good
//! }
//! assert_eq!(jobs.stats()?.active, 0);
//! # Ok(()) }
//! ```
//!
//! ## Transactions
//!
//! [`Store::begin`] starts a [`Transaction`]: messages it receives and sends, across any queues
//! of the store, commit together or not at all. Dropping it aborts.
//!
//! ## Blocking receive
//!
//! Receives follow crossbeam-channel: [`Queue::try_receive`] never waits,
//! [`Queue::receive`] waits up to a timeout, [`Queue::receive_deadline`] until an instant.
//! A waiting receiver is woken by a send in the same process within microseconds; with
//! [`StoreBuilder::multi_process`] it also polls the file with truncated exponential backoff.
//!
//! ## Durability
//!
//! By default every call that changes the store returns after its change is on disk
//! ([`Durability::Immediate`]). Concurrent calls share commits (group commit), so many threads
//! sending at once pay for few fsyncs. [`Durability::None`] skips the fsync and loses recent
//! work on a crash.
//!
//! ## Errors
//!
//! Every fallible call returns [`Error`]; [`Error::kind`] gives the stable [`ErrorKind`] the C
//! and Python bindings map to status codes and exception classes.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod engine;
mod error;
mod message;
mod queue;
mod received;
mod store;
mod tx;

pub use engine::clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, ErrorKind, Result};
pub use message::{
    DEFAULT_PRIORITY, DeadLetterInfo, Envelope, MAX_PRIORITY, MIN_PRIORITY, Message, MessageId,
    PropertyValue, REASON_MAX_DELIVERIES, REASON_TTL_EXPIRED,
};
pub use queue::{Browse, Queue, QueueOptions, QueueStats};
pub use received::Received;
pub use store::{Durability, Store, StoreBuilder, StoreStats};
pub use tx::Transaction;
