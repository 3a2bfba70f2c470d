//! Receiving and settling: locking the head of a queue, checking and ending a lock, renewing
//! it.

use redb::ReadableTable;

use super::*;
use crate::engine::rules::{self, Spent};

impl<'t> Batch<'t> {
    /// Locks up to `max` messages from the head of queue `q` for `owner`.
    pub fn receive(&mut self, queue: QueueRef<'_>, owner: u64, max: usize) -> Result<Vec<Locked>> {
        let QueueRef { id: q, name } = queue;
        let rec = self.require_queue(queue)?;
        if rec.record.options.requires_session {
            return Err(Error::invalid(format!(
                "queue {name:?} requires sessions: accept a session to receive"
            )));
        }
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        let max_deliveries = rec.record.options.max_deliveries;
        let mut out = Vec::new();
        while out.len() < max {
            let head = self
                .tables
                .ready()?
                .range((q, 0, 0)..=(q, u8::MAX, u64::MAX))?
                .next()
                .transpose()?
                .map(|(k, _)| k.value());
            let Some(key) = head else { break };
            let id = key.2;
            let st = self
                .load_state(id)?
                .ok_or_else(|| Error::corrupted(format!("ready message {id} has no state")))?;
            // A state that disagrees with its index entry would not remove that entry below,
            // and this loop would find the same head forever (seen on damaged files).
            if st.status != Status::Ready || st.ready_key(id) != key {
                return Err(Error::corrupted(format!(
                    "ready message {id} has an inconsistent state"
                )));
            }
            if let Some(why) = rules::spent(&st, max_deliveries, self.now) {
                self.move_to_dead_letter(id, st, why.reason(), &why.description())?;
                continue;
            }
            out.push(self.lock_ready_for(id, st, owner, lock_ms)?);
        }
        Ok(out)
    }

    /// Locks ready message `id` (state `st`) for `owner` for `lock_ms`.
    pub(super) fn lock_ready_for(
        &mut self,
        id: u64,
        mut st: State,
        owner: u64,
        lock_ms: u64,
    ) -> Result<Locked> {
        self.detach(id, &st)?;
        st.delivery_count += 1;
        st.lock_owner = owner;
        st.lock_token = self.next_seq(Seq::Token)?;
        st.locked_until = self.now.saturating_add(lock_ms);
        self.attach(id, &mut st, Status::Locked)?;
        let envelope = self.envelope(id, &st)?;
        Ok(Locked {
            envelope,
            token: st.lock_token,
            locked_until: st.locked_until,
        })
    }

    /// Locks the one receivable message of queue `q` that `select` picks, if there is one now.
    /// A pick that is spent goes to the dead-letter queue instead, as in [`Batch::receive`].
    /// Refused on a queue that requires sessions: a held session is exclusive (invariant 7),
    /// so its messages are picked through it ([`Batch::session_receive_selected`]).
    pub fn receive_selected(
        &mut self,
        queue: QueueRef<'_>,
        owner: u64,
        select: &Select,
    ) -> Result<Option<Locked>> {
        let QueueRef { id: q, name } = queue;
        let rec = self.require_queue(queue)?;
        if rec.record.options.requires_session {
            let how = match select {
                Select::Id(_) => "by id",
                Select::CorrelationId(_) => "by correlation id",
            };
            return Err(Error::invalid(format!(
                "queue {name:?} requires sessions: accept a session and receive {how} through \
                 it (only the holder of a group takes its messages)"
            )));
        }
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        let max_deliveries = rec.record.options.max_deliveries;
        loop {
            let Some((id, st)) = self.select_ready(q, select)? else {
                return Ok(None);
            };
            if let Some(why) = rules::spent(&st, max_deliveries, self.now) {
                self.move_to_dead_letter(id, st, why.reason(), &why.description())?;
                continue;
            }
            return self.lock_ready_for(id, st, owner, lock_ms).map(Some);
        }
    }

    /// The receivable message of queue `q` that `select` picks: by id, or the first in
    /// delivery order with the correlation id (a scan of the queue's receivable messages).
    fn select_ready(&mut self, q: u32, select: &Select) -> Result<Option<(u64, State)>> {
        match select {
            // By id, a deferred message is receivable too: that is the only way to it.
            Select::Id(id) => Ok(self
                .load_state(*id)?
                .filter(|st| st.queue == q && matches!(st.status, Status::Ready | Status::Deferred))
                .map(|st| (*id, st))),
            Select::CorrelationId(wanted) => {
                let ids: Vec<u64> = self
                    .tables
                    .ready()?
                    .range((q, 0, 0)..=(q, u8::MAX, u64::MAX))?
                    .map(|e| e.map(|(k, _)| k.value().2))
                    .collect::<std::result::Result<_, _>>()?;
                for id in ids {
                    let env = self.load_envelope(id)?;
                    if env.props.correlation_id.as_deref() == Some(wanted.as_str()) {
                        let st = self.load_state(id)?.ok_or_else(|| {
                            Error::corrupted(format!("ready message {id} has no state"))
                        })?;
                        return Ok(Some((id, st)));
                    }
                }
                Ok(None)
            }
        }
    }

