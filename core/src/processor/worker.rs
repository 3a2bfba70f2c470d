//! One receiver of a processor: wait for messages, run the handler, settle — and, when busy,
//! settle the finished message and lock the next one in the same commit.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::sync::thread;

use super::{
    Delivery, Failure, Handler, Lease, ProcessorEvent, REASON_DECODE_FAILED, Shared, Track,
    WORKER_OF, Watched, renewal,
};
use crate::clock::duration_ms;
use crate::engine::HeldLock;
use crate::engine::{Locked, Settle};
use crate::error::{Error, Result};
use crate::message::MessageId;
use crate::tx::Transaction;

/// Pause after a receive failed with an error that may pass (e.g. a full disk).
const ERROR_PAUSE: Duration = Duration::from_millis(100);

pub(super) fn spawn_workers(sh: &Arc<Shared>, n: usize) -> Result<()> {
    for _ in 0..n {
        spawn_one(sh)?;
    }
    Ok(())
}

/// Starts one worker unless the processor is stopping.
pub(super) fn spawn_one(sh: &Arc<Shared>) -> Result<()> {
    let added = sh.add_worker(|| {
        let s = sh.clone();
        let mut builder =
            thread::Builder::new().name(format!("postbox-worker-{}", sh.queue.name()));
        if let Some(bytes) = sh.config.stack_size {
            builder = builder.stack_size(bytes);
        }
        builder.spawn(move || run(&s))
    })?;
    if added.is_some() {
        sh.report_scale();
    }
    Ok(())
}

fn run(sh: &Arc<Shared>) {
    WORKER_OF.with(|w| w.set(sh.id));
    let mut w = Worker {
        sh,
        buffer: VecDeque::new(),
        session: None,
    };
    let retired = match catch_unwind(AssertUnwindSafe(|| w.main_loop())) {
        Ok(retired) => retired,
        Err(p) => {
            tracing::error!(
                queue = %sh.queue.name(),
                panic = %panic_text(p.as_ref()),
                "processor worker failed"
            );
            false
        }
    };
    if sh.is_forked() {
        // This thread is the one that forked (from inside a handler) and the handler returned
        // in the child: the processor's state belongs to the parent, whose other threads may
        // have held its lock at the fork. Leave without touching it or the store.
        return;
    }
    w.release_buffer();
    w.release_session();
    sh.worker_exited(retired);
    sh.report_scale();
}

enum Wait {
    Got,
    Stop,
    Retire,
}

/// What the handler's run asks the worker to do with its message.
enum Outcome {
    Complete,
    Fail(String),
    DeadLetter { reason: String, description: String },
}

struct Worker<'a> {
    sh: &'a Arc<Shared>,
    /// Messages locked for this worker and not yet handled (prefetch).
    buffer: VecDeque<(Locked, Arc<Track>)>,
    /// Session mode: the session this worker holds (group, token, locked until, ms).
    session: Option<(String, u64, u64)>,
}

