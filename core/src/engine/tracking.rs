//! Engine operations behind jobs, reserved ids, replies and idle deletion: the parts that are
//! more than one batch call (waiting for a job, the janitor's loop).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::batch::{Batch, JobRecord, Locked, QueueRef, job_signal};
use super::{Engine, HeldLock, janitor, read, wait};
use crate::error::{Error, Result};
use crate::message::{Message, MessageId};

impl Engine {
    /// An id for a message a transaction will send: in memory for a single-process store (the
    /// writer's batches draw from the same counter), by a commit for a shared one.
    pub fn reserve_id(&self) -> Result<u64> {
        self.check_open()?;
        match &self.ids {
            Some(ids) => Ok(ids.fetch_add(1, Ordering::AcqRel)),
            None => self.call(|b| b.reserve_id()),
        }
    }

    /// A fresh correlation id for a request: unique in the store without a commit, since owner
    /// ids are never reused and the counter is this process's.
    pub fn new_correlation_id(&self) -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        format!("request-{}-{n}", self.owner)
    }

    /// Waits until job `job` is done or `deadline` passes (or the thread's interrupt fires,
    /// see `wait::with_interrupt`); returns its record then. Woken by the commit that ends its
    /// last piece in this process, and by a look at the file or the poll of a shared store.
    pub fn wait_job(&self, job: u64, deadline: Option<Instant>) -> Result<JobRecord> {
        let interrupt = wait::token(None);
        let signal = self.signals.get(job_signal(job));
        let _waiting = signal.waiting();
        let _on_cancel = interrupt.as_ref().map(|c| {
            let s = signal.clone();
            c.on_cancel(Arc::new(move || s.notify()))
        });
        let mut backoff = self.backoff();
        loop {
            let seen = signal.seq();
            let rec = self
                .read(|t| read::job(t, job))?
                .ok_or(Error::JobNotFound(job))?;
            if rec.is_done() {
                return Ok(rec);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d)
                || interrupt.as_ref().is_some_and(|c| c.is_cancelled())
            {
                return Ok(rec);
            }
            let poll = self.next_poll(&mut backoff, now);
            if signal.wait(seen, super::earliest(deadline, poll)) {
                self.reset_backoff(&mut backoff);
            }
        }
    }

    /// Sends `reply` to queue `to` and completes the lock `l`, in one commit.
    pub fn reply(&self, l: HeldLock, to: String, reply: Message) -> Result<MessageId> {
        self.call(move |b| {
            b.check_lock(l)?;
            let (q, name) = b.queue_id_by_name(&to)?;
            let sent = b.send_one(QueueRef::new(q, &name), reply)?;
            b.complete_all(&[l])?;
            Ok(sent.id)
        })
    }

    /// Starts the thread that deletes idle queues, or makes a running one look again now (a
    /// queue just opened with a short idle period may be due before its next look).
    pub fn ensure_janitor(self: &Arc<Self>) {
        let mut slot = self.janitor.lock();
        if self.is_closed() || self.is_forked() {
            return;
        }
        if let Some(j) = slot.as_ref()
            && !j.is_finished()
        {
            j.poke();
            return;
        }
        let weak = Arc::downgrade(self);
        *slot = janitor::Janitor::start(move || {
            let engine = weak.upgrade()?;
            engine.check_open().ok()?;
            engine.idle_tick()
        });
    }

    /// One look of the janitor: deletes the queues whose idle period is over and says how long
    /// to sleep before the next look — until the next queue falls due, at most a second —
    /// or `None` when no queue asks for idle deletion any more.
    fn idle_tick(&self) -> Option<std::time::Duration> {
        let Ok(mut due) = self.read(read::idle_schedule) else {
            return Some(janitor::PERIOD);
        };
        let mut now = self.clock.now_ms();
        if due.next.is_some_and(|at| at <= now) {
            // The deleting batch checks every queue again (`delete_idle_queues`).
            let _ = self.call(|b: &mut Batch<'_>| b.delete_idle_queues().map(drop));
            let Ok(after) = self.read(read::idle_schedule) else {
                return Some(janitor::PERIOD);
            };
            due = after;
            now = self.clock.now_ms();
            // Still due: the deletion failed; try again in a while rather than at once.
            if due.next.is_some_and(|at| at <= now) {
                return due.any.then_some(janitor::PERIOD);
            }
        }
        if !due.any {
            return None;
        }
        Some(due.next.map_or(janitor::PERIOD, |at| {
            std::time::Duration::from_millis(at - now).min(janitor::PERIOD)
        }))
    }

    /// Notes that a request with `correlation_id` waits for its reply, until the returned
    /// guard is dropped. A reply on this handle's reply queue that no waiting request expects
    /// is dropped by the next request that looks at the queue ([`Engine::receive_reply`]), so
    /// register before the request is sent: its reply cannot arrive earlier.
    pub fn await_reply(&self, correlation_id: String) -> AwaitingReply {
        *self
            .awaited
            .lock()
            .entry(correlation_id.clone())
            .or_default() += 1;
        AwaitingReply {
            awaited: self.awaited.clone(),
            correlation_id,
            process: crate::os::process::id(),
        }
    }

    /// Locks the reply of the request `awaiting` in reply queue `q` (`name`), waiting until
    /// `deadline` (forever if `None`) as a receive by correlation id does, and drops the
    /// replies it passes that no waiting request of this handle expects (late replies to
    /// requests that timed out).
    pub fn receive_reply(
        &self,
        queue: QueueRef<'_>,
        awaiting: &AwaitingReply,
        deadline: Option<Instant>,
    ) -> Result<Option<Locked>> {
        let QueueRef { id: q, name } = queue;
        self.check_open()?;
        let owner = self.owner;
        self.wait_for(q, deadline, None, || {
            let (qname, cid) = (name.to_owned(), awaiting.correlation_id.clone());
            let awaited = self.awaited.clone();
            self.call(move |b| {
                // Read inside the batch: a reply the batch can see was committed before it,
                // so its request had registered (it registers before it sends).
                let waiting: HashSet<String> = awaited.lock().keys().cloned().collect();
                b.receive_reply(QueueRef::new(q, &qname), owner, &cid, &waiting)
            })
        })
    }

    /// This store handle's reply queue for requests, `(id, name)`: a temporary queue created
    /// on first use (and again if it was deleted since).
    pub fn reply_queue(&self) -> Result<(u32, String)> {
        let mut slot = self.replies.lock();
        if let Some((q, name)) = slot.clone()
            && self.read(|t| read::queue_by_id(t, q))?.is_some()
        {
            return Ok((q, name));
        }
        let owner = self.owner;
        let made = self.call(move |b| {
            b.create_temporary_queue(owner, None)
                .map(|e| (e.record.id, e.name))
        })?;
        *slot = Some(made.clone());
        Ok(made)
    }
}

/// The correlation ids of a store handle's requests that wait for their reply now, each with
/// the number of requests waiting for it (a caller may reuse one).
pub type Awaited = Arc<crate::sync::Mutex<HashMap<String, usize>>>;

/// A request waiting for its reply ([`Engine::await_reply`]); dropping it stops the wait, and
/// a reply that comes afterwards is dropped.
#[derive(Debug)]
pub struct AwaitingReply {
    awaited: Awaited,
    correlation_id: String,
    /// The process that registered it: a forked child never takes the mutex, which a parent
    /// thread may have held at fork time.
    process: u32,
}

impl AwaitingReply {
    /// The correlation id the reply will carry.
    pub fn correlation_id(&self) -> &str {
        &self.correlation_id
    }
}

impl Drop for AwaitingReply {
    fn drop(&mut self) {
        if crate::os::process::id() != self.process {
            return;
        }
        let mut awaited = self.awaited.lock();
        if let Some(n) = awaited.get_mut(&self.correlation_id) {
            *n -= 1;
            if *n == 0 {
                awaited.remove(&self.correlation_id);
            }
        }
    }
}
