//! The one wait for a message, for every receiver: `Queue::receive`, transactions and processor
//! workers.
//!
//! Single-process stores park the request in the writer, which serves it inside the very batch
//! that makes a message receivable (`park`): one commit per delivery. Multi-process waiters are
//! woken by a local commit or a look at the file when it changes, and poll the file only where
//! no change notification runs (`poll`). A [`Cancel`] token ends a wait at once (a processor's
//! stop, a retiring worker, a binding's interrupt).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::channel::{self, Receiver, Sender};

use super::batch::{Locked, QueueRef, Select};
use super::{Engine, earliest, park, read};
use crate::error::{Error, Result};

/// Ends waits early. Cheap to clone; every clone cancels the same waits.
#[derive(Debug, Clone)]
pub struct Cancel {
    inner: Arc<CancelInner>,
    rx: Receiver<()>,
}

struct CancelInner {
    flag: AtomicBool,
    /// Dropped on cancel: the receivers below then disconnect, which wakes parked waits.
    sender: Mutex<Option<Sender<()>>>,
    /// What the waits using this token sleep on besides the channel (a queue's signal, a
    /// processor's condition variable), woken on cancel: registered with [`Cancel::on_cancel`].
    wakes: Mutex<Vec<(u64, Wake)>>,
    next_wake: AtomicU64,
}

/// Wakes one sleeping wait.
pub type Wake = Arc<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for CancelInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelInner")
            .field("cancelled", &self.flag.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Default for Cancel {
    fn default() -> Self {
        let (tx, rx) = channel::bounded(0);
        Cancel {
            inner: Arc::new(CancelInner {
                flag: AtomicBool::new(false),
                sender: Mutex::new(Some(tx)),
                wakes: Mutex::new(Vec::new()),
                next_wake: AtomicU64::new(0),
            }),
            rx,
        }
    }
}

impl Cancel {
    /// Ends every wait that uses this token, now and later: parked waits through the channel,
    /// the others through what they registered with [`Cancel::on_cancel`].
    pub fn cancel(&self) {
        self.inner.flag.store(true, Ordering::Release);
        self.inner.sender.lock().take();
        let wakes = std::mem::take(&mut *self.inner.wakes.lock());
        for (_, wake) in wakes {
            wake();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::Acquire)
    }

    /// Has `wake` called on cancel while the returned guard lives. A wait registers before it
    /// checks [`Cancel::is_cancelled`] and sleeps, so a cancel in between is not missed.
    pub fn on_cancel(&self, wake: Wake) -> OnCancel<'_> {
        let id = self.inner.next_wake.fetch_add(1, Ordering::Relaxed);
        self.inner.wakes.lock().push((id, wake));
        OnCancel { cancel: self, id }
    }
}

/// Registered with [`Cancel::on_cancel`]; dropping it unregisters.
pub struct OnCancel<'a> {
    cancel: &'a Cancel,
    id: u64,
}

impl Drop for OnCancel<'_> {
    fn drop(&mut self) {
        self.cancel
            .inner
            .wakes
            .lock()
            .retain(|(id, _)| *id != self.id);
    }
}

std::thread_local! {
    /// The interrupt a binding set for the waits this thread makes (`with_interrupt`).
    static INTERRUPT: std::cell::RefCell<Option<Cancel>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `interrupt` ending every wait it makes on this thread that has no token of its
/// own, as if its time were up (see `binding::interruptible`).
pub fn with_interrupt<R>(interrupt: &Cancel, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Cancel>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            INTERRUPT.with(|i| *i.borrow_mut() = previous);
        }
    }
    let _restore = Restore(INTERRUPT.with(|i| i.replace(Some(interrupt.clone()))));
    f()
}

/// The interrupt set on this thread, if any.
pub fn thread_interrupt() -> Option<Cancel> {
    INTERRUPT.with(|i| i.borrow().clone())
}

/// The token a wait uses: its own, else the interrupt set on this thread.
pub fn token(own: Option<&Cancel>) -> Option<Cancel> {
    own.cloned().or_else(thread_interrupt)
}

