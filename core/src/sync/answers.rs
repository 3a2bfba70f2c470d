//! Where a pipeline's callers wait for their jobs' results: the leader fills each caller's
//! slot as the batch settles and wakes them all at once when the batch is done.
//!
//! A reply channel per caller wakes each caller with a system call of its own, and crossbeam's
//! receivers spin and call `sched_yield` before they sleep. With many callers on few cores that
//! hand-over is what the processor does: 32 threads taking turns through one leader, with
//! nothing else to do, made 73–88k round trips a second through crossbeam reply channels,
//! 150–170k through a condition variable per caller, and 265–325k through one wake-up per batch
//! (two cores; `perf` of 32 senders found about 130 context switches per commit, most of them
//! `sched_yield`). Built on this module's `Mutex` and `Condvar`, so the concurrency checks
//! schedule it too.

use std::sync::Arc;

use super::{Condvar, Mutex};

/// What a slot holds.
enum State<T> {
    Waiting,
    Ready(T),
    /// The sending half was dropped without an answer (its job panicked or was dropped).
    Gone,
}

/// The callers of one pipeline, waiting for [`Answers::wake`].
#[derive(Default)]
pub struct Answers {
    /// How many callers wait; the lock is what a waiter's check of its slot and the wake-up
    /// agree on.
    waiting: Mutex<usize>,
    cv: Condvar,
}

/// The sending half: [`Reply::send`] once (the waiter sees it at the next [`Answers::wake`]),
/// or drop it, which wakes the waiter with an error at once.
pub struct Reply<T> {
    slot: Arc<Mutex<State<T>>>,
    answers: Arc<Answers>,
    sent: bool,
}

/// The waiting half.
pub struct Answer<T> {
    slot: Arc<Mutex<State<T>>>,
    answers: Arc<Answers>,
}

/// The reply was dropped unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unanswered;

impl Answers {
    /// A connected pair whose waiter is woken by this `Answers`.
    pub fn pair<T>(self: &Arc<Self>) -> (Reply<T>, Answer<T>) {
        let slot = Arc::new(Mutex::new(State::Waiting));
        (
            Reply {
                slot: slot.clone(),
                answers: self.clone(),
                sent: false,
            },
            Answer {
                slot,
                answers: self.clone(),
            },
        )
    }

    /// Wakes every waiter: those whose answers were sent since the last wake-up return, the
    /// others wait on. Whoever sends answers must call this once it has sent them.
    pub fn wake(&self) {
        // A lone caller leads its own batch and never waits: no system call for it.
        if *self.waiting.lock() > 0 {
            self.cv.notify_all();
        }
    }
}

impl<T> Reply<T> {
    /// Leaves `value` for the waiter, who sees it at the next [`Answers::wake`] (kept, and
    /// dropped with the slot, when nobody waits).
    pub fn send(mut self, value: T) {
        *self.slot.lock() = State::Ready(value);
        self.sent = true;
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if !self.sent {
            *self.slot.lock() = State::Gone;
            self.answers.wake();
        }
    }
}

impl<T> Answer<T> {
    /// Waits for the answer. `Err` when the reply was dropped unanswered.
    pub fn recv(self) -> Result<T, Unanswered> {
        let mut waiting = self.answers.waiting.lock();
        loop {
            let mut slot = self.slot.lock();
            match std::mem::replace(&mut *slot, State::Waiting) {
                State::Ready(v) => return Ok(v),
                State::Gone => return Err(Unanswered),
                State::Waiting => {
                    drop(slot);
                    *waiting += 1;
                    self.answers.cv.wait(&mut waiting);
                    *waiting -= 1;
                }
            }
        }
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn an_answer_arrives_at_the_wake_up() {
        let answers = Arc::new(Answers::default());
        let (reply, answer) = answers.pair();
        let a = answers.clone();
        let t = std::thread::spawn(move || {
            reply.send(7);
            a.wake();
        });
        assert_eq!(answer.recv(), Ok(7));
        t.join().unwrap();
    }

    #[test]
    fn one_wake_up_answers_every_waiter() {
        let answers = Arc::new(Answers::default());
        let (replies, waiters): (Vec<_>, Vec<_>) = (0..8u32)
            .map(|i| {
                let (reply, answer) = answers.pair();
                (reply, std::thread::spawn(move || (i, answer.recv())))
            })
            .unzip();
        for (i, r) in replies.into_iter().enumerate() {
            r.send(i as u32);
        }
        answers.wake();
        for w in waiters {
            let (i, got) = w.join().unwrap();
            assert_eq!(got, Ok(i));
        }
    }

    #[test]
    fn a_reply_dropped_unanswered_wakes_its_waiter_with_an_error() {
        let answers = Arc::new(Answers::default());
        let (reply, answer) = answers.pair::<u32>();
        let t = std::thread::spawn(move || drop(reply));
        assert_eq!(answer.recv(), Err(Unanswered));
        t.join().unwrap();
    }

    #[test]
    fn a_reply_to_nobody_is_dropped_quietly() {
        let answers = Arc::new(Answers::default());
        let (reply, answer) = answers.pair::<Vec<u8>>();
        drop(answer);
        reply.send(vec![1, 2, 3]);
        answers.wake();
    }
}