    /// Checks that `lock` is still held.
    pub fn check_lock(&mut self, lock: HeldLock) -> Result<State> {
        let HeldLock { id, token } = lock;
        match self.load_state(id)? {
            Some(st)
                if st.status == Status::Locked
                    && st.lock_token == token
                    && st.locked_until > self.now =>
            {
                Ok(st)
            }
            _ => Err(Error::LockLost(MessageId(id))),
        }
    }

    /// Ends `lock`; returns the dead-letter reason when the message went to its dead-letter
    /// queue (asked for, or spent on its way back to its queue).
    pub fn settle(&mut self, lock: HeldLock, how: &Settle) -> Result<Option<String>> {
        let id = lock.id;
        let mut st = self.check_lock(lock)?;
        match how {
            Settle::Complete => self.complete_message(id, st).map(|()| None),
            Settle::Abandon { delay_ms } | Settle::Fail { delay_ms, .. } => {
                let rec = self.require_queue_id(st.queue)?;
                // Dead letters never die twice: they stay until someone deals with them.
                let spent = match rec.record.kind {
                    QueueKind::DeadLetter => None,
                    _ => rules::spent(&st, rec.record.options.max_deliveries, self.now),
                };
                if let Some(why) = spent {
                    // A failed handler's own text says more than the generic description.
                    let description = match (&why, how) {
                        (Spent::MaxDeliveries(_), Settle::Fail { description, .. }) => {
                            description.clone()
                        }
                        _ => why.description(),
                    };
                    self.move_to_dead_letter(id, st, why.reason(), &description)?;
                    return Ok(Some(why.reason().to_owned()));
                }
                self.detach(id, &st)?;
                let status = if st.deferred {
                    // A deferred message stays set aside: a delay means nothing there.
                    Status::Deferred
                } else if *delay_ms == 0 {
                    Status::Ready
                } else {
                    st.visible_at = self.now.saturating_add(*delay_ms);
                    Status::Scheduled
                };
                self.attach(id, &mut st, status).map(|()| None)
            }
            Settle::DeadLetter {
                reason,
                description,
            } => {
                let rec = self.require_queue_id(st.queue)?;
                if rec.record.kind == QueueKind::DeadLetter {
                    return Err(Error::invalid(
                        "a dead letter cannot be dead-lettered again",
                    ));
                }
                if reason.len() > crate::message::MAX_REASON_LEN {
                    return Err(Error::invalid(format!(
                        "dead-letter reasons are at most {} bytes, got {}",
                        crate::message::MAX_REASON_LEN,
                        reason.len()
                    )));
                }
                self.move_to_dead_letter(id, st, reason, description)?;
                Ok(Some(reason.clone()))
            }
            Settle::Defer => {
                self.detach(id, &st)?;
                st.deferred = true;
                self.attach(id, &mut st, Status::Deferred).map(|()| None)
            }
            Settle::Resubmit => {
                let rec = self.require_queue_id(st.queue)?;
                if rec.record.kind != QueueKind::DeadLetter {
                    return Err(Error::invalid(
                        "only a message received from a dead-letter queue can be resubmitted",
                    ));
                }
                // A resubmitted message starts over: its delivery count and dead-letter details
                // are cleared (its time to live was cleared when it was dead-lettered).
                st.delivery_count = 0;
                self.move_to_queue(id, st, rec.record.peer, None)?;
                Ok(None)
            }
        }
    }

    /// Extends `lock`; returns the new expiry.
    pub fn renew(&mut self, lock: HeldLock) -> Result<u64> {
        let id = lock.id;
        let mut st = self.check_lock(lock)?;
        let rec = self.require_queue_id(st.queue)?;
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        self.detach(id, &st)?;
        st.locked_until = self.now.saturating_add(lock_ms);
        self.attach(id, &mut st, Status::Locked)?;
        Ok(st.locked_until)
    }

    /// One lock handed back uncounted by its holder ([`crate::Received::release`]); unlike
    /// [`Batch::unreceive`], a lost lock is the caller's error.
    pub fn release_lock(&mut self, lock: HeldLock) -> Result<()> {
        self.check_lock(lock)?;
        self.unreceive(&[lock])
    }

    /// Takes back locks that were never handed to a receiver (an async receive dropped while
    /// its answer was on the way): each message returns to the head of its queue with the
    /// delivery that was counted for it uncounted, since nobody saw it. Locks already lost
    /// are skipped.
    pub fn unreceive(&mut self, locks: &[HeldLock]) -> Result<()> {
        for &lock in locks {
            let id = lock.id;
            let mut st = match self.check_lock(lock) {
                Ok(st) => st,
                Err(Error::LockLost(_)) => continue,
                Err(e) => return Err(e),
            };
            self.detach(id, &st)?;
            st.delivery_count = st.delivery_count.saturating_sub(1);
            let status = if st.deferred {
                Status::Deferred
            } else {
                Status::Ready
            };
            self.attach(id, &mut st, status)?;
        }
        Ok(())
    }

    pub(super) fn envelope(&mut self, id: u64, st: &State) -> Result<Envelope> {
        let env = self.load_envelope(id)?;
        let queue_name = self
            .queue(st.queue)?
            .map(|r| r.name.clone())
            .unwrap_or_default();
        let source = match &env.dead_letter {
            Some(d) => Some(
                self.queue(d.source_queue)?
                    .map(|r| r.name.clone())
                    .unwrap_or_default(),
            ),
            None => None,
        };
        Ok(crate::engine::read::build_envelope(
            id, st, queue_name, env, source,
        ))
    }
}
