//! Sending: validation and quota planning first, then the inserts, so a refused send writes
//! nothing.

use std::collections::HashMap;

use redb::ReadableTable;

use super::*;
use crate::message::Sent;

impl<'t> Batch<'t> {
    /// Sends messages to queue `q` atomically: all are stored or none. One id per message, in
    /// order.
    pub fn send(&mut self, queue: QueueRef<'_>, msgs: Vec<Message>) -> Result<Vec<MessageId>> {
        Ok(self
            .send_detailed(queue, msgs)?
            .into_iter()
            .map(|s| s.id)
            .collect())
    }

    /// [`Batch::send`], saying of each message whether it was a duplicate.
    pub fn send_detailed(&mut self, queue: QueueRef<'_>, msgs: Vec<Message>) -> Result<Vec<Sent>> {
        let (q, name) = self.forward_target(queue)?;
        let rec = self.require_queue(QueueRef::new(q, &name))?;
        let plan = self.plan_send(q, &rec, &msgs, (0, 0))?;
        self.insert_planned(q, &rec, msgs, plan)
    }

    /// Sends one message to queue `q`: the planning and writing of [`Batch::send`] for a single
    /// message, so that its caller gets exactly one result.
    pub fn send_one(&mut self, queue: QueueRef<'_>, m: Message) -> Result<Sent> {
        let (q, name) = self.forward_target(queue)?;
        let rec = self.require_queue(QueueRef::new(q, &name))?;
        let mut plan = Planner::for_queue(&rec)?;
        let step = self.plan_step(q, &rec, &mut plan, 0, &m)?;
        self.check_quota(q, &rec, (0, 0), &plan)?;
        self.insert_step(q, &rec, m, step, &[])
    }

