//! The one wait for a message, for every receiver: `Queue::receive`, transactions and processor
//! workers.
//!
//! Single-process stores park the request in the writer, which serves it inside the very batch
//! that makes a message receivable (`park`): one commit per delivery. Multi-process stores poll
//! the file with the store's truncated exponential backoff (`poll_interval`), woken early by a
//! local commit or the file watch. A [`Cancel`] token ends a wait at once (a processor's stop).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::channel::{self, Receiver, Sender};

use super::batch::{Locked, Select};
use super::{Engine, earliest, park, read};
use crate::error::{Error, Result};

/// Ends waits early. Cheap to clone; every clone cancels the same waits.
#[derive(Debug, Clone)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    /// Dropped on cancel: the receivers below then disconnect, which wakes parked waits.
    sender: Arc<Mutex<Option<Sender<()>>>>,
    rx: Receiver<()>,
}

impl Default for Cancel {
    fn default() -> Self {
        let (tx, rx) = channel::bounded(0);
        Cancel {
            flag: Arc::new(AtomicBool::new(false)),
            sender: Arc::new(Mutex::new(Some(tx))),
            rx,
        }
    }
}

impl Cancel {
    /// Ends every wait that uses this token, now and later. Polling waits notice at their next
    /// wake-up; whoever cancels also bumps the queue's signal to make that immediate.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Release);
        self.sender.lock().take();
    }

    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
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
        q: u32,
        name: &str,
        max: usize,
        deadline: Option<Instant>,
    ) -> Result<Vec<Locked>> {
        self.receive_until(q, name, max, deadline, None)
    }

    /// [`Engine::receive`] that `cancel` can end early (then with nothing): the one wait for a
    /// message, used by receivers and processor workers alike.
    pub fn receive_until(
        &self,
        q: u32,
        name: &str,
        max: usize,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Result<Vec<Locked>> {
        // Before any lock, such as the signal map's that the polling wait takes first.
        self.check_open()?;
        if self.multi_process {
            self.receive_polling(q, name, max, deadline, cancel)
        } else {
            self.receive_parked(q, name, max, deadline, cancel)
        }
    }

    /// Single-process receive: the request waits in the writer, which serves it in the batch
    /// that makes a message receivable (see `park`).
    fn receive_parked(
        &self,
        q: u32,
        name: &str,
        max: usize,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Result<Vec<Locked>> {
        let state = park::ParkState::new();
        let (reply, answer) = channel::bounded(1);
        self.pipeline.park(park::ParkedReceive {
            q,
            name: name.to_owned(),
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
        q: u32,
        name: &str,
        max: usize,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Result<Vec<Locked>> {
        let owner = self.owner;
        let got = self.wait_for(q, deadline, cancel, || {
            let qname = name.to_owned();
            let got = self.call(move |b| b.receive(q, &qname, owner, max))?;
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
        q: u32,
        name: &str,
        select: Select,
        deadline: Option<Instant>,
    ) -> Result<Option<Locked>> {
        self.check_open()?;
        let owner = self.owner;
        self.wait_for(q, deadline, None, || {
            let (qname, select) = (name.to_owned(), select.clone());
            self.call(move |b| b.receive_selected(q, &qname, owner, &select))
        })
    }

    /// Runs `attempt` until it finds something, the deadline passes (forever if `None`) or
    /// `cancel` ends the wait; between attempts, sleeps until a local commit to queue `q`
    /// wakes it, time-driven work falls due, or (multi-process) the next poll of the file.
    pub fn wait_for<T>(
        &self,
        q: u32,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
        mut attempt: impl FnMut() -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let is_cancelled = || cancel.is_some_and(Cancel::is_cancelled);
        let signal = self.signals.get(q);
        let mut backoff = self.poll_floor;
        loop {
            let seen = signal.seq();
            if let Some(found) = attempt()? {
                return Ok(Some(found));
            }
            // Nothing now: sleep until a local commit wakes us, time-driven work falls due, the
            // deadline passes, or (multi-process) the next poll of the shared file.
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
                let mut wake = earliest(deadline, due);
                if self.multi_process {
                    wake = earliest(wake, Some(now + backoff));
                }
                if signal.wait(seen, wake) {
                    backoff = self.poll_floor;
                    break;
                }
                if due.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if self.multi_process {
                    let now_ms = self.clock.now_ms();
                    let me = self.owner;
                    let scope = self.scope;
                    if self.read(|t| read::has_dead_owner(t, me, scope))? {
                        // Release the dead process's locks now rather than at the pipeline's
                        // next periodic reap, so the retry below can take them.
                        self.call(move |b| b.reap_dead_owners(me, scope))?;
                        backoff = self.poll_floor;
                        break;
                    }
                    if self.read(|t| read::has_candidate(t, q, now_ms))? {
                        backoff = self.poll_floor;
                        break;
                    }
                    backoff = (backoff * 2).min(self.poll_ceiling);
                }
            }
        }
    }
}
