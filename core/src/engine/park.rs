//! Parked receives: a receiver waiting on an empty queue leaves its request with the writer,
//! which serves it inside the very batch that makes a message receivable.
//!
//! Without parking, a send wakes the waiter, which then asks for a lock in a batch of its own:
//! two commits and four thread hand-offs between a send and its delivery. A parked request is
//! served in the send's own commit. Used in single-process mode, where every send passes
//! through this writer; multi-process waiters poll the file instead (see `Engine::receive`).
//!
//! A request and its caller agree through one atomic state: the writer may serve a request only
//! after taking it (`WAITING`/`FRESH` → `TAKEN`), the caller may withdraw only a request that is
//! `WAITING`. A fresh request is always tried once, so `try_receive` works. A caller that gives
//! up while its request is fresh or taken marks it `GIVEN_UP` and waits for the answer: the
//! writer then answers it after its try instead of keeping it. (Without the mark, a processor
//! worker cancelled by `stop` while the writer tried its request on an empty queue waited for
//! the next message or its idle deadline, up to half a second: the concurrency checks found
//! it.)

use std::sync::Arc;
use std::time::Instant;

use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::channel::Sender;

use super::batch::{Batch, Locked, QueueRef};
use crate::error::{Error, Result};

const FRESH: u8 = 0;
const WAITING: u8 = 1;
const TAKEN: u8 = 2;
const CANCELLED: u8 = 3;
/// Added to `FRESH` or `TAKEN`: the caller gave up and waits for the answer.
const GIVEN_UP: u8 = 0x10;

/// The state shared between a parked request and its caller.
#[derive(Debug)]
pub struct ParkState(AtomicU8);

impl ParkState {
    pub fn new() -> Arc<ParkState> {
        Arc::new(ParkState(AtomicU8::new(FRESH)))
    }

    /// The caller gives up: true if the request is withdrawn, false if an answer is coming.
    pub fn cancel(&self) -> bool {
        let mut s = self.0.load(Ordering::Acquire);
        loop {
            let next = match s {
                WAITING => CANCELLED,
                FRESH | TAKEN => s | GIVEN_UP,
                _ => return false,
            };
            match self
                .0
                .compare_exchange(s, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return s == WAITING,
                Err(now) => s = now,
            }
        }
    }