    /// Sends to several queues atomically: every message of every group is validated (size,
    /// priority, quota, duplicates) before the first is written.
    pub fn send_many(
        &mut self,
        groups: Vec<(u32, String, Vec<Message>)>,
    ) -> Result<Vec<Vec<MessageId>>> {
        // Auto-forwarding: each group lands at the end of its queue's `forward_to` chain.
        let groups = groups
            .into_iter()
            .map(|(q, name, msgs)| {
                let (q, name) = self.forward_target(QueueRef::new(q, &name))?;
                Ok((q, name, msgs))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut plans = Vec::with_capacity(groups.len());
        // Quotas are checked against what earlier groups of this call add to the same queue.
        let mut added: HashMap<u32, (u64, u64)> = HashMap::new();
        for (q, name, msgs) in &groups {
            let rec = self.require_queue(QueueRef::new(*q, name))?;
            let plan = self.plan_send(*q, &rec, msgs, added.get(q).copied().unwrap_or_default())?;
            let e = added.entry(*q).or_default();
            e.0 += plan.new_count;
            e.1 += plan.new_bytes;
            plans.push((rec, plan));
        }
        let mut out = Vec::with_capacity(groups.len());
        for ((q, _, msgs), (rec, plan)) in groups.into_iter().zip(plans) {
            let sent = self.insert_planned(q, &rec, msgs, plan)?;
            out.push(sent.into_iter().map(|s| s.id).collect());
        }
        Ok(out)
    }

    /// Writes a planned group: one result per message, in order.
    fn insert_planned(
        &mut self,
        q: u32,
        rec: &QueueEntry,
        msgs: Vec<Message>,
        plan: SendPlan,
    ) -> Result<Vec<Sent>> {
        let mut sent: Vec<Sent> = Vec::with_capacity(msgs.len());
        for (m, step) in msgs.into_iter().zip(plan.steps) {
            let s = self.insert_step(q, rec, m, step, &sent)?;
            sent.push(s);
        }
        Ok(sent)
    }

    /// Writes one message as planned; `earlier` holds the results of the messages before it
    /// in its group (a `SameAs` step names one of them).
    fn insert_step(
        &mut self,
        q: u32,
        rec: &QueueEntry,
        m: Message,
        step: SendStep,
        earlier: &[Sent],
    ) -> Result<Sent> {
        let (id, duplicate) = match step {
            SendStep::Existing(id) => (id, true),
            SendStep::SameAs(j) => (earlier[j].id.0, true),
            SendStep::New => (self.insert_message(q, &rec.record.options, m)?, false),
        };
        Ok(Sent {
            id: MessageId(id),
            duplicate,
        })
    }

    fn plan_send(
        &mut self,
        q: u32,
        rec: &QueueEntry,
        msgs: &[Message],
        already: (u64, u64),
    ) -> Result<SendPlan> {
        let mut plan = Planner::for_queue(rec)?;
        let steps = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| self.plan_step(q, rec, &mut plan, i, m))
            .collect::<Result<Vec<_>>>()?;
        self.check_quota(q, rec, already, &plan)?;
        Ok(SendPlan {
            steps,
            new_count: plan.new_count,
            new_bytes: plan.new_bytes,
        })
    }

    /// Plans message `i` of a group: validates it and says whether it is new or a duplicate.
    fn plan_step<'m>(
        &mut self,
        q: u32,
        rec: &QueueEntry,
        plan: &mut Planner<'m>,
        i: usize,
        m: &'m Message,
    ) -> Result<SendStep> {
        let (qname, o) = (&rec.name, &rec.record.options);
        validate_message(m, o.max_message_size)?;
        if let Some(job) = m.tags.job
            && !plan.jobs_seen.contains(&job)
        {
            self.check_job_open(job)?;
            plan.jobs_seen.push(job);
        }
        if o.requires_session && m.props.group.is_none() {
            return Err(Error::invalid(format!(
                "queue {qname:?} requires sessions: every message needs a group"
            )));
        }
        let key = m
            .props
            .message_key
            .as_deref()
            .filter(|_| o.dedup_window.is_some());
        if let Some(key) = key {
            let now = self.now;
            if let Some((id, forget_at)) = self.tables.dedup()?.get((q, key))?.map(|g| g.value())
                && forget_at > now
            {
                return Ok(SendStep::Existing(id));
            }
            if let Some(&j) = plan.keys_here.get(key) {
                return Ok(SendStep::SameAs(j));
            }
            plan.keys_here.insert(key, i);
        }
        plan.new_count += 1;
        plan.new_bytes += m.size();
        Ok(SendStep::New)
    }

    /// Refuses a plan that would take the queue past its quotas, counting `already`: what
    /// earlier groups of the same send add to it.
    fn check_quota(
        &mut self,
        q: u32,
        rec: &QueueEntry,
        already: (u64, u64),
        plan: &Planner<'_>,
    ) -> Result<()> {
        let (qname, o) = (&rec.name, &rec.record.options);
        let c = self.counters(q)?;
        if let Some(max) = o.max_messages
            && c.total() + already.0 + plan.new_count > max
        {
            return Err(Error::QueueFull {
                queue: qname.clone(),
                limit: format!("max_messages = {max}"),
            });
        }
        if let Some(max) = o.max_bytes
            && c.bytes + already.1 + plan.new_bytes > max
        {
            return Err(Error::QueueFull {
                queue: qname.clone(),
                limit: format!("max_bytes = {max}"),
            });
        }
        Ok(())
    }

