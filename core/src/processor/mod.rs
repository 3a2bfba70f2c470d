//! Processors: many receivers on one queue, automatic lock renewal, retries, graceful shutdown
//! and autoscaling — the receive loop users should not have to write.
//!
//! Layout: this file holds the public API and the shared state; `worker` runs one receiver;
//! `renewal` renews locks and enforces handler time limits; `scaling` autoscales.

mod delivery;
mod renewal;
mod scaling;
mod worker;

#[cfg(all(test, shuttle))]
mod concurrency_checking;

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sync::thread::{self, JoinHandle};
use crate::sync::{Condvar, Mutex};
use serde::de::DeserializeOwned;

use crate::clock::Clock;
use crate::engine::{Cancel, Signal};
use crate::error::{Error, Result};
use crate::message::MessageId;
use crate::queue::Queue;
use crate::tx::Transaction;

pub use crate::message::REASON_DECODE_FAILED;
pub(crate) use delivery::Lease;
use delivery::Track;
pub use delivery::{Delivery, LockWatch};

/// How long a failed message waits before it is delivered again: `initial` after the first
/// delivery, multiplied by `multiplier` for every further delivery, never more than `max`.
///
/// # Defaults
///
/// `initial` 100 ms, `multiplier` 2, `max` 60 s.
///
/// ```
/// use std::time::Duration;
/// let p = postbox::RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(1));
/// assert_eq!(p.delay(1), Duration::from_millis(100));
/// assert_eq!(p.delay(3), Duration::from_millis(400));
/// assert_eq!(p.delay(10), Duration::from_secs(1));
/// assert_eq!(postbox::RetryPolicy::immediate().delay(5), Duration::ZERO);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay after the first failed delivery.
    pub initial: Duration,
    /// Growth factor per further delivery.
    pub multiplier: u32,
    /// Upper bound of the delay.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(60))
    }
}

impl RetryPolicy {
    /// Redelivers at once.
    pub fn immediate() -> RetryPolicy {
        RetryPolicy {
            initial: Duration::ZERO,
            multiplier: 1,
            max: Duration::ZERO,
        }
    }

    /// Doubles the delay from `initial` on every delivery, up to `max`.
    pub fn exponential(initial: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy {
            initial,
            multiplier: 2,
            max,
        }
    }

    /// The delay before the next delivery of a message that failed on its
    /// `delivery_count`-th delivery.
    pub fn delay(&self, delivery_count: u32) -> Duration {
        let mut d = self.initial;
        for _ in 1..delivery_count {
            if d >= self.max {
                break;
            }
            d = d.saturating_mul(self.multiplier);
        }
        d.min(self.max)
    }
}

/// The most workers a processor runs (its `workers`, and an autoscaler's `max_workers` and
/// `reserve`): each is a thread, and a count from a mistaken setting would otherwise start
/// threads until the system refuses. More is [`Error::InvalidArgument`] at start.
pub const MAX_PROCESSOR_WORKERS: usize = 1024;

/// Autoscaling by backlog: every `check_interval` the processor wants
/// `ceil(backlog / messages_per_worker) + reserve` workers, clamped to
/// `min_workers..=max_workers`, where the backlog is the queue's receivable messages plus those
/// the processor holds locked (being handled or prefetched). Workers are added at once and retired when they find the queue
/// empty.
///
/// # Defaults
///
/// `messages_per_worker` 20, `check_interval` 5 s, `reserve` 0.
///
/// ```
/// use std::time::Duration;
/// let a = postbox::Autoscale::new(0, 5).messages_per_worker(20).check_interval(Duration::from_secs(60)).reserve(1);
/// assert_eq!(a.max_workers, 5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Autoscale {
    /// Never fewer workers than this (may be 0).
    pub min_workers: usize,
    /// Never more workers than this.
    pub max_workers: usize,
    /// Backlog one worker is expected to handle.
    pub messages_per_worker: u64,
    /// How often the backlog is measured.
    pub check_interval: Duration,
    /// Workers kept beyond what the backlog asks for.
    pub reserve: usize,
}

impl Autoscale {
    /// Scales between `min_workers` and `max_workers`, with the other settings at their
    /// defaults.
    pub fn new(min_workers: usize, max_workers: usize) -> Autoscale {
        Autoscale {
            min_workers,
            max_workers,
            messages_per_worker: 20,
            check_interval: Duration::from_secs(5),
            reserve: 0,
        }
    }
    /// Sets `messages_per_worker`.
    pub fn messages_per_worker(mut self, n: u64) -> Self {
        self.messages_per_worker = n;
        self
    }
    /// Sets `check_interval`.
    pub fn check_interval(mut self, d: Duration) -> Self {
        self.check_interval = d;
        self
    }
    /// Sets `reserve`.
    pub fn reserve(mut self, n: usize) -> Self {
        self.reserve = n;
        self
    }

