//! Message state transitions: a message's state row and the index entry that goes with its
//! status, kept in step with the exact counts; requeueing and dead-lettering.

use redb::ReadableTable;

use super::jobs::PieceEnd;
use super::receipts::Outcome;
use super::*;
use crate::engine::codec::StoredEnvelope;
use crate::engine::rules;

impl<'t> Batch<'t> {
    pub(super) fn load_state(&mut self, id: u64) -> Result<Option<State>> {
        match self.tables.state()?.get(id)? {
            None => Ok(None),
            Some(g) => Ok(Some(
                State::decode(id, &g.value()).map_err(|e| corrupted("message state", e))?,
            )),
        }
    }

    /// Removes the index entries of the message's current status and its count.
    pub(super) fn detach(&mut self, id: u64, st: &State) -> Result<()> {
        match st.status {
            Status::Ready => {
                self.tables.ready()?.remove(st.ready_key(id))?;
            }
            Status::Scheduled => {
                self.tables.scheduled()?.remove((st.visible_at, id))?;
            }
            Status::Locked => {
                self.tables.lock_expiry()?.remove((st.locked_until, id))?;
            }
            Status::Deferred => {
                self.tables.deferred()?.remove((st.queue, id))?;
            }
        }
        if st.status != Status::Locked && st.expires_at != 0 {
            self.tables.expiring()?.remove((st.expires_at, id))?;
        }
        let c = self.counters_mut(st.queue)?;
        let slot = c.slot(st.status);
        *slot = slot.saturating_sub(1);
        Ok(())
    }

    /// Puts the message in `status`: index entries, count, stored state.
    pub(super) fn attach(&mut self, id: u64, st: &mut State, status: Status) -> Result<()> {
        st.status = status;
        if status != Status::Locked {
            st.lock_owner = 0;
            st.lock_token = 0;
            st.locked_until = 0;
        }
        match status {
            Status::Ready => {
                self.tables.ready()?.insert(st.ready_key(id), ())?;
                self.woken.insert(st.queue);
            }
            Status::Scheduled => {
                self.tables.scheduled()?.insert((st.visible_at, id), ())?;
                self.hints.scheduled = self.hints.scheduled.min(st.visible_at);
            }
            Status::Locked => {
                self.tables
                    .lock_expiry()?
                    .insert((st.locked_until, id), ())?;
                self.hints.lock = self.hints.lock.min(st.locked_until);
            }
            Status::Deferred => {
                self.tables.deferred()?.insert((st.queue, id), ())?;
                if st.session {
                    // Set aside: its group's next message may be receivable now.
                    self.woken.insert(st.queue);
                }
            }
        }
        if status != Status::Locked && st.expires_at != 0 {
            self.tables.expiring()?.insert((st.expires_at, id), ())?;
            self.hints.expiring = self.hints.expiring.min(st.expires_at);
        }
        *self.counters_mut(st.queue)?.slot(status) += 1;
        self.tables.state()?.insert(id, st.encode(id))?;
        Ok(())
    }

    /// Completes message `id`: removes it, or keeps it in its queue's journal when the queue
    /// has one (dropping the journal's oldest beyond its quota).
    pub(super) fn complete_message(&mut self, id: u64, mut st: State) -> Result<()> {
        self.traffic.entry(st.queue).or_default().completed += 1;
        let rec = self.require_queue_id(st.queue)?;
        self.end_piece(id, &mut st, PieceEnd::Completed)?;
        self.post_receipt(&rec, id, Outcome::Completed)?;
        match rec.record.options.journal {
            Some(max) if rec.record.journal != 0 => {
                let journal = rec.record.journal;
                self.move_to_queue(id, st, journal, None)?;
                while self.counters(journal)?.total() > max {
                    let Some(oldest) = self.oldest_ready(journal)? else {
                        break;
                    };
                    let st = self.load_state(oldest)?.ok_or_else(|| {
                        Error::corrupted(format!("journal message {oldest} has no state"))
                    })?;
                    self.remove_message(oldest, &st)?;
                }
                Ok(())
            }
            _ => self.remove_message(id, &st),
        }
    }

    /// The receivable message of queue `q` with the lowest id (the oldest), whatever its
    /// priority: the first entry of each priority's range of `READY`.
    fn oldest_ready(&mut self, q: u32) -> Result<Option<u64>> {
        let mut oldest: Option<u64> = None;
        for p in 0..=crate::message::MAX_PRIORITY {
            let first = self
                .tables
                .ready()?
                .range((q, p, 0)..=(q, p, u64::MAX))?
                .next()
                .transpose()?
                .map(|(k, _)| k.value().2);
            if let Some(id) = first {
                oldest = Some(oldest.map_or(id, |o| o.min(id)));
            }
        }
        Ok(oldest)
    }

    pub(super) fn remove_message(&mut self, id: u64, st: &State) -> Result<()> {
        // A piece removed unsettled (a purge, a deleted queue) will never complete.
        let mut st = *st;
        let st = &mut st;
        self.end_piece(id, st, PieceEnd::DeadLettered)?;
        if st.checkpointed {
            self.clear_checkpoints(id)?;
        }
        if st.session {
            let env = self.load_envelope(id)?;
            self.unindex_session_message(st.queue, &env.props, id)?;
        }
        self.detach(id, st)?;
        let c = self.counters_mut(st.queue)?;
        c.bytes = c.bytes.saturating_sub(u64::from(st.size));
        self.tables.state()?.remove(id)?;
        self.tables.data()?.remove(id)?;
        Ok(())
    }