    /// The writer takes the request; false if its caller withdrew it.
    fn take(&self) -> bool {
        let mut s = self.0.load(Ordering::Acquire);
        // Retried: the caller may have marked the request given up meanwhile.
        while matches!(s & !GIVEN_UP, FRESH | WAITING) {
            let taken = TAKEN | (s & GIVEN_UP);
            match self
                .0
                .compare_exchange(s, taken, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }

    fn is_fresh(&self) -> bool {
        self.0.load(Ordering::Acquire) & !GIVEN_UP == FRESH
    }

    /// Puts a tried request back to wait; false if its caller gave up, which wants an answer.
    fn release(&self) -> bool {
        self.0
            .compare_exchange(TAKEN, WAITING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// A receive waiting for a message.
pub struct ParkedReceive {
    pub q: u32,
    pub name: String,
    pub owner: u64,
    pub max: usize,
    pub deadline: Option<Instant>,
    pub state: Arc<ParkState>,
    pub reply: Sender<Result<Vec<Locked>>>,
    /// An async caller's: dropped with the request, after `reply` (the answer sent, or the
    /// request dropped unanswered), it wakes the caller's task (see `wait_async`).
    #[allow(dead_code, reason = "held for its Drop, which wakes the caller")]
    pub hook: Option<AnswerHook>,
}

/// What an async caller's side does when its parked request is dropped (see `wait_async`): a
/// trait object, so that parking needs nothing from the async side.
pub trait OnAnswer: Send + Sync + std::fmt::Debug {
    /// Called once, as the parked request holding it is dropped.
    fn answered(&self);
}

/// Dropped with its parked request, after `reply` (the answer sent, or the request dropped
/// unanswered): tells the async caller's side.
#[derive(Debug)]
pub struct AnswerHook(pub Arc<dyn OnAnswer>);

impl Drop for AnswerHook {
    fn drop(&mut self) {
        self.0.answered();
    }
}

impl ParkedReceive {
    fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }
}

/// A request served in this batch, to be answered once the batch's outcome is known.
pub struct Served {
    request: ParkedReceive,
    result: Result<Vec<Locked>>,
}

impl Served {
    /// Answers the caller. If the batch failed, locks taken for it were rolled back.
    pub fn answer(self, batch_error: Option<&Error>) {
        let out = match (self.result, batch_error) {
            (Ok(v), Some(e)) if !v.is_empty() => Err(e.duplicate()),
            (r, _) => r,
        };
        let _ = self.request.reply.send(out);
    }
}

/// Serves the parked requests that may succeed now: fresh ones, those on queues that gained
/// messages in this batch (`woken`), all of them after a time-driven wake-up; and answers the
/// ones whose deadline passed. Returns what was served; `Err` is a failure after writing.
pub fn serve(
    batch: &mut Batch<'_>,
    parked: &mut Vec<ParkedReceive>,
    all: bool,
) -> std::result::Result<Vec<Served>, Error> {
    serve_with(
        batch,
        parked,
        all,
        |b, q| b.woken.contains(&q),
        |b, p| b.attempt(|b| b.receive(QueueRef::new(p.q, &p.name), p.owner, p.max)),
    )
}

/// [`serve`] on `batch` of any kind: `woken` tells whether a queue gained messages in it,
/// `receive` tries a request (the outer `Err` is a failure after writing). The concurrency
/// checks serve from a stand-in for the store.
pub fn serve_with<B>(
    batch: &mut B,
    parked: &mut Vec<ParkedReceive>,
    all: bool,
    woken: impl Fn(&B, u32) -> bool,
    mut receive: impl FnMut(&mut B, &ParkedReceive) -> Result<Result<Vec<Locked>>>,
) -> std::result::Result<Vec<Served>, Error> {
    let now = Instant::now();
    let mut served = Vec::new();
    let mut keep = Vec::with_capacity(parked.len());
    let mut pending = std::mem::take(parked).into_iter();
    for p in pending.by_ref() {
        let worth_trying = all || p.state.is_fresh() || woken(batch, p.q);
        if !worth_trying && !p.expired(now) {
            keep.push(p);
            continue;
        }
        if !p.state.take() {
            continue; // cancelled by its caller
        }
        if !worth_trying {
            served.push(Served {
                request: p,
                result: Ok(Vec::new()),
            });
            continue;
        }
        match receive(batch, &p) {
            Err(e) => {
                let fatal = e.duplicate();
                served.push(Served {
                    request: p,
                    result: Err(e),
                });
                keep.extend(pending);
                *parked = keep;
                return Err(fatal);
            }
            // Released only if its caller still waits; otherwise answered (empty) below.
            Ok(Ok(v)) if v.is_empty() && !p.expired(Instant::now()) && p.state.release() => {
                keep.push(p);
            }
            Ok(result) => served.push(Served { request: p, result }),
        }
    }
    *parked = keep;
    Ok(served)
}

/// Answers every request whose deadline has passed without a batch (used when the store
/// cannot begin one), and fails fresh requests with `error` if given.
pub fn expire(parked: &mut Vec<ParkedReceive>, error: Option<&Error>) {
    let now = Instant::now();
    parked.retain(|p| {
        let fail_fresh = error.is_some() && p.state.is_fresh();
        if !(fail_fresh || p.expired(now)) {
            return true;
        }
        if p.state.take() {
            let out = match error {
                Some(e) if fail_fresh => Err(e.duplicate()),
                _ => Ok(Vec::new()),
            };
            let _ = p.reply.send(out);
        }
        false
    });
}

/// The earliest deadline among the parked requests.
pub fn next_deadline(parked: &[ParkedReceive]) -> Option<Instant> {
    parked.iter().filter_map(|p| p.deadline).min()
}