    fn validate(&self) -> Result<()> {
        if self.max_workers == 0 || self.min_workers > self.max_workers {
            return Err(Error::invalid(
                "autoscale needs 0 <= min_workers <= max_workers and max_workers >= 1",
            ));
        }
        if self.max_workers > MAX_PROCESSOR_WORKERS || self.reserve > MAX_PROCESSOR_WORKERS {
            return Err(Error::invalid(format!(
                "autoscale's max_workers and reserve are at most {MAX_PROCESSOR_WORKERS}"
            )));
        }
        if self.messages_per_worker == 0 || self.check_interval.is_zero() {
            return Err(Error::invalid(
                "autoscale needs messages_per_worker >= 1 and a positive check_interval",
            ));
        }
        Ok(())
    }

    fn desired(&self, backlog: u64) -> usize {
        let want = backlog.div_ceil(self.messages_per_worker);
        let want = usize::try_from(want)
            .unwrap_or(usize::MAX)
            .saturating_add(self.reserve);
        want.clamp(self.min_workers, self.max_workers)
    }
}

/// Counters of a processor, readable at any time with [`Processor::stats`].
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

/// What [`Processor::shutdown`] and [`Processor::join`] report.
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

/// Why a handler did not succeed.
enum Failure {
    Handler(String),
    Decode(String),
}

type PeekLockFn = dyn Fn(&Delivery) -> std::result::Result<(), Failure> + Send + Sync;
type TransactionalFn =
    dyn Fn(&Delivery, &mut Transaction) -> std::result::Result<(), Failure> + Send + Sync;

enum Handler {
    PeekLock(Box<PeekLockFn>),
    Transactional(Box<TransactionalFn>),
}

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

#[derive(Clone)]
struct Config {
    workers: usize,
    retry: RetryPolicy,
    handler_timeout: Option<Duration>,
    max_auto_renew: Duration,
    prefetch: usize,
    combined_commit: bool,
    autoscale: Option<Autoscale>,
    drop_timeout: Duration,
    on_scale: Option<ScaleCallback>,
    on_event: Option<EventCallback>,
    /// Stack size of worker threads; `None` for the Rust default.
    stack_size: Option<usize>,
    /// Session mode: each worker holds one session (group) at a time.
    sessions: bool,
}

/// Configures and starts a [`Processor`]; see [`Processor::builder`].
///
/// # Defaults
///
/// - `workers`: 4
/// - `retry`: [`RetryPolicy::default`] (100 ms doubling to 60 s)
/// - `handler_timeout`: none
/// - `max_auto_renew`: 5 minutes (locks are renewed while a handler runs, up to this long after
///   the receive); `Duration::ZERO` turns renewal off
/// - `prefetch`: 0 (messages locked ahead of the one being handled, per worker)
/// - `combined_commit`: on (a worker settles its message and locks the next in one commit)
/// - `autoscale`: off
/// - `drop_timeout`: 30 s (how long dropping the processor waits for running handlers)
/// - `stack_size`: the Rust default for spawned threads (2 MiB unless `RUST_MIN_STACK` says
///   otherwise)
#[derive(Clone)]
pub struct ProcessorBuilder {
    queue: Queue,
    config: Config,
}

impl fmt::Debug for ProcessorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorBuilder")
            .field("queue", &self.queue.name())
            .field("workers", &self.config.workers)
            .field("retry", &self.config.retry)
            .field("handler_timeout", &self.config.handler_timeout)
            .field("max_auto_renew", &self.config.max_auto_renew)
            .field("prefetch", &self.config.prefetch)
            .field("combined_commit", &self.config.combined_commit)
            .field("autoscale", &self.config.autoscale)
            .finish_non_exhaustive()
    }
}

impl ProcessorBuilder {
    /// Number of receivers (threads). With [`autoscale`](Self::autoscale), the starting count,
    /// clamped to its bounds.
    pub fn workers(mut self, n: usize) -> Self {
        self.config.workers = n;
        self
    }

    /// How long a failed message waits before its next delivery.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// A time limit per handler call. Handlers cannot be preempted: past the limit the
    /// delivery is cancelled ([`Delivery::is_cancelled`]) and, when the handler returns, the
    /// message is abandoned as failed whatever the handler returned.
    pub fn handler_timeout(mut self, limit: Duration) -> Self {
        self.config.handler_timeout = Some(limit);
        self
    }