    pub(super) fn insert_message(&mut self, q: u32, o: &QueueSettings, m: Message) -> Result<u64> {
        let now = self.now;
        let id = match m.tags.reserved_id {
            // Reserved by a transaction when it sent the message; the sequence must pass it,
            // or a later send could be given the same id.
            Some(id) => {
                self.pass_reserved(id)?;
                id
            }
            None => {
                let id = self.next_seq(Seq::Message)?;
                // The sequence row carries no checksum: damage to it must not make a send
                // overwrite a stored message (docs/design.md § Checksums).
                if self.tables.state()?.get(id)?.is_some() {
                    return Err(Error::corrupted(format!(
                        "message id {id} is already in use: the id sequence is damaged"
                    )));
                }
                id
            }
        };
        let visible_at = match m.visibility {
            Visibility::Now => 0,
            Visibility::After(d) => now.saturating_add(crate::clock::duration_ms(d)),
            Visibility::At(t) => crate::clock::from_system_time(t),
        };
        let expires_at = match m.expiry {
            Expiry::QueueDefault => o
                .default_ttl
                .map_or(0, |d| now.saturating_add(crate::clock::duration_ms(d))),
            Expiry::After(d) => now.saturating_add(crate::clock::duration_ms(d)),
            Expiry::At(t) => crate::clock::from_system_time(t).max(1),
        };
        // The whole message counts against `max_bytes`, as it does against `max_message_size`.
        let size = u32::try_from(m.size()).map_err(|_| Error::invalid("message too large"))?;
        let mut st = State {
            deferred: false,
            session: o.requires_session,
            tracked: m.tags.job.is_some(),
            checkpointed: false,
            queue: q,
            priority: m.priority.unwrap_or(o.default_priority),
            status: Status::Ready,
            delivery_count: m.tags.prior_deliveries,
            size,
            enqueued_at: now,
            visible_at,
            expires_at,
            lock_owner: 0,
            lock_token: 0,
            locked_until: 0,
        };
        self.tables.data()?.insert(
            id,
            codec::encode_envelope(id, &m.props, None, &m.body).as_slice(),
        )?;
        let status = if visible_at > now {
            Status::Scheduled
        } else {
            Status::Ready
        };
        self.attach(id, &mut st, status)?;
        self.counters_mut(q)?.bytes += u64::from(size);
        self.traffic.entry(q).or_default().sent += 1;
        if let Some(job) = m.tags.job {
            self.add_piece(job, id)?;
        }
        if o.requires_session
            && let Some(g) = m.props.group.as_deref()
        {
            self.index_session_message(q, g, id)?;
        }
        if let (Some(key), Some(window)) = (m.props.message_key.as_deref(), o.dedup_window) {
            let forget_at = now.saturating_add(crate::clock::duration_ms(window));
            let old = self
                .tables
                .dedup()?
                .insert((q, key), (id, forget_at))?
                .map(|g| g.value());
            if let Some((_, old_at)) = old {
                self.tables.dedup_expiry()?.remove((old_at, q, key))?;
            }
            self.tables
                .dedup_expiry()?
                .insert((forget_at, q, key), ())?;
            self.hints.dedup = self.hints.dedup.min(forget_at);
        }
        Ok(id)
    }
}

enum SendStep {
    New,
    Existing(u64),
    SameAs(usize),
}

struct SendPlan {
    steps: Vec<SendStep>,
    new_count: u64,
    new_bytes: u64,
}

/// What planning a group has seen so far: its message keys, the jobs already checked, and
/// what its new messages add to the queue.
struct Planner<'m> {
    keys_here: HashMap<&'m str, usize>,
    jobs_seen: Vec<u64>,
    new_count: u64,
    new_bytes: u64,
}

impl Planner<'_> {
    /// A plan for sending to the queue of `rec`, which must take sends.
    fn for_queue(rec: &QueueEntry) -> Result<Self> {
        if rec.record.kind == QueueKind::DeadLetter {
            return Err(Error::invalid(
                "messages cannot be sent to a dead-letter queue",
            ));
        }
        Ok(Planner {
            keys_here: HashMap::new(),
            jobs_seen: Vec::new(),
            new_count: 0,
            new_bytes: 0,
        })
    }
}

/// Checks a message against the queue's current `max_message_size` (which counts the whole
/// message: body and properties), its priority and its property bounds.
pub fn validate_message(m: &Message, max_message_size: usize) -> Result<()> {
    m.validate()?;
    let size = m.size();
    if size > max_message_size as u64 || u32::try_from(size).is_err() {
        return Err(Error::MessageTooLarge {
            size: usize::try_from(size).unwrap_or(usize::MAX),
            max: max_message_size,
        });
    }
    Ok(())
}
