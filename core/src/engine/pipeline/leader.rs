//! The inbox and the leader election: callers queue their operations, and whoever finds
//! nobody writing leads — a caller for one batch, the writer thread until the inbox is empty.
//! Apart from what a batch does, which this file leaves to the [`Writer`]; generic over it so
//! that the concurrency checks drive this very code.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::writer::{Round, Writer};
use crate::engine::park::{self, ParkedReceive};
use crate::error::{Error, Result};
use crate::options::Durability;
use crate::sync::answers::Answers;
use crate::sync::{Condvar, Mutex};

/// The most operations one batch takes; more wait for the next batch, which bounds the latency
/// a single huge burst can add.
const MAX_BATCH: usize = 4096;

/// What a caller leaves in the inbox.
pub(super) enum Msg<J> {
    Job(J),
    /// A receive that waits in the writer until a batch makes a message receivable.
    Park(ParkedReceive),
    /// Finish what is queued, run the closing job durably, exit.
    Stop(J),
}

/// What waits to be written, and who is writing.
struct Inbox<J> {
    msgs: VecDeque<Msg<J>>,
    /// Someone leads: only the leader takes messages and runs batches.
    leading: bool,
    /// A leader passed leadership to the writer thread.
    handoff: bool,
    /// When the writer thread must run a batch of its own (a parked receive's deadline, or a
    /// scheduled message or lock expiry that may serve one). Set by each leader on leaving.
    timer_at: Option<Instant>,
    /// The writer thread found its timer due while somebody else led, and sleeps until told.
    timer_blocked: bool,
    /// No more messages are taken (a stop is queued or done).
    closed: bool,
    /// The stop has run: the writer thread exits.
    exit: bool,
}

/// What only the leader touches, carried from batch to batch.
struct Carried {
    parked: Vec<ParkedReceive>,
    /// Number of the last batch run (its commit mark; see `db`).
    batch_no: u64,
    /// Callers the next batch may expect: those the last batch answered and those that
    /// queued while it ran. A durable batch waits briefly for as many.
    expect: usize,
    last_cost: Duration,
    last_reap: Instant,
    last_checkpoint: Instant,
}

/// The state the callers, the leader and the writer thread share.
pub(super) struct Shared<W: Writer> {
    pub(super) ctx: W,
    inbox: Mutex<Inbox<W::Job>>,
    /// Wakes the writer thread: a handoff, an earlier timer, the exit.
    writer_cv: Condvar,
    /// Wakes a leader that gathers a batch.
    arrived: Condvar,
    /// Never contended: only the leader locks it.
    carried: Mutex<Carried>,
    /// Where callers wait for their jobs' results; woken once per batch.
    pub(super) answers: Arc<Answers>,
}

/// A batch taken from the inbox: its jobs, and the closing job if a stop was queued.
type Taken<J> = (Vec<J>, Option<J>);

/// Who leads: a caller runs one batch, the writer thread runs until nothing is left.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Leader {
    Caller,
    Writer,
}

/// With `Durability::None`, a durable commit at least this often bounds what a crash can lose
/// and lets redb reclaim pages that only a durable commit frees.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// The longest a durable batch waits for the callers of the previous batch to come back.
const MAX_GATHER: Duration = Duration::from_micros(500);

impl<W: Writer> Shared<W> {
    /// The state of a pipeline that has just started: nobody leads, nothing is queued.
    pub(super) fn new(ctx: W) -> Shared<W> {
        let now = Instant::now();
        Shared {
            ctx,
            inbox: Mutex::new(Inbox {
                msgs: VecDeque::new(),
                leading: false,
                handoff: false,
                timer_at: None,
                timer_blocked: false,
                closed: false,
                exit: false,
            }),
            writer_cv: Condvar::new(),
            arrived: Condvar::new(),
            carried: Mutex::new(Carried {
                parked: Vec::new(),
                batch_no: 0,
                expect: 1,
                last_cost: Duration::ZERO,
                last_reap: now,
                last_checkpoint: now,
            }),
            answers: Arc::default(),
        }
    }

    /// Closes the inbox and lets the writer thread exit (see `Drop for Pipeline`).
    pub(super) fn release(&self) {
        let mut inbox = self.inbox.lock();
        inbox.closed = true;
        inbox.exit = true;
        self.writer_cv.notify_one();
    }

    /// Queues `msg`. `Ok(true)`: nobody was writing and the caller must now lead. A caller
    /// that may not block (`may_lead == false`) hands the lead to the writer thread instead.
    pub(super) fn submit(&self, msg: Msg<W::Job>, may_lead: bool) -> Result<bool> {
        let mut inbox = self.inbox.lock();
        if inbox.closed {
            return Err(Error::Closed);
        }
        if matches!(msg, Msg::Stop(_)) {
            inbox.closed = true;
        }
        inbox.msgs.push_back(msg);
        if inbox.leading {
            // Every arrival wakes a gathering leader, though most find it short of its count:
            // waking it only once the count is reached ran 32 senders 1.12-1.15x faster but 8
            // senders 0.86-0.97x (`postbox-profile send 40000 durable 8|32`, alternating).
            self.arrived.notify_one();
            return Ok(false);
        }
        inbox.leading = true;
        if may_lead {
            return Ok(true);
        }
        inbox.handoff = true;
        self.writer_cv.notify_one();
        Ok(false)
    }

