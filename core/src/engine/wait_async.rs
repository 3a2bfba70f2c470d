//! The one wait for a message (see `wait`), for async callers: a future's poll never blocks on
//! the writer, and its task is woken by the engine's own wake-ups, never by a polling timer.
//!
//! Single-process stores park the request in the writer as a blocking receive does
//! (`park_detached`: the writer thread tries it, so the poll does no I/O); dropping the parked
//! request, answered or not, wakes the task (`AnswerHook`). The writer answers a request with
//! a deadline at that deadline, so no timer is needed. Multi-process stores attempt on the
//! polling thread (one commit, as a blocking receive's attempt), then leave the waker with
//! the queue's signal (woken by a local commit or a look at the file) and with the store's
//! `timer` for time-driven work, the deadline, and the next poll of the file where the store
//! polls (see `poll`).
//!
//! Cancellation: a future dropped while its request is parked withdraws it, and nothing was
//! locked. If the writer has the request already, its answer is on the way; the locks it
//! brings are taken back without counting the delivery (`Batch::unreceive`), by the dropped
//! future if the answer is there, else by the hook when it arrives.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::sync::Mutex;
use crate::sync::channel::{self, Receiver, TryRecvError};

use super::batch::{HeldLock, Locked, QueueRef};
use super::park::{AnswerHook, OnAnswer};
use super::pipeline::Detacher;
use super::poll::Backoff;
use super::signal::{Signal, Waiting};
use super::{Engine, earliest, park, read};
use crate::error::{Error, Result};

type Answer = Result<Vec<Locked>>;

/// Where a parked async request's answer is taken from, and whom to wake.
#[derive(Debug)]
struct Slot {
    inner: Mutex<SlotInner>,
}

#[derive(Debug)]
struct SlotInner {
    answer: Receiver<Answer>,
    waker: Option<Waker>,
    /// Set when the future was dropped with the answer still on the way: whoever brings it
    /// takes its locks back.
    orphaned: Option<Detacher>,
}