    /// How long after its receive a message's lock keeps being renewed while its handler runs
    /// (`Duration::ZERO`: never renewed). A lock is renewed once half of its remaining time has
    /// passed, each renewal extending it by the queue's `lock_duration` as stored at that
    /// moment, so a change made by another handle or process applies to running handlers.
    pub fn max_auto_renew(mut self, d: Duration) -> Self {
        self.config.max_auto_renew = d;
        self
    }

    /// Messages each worker locks ahead of the one it is handling (their locks are renewed
    /// like the handled one's). Speeds up small messages; holds back work from other
    /// receivers.
    pub fn prefetch(mut self, n: usize) -> Self {
        self.config.prefetch = n;
        self
    }

    /// Whether a worker settles the message it finished and locks its next one in the same
    /// commit (on by default). A benchmark knob, kept out of the documented API: turning it
    /// off only measures what combining saves.
    #[doc(hidden)]
    pub fn combined_commit(mut self, on: bool) -> Self {
        self.config.combined_commit = on;
        self
    }

    /// Scales the number of workers with the backlog.
    pub fn autoscale(mut self, autoscale: Autoscale) -> Self {
        self.config.autoscale = Some(autoscale);
        self
    }

    /// How long dropping the processor waits for running handlers before leaving them to
    /// finish on their own.
    pub fn drop_timeout(mut self, d: Duration) -> Self {
        self.config.drop_timeout = d;
        self
    }

    /// Session mode, for a queue that requires sessions
    /// ([`QueueOptions::requires_session`](crate::QueueOptions::requires_session)): each worker
    /// accepts one session at a time and handles its messages in send order, one by one, until
    /// none is receivable, then releases it and accepts the next; N workers work on N groups in
    /// parallel. Prefetch and the combined commit do not apply (a session hands out one
    /// message at a time). Starting fails with `InvalidArgument` when the mode does not match
    /// the queue.
    pub fn sessions(mut self, on: bool) -> Self {
        self.config.sessions = on;
        self
    }

