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
//! ## Async receive
//!
//! [`Queue::receive_async`] is the receive as a future and [`Queue::stream`] an endless
//! [`Stream`](futures_core::Stream) of messages, for tokio or any other executor: postbox
//! depends on no runtime, and the task is woken by the store's own wake-ups. Dropping a
//! waiting future loses nothing and leaves nothing locked. [`Queue::iter`] and
//! [`Queue::try_iter`] are the blocking forms, as in crossbeam-channel.
//!
//! ## Processors and shutdown
//!
//! A [`Processor`] runs a handler on many receiver threads so nobody writes the receive loop by
//! hand. In peek-lock mode ([`ProcessorBuilder::start`]) `Ok` completes the message and `Err` or
//! a panic abandons it for a retry after a growing delay ([`RetryPolicy`]); on its last allowed
//! delivery it goes to the dead-letter queue with the error text as description. In
//! transactional mode ([`ProcessorBuilder::start_transactional`]) the handler also gets a
//! [`Transaction`], so replies commit together with the completion. Locks are renewed while a
//! handler runs; a busy worker settles its message and locks the next one in one commit. Under
//! that lock the handler's [`Delivery`] records checkpoints a redelivery skips
//! ([`Delivery::mark_done`]), renews the lock itself and answers a request with the completion
//! ([`Delivery::reply`]). A
//! running processor follows the queue's options as stored, not as they were when it started:
//! each renewal uses the current `lock_duration` and each failure is judged against the current
//! `max_deliveries`, whoever changed them.
//!
//! ```
//! use std::time::Duration;
//! use postbox::{Processor, RetryPolicy, Store};
//!
//! # fn main() -> postbox::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().join("app.postbox"))?;
//! let jobs = store.queue("jobs")?;
//! jobs.send_batch(["a", "b", "c"])?;
//!
//! # let (done, started) = std::sync::mpsc::channel();
//! let processor = Processor::builder(&jobs)
//!     .workers(4)
//!     .retry(RetryPolicy::exponential(Duration::from_millis(200), Duration::from_secs(30)))
//!     .start(move |msg| -> Result<(), String> {
//!         println!("processing {:?}", String::from_utf8_lossy(msg.body()));
//! #       let _ = done.send(());
//!         Ok(())
//!     })?;
//! # for _ in 0..3 { started.recv().unwrap(); }
//!
//! // Later, e.g. on Ctrl-C: stop taking messages, wait for running handlers.
//! let report = processor.shutdown(Duration::from_secs(30));
//! assert!(report.finished);            // nothing left running, nothing left locked
//! println!("{} processed, {} failed", report.processed, report.failed);
//! # Ok(()) }
//! ```
//!
//! [`Processor::stop`] only stops; [`Processor::join`] waits on a condition variable until every
//! running handler has returned and its commit or abort is applied; [`Processor::shutdown`]
//! does both and dropping the processor does the same. A message received just as the
//! processor stopped goes back to the queue untouched (its delivery count, already persisted,
//! stays incremented). Messages the processor could not settle, for instance because the store
//! was closed under it, are counted in [`ShutdownReport::unsettled`]; they are delivered again.
//! The processor prints nothing: problems are returned or emitted as
//! [`tracing`](https://docs.rs/tracing) events. [`Autoscale`] adds and retires workers with the
//! backlog, and [`Queue::typed`] gives typed queues whose undecodable bodies are dead-lettered
//! as `DecodeFailed`.
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
#![deny(unsafe_code)]
// Library code never prints: it returns errors and emits `tracing` events.
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]

mod app_table;
#[doc(hidden)]
pub mod binding;
mod body_codec;
mod clock;
mod collator;
mod engine;
mod error;
mod filter;
// The record decoders, for the fuzz targets under fuzz/ only (docs/design.md § Fuzzing).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use engine::fuzzing;
mod job;
mod message;
mod message_id;
mod options;
// The OS layer: the crate's only unsafe code, each block with its reason.
#[allow(unsafe_code)]
mod os;
mod processor;
mod queue;
mod received;
mod session;
#[doc(hidden)]
pub mod storage;
mod store;
mod stream;
#[doc(hidden)]
pub mod sync;
mod topic;
mod traffic;
mod tx;
mod typed;

pub use app_table::{MAX_TABLE_KEY_LEN, MAX_TABLE_VALUE_LEN, Table, TxTable};
pub use clock::{Clock, ManualClock, SystemClock};
pub use collator::{Collated, Collator, SeriesGap};
pub use error::{Error, ErrorKind, Result};
pub use filter::{CorrelationFilter, Filter};
pub use job::{Job, JobInfo, JobOptions, JobProgress, PieceState};
pub use message::{
    DEFAULT_PRIORITY, DeadLetterInfo, Envelope, MAX_DESCRIPTION_LEN, MAX_PRIORITY,
    MAX_PROPERTY_KEY_LEN, MAX_REASON_LEN, MAX_TEXT_PROPERTY_LEN, MIN_PRIORITY, Message, MessageId,
    MessageState, PropertyValue, REASON_DESTINATION_MISSING, REASON_MAX_DELIVERIES,
    REASON_TTL_EXPIRED, RECEIPT_AT, RECEIPT_COMPLETED, RECEIPT_DEAD_LETTERED, RECEIPT_LABEL,
    RECEIPT_MESSAGE_ID, RECEIPT_OUTCOME, RECEIPT_QUEUE, RECEIPT_REASON, SERIES_LAST_PROPERTY,
    SERIES_LENGTH_PROPERTY, Sent,
};
pub use options::{Durability, OptionField, OptionKind, OptionValue, QueueOptions};
pub use processor::{
    Autoscale, Delivery, EventCallback, LockWatch, MAX_PROCESSOR_WORKERS, Processor,
    ProcessorBuilder, ProcessorEvent, ProcessorStats, REASON_DECODE_FAILED, RetryPolicy,
    ScaleCallback, ShutdownReport,
};
pub use queue::{Browse, BrowseAll, Queue, QueueStats};
pub use received::{Received, SettleError};
pub use session::{Session, SessionInfo};
pub use store::{
    CompactStats, LogTiming, QueueInfo, Store, StoreBuilder, StoreStats, TEMPORARY_QUEUE_PREFIX,
};
pub use stream::{Iter, ReceiveFuture, ReceiveStream, TryIter};
pub use topic::{Topic, TopicStats};
pub use traffic::QueueTraffic;
pub use tx::Transaction;
pub use typed::{TypedQueue, TypedReceived};
mod typed_body;
pub use typed_body::{
    Bincode, BodyCodec, CODEC_BINCODE, CODEC_JSON, CODEC_PICKLE, FIRST_USER_CODEC, Json,
    TYPED_BODY_HEADER_LEN, TYPED_BODY_MAGIC, TYPED_BODY_VERSION, TypedBody, TypedBodyError,
    decode_typed_body, is_typed_body, wrap_typed_body,
};
