//! How a worker settles what its handler did: the commit that completes the message (with the
//! handler's transaction and reply), or the settle of a failed or dead-lettered run — each,
//! when combined commits are on, with the next receive in the same commit — and what it counts
//! and reports; and giving messages back untouched.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Outcome, Ran, Worker, tx_free};
use crate::clock::duration_ms;
use crate::engine::{HeldLock, Locked, Settle};
use crate::error::{Error, Result};
use crate::message::MessageId;
use crate::processor::{ProcessorEvent, Track};
use crate::tx::Transaction;

impl Worker<'_> {
    /// Completes a successful run's message through `tx` (the handler's transaction, or its
    /// reply's), locking up to `want` more in the same commit when combined commits are on.
    pub(super) fn commit_run(
        &mut self,
        mut tx: Transaction,
        track: &Track,
        id: MessageId,
        want: usize,
    ) -> Result<Vec<Locked>> {
        let sh = self.sh;
        tx.enlist(track.lock, track.locked_until.load(Ordering::Acquire));
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

    /// Settles a run's message without a transaction (a failed or dead-lettered run, or a
    /// plain handler's success), with the next receive — or the session's next message — in
    /// the same commit when combined commits are on.
    pub(super) fn settle_run(
        &mut self,
        ran: Ran,
        track: &Track,
        want: usize,
    ) -> Result<Vec<Locked>> {
        let sh = self.sh;
        let Ran {
            outcome,
            id,
            delivery_count,
            ..
        } = ran;
        let plan = self.plan(&outcome, delivery_count);
        let combined = sh.config.combined_commit && tx_free(&sh.handler);
        let (settled, got) = if combined && sh.config.sessions {
            (self.settle_in_session(track.lock, plan), Ok(Vec::new()))
        } else if combined {
            self.settle_and_receive(track.lock, plan, want)
        } else {
            (self.settle(track.lock, plan), Ok(Vec::new()))
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
                    if let Err(e) = self.settle(track.lock, abandon) {
                        self.settle_failed(id.0, &e);
                    }
                }
            }
        }
        got
    }

    /// How the commit settles a run's message. A failure's fate (retry, or dead letter after
    /// the last delivery allowed) is decided by the engine inside that commit.
    pub(super) fn plan(&self, outcome: &Outcome, delivery_count: u32) -> Settle {
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
    pub(super) fn settle(&self, lock: HeldLock, how: Settle) -> Result<Option<String>> {
        self.sh.queue.engine.call(move |b| b.settle(lock, &how))
    }

    /// Settles a message and locks up to `want` more in one commit. A settle or receive that
    /// fails before writing does not spoil the other; one that fails half way aborts both.
    pub(super) fn settle_and_receive(
        &self,
        lock: HeldLock,
        how: Settle,
        want: usize,
    ) -> (Result<Option<String>>, Result<Vec<Locked>>) {
        let q = &self.sh.queue;
        q.engine.settle_then_receive(lock, how, q.queue_ref(), want)
    }

    /// Tells the event hook what became of a settled message.
    pub(super) fn report(
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
    pub(super) fn settle_failed(&self, id: u64, e: &Error) {
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

    /// Gives messages back without running a handler (stopping): not a failure.
    pub(super) fn return_untouched(&self, got: Vec<Locked>) {
        let locks = got.iter().map(Locked::held).collect();
        self.abandon_all(locks);
    }

    /// Returns the prefetched messages on exit, so that nothing stays locked.
    pub(super) fn release_buffer(&mut self) {
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
        let locks = taken.iter().map(|(l, _)| l.held()).collect();
        self.abandon_all(locks);
    }

    pub(super) fn abandon_all(&self, locks: Vec<HeldLock>) {
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