/// The caller's side of a parked receive: waits for the writer's answer until `deadline` or
/// `cancel`; `gone` is the error when the writer dropped the request unanswered.
pub(super) fn await_answer(
    state: &park::ParkState,
    answer: &Receiver<Result<Vec<Locked>>>,
    deadline: Option<Instant>,
    cancel: Option<&Cancel>,
    gone: impl Fn() -> Error,
) -> Result<Vec<Locked>> {
    match channel::recv_until(answer, cancel.map(|c| &c.rx), deadline) {
        Some(Ok(r)) => r,
        Some(Err(_)) => Err(gone()),
        // Timed out or cancelled: withdraw the request, unless the writer has it already,
        // in which case its answer is on the way.
        None if state.cancel() => Ok(Vec::new()),
        None => answer.recv().unwrap_or_else(|_| Err(gone())),
    }
}

impl Engine {
    /// Locks up to `max` messages of queue `q`, waiting until `deadline` (forever if `None`)
    /// for at least one.
    pub fn receive(
        &self,
        queue: QueueRef<'_>,
        max: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<Locked>> {
        self.receive_until(queue, max, deadline, None)
    }

    /// [`Engine::receive`] that `cancel` (else the thread's interrupt, see `with_interrupt`)
    /// can end early, then with nothing: the one wait for a message, used by receivers and
    /// processor workers alike.
    pub fn receive_until(
        &self,
        queue: QueueRef<'_>,
        max: usize,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Result<Vec<Locked>> {
        // Before any lock, such as the signal map's that the polling wait takes first.
        self.check_open()?;
        let cancel = token(cancel);
        if self.multi_process {
            self.receive_polling(queue, max, deadline, cancel.as_ref())
        } else {
            self.receive_parked(queue, max, deadline, cancel.as_ref())
        }
    }

    /// Single-process receive: the request waits in the writer, which serves it in the batch
    /// that makes a message receivable (see `park`).
    fn receive_parked(
        &self,
        queue: QueueRef<'_>,
        max: usize,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Result<Vec<Locked>> {
        let state = park::ParkState::new();
        let (reply, answer) = channel::bounded(1);
        self.pipeline.park(park::ParkedReceive {
            q: queue.id,
            name: queue.name.to_owned(),
            owner: self.owner,
            max,
            deadline,
            state: state.clone(),
            reply,
            hook: None,
        })?;
        let gone = || {
            if self.is_closed() {
                Error::Closed
            } else {
                // The writer caught a panic in this batch; as in `call`, that is redb failing
                // on a damaged page.
                Error::Corrupted(
                    "storage failure: the commit pipeline stopped before answering".into(),
                )
            }
        };
        await_answer(&state, &answer, deadline, cancel, gone)
    }

    /// Multi-process receive: other processes' sends do not pass through this writer, so a
    /// waiter polls the file with truncated exponential backoff.
    fn receive_polling(
        &self,
        queue: QueueRef<'_>,
        max: usize,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Result<Vec<Locked>> {
        let (owner, QueueRef { id: q, name }) = (self.owner, queue);
        let got = self.wait_for(q, deadline, cancel, || {
            let qname = name.to_owned();
            let got = self.call(move |b| b.receive(QueueRef::new(q, &qname), owner, max))?;
            Ok((!got.is_empty()).then_some(got))
        })?;
        Ok(got.unwrap_or_default())
    }

    /// Locks the message of queue `q` that `select` picks, waiting until `deadline` (forever
    /// if `None`) for it to be receivable. Selective waits are not parked in the writer (which
    /// serves the head of a queue): they retry on each commit to the queue and on time-driven
    /// work falling due, and poll the file in multi-process stores.
    pub fn receive_selected(
        &self,
        queue: QueueRef<'_>,
        select: Select,
        deadline: Option<Instant>,
    ) -> Result<Option<Locked>> {
        let QueueRef { id: q, name } = queue;
        self.check_open()?;
        let owner = self.owner;
        self.wait_for(q, deadline, None, || {
            let (qname, select) = (name.to_owned(), select.clone());
            self.call(move |b| b.receive_selected(QueueRef::new(q, &qname), owner, &select))
        })
    }

    /// Runs `attempt` until it finds something, the deadline passes (forever if `None`) or
    /// `cancel` (else the thread's interrupt, see `with_interrupt`) ends the wait; between
    /// attempts, sleeps until a local commit to queue `q` wakes it, time-driven work falls due,
    /// or — in a shared store — a look at the file wakes it or its next poll comes (see `poll`).
    pub fn wait_for<T>(
        &self,
        q: u32,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
        mut attempt: impl FnMut() -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let cancel = token(cancel);
        let is_cancelled = || cancel.as_ref().is_some_and(Cancel::is_cancelled);
        let signal = self.signals.get(q);
        // Counted from before the first attempt (see `Signal::waiting`).
        let _waiting = signal.waiting();
        let _on_cancel = cancel.as_ref().map(|c| {
            let s = signal.clone();
            c.on_cancel(Arc::new(move || s.notify()))
        });
        let mut backoff = self.backoff();
        loop {
            let seen = signal.seq();
            self.reap_if_flagged()?;
            if let Some(found) = attempt()? {
                return Ok(Some(found));
            }
            // Nothing now: sleep until a local commit or a look at the file wakes us,
            // time-driven work falls due, the deadline passes, or the next poll of the file.
            loop {
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) || is_cancelled() {
                    return Ok(None);
                }
                self.check_open()?;
                let due = self.read(read::next_due)?.map(|at| {
                    let wait_ms = at.saturating_sub(self.clock.now_ms()).max(1);
                    now + Duration::from_millis(wait_ms)
                });
                let poll = self.next_poll(&mut backoff, now);
                if signal.wait(seen, earliest(earliest(deadline, due), poll)) {
                    self.reset_backoff(&mut backoff);
                    break;
                }
                let now = Instant::now();
                if due.is_some_and(|d| now >= d) {
                    break;
                }
                if poll.is_some_and(|p| now >= p) && self.worth_a_try(q)? {
                    self.reset_backoff(&mut backoff);
                    break;
                }
            }
        }
    }

    /// At a poll of a shared store's file: whether an attempt may find something now (a
    /// candidate in queue `q`, or a dead process's locks, which are released here first).
    /// Reads only: an attempt would take the store's write lock at every poll.
    pub(super) fn worth_a_try(&self, q: u32) -> Result<bool> {
        let (me, scope) = (self.owner, self.scope);
        if self.read(|t| read::has_dead_owner(t, me, scope))? {
            self.call(move |b| b.reap_dead_owners(me, scope))?;
            return Ok(true);
        }
        let now_ms = self.clock.now_ms();
        self.read(|t| read::has_candidate(t, q, now_ms))
    }
}

/// Pause after a wait of an [`IdleReceiver`] failed with an error that may pass (e.g. a full
/// disk), before it waits again.
const IDLE_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A receiver that waits without a time limit whenever it has nothing to do, woken for work or
/// through a token it renews itself: what [`Engine::wait_idle`] asks of it, and all the engine
/// knows of it.
pub trait IdleReceiver {
    /// Why a wait ended without work (e.g. the receiver stops).
    type Leave;

    /// The token that ends the next wait early. Taken before `leave` looks, so that a reason
    /// to leave arising after that look cancels the token and the wait cannot miss it.
    fn idle_token(&self) -> Cancel;

    /// Whether to end the wait now, and why; `woken`: the last wait was ended by its token.
    fn leave(&mut self, woken: bool) -> Option<Self::Leave>;

    /// One wait for work, ended early by `token`: whether work was taken.
    fn wait_once(&mut self, engine: &Engine, token: &Cancel) -> Result<bool>;

    /// A failed wait: `Some` ends the wait; `None` pauses briefly and waits again.
    fn failed(&mut self, e: &Error) -> Option<Self::Leave>;
}

impl Engine {
    /// Waits until `receiver`, idle on queue `q`, has taken work (`None`) or wants to leave
    /// (`Some`, why). Wakes only for work, its token or — after a failed wait — the queue's
    /// signal or a short pause, never on a timer.
    pub fn wait_idle<R: IdleReceiver>(&self, q: u32, receiver: &mut R) -> Option<R::Leave> {
        let signal = self.signals.get(q);
        let mut woken = false;
        loop {
            let token = receiver.idle_token();
            let seen = signal.seq();
            if let Some(leave) = receiver.leave(woken) {
                return Some(leave);
            }
            match receiver.wait_once(self, &token) {
                Ok(true) => return None,
                Ok(false) => woken = true,
                Err(e) => {
                    if let Some(leave) = receiver.failed(&e) {
                        return Some(leave);
                    }
                    signal.wait(seen, Instant::now().checked_add(IDLE_ERROR_PAUSE));
                }
            }
        }
    }
}