    /// Returns an unlocked message to its queue, unless it has used up its deliveries or its
    /// time to live, in which case it goes to the dead-letter queue.
    pub(super) fn requeue(&mut self, id: u64, mut st: State) -> Result<()> {
        let rec = self.require_queue_id(st.queue)?;
        if let Some(why) = rules::spent(&st, rec.record.options.max_deliveries, self.now) {
            return self.move_to_dead_letter(id, st, why.reason(), &why.description());
        }
        self.detach(id, &st)?;
        let back = if st.deferred {
            Status::Deferred
        } else {
            Status::Ready
        };
        self.attach(id, &mut st, back)
    }

    /// Reads and decodes message `id`'s envelope and body.
    pub(super) fn load_envelope(&mut self, id: u64) -> Result<StoredEnvelope> {
        let data = self
            .tables
            .data()?
            .get(id)?
            .ok_or_else(|| Error::corrupted(format!("message {id} has state but no data")))?;
        codec::decode_envelope(id, data.value()).map_err(|e| corrupted("envelope", e))
    }

    /// Moves a message to queue `to` as a ready message, rewriting its envelope with
    /// `dead_letter` (set or cleared); the one move that dead-lettering and resubmitting share.
    /// Its bytes move with it.
    pub(super) fn move_to_queue(
        &mut self,
        id: u64,
        mut st: State,
        to: u32,
        dead_letter: Option<&DeadLetter>,
    ) -> Result<State> {
        let env = self.load_envelope(id)?;
        if st.session {
            self.unindex_session_message(st.queue, &env.props, id)?;
        }
        st.session = false;
        if let Some(g) = env.props.group.as_deref()
            && self.requires_session(to)?
        {
            self.index_session_message(to, g, id)?;
            st.session = true;
        }
        self.detach(id, &st)?;
        let size = u64::from(st.size);
        let c = self.counters_mut(st.queue)?;
        c.bytes = c.bytes.saturating_sub(size);
        self.tables.data()?.insert(
            id,
            codec::encode_envelope(id, &env.props, dead_letter, &env.body).as_slice(),
        )?;
        st.queue = to;
        st.expires_at = 0;
        st.deferred = false;
        self.attach(id, &mut st, Status::Ready)?;
        self.counters_mut(to)?.bytes += size;
        Ok(st)
    }

    /// Moves a message (in any status) to its queue's dead-letter queue.
    pub(super) fn move_to_dead_letter(
        &mut self,
        id: u64,
        mut st: State,
        reason: &str,
        description: &str,
    ) -> Result<()> {
        let rec = self.require_queue_id(st.queue)?;
        if rec.record.kind == QueueKind::DeadLetter {
            // Dead letters never die twice: they stay until someone deals with them.
            self.detach(id, &st)?;
            st.expires_at = 0;
            return self.attach(id, &mut st, Status::Ready);
        }
        self.end_piece(id, &mut st, PieceEnd::DeadLettered)?;
        self.post_receipt(&rec, id, Outcome::DeadLettered(reason))?;
        let dl = DeadLetter {
            reason: reason.to_owned(),
            description: crate::message::truncate_description(description).to_owned(),
            source_queue: st.queue,
            at_ms: self.now,
        };
        let to = self.dead_letter_target(&rec.record)?;
        self.move_to_queue(id, st, to, Some(&dl))?;
        Ok(())
    }

    /// Where the dead letters of plain queue `rec` go: its `forward_dead_letters_to` (with
    /// their reason and source), or its own dead-letter queue if that target is missing (only
    /// in a store an older postbox wrote: nothing deletes a queue in use now).
    fn dead_letter_target(&mut self, rec: &QueueRecord) -> Result<u32> {
        Ok(match &rec.options.forward_dead_letters_to {
            Some(target) => self
                .queue_by_name(target)?
                .filter(|r| r.kind == QueueKind::Normal)
                .map_or(rec.peer, |r| r.id),
            None => rec.peer,
        })
    }

    /// Keeps `m`, a message a commit promised to send (a receipt, a job's continuation) whose
    /// queue no longer exists, as a dead letter of plain queue `source` — the queue whose
    /// settle sent it — with reason `DestinationMissing` and `description` saying which.
    /// Returns false, storing nothing, when `source`'s dead letters have nowhere to go (its
    /// dead-letter queue is being deleted in this batch).
    pub(super) fn dead_letter_undeliverable(
        &mut self,
        source: &QueueEntry,
        mut m: Message,
        description: &str,
    ) -> Result<bool> {
        if source.record.kind != QueueKind::Normal {
            return Ok(false);
        }
        let to = self.dead_letter_target(&source.record)?;
        let Some(target) = self.queue(to)? else {
            return Ok(false);
        };
        tracing::warn!(queue = %source.name, "{description}: the message is dead-lettered");
        // Dead letters never expire and wait for no schedule.
        m.expiry = Expiry::QueueDefault;
        m.visibility = Visibility::Now;
        let settings = QueueSettings {
            default_ttl: None,
            ..target.record.options.clone()
        };
        let id = self.insert_message(to, &settings, m)?;
        let env = self.load_envelope(id)?;
        let dl = DeadLetter {
            reason: crate::message::REASON_DESTINATION_MISSING.to_owned(),
            description: crate::message::truncate_description(description).to_owned(),
            source_queue: source.record.id,
            at_ms: self.now,
        };
        self.tables.data()?.insert(
            id,
            codec::encode_envelope(id, &env.props, Some(&dl), &env.body).as_slice(),
        )?;
        Ok(true)
    }
}