    /// Stack size of the worker threads, in bytes. Handlers that recurse deeply, or that run an
    /// interpreter (the Python binding gives workers the stack Python's own threads get),
    /// need more than the Rust default.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.config.stack_size = Some(bytes);
        self
    }

    /// Calls `f` with every [`ProcessorEvent`]: retries scheduled, messages dead-lettered,
    /// locks lost, settles that failed, worker counts changed. Runs on the worker thread that
    /// saw it; keep it short (a panic in it is caught and logged).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// # let q = store.queue("jobs")?;
    /// use postbox::{Processor, ProcessorEvent};
    /// let p = Processor::builder(&q)
    ///     .on_event(|e| {
    ///         if let ProcessorEvent::DeadLettered { id, reason } = e {
    ///             eprintln!("message {id} dead-lettered: {reason}");
    ///         }
    ///     })
    ///     .start(|_msg| -> Result<(), String> { Ok(()) })?;
    /// p.shutdown(std::time::Duration::from_secs(5));
    /// # Ok::<(), postbox::Error>(())
    /// ```
    pub fn on_event<F>(mut self, f: F) -> Self
    where
        F: Fn(&ProcessorEvent) + Send + Sync + 'static,
    {
        self.config.on_event = Some(Arc::new(f));
        self
    }

    /// Calls `f` with the new live worker count every time it changes (autoscaling, stop).
    /// Runs on the thread that made the change; keep it short.
    pub fn on_scale<F>(mut self, f: F) -> Self
    where
        F: Fn(usize) + Send + Sync + 'static,
    {
        self.config.on_scale = Some(Arc::new(f));
        self
    }

    /// Starts processing in peek-lock mode: `Ok` completes the message, `Err` (or a panic)
    /// abandons it for a later retry, or dead-letters it with the error text once it has used
    /// up the queue's `max_deliveries`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = postbox::Store::open(dir.path().join("s")).unwrap();
    /// let q = store.queue("jobs")?;
    /// q.send("hello")?;
    /// let (done, seen) = std::sync::mpsc::channel();
    /// let p = postbox::Processor::builder(&q).workers(2).start(move |m| {
    ///     let _ = done.send(m.body().to_vec());
    ///     Ok::<(), String>(())
    /// })?;
    /// assert_eq!(seen.recv().unwrap(), b"hello");
    /// let report = p.shutdown(std::time::Duration::from_secs(5));
    /// assert!(report.finished);
    /// # Ok::<(), postbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a configuration that cannot run (no workers, bad
    /// autoscale bounds); [`Error::Closed`] when the store was closed and [`Error::Forked`] in
    /// a forked child (both before any thread is spawned); [`Error::Io`] when a thread cannot
    /// be spawned.
    pub fn start<F, E>(self, handler: F) -> Result<Processor>
    where
        F: Fn(&Delivery) -> std::result::Result<(), E> + Send + Sync + 'static,
        E: fmt::Display,
    {
        self.launch(Handler::PeekLock(Box::new(move |d| {
            handler(d).map_err(|e| Failure::Handler(e.to_string()))
        })))
    }

    /// Starts processing in transactional mode: the handler gets the message and a
    /// [`Transaction`]; on `Ok` the message's completion and everything the handler did in the
    /// transaction (replies, follow-up sends, other receives) commit together; on `Err` or a
    /// panic none of it happens and the message is retried as in [`start`](Self::start).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_transactional<F, E>(self, handler: F) -> Result<Processor>
    where
        F: Fn(&Delivery, &mut Transaction) -> std::result::Result<(), E> + Send + Sync + 'static,
        E: fmt::Display,
    {
        self.launch(Handler::Transactional(Box::new(move |d, tx| {
            handler(d, tx).map_err(|e| Failure::Handler(e.to_string()))
        })))
    }

    /// Starts processing in peek-lock mode with bodies decoded as `T` (see
    /// [`TypedQueue`](crate::TypedQueue)). A body that does not decode never reaches the
    /// handler: it goes to the dead-letter queue with reason `DecodeFailed`
    /// ([`REASON_DECODE_FAILED`]) and the codec error as description.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_typed<T, F, E>(self, handler: F) -> Result<Processor>
    where
        T: DeserializeOwned + 'static,
        F: Fn(&Delivery, T) -> std::result::Result<(), E> + Send + Sync + 'static,
        E: fmt::Display,
    {
        self.launch(Handler::PeekLock(Box::new(move |d| {
            let value: T = d.decode().map_err(|e| Failure::Decode(e.to_string()))?;
            handler(d, value).map_err(|e| Failure::Handler(e.to_string()))
        })))
    }

    fn launch(self, handler: Handler) -> Result<Processor> {
        let c = &self.config;
        let initial = match &c.autoscale {
            Some(a) => {
                a.validate()?;
                c.workers.clamp(a.min_workers, a.max_workers)
            }
            None if c.workers == 0 => {
                return Err(Error::invalid("a processor needs at least one worker"));
            }
            None if c.workers > MAX_PROCESSOR_WORKERS => {
                return Err(Error::invalid(format!(
                    "a processor has at most {MAX_PROCESSOR_WORKERS} workers, got {}",
                    c.workers
                )));
            }
            None => c.workers,
        };
        let engine = self.queue.engine.clone();
        // Before anything is spawned: workers on a closed store would only log their failed
        // receives and stop, and in a forked child nothing may touch the parent's store.
        engine.check_open()?;
        let requires_session = self.queue.options()?.requires_session;
        if requires_session != c.sessions {
            return Err(Error::invalid(if requires_session {
                "the queue requires sessions: start the processor with sessions(true)"
            } else {
                "sessions(true) needs a queue that requires sessions"
            }));
        }
        let shared = Arc::new(Shared {
            id: NEXT_PROCESSOR.fetch_add(1, Ordering::Relaxed),
            signal: engine.signals.get(self.queue.id),
            idle: Mutex::new(Cancel::default()),
            last_scale: Mutex::new(None),
            clock: engine.clock.clone(),
            queue: self.queue,
            config: self.config,
            handler,
            gate: Gate::new(initial),
            counters: Counters::default(),
        });
        let processor = Processor {
            shared: shared.clone(),
        };
        renewal::spawn_watchdog(&shared)?;
        if shared.config.autoscale.is_some() {
            scaling::spawn_autoscaler(&shared)?;
        }
        worker::spawn_workers(&shared, initial)?;
        Ok(processor)
    }
}

static NEXT_PROCESSOR: AtomicU64 = AtomicU64::new(1);