    /// The writer thread: leads when handed the lead, and runs the time-driven batches.
    pub(super) fn writer_loop(&self) {
        loop {
            let timer = {
                let mut inbox = self.inbox.lock();
                loop {
                    if inbox.exit {
                        return;
                    }
                    if inbox.handoff {
                        inbox.handoff = false;
                        break false;
                    }
                    match inbox.timer_at {
                        Some(at) if !inbox.leading => {
                            if Instant::now() >= at {
                                inbox.leading = true;
                                inbox.timer_at = None;
                                break true;
                            }
                            self.writer_cv.wait_until(&mut inbox, at);
                        }
                        Some(_) => {
                            // Whoever leads sets a new timer when it leaves, and wakes us.
                            inbox.timer_blocked = true;
                            self.writer_cv.wait(&mut inbox);
                        }
                        None => self.writer_cv.wait(&mut inbox),
                    }
                }
            };
            if self.lead(Leader::Writer, timer) {
                return;
            }
        }
    }

    /// Runs batches as the leader (the caller has set `inbox.leading`). Returns true once
    /// the stop has run.
    pub(super) fn lead(&self, who: Leader, timer: bool) -> bool {
        let mut carried = self.carried.lock();
        let c = &mut *carried;
        let mut timer = timer;
        loop {
            let Some((jobs, stop)) = self.take(c, timer) else {
                return false;
            };
            // Callers answered by this batch come back together (its jobs, and the parked
            // receives it serves or answers at their deadline); so do the ones that queued up
            // while it ran, answered by the next. Waiting for both keeps two halves of the
            // callers from settling into alternate commits of half the size.
            let answered = jobs.len();
            let parked_before = c.parked.len();
            let reap = match self.ctx.reap_as() {
                Some(owner) if c.last_reap.elapsed() >= Duration::from_millis(100) => {
                    c.last_reap = Instant::now();
                    Some(owner)
                }
                _ => None,
            };
            if !jobs.is_empty() || !c.parked.is_empty() {
                let durability = match self.ctx.durability() {
                    Durability::None if c.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL => {
                        c.last_checkpoint = Instant::now();
                        Durability::Immediate
                    }
                    other => other,
                };
                let started = Instant::now();
                c.batch_no += 1;
                let round = Round {
                    timer,
                    durability,
                    reap,
                    batch_no: c.batch_no,
                };
                self.ctx.run(jobs, &mut c.parked, round);
                self.answers.wake();
                c.last_cost = started.elapsed();
            }
            timer = false;
            if let Some(last) = stop {
                // Parked receives are dropped unanswered: their callers see the store closed.
                c.parked.clear();
                // Batch 0 writes no commit mark: the closing batch unregisters this owner.
                let closing = Round {
                    timer: false,
                    durability: Durability::Immediate,
                    reap: None,
                    batch_no: 0,
                };
                self.ctx.run(vec![last], &mut c.parked, closing);
                self.answers.wake();
                let mut inbox = self.inbox.lock();
                inbox.exit = true;
                self.writer_cv.notify_one();
                return true;
            }
            let mut inbox = self.inbox.lock();
            c.expect =
                (answered + parked_before.saturating_sub(c.parked.len()) + inbox.msgs.len()).max(1);
            if who == Leader::Caller {
                // The caller's own operation is done: what came meanwhile goes to the writer
                // thread, so this caller returns now.
                if inbox.msgs.is_empty() {
                    self.step_down(&mut inbox, c);
                } else {
                    inbox.handoff = true;
                    self.writer_cv.notify_one();
                }
                return false;
            }
        }
    }

    /// Takes the next batch from the inbox: its jobs, and the stop if one is queued (parked
    /// receives go straight to `c.parked`). `None` (and leadership given up) when there is
    /// nothing to do.
    fn take(&self, c: &mut Carried, timer: bool) -> Option<Taken<W::Job>> {
        let mut inbox = self.inbox.lock();
        // Callers of a batch are answered together and come back together, but a woken
        // thread takes a while to run: without waiting, the first one back would get a commit
        // of its own and the rest would queue behind its fsync. So a durable batch waits
        // briefly (a quarter of the last commit's cost, at most MAX_GATHER) for as many
        // callers as the last batch had. A lone caller (expect == 1) never waits.
        if matches!(self.ctx.durability(), Durability::Immediate) && c.expect > 1 {
            let deadline = Instant::now() + (c.last_cost / 4).min(MAX_GATHER);
            while inbox.msgs.len() < c.expect && !inbox.closed {
                if self.arrived.wait_until(&mut inbox, deadline).timed_out() {
                    break;
                }
            }
        }
        if inbox.msgs.is_empty() && !timer {
            self.step_down(&mut inbox, c);
            return None;
        }
        let mut jobs = Vec::with_capacity(inbox.msgs.len().min(MAX_BATCH));
        let mut stop = None;
        while jobs.len() < MAX_BATCH {
            match inbox.msgs.pop_front() {
                Some(Msg::Job(j)) => jobs.push(j),
                Some(Msg::Park(p)) => c.parked.push(p),
                Some(Msg::Stop(j)) => {
                    stop = Some(j);
                    break;
                }
                None => break,
            }
        }
        Some((jobs, stop))
    }

    /// Gives up the lead, leaving the writer thread a timer if parked receives need one.
    fn step_down(&self, inbox: &mut Inbox<W::Job>, c: &Carried) {
        inbox.leading = false;
        let at = if c.parked.is_empty() {
            None
        } else {
            let due_in = self.ctx.due_in_ms();
            let due_at = Instant::now().checked_add(Duration::from_millis(due_in.max(1)));
            [park::next_deadline(&c.parked), due_at]
                .into_iter()
                .flatten()
                .min()
        };
        let changed = at != inbox.timer_at;
        inbox.timer_at = at;
        if at.is_some() && (changed || inbox.timer_blocked) {
            inbox.timer_blocked = false;
            self.writer_cv.notify_one();
        }
    }
}