/// Told when its parked request is dropped, after the answer was sent (or the request dropped
/// unanswered, which disconnects the answer): wakes the task, or takes back what an orphaned
/// answer locked.
impl OnAnswer for Slot {
    fn answered(&self) {
        let mut g = self.inner.lock();
        if let Some(detacher) = g.orphaned.take() {
            if let Ok(Ok(locks)) = g.answer.try_recv() {
                drop(g);
                take_back(|f| detacher.detach(f), locks);
            }
            return;
        }
        let waker = g.waker.take();
        drop(g);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Queues the return of `locks` (never handed out) through `detach`.
fn take_back(
    detach: impl FnOnce(Box<dyn FnOnce(&mut super::Batch<'_>) -> Result<()> + Send>),
    locks: Vec<Locked>,
) {
    if locks.is_empty() {
        return;
    }
    let held: Vec<HeldLock> = locks.iter().map(Locked::held).collect();
    detach(Box::new(move |b| b.unreceive(&held)));
}

/// One async receive's progress; driven by [`Engine::poll_receive`], ended early by
/// [`Engine::drop_receive`].
#[derive(Debug)]
pub struct AsyncReceive {
    q: u32,
    name: String,
    deadline: Option<Instant>,
    phase: Phase,
}

#[derive(Debug)]
enum Phase {
    Start,
    /// Single-process: the request waits in the writer.
    Parked {
        state: Arc<park::ParkState>,
        slot: Arc<Slot>,
    },
    /// Multi-process: waiting for the signal or the timer.
    Polling(Polling),
    Done,
}

#[derive(Debug)]
struct Polling {
    _waiting: Waiting,
    signal: Arc<Signal>,
    seen: u64,
    /// Not tried yet: the first poll always tries once.
    first: bool,
    backoff: Backoff,
    /// The next poll of the file, where the store polls (see `poll`).
    poll_at: Option<Instant>,
    /// When time-driven work (a scheduled message, a lock expiry) falls due.
    due: Option<Instant>,
}

impl AsyncReceive {
    /// A receive of one message of queue `q` until `deadline` (forever if `None`).
    pub fn new(queue: QueueRef<'_>, deadline: Option<Instant>) -> AsyncReceive {
        let QueueRef { id: q, name } = queue;
        AsyncReceive {
            q,
            name: name.to_owned(),
            deadline,
            phase: Phase::Start,
        }
    }

    /// Whether the receive has ended (it answered, or failed).
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }
}

impl Engine {
    /// Polls an async receive: `Ready(Ok(None))` at its deadline, `Ready(Ok(Some))` with the
    /// lock taken, `Pending` with `cx`'s waker left where the engine wakes it. Once ready, later
    /// polls give `Ready(Ok(None))`.
    pub fn poll_receive(
        &self,
        r: &mut AsyncReceive,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Locked>>> {
        if r.is_done() {
            return Poll::Ready(Ok(None));
        }
        let out = if self.multi_process {
            self.poll_shared(r, cx)
        } else {
            self.poll_parked(r, cx)
        };
        if out.is_ready() {
            r.phase = Phase::Done;
        }
        out
    }

    fn poll_parked(
        &self,
        r: &mut AsyncReceive,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Locked>>> {
        loop {
            let slot = match &r.phase {
                Phase::Parked { slot, .. } => slot.clone(),
                _ => {
                    self.check_open()?;
                    let state = park::ParkState::new();
                    let (reply, answer) = channel::bounded(1);
                    let slot = Arc::new(Slot {
                        inner: Mutex::new(SlotInner {
                            answer,
                            waker: Some(cx.waker().clone()),
                            orphaned: None,
                        }),
                    });
                    self.pipeline.park_detached(park::ParkedReceive {
                        q: r.q,
                        name: r.name.clone(),
                        owner: self.owner,
                        max: 1,
                        deadline: r.deadline,
                        state: state.clone(),
                        reply,
                        hook: Some(AnswerHook(slot.clone())),
                    })?;
                    r.phase = Phase::Parked {
                        state,
                        slot: slot.clone(),
                    };
                    slot
                }
            };
            let mut g = slot.inner.lock();
            match g.answer.try_recv() {
                Ok(Ok(mut got)) => {
                    drop(g);
                    if let Some(l) = got.pop() {
                        return Poll::Ready(Ok(Some(l)));
                    }
                    if r.deadline.is_some() {
                        // The writer answers empty only at the deadline.
                        return Poll::Ready(Ok(None));
                    }
                    // Not expected without a deadline; wait again rather than end early.
                    r.phase = Phase::Start;
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(TryRecvError::Empty) => {
                    if !g.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        g.waker = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                Err(TryRecvError::Disconnected) => return Poll::Ready(Err(self.unanswered())),
            }
        }
    }

    /// The error when the writer dropped a parked request unanswered.
    fn unanswered(&self) -> Error {
        if self.is_closed() {
            Error::Closed
        } else {
            // The writer caught a panic in this batch; as in `call`, that is redb failing on
            // a damaged page.
            Error::Corrupted("storage failure: the commit pipeline stopped before answering".into())
        }
    }

    /// Multi-process: the wait of `wait_for`, with the waker left with the queue's signal and
    /// the timer instead of a sleep.
    fn poll_shared(
        &self,
        r: &mut AsyncReceive,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Locked>>> {
        loop {
            self.check_open()?;
            if !matches!(r.phase, Phase::Polling(_)) {
                let signal = self.signals.get(r.q);
                r.phase = Phase::Polling(Polling {
                    // Counted from before the first attempt (see `Signal::waiting`).
                    _waiting: signal.waiting(),
                    seen: signal.seq(),
                    signal,
                    first: true,
                    backoff: self.backoff(),
                    poll_at: None,
                    due: None,
                });
            }
            let Phase::Polling(p) = &mut r.phase else {
                return Poll::Ready(Ok(None));
            };
            let now = Instant::now();
            let wake_at = earliest(earliest(r.deadline, p.due), p.poll_at);
            let try_now = if std::mem::take(&mut p.first) {
                true
            } else if p.signal.seq() != p.seen {
                self.reset_backoff(&mut p.backoff);
                true
            } else if wake_at.is_some_and(|w| now >= w) {
                if p.due.is_some_and(|d| now >= d) {
                    true
                } else if p.poll_at.is_some_and(|at| now >= at) && self.worth_a_try(r.q)? {
                    self.reset_backoff(&mut p.backoff);
                    true
                } else {
                    false
                }
            } else if p.signal.register(p.seen, cx.waker()) {
                // Polled early (by the executor, or a waker left before): keep waiting, with
                // this poll's waker at the timer too in case the task changed.
                if let Some(at) = wake_at {
                    self.signals.timer.wake_at(at, cx.waker().clone())?;
                }
                return Poll::Pending;
            } else {
                true
            };
            if try_now {
                p.seen = p.signal.seq();
                self.reap_if_flagged()?;
                let (q, name, owner) = (r.q, r.name.clone(), self.owner);
                let mut got = self.call(move |b| b.receive(QueueRef::new(q, &name), owner, 1))?;
                if let Some(l) = got.pop() {
                    return Poll::Ready(Ok(Some(l)));
                }
            }
            let now = Instant::now();
            if r.deadline.is_some_and(|d| now >= d) {
                return Poll::Ready(Ok(None));
            }
            p.due = self.read(read::next_due)?.map(|at| {
                let wait_ms = at.saturating_sub(self.clock.now_ms()).max(1);
                now + Duration::from_millis(wait_ms)
            });
            p.poll_at = self.next_poll(&mut p.backoff, now);
            if !p.signal.register(p.seen, cx.waker()) {
                continue;
            }
            if let Some(at) = earliest(earliest(r.deadline, p.due), p.poll_at) {
                self.signals.timer.wake_at(at, cx.waker().clone())?;
            }
            return Poll::Pending;
        }
    }

    /// Ends an async receive that will not be polled again (its future was dropped). A parked
    /// request is withdrawn; if the writer has it already, what its answer locks is taken back
    /// without counting the delivery, now or when the answer arrives.
    pub fn drop_receive(&self, r: &mut AsyncReceive) {
        let Phase::Parked { state, slot } = std::mem::replace(&mut r.phase, Phase::Done) else {
            return;
        };
        if state.cancel() {
            return; // withdrawn before the writer took it: nothing was locked
        }
        let mut g = slot.inner.lock();
        g.waker = None;
        match g.answer.try_recv() {
            Ok(Ok(locks)) => {
                drop(g);
                take_back(|f| self.call_detached(f), locks);
            }
            Ok(Err(_)) | Err(TryRecvError::Disconnected) => {}
            Err(TryRecvError::Empty) => g.orphaned = Some(self.pipeline.detacher()),
        }
    }
}