impl Worker<'_> {
    /// Runs until stopped; returns whether the worker retired (and already left `live`).
    fn main_loop(&mut self) -> bool {
        loop {
            if self.sh.is_forked() {
                return false;
            }
            let next = match self.buffer.pop_front() {
                Some(m) => m,
                None => match self.wait_for_messages() {
                    Wait::Got => continue,
                    Wait::Stop => return false,
                    Wait::Retire => return true,
                },
            };
            if !self.begin(&next.1) {
                self.buffer.push_front(next);
                return false;
            }
            self.handle(next);
        }
    }

    /// Admits one handler run, unless the processor is stopping (see `Gate::begin`).
    fn begin(&self, track: &Track) -> bool {
        self.sh
            .gate
            .begin(track.token, self.sh.config.handler_timeout)
    }

    /// Ends a handler run (see `Gate::end`).
    fn end(&self, token: u64) {
        if self.sh.is_forked() {
            // See `run`: the state is the parent's.
            return;
        }
        self.sh.gate.end(token);
    }

    fn handle(&mut self, (locked, track): (Locked, Arc<Track>)) {
        let sh = self.sh;
        let lease = Arc::new(Lease::new(
            locked.envelope,
            track.clone(),
            sh.clock.clone(),
            sh.queue.engine.clone(),
        ));
        let delivery = Delivery::new(lease.clone());
        let mut tx = None;
        let result = match &sh.handler {
            Handler::PeekLock(f) => catch_unwind(AssertUnwindSafe(|| f(&delivery))),
            Handler::Transactional(f) => {
                let t = tx.insert(Transaction::new(sh.queue.engine.clone()));
                catch_unwind(AssertUnwindSafe(|| f(&delivery, t)))
            }
        };
        // From here on nothing the handler kept (a thread, a binding's message handle) can add
        // a checkpoint, a reply or a dead letter: the settle below is decided.
        let (dead_letter, reply) = lease.close();
        let envelope = lease.envelope();
        let id = envelope.id();
        let outcome = match (dead_letter, result) {
            (Some((reason, description)), _) => Outcome::DeadLetter {
                reason,
                description,
            },
            (None, Ok(Ok(()))) if track.timed_out.load(Ordering::Acquire) => {
                let limit = sh.config.handler_timeout.unwrap_or_default();
                Outcome::Fail(format!("handler exceeded its time limit of {limit:?}"))
            }
            (None, Ok(Ok(()))) => Outcome::Complete,
            (None, Ok(Err(Failure::Handler(text)))) => Outcome::Fail(text),
            (None, Ok(Err(Failure::Decode(text)))) => {
                sh.counters.failed.fetch_add(1, Ordering::Relaxed);
                Outcome::DeadLetter {
                    reason: REASON_DECODE_FAILED.to_owned(),
                    description: text,
                }
            }
            (None, Err(p)) => {
                let text = format!("handler panicked: {}", panic_text(p.as_ref()));
                tracing::warn!(
                    queue = %sh.queue.name(),
                    message_id = id.0,
                    delivery_count = envelope.delivery_count(),
                    error = %text,
                    "processor handler panicked"
                );
                Outcome::Fail(text)
            }
        };
        // The transaction that completes the message: the handler's, carrying its reply; or,
        // for a plain handler that replied, the reply's own.
        let tx = match (tx, reply) {
            (Some(mut t), Some(r)) => {
                t.absorb_sends(r);
                Some(t)
            }
            (t, r) => t.or(r),
        };

        let want = self.refill_wanted();
        let got = match (outcome, tx) {
            (Outcome::Complete, Some(mut tx)) => {
                let lock = HeldLock {
                    id: track.id,
                    token: track.token,
                };
                tx.enlist(lock, track.locked_until.load(Ordering::Acquire));
                let (committed, got) = if sh.config.combined_commit {
                    tx.commit_then_receive(&sh.queue, want)
                } else {
                    let committed = tx.commit();
                    let got = if want > 0 && self.buffer.is_empty() {
                        self.receive(want)
                    } else {
                        Ok(Vec::new())
                    };
                    (committed, got)
                };
                match committed {
                    Ok(()) => {
                        sh.counters.processed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => self.settle_failed(id.0, &e),
                }
                got
            }
            (outcome, tx) => {
                // A failed or dead-lettered run: its transaction's sends and receives (and its
                // reply) are discarded before the message itself is settled.
                drop(tx);
                let delivery_count = envelope.delivery_count();
                let plan = self.plan(&outcome, delivery_count);
                let combined = sh.config.combined_commit && tx_free(&sh.handler);
                let (settled, got) = if combined && sh.config.sessions {
                    (
                        self.settle_in_session(track.id, track.token, plan),
                        Ok(Vec::new()),
                    )
                } else if combined {
                    self.settle_and_receive(track.id, track.token, plan, want)
                } else {
                    (self.settle(track.id, track.token, plan), Ok(Vec::new()))
                };
                match settled {
                    Ok(dead_letter) => {
                        let c = &sh.counters;
                        match outcome {
                            Outcome::Complete => c.processed.fetch_add(1, Ordering::Relaxed),
                            Outcome::Fail(_) => c.failed.fetch_add(1, Ordering::Relaxed),
                            Outcome::DeadLetter { .. } => 0,
                        };
                        if dead_letter.is_some() {
                            c.dead_lettered.fetch_add(1, Ordering::Relaxed);
                        }
                        self.report(id, delivery_count, &outcome, dead_letter);
                    }
                    Err(e) => {
                        if let Outcome::Fail(_) = outcome {
                            sh.counters.failed.fetch_add(1, Ordering::Relaxed);
                        }
                        self.settle_failed(id.0, &e);
                        if let Error::InvalidArgument(_) = e {
                            // e.g. a dead letter requested on a dead-letter queue: release the
                            // message now instead of leaving it locked until its lock expires.
                            let abandon = Settle::Abandon { delay_ms: 0 };
                            if let Err(e) = self.settle(track.id, track.token, abandon) {
                                self.settle_failed(id.0, &e);
                            }
                        }
                    }
                }
                got
            }
        };
        self.end(track.token);
        match got {
            Ok(v) if v.is_empty() => {}
            Ok(v) => {
                if self.sh.is_stopping() {
                    self.return_untouched(v);
                } else {
                    self.accept(v);
                }
            }
            Err(e) => {
                self.receive_failed(&e);
            }
        }
    }

    /// How many messages the next commit should lock so that the worker holds its one plus
    /// `prefetch`; none when stopping.
    fn refill_wanted(&self) -> usize {
        // A session hands out one message at a time, through `session_step`.
        if self.sh.is_stopping() || self.sh.config.sessions {
            return 0;
        }
        (self.sh.config.prefetch + 1).saturating_sub(self.buffer.len())
    }

    /// How the commit settles a run's message. A failure's fate (retry, or dead letter after
    /// the last delivery allowed) is decided by the engine inside that commit.
    fn plan(&self, outcome: &Outcome, delivery_count: u32) -> Settle {
        match outcome {
            Outcome::Complete => Settle::Complete,
            Outcome::DeadLetter {
                reason,
                description,
            } => Settle::DeadLetter {
                reason: reason.clone(),
                description: description.clone(),
            },
            Outcome::Fail(text) => Settle::Fail {
                delay_ms: duration_ms(self.sh.config.retry.delay(delivery_count)),
                description: text.clone(),
            },
        }
    }

    /// Settles one message in its own commit; returns the dead-letter reason when it went to
    /// the dead-letter queue.
    fn settle(&self, id: u64, token: u64, how: Settle) -> Result<Option<String>> {
        self.sh
            .queue
            .engine
            .call(move |b| b.settle(id, token, &how))
    }

    /// Settles a message and locks up to `want` more in one commit. A settle or receive that
    /// fails before writing does not spoil the other; one that fails half way aborts both.
    fn settle_and_receive(
        &self,
        id: u64,
        token: u64,
        how: Settle,
        want: usize,
    ) -> (Result<Option<String>>, Result<Vec<Locked>>) {
        let q = &self.sh.queue;
        q.engine
            .then_receive(move |b| b.settle(id, token, &how), q.id, &q.name, want)
    }

    /// Session mode: settles the run's message and, in the same commit, takes the session's
    /// next message into the buffer (renewing the session lock when due) or releases the
    /// session when nothing of it is receivable — one commit per message, as plain workers
    /// pay. A stopping worker only settles.
    fn settle_in_session(&mut self, id: u64, token: u64, how: Settle) -> Result<Option<String>> {
        let held = self.session.clone().filter(|_| !self.sh.is_stopping());
        let Some((group, stoken, _)) = held else {
            return self.settle(id, token, how);
        };
        let q = &self.sh.queue;
        let (qid, name, owner) = (q.id, q.name.to_string(), q.engine.owner);
        let g = group.clone();
        let (settled, next) = q.engine.both(
            move |b| b.settle(id, token, &how),
            move |b| b.session_next(qid, &name, &g, stoken, owner),
        );
        match next {
            Ok((Some(l), Some(until))) => {
                self.session = Some((group, stoken, until));
                self.accept(vec![l]);
            }
            Ok((_, _)) => self.session = None,
            Err(e) if e.is_lock_lost() => self.session = None,
            // Anything else: `session_step` tries again with the session still held.
            Err(_) => {}
        }
        settled
    }

    /// Tells the event hook what became of a settled message.
    fn report(
        &self,
        id: MessageId,
        delivery_count: u32,
        outcome: &Outcome,
        dead_letter: Option<String>,
    ) {
        let sh = self.sh;
        let event = match (outcome, dead_letter) {
            (Outcome::Complete, _) => return,
            (_, Some(reason)) => ProcessorEvent::DeadLettered { id, reason },
            (Outcome::Fail(error), None) => ProcessorEvent::RetryScheduled {
                id,
                delivery_count,
                delay: sh.config.retry.delay(delivery_count),
                error: error.clone(),
            },
            (Outcome::DeadLetter { .. }, None) => return,
        };
        sh.emit(event);
    }

    /// Counts a settlement that did not commit: a lost lock, or an unsettled message.
    fn settle_failed(&self, id: u64, e: &Error) {
        let sh = self.sh;
        if e.is_lock_lost() {
            sh.counters.lock_lost.fetch_add(1, Ordering::Relaxed);
            sh.emit(ProcessorEvent::LockLost { id: MessageId(id) });
            return;
        }
        sh.counters.unsettled.fetch_add(1, Ordering::Relaxed);
        if !matches!(e, Error::Forked { .. }) {
            sh.emit(ProcessorEvent::Unsettled {
                id: MessageId(id),
                error: e.to_string(),
            });
        }
        match e {
            // In a forked child (see `run`) nothing is reported: the processor is the parent's.
            Error::Forked { .. } => {}
            // Expected once the store is closed under a running processor; the lock went with
            // the store, so the message is delivered again.
            Error::Closed => tracing::warn!(
                queue = %sh.queue.name(),
                message_id = id,
                error = %e,
                "processor could not settle a message: the store is closed"
            ),
            _ => tracing::error!(
                queue = %sh.queue.name(),
                message_id = id,
                error = %e,
                "processor could not settle a message; it is delivered again when its lock expires"
            ),
        }
    }

    fn receive(&self, want: usize) -> Result<Vec<Locked>> {
        let q = &self.sh.queue;
        let (qid, name, owner) = (q.id, q.name.to_string(), q.engine.owner);
        q.engine.call(move |b| b.receive(qid, &name, owner, want))
    }

    /// Reports a failed receive; returns whether the worker should leave: the store is closed,
    /// the queue deleted (the processor stops) or this is a forked child (see `run`).
    fn receive_failed(&self, e: &Error) -> bool {
        let sh = self.sh;
        match e {
            Error::Forked { .. } => true,
            Error::Closed | Error::QueueNotFound(_) => {
                tracing::warn!(queue = %sh.queue.name(), error = %e, "processor stops");
                sh.stop();
                true
            }
            _ => {
                tracing::warn!(
                    queue = %sh.queue.name(),
                    error = %e,
                    "processor could not receive; retrying"
                );
                false
            }
        }
    }

    /// Waits until messages are locked into the buffer, the processor stops, or this worker
    /// should retire (autoscaling). The wait is the engine's one wait for a message, without a
    /// time limit: a worker wakes for a message, and for a stop or a retirement through the
    /// processor's idle token (`Shared::wake_idle`), never on a timer.
    fn wait_for_messages(&mut self) -> Wait {
        let sh = self.sh;
        let mut idle = false;
        loop {
            // Taken before the checks below: a stop or a retirement asked for after them
            // cancels this token, so the wait cannot miss it.
            let token = sh.idle_token();
            let seen = sh.signal.seq();
            if sh.is_stopping() {
                return Wait::Stop;
            }
            if idle && self.try_retire() {
                return Wait::Retire;
            }
            let q = &sh.queue;
            let got = if sh.config.sessions {
                // `session_step` takes what it finds into the buffer, where a stop finds it.
                q.engine
                    .wait_for(q.id, None, Some(&token), || {
                        Ok(self.session_step()?.then_some(()))
                    })
                    .map(|got| got.is_some())
            } else {
                q.engine
                    .receive_until(q.id, &q.name, sh.config.prefetch + 1, None, Some(&token))
                    .map(|v| {
                        if v.is_empty() {
                            false
                        } else if sh.is_stopping() {
                            self.return_untouched(v);
                            false
                        } else {
                            self.accept(v);
                            true
                        }
                    })
            };
            match got {
                Ok(true) => return Wait::Got,
                // Woken by the token: a stop or a retirement, looked at above.
                Ok(false) => idle = true,
                Err(e) => {
                    if self.receive_failed(&e) || sh.is_stopping() {
                        return Wait::Stop;
                    }
                    sh.signal
                        .wait(seen, Instant::now().checked_add(ERROR_PAUSE));
                }
            }
        }
    }

    /// Session mode: locks the next message of the held session into the buffer, accepting a
    /// session first if none is held; a session with nothing receivable is released and the
    /// next one tried. Returns whether a message was buffered.
    fn session_step(&mut self) -> Result<bool> {
        let q = &self.sh.queue;
        let (qid, name, owner) = (q.id, q.name.to_string(), q.engine.owner);
        loop {
            if self.sh.is_stopping() {
                return Ok(false);
            }
            let Some((group, token, until)) = self.session.clone() else {
                let n = name.clone();
                let got = q
                    .engine
                    .call(move |b| b.accept_session(qid, &n, None, owner))?;
                match got {
                    Some((group, s)) => {
                        self.session = Some((group, s.token, s.locked_until));
                        continue;
                    }
                    None => return Ok(false),
                }
            };
            // Keep the session while working through it: renew once half its lock has passed.
            let lock_ms = crate::clock::duration_ms(q.options()?.lock_duration);
            let now = self.sh.clock.now_ms();
            let (n, g) = (name.clone(), group.clone());
            let step = if until.saturating_sub(now) < lock_ms / 2 {
                q.engine
                    .call(move |b| {
                        let until = b.renew_session(qid, &n, &g, token)?;
                        Ok((until, b.session_receive(qid, &n, &g, token, owner)?))
                    })
                    .map(|(until, got)| {
                        self.session = Some((group.clone(), token, until));
                        got
                    })
            } else {
                q.engine
                    .call(move |b| b.session_receive(qid, &n, &g, token, owner))
            };
            match step {
                Ok(Some(l)) => {
                    self.accept(vec![l]);
                    return Ok(true);
                }
                Ok(None) => self.release_session(),
                Err(e) if e.is_lock_lost() => self.session = None,
                Err(e) => return Err(e),
            }
        }
    }

    /// Lets go of the session this worker holds, if any (best effort: it expires anyway).
    fn release_session(&mut self) {
        if self.sh.is_forked() {
            return;
        }
        if let Some((group, token, _)) = self.session.take() {
            let q = &self.sh.queue;
            let (qid, name) = (q.id, q.name.to_string());
            let _ = q
                .engine
                .call(move |b| b.release_session(qid, &name, &group, token));
        }
    }

    /// Retires this worker when there are more than the autoscaler wants.
    fn try_retire(&self) -> bool {
        let mut st = self.sh.state.lock();
        if st.live > st.target && !st.stopping {
            st.live -= 1;
            true
        } else {
            false
        }
    }

    /// Takes freshly locked messages into the buffer and has their locks watched.
    fn accept(&mut self, got: Vec<Locked>) {
        let sh = self.sh;
        let now = Instant::now();
        let auto_renew = sh.config.max_auto_renew;
        {
            let mut st = sh.state.lock();
            for l in got {
                let track = Arc::new(Track::new(l.envelope.id().0, l.token, l.locked_until));
                let renew_until = (!auto_renew.is_zero())
                    .then(|| now.checked_add(auto_renew))
                    .flatten();
                st.watched.insert(
                    l.token,
                    Watched {
                        track: track.clone(),
                        next_renew: renewal::next_renewal(sh, l.locked_until, renew_until),
                        renew_until,
                        deadline: None,
                    },
                );
                self.buffer.push_back((l, track));
            }
        }
        sh.cv.notify_all();
    }

    /// Gives messages back without running a handler (stopping): not a failure.
    fn return_untouched(&self, got: Vec<Locked>) {
        let locks = got.iter().map(held).collect();
        self.abandon_all(locks);
    }

    /// Returns the prefetched messages on exit, so that nothing stays locked.
    fn release_buffer(&mut self) {
        let taken: Vec<(Locked, Arc<Track>)> = self.buffer.drain(..).collect();
        if taken.is_empty() {
            return;
        }
        {
            let mut st = self.sh.state.lock();
            for (l, _) in &taken {
                st.watched.remove(&l.token);
            }
        }
        let locks = taken.iter().map(|(l, _)| held(l)).collect();
        self.abandon_all(locks);
    }

    fn abandon_all(&self, locks: Vec<HeldLock>) {
        let sh = self.sh;
        let n = locks.len() as u64;
        let r = sh.queue.engine.abandon_all(locks);
        match r {
            Ok(()) => {
                sh.counters.returned.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                sh.counters.unsettled.fetch_add(n, Ordering::Relaxed);
                match e {
                    Error::Forked { .. } => {}
                    // A closed store has released every lock of this process already.
                    Error::Closed => tracing::warn!(
                        queue = %sh.queue.name(),
                        messages = n,
                        error = %e,
                        "processor could not return messages: the store is closed"
                    ),
                    _ => tracing::error!(
                        queue = %sh.queue.name(),
                        messages = n,
                        error = %e,
                        "processor could not return messages; they wait for their locks to expire"
                    ),
                }
            }
        }
    }
}

fn tx_free(h: &Handler) -> bool {
    matches!(h, Handler::PeekLock(_))
}

pub(super) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The lock a receive took.
fn held(l: &Locked) -> HeldLock {
    HeldLock {
        id: l.envelope.id().get(),
        token: l.token,
    }
}
