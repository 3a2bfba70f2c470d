//! Configuring and starting a processor: [`Processor::builder`] with the defaults it sets,
//! the [`ProcessorBuilder`], and the start that spawns the threads.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::de::DeserializeOwned;

#[cfg(doc)]
use super::REASON_DECODE_FAILED;
use super::config::Config;
use super::shared::Counters;
use super::{
    Autoscale, Delivery, Failure, Gate, Handler, MAX_PROCESSOR_WORKERS, Processor, ProcessorEvent,
    RetryPolicy, Shared, renewal, scaling, worker,
};
use crate::engine::Cancel;
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::sync::Mutex;
use crate::tx::Transaction;

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
    pub(super) queue: Queue,
    pub(super) config: Config,
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

    pub(super) fn launch(self, handler: Handler) -> Result<Processor> {
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

pub(super) static NEXT_PROCESSOR: AtomicU64 = AtomicU64::new(1);
