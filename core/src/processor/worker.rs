//! One receiver of a processor: wait for messages, run the handler, settle — and, when busy,
//! settle the finished message and lock the next one in the same commit.
//!
//! Layout: this file runs the loop and the handler; `settle` decides and commits what becomes
//! of the message; `sessions` holds a session worker's session.

mod sessions;
mod settle;

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::sync::thread;

use super::{
    Delivery, Failure, Handler, Lease, REASON_DECODE_FAILED, Shared, Track, WORKER_OF, Watched,
    panic_text, renewal,
};
use crate::engine::{Cancel, Engine, IdleReceiver, Locked, QueueRef};
use crate::error::{Error, Result};
use crate::message::MessageId;
use crate::tx::Transaction;

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

/// Why a worker stopped waiting without a message.
enum Leave {
    Stop,
    Retire,
}

/// What the handler's run asks the worker to do with its message.
enum Outcome {
    Complete,
    Fail(String),
    DeadLetter { reason: String, description: String },
}

/// A handler's run, as the settle needs it.
struct Ran {
    outcome: Outcome,
    /// The transaction that completes the message: the handler's, carrying its reply; or, for
    /// a plain handler that replied, the reply's own.
    tx: Option<Transaction>,
    id: MessageId,
    delivery_count: u32,
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
                None => match self.sh.queue.engine.wait_idle(self.sh.queue.id, self) {
                    None => continue,
                    Some(Leave::Stop) => return false,
                    Some(Leave::Retire) => return true,
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
            .begin(track.lock.token, self.sh.config.handler_timeout)
    }

    /// Ends a handler run (see `Gate::end`).
    fn end(&self, token: u64) {
        if self.sh.is_forked() {
            // See `run`: the state is the parent's.
            return;
        }
        self.sh.gate.end(token);
    }

    /// Runs the handler on one message, settles it (taking the next messages in the same
    /// commit when it can) and ends the run.
    fn handle(&mut self, (locked, track): (Locked, Arc<Track>)) {
        let mut ran = self.run_handler(locked, &track);
        let want = self.refill_wanted();
        let got = match (&ran.outcome, ran.tx.take()) {
            (Outcome::Complete, Some(tx)) => self.commit_run(tx, &track, ran.id, want),
            // A failed or dead-lettered run: its transaction's sends and receives (and its
            // reply) are discarded before the message itself is settled.
            (_, tx) => {
                drop(tx);
                self.settle_run(ran, &track, want)
            }
        };
        self.end(track.lock.token);
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

    /// Runs the handler and decides what becomes of its message.
    fn run_handler(&self, locked: Locked, track: &Arc<Track>) -> Ran {
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
        // a checkpoint, a reply or a dead letter: the settle is decided.
        let (dead_letter, reply) = lease.close();
        let envelope = lease.envelope();
        let (id, delivery_count) = (envelope.id(), envelope.delivery_count());
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
                    delivery_count,
                    error = %text,
                    "processor handler panicked"
                );
                Outcome::Fail(text)
            }
        };
        let tx = match (tx, reply) {
            (Some(mut t), Some(r)) => {
                t.absorb_sends(r);
                Some(t)
            }
            (t, r) => t.or(r),
        };
        Ran {
            outcome,
            tx,
            id,
            delivery_count,
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

    fn receive(&self, want: usize) -> Result<Vec<Locked>> {
        let q = &self.sh.queue;
        let (qid, name, owner) = (q.id, q.name.to_string(), q.engine.owner);
        q.engine
            .call(move |b| b.receive(QueueRef::new(qid, &name), owner, want))
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
                let track = Arc::new(Track::new(l.held(), l.locked_until));
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
}

/// A worker waits for messages through the engine's one idle wait, without a time limit: it
/// wakes for a message, and for a stop or a retirement through the processor's idle token
/// (`Shared::wake_idle`), never on a timer.
impl IdleReceiver for Worker<'_> {
    type Leave = Leave;

    fn idle_token(&self) -> Cancel {
        self.sh.idle_token()
    }

    fn leave(&mut self, woken: bool) -> Option<Leave> {
        if self.sh.is_stopping() {
            return Some(Leave::Stop);
        }
        // Woken by the token: a stop (looked at above) or a retirement.
        (woken && self.try_retire()).then_some(Leave::Retire)
    }

    fn wait_once(&mut self, engine: &Engine, token: &Cancel) -> Result<bool> {
        let sh = self.sh;
        let q = &sh.queue;
        if sh.config.sessions {
            // `session_step` takes what it finds into the buffer, where a stop finds it.
            return engine
                .wait_for(q.id, None, Some(token), || {
                    Ok(self.session_step()?.then_some(()))
                })
                .map(|got| got.is_some());
        }
        let v = engine.receive_until(q.queue_ref(), sh.config.prefetch + 1, None, Some(token))?;
        Ok(if v.is_empty() {
            false
        } else if sh.is_stopping() {
            self.return_untouched(v);
            false
        } else {
            self.accept(v);
            true
        })
    }

    fn failed(&mut self, e: &Error) -> Option<Leave> {
        (self.receive_failed(e) || self.sh.is_stopping()).then_some(Leave::Stop)
    }
}

fn tx_free(h: &Handler) -> bool {
    matches!(h, Handler::PeekLock(_))
}