std::thread_local! {
    /// The id of the processor whose worker runs on this thread (0: none), so that a handler
    /// that shuts its own processor down does not wait for itself.
    static WORKER_OF: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[derive(Default)]
struct Counters {
    processed: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
    lock_lost: AtomicU64,
    returned: AtomicU64,
    unsettled: AtomicU64,
}

/// A watched lock: renewal schedule and handler deadline.
struct Watched {
    track: Arc<Track>,
    next_renew: Option<Instant>,
    renew_until: Option<Instant>,
    deadline: Option<Instant>,
}

#[derive(Default)]
struct State {
    stopping: bool,
    /// Workers that have not exited (or retired).
    live: usize,
    /// Workers wanted (autoscaling); idle workers above it retire.
    target: usize,
    in_flight: usize,
    /// Watchdog and autoscaler threads still running.
    background: usize,
    threads: Vec<JoinHandle<()>>,
    watched: HashMap<u64, Watched>,
}

/// The part of a processor that starts threads, admits handler runs and waits for them: its
/// state and the condition variable every change of it is announced on. It knows nothing of
/// the store, so that the concurrency checks drive it as the workers and `join` do.
struct Gate {
    /// Mirrors `State::stopping` for lock-free checks; set under the state lock.
    stopping: crate::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// Notified on every change of `State`: join, the watchdog and the autoscaler wait on it.
    cv: Condvar,
}

impl Gate {
    fn new(target: usize) -> Gate {
        Gate {
            stopping: crate::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                target,
                ..State::default()
            }),
            cv: Condvar::new(),
        }
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// No handler is admitted and no worker started from now on.
    fn stop(&self) {
        {
            let mut st = self.state.lock();
            st.stopping = true;
            self.stopping.store(true, Ordering::Release);
        }
        self.cv.notify_all();
    }

    /// Starts a worker with `spawn` unless stopping; returns the live workers then.
    fn add_worker(
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
    fn add_background(
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

    fn background_exited(&self) {
        self.state.lock().background -= 1;
        self.cv.notify_all();
    }

    /// A worker leaves (a retired one has left `live` already); returns the live workers.
    fn worker_exited(&self, retired: bool) -> usize {
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
    fn begin(&self, token: u64, limit: Option<Duration>) -> bool {
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
    fn end(&self, token: u64) {
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
    fn wait_idle(
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

struct Shared {
    id: u64,
    queue: Queue,
    config: Config,
    handler: Handler,
    signal: Arc<Signal>,
    /// The token of the idle workers' waits for messages: cancelled (and replaced) by
    /// `wake_idle` when they must look at the processor's state — a stop, or fewer workers
    /// wanted — so that an idle worker wakes for nothing else.
    idle: Mutex<Cancel>,
    /// The worker count last reported (see `report_scale`).
    last_scale: Mutex<Option<usize>>,
    clock: Arc<dyn Clock>,
    /// Reached through `Deref`, as `sh.state` and `sh.cv`, by the workers and watchers.
    gate: Gate,
    counters: Counters,
}

impl Deref for Shared {
    type Target = Gate;
    fn deref(&self) -> &Gate {
        &self.gate
    }
}

impl Shared {
    /// Whether this process is a forked child of the one that started the processor: its
    /// threads do not exist here, and its locks (`state`, the queue's signal) may have been
    /// held by one of them at the fork, so they must not be taken.
    fn is_forked(&self) -> bool {
        self.queue.engine.is_forked()
    }

    fn stop(&self) {
        self.gate.stop();
        self.wake_idle();
        // Workers pausing after an error wait on the queue's signal.
        self.signal.notify();
    }

    /// The token for a worker's next wait for messages (see `idle`).
    fn idle_token(&self) -> Cancel {
        self.idle.lock().clone()
    }

    /// Ends the idle workers' waits, so that they look at the processor's state (stopping,
    /// the wanted worker count) again.
    fn wake_idle(&self) {
        let old = std::mem::take(&mut *self.idle.lock());
        old.cancel();
    }

    /// Tells the `on_event` callback, if any, about `event`.
    fn emit(&self, event: ProcessorEvent) {
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
    fn report_scale(&self) {
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

    fn stats(&self) -> ProcessorStats {
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
    fn report(&self) -> ShutdownReport {
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
    shared: Arc<Shared>,
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
    /// Starts configuring a processor of `queue`.
    pub fn builder(queue: &Queue) -> ProcessorBuilder {
        ProcessorBuilder {
            queue: queue.clone(),
            config: Config {
                workers: 4,
                retry: RetryPolicy::default(),
                handler_timeout: None,
                max_auto_renew: Duration::from_secs(300),
                prefetch: 0,
                combined_commit: true,
                autoscale: None,
                drop_timeout: Duration::from_secs(30),
                on_scale: None,
                on_event: None,
                stack_size: None,
                sessions: false,
            },
        }
    }

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

/// Starts a background thread counted in `State::background`, so `join` waits for it.
fn spawn_background(sh: &Arc<Shared>, name: &str, body: fn(&Arc<Shared>)) -> Result<()> {
    let s = sh.clone();
    sh.add_background(|| {
        thread::Builder::new().name(name.to_owned()).spawn(move || {
            body(&s);
            s.background_exited();
        })
    })
}
