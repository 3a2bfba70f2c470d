//! The queue catalog: queue records by id and name, creating, opening, deleting and purging
//! queues, and the dead-letter queue that goes with each.

use std::sync::Arc;

use redb::ReadableTable;

use super::sweep::index_ids;
use super::*;

impl<'t> Batch<'t> {
    /// The record of queue `q`, or `None` if it was deleted.
    pub fn queue(&mut self, q: u32) -> Result<Option<Arc<QueueEntry>>> {
        if let Some(r) = self.queue_cache.get(&q) {
            return Ok(r.clone());
        }
        let name = self
            .tables
            .queue_ids()?
            .get(q)?
            .map(|g| g.value().to_owned());
        let rec = match name {
            None => None,
            Some(name) => {
                let raw = self
                    .tables
                    .queues()?
                    .get(name.as_str())?
                    .ok_or_else(|| {
                        Error::corrupted(format!("queue {name:?} has an id but no record"))
                    })?
                    .value()
                    .to_vec();
                let rec =
                    codec::decode_queue(&name, &raw).map_err(|e| corrupted("queue record", e))?;
                Some(Arc::new(QueueEntry { name, record: rec }))
            }
        };
        self.queue_cache.insert(q, rec.clone());
        Ok(rec)
    }

    /// The record of `queue`, failing when it was deleted.
    pub(super) fn require_queue(&mut self, queue: QueueRef<'_>) -> Result<Arc<QueueEntry>> {
        let QueueRef { id: q, name } = queue;
        if let Some(rec) = self.queue(q)? {
            return Ok(rec);
        }
        // Gone from the id index: deleted, unless its record is still there under its name,
        // which only damage to the index explains.
        if let Some(rec) = self.queue_by_name(name)?
            && rec.id == q
        {
            return Err(Error::corrupted(format!(
                "queue {name:?} is missing from the queue id index"
            )));
        }
        Err(Error::QueueNotFound(name.to_owned()))
    }

    /// The record of queue `q`, known by its id only (the queue of a message in hand),
    /// failing when it was deleted. Its name is gone with it, so the error names none.
    pub(super) fn require_queue_id(&mut self, q: u32) -> Result<Arc<QueueEntry>> {
        self.queue(q)?
            .ok_or_else(|| Error::QueueNotFound(String::new()))
    }

    pub(super) fn queue_by_name(&mut self, name: &str) -> Result<Option<QueueRecord>> {
        match self.tables.queues()?.get(name)? {
            None => Ok(None),
            Some(g) => Ok(Some(
                codec::decode_queue(name, g.value()).map_err(|e| corrupted("queue record", e))?,
            )),
        }
    }

    /// The id of ordinary queue `name` (a reply's or a receipt's destination).
    pub fn queue_id_by_name(&mut self, name: &str) -> Result<(u32, String)> {
        match self.queue_by_name(name)? {
            Some(r) if r.kind == QueueKind::Normal => Ok((r.id, name.to_owned())),
            _ => Err(Error::QueueNotFound(name.to_owned())),
        }
    }

    pub(super) fn put_queue(&mut self, name: &str, rec: &QueueRecord) -> Result<()> {
        self.tables
            .queues()?
            .insert(name, codec::encode_queue(name, rec).as_slice())?;
        self.tables.queue_ids()?.insert(rec.id, name)?;
        self.queue_cache.remove(&rec.id);
        Ok(())
    }

    /// Opens queue `name`, creating it and its dead-letter queue if missing. With `options`,
    /// an existing queue takes the options they mention (see `QueueOptions::apply_to`); its
    /// messages are kept.
    pub fn open_queue(
        &mut self,
        name: &str,
        options: Option<&QueueOptions>,
    ) -> Result<QueueRecord> {
        if let Some(mut rec) = self.queue_by_name(name)? {
            if matches!(rec.kind, QueueKind::Topic | QueueKind::Collator) {
                return Err(Error::invalid(format!(
                    "{name:?} is {}, not a queue",
                    rec.kind.described()
                )));
            }
            if let Some(o) = options {
                if rec.kind == QueueKind::DeadLetter {
                    return Err(Error::invalid(
                        "the options of a dead-letter queue follow its source queue",
                    ));
                }
                let merged = o.apply_to(&rec.options);
                merged.validate()?;
                self.check_forwarding(name, &merged)?;
                if merged.requires_session != rec.options.requires_session {
                    return Err(Error::invalid(format!(
                        "requires_session of queue {name:?} is fixed when it is created"
                    )));
                }
                if rec.options != merged {
                    if merged.journal.is_some() && rec.journal == 0 {
                        rec.journal = self.create_journal(QueueRef::new(rec.id, name))?;
                    }
                    rec.options = merged;
                    self.put_queue(name, &rec)?;
                    let dlq_name = dead_letter_name(name);
                    if let Some(mut dlq) = self.queue_by_name(&dlq_name)? {
                        dlq.options = dead_letter_options(&rec.options);
                        self.put_queue(&dlq_name, &dlq)?;
                    }
                }
            }
            return Ok(rec);
        }
        if name.ends_with(DEAD_LETTER_SUFFIX) {
            return Err(Error::invalid(format!(
                "queue names ending in {DEAD_LETTER_SUFFIX:?} are reserved for dead-letter queues"
            )));
        }
        if name.starts_with(super::TEMPORARY_PREFIX) {
            return Err(Error::invalid(format!(
                "queue names starting with {:?} are reserved for temporary queues",
                super::TEMPORARY_PREFIX
            )));
        }
        if name.contains(SUBSCRIPTIONS_INFIX) || name.ends_with(JOURNAL_SUFFIX) {
            return Err(Error::invalid(format!(
                "queue names containing {SUBSCRIPTIONS_INFIX:?} or ending in {JOURNAL_SUFFIX:?} are reserved"
            )));
        }
        let options = options.map_or_else(QueueSettings::default, |o| {
            o.apply_to(&QueueSettings::default())
        });
        options.validate()?;
        self.create_queue(name, options, None)
    }

    /// A fresh queue id, below the keys `COUNTERS` uses for other rows.
    pub(super) fn new_queue_id(&mut self) -> Result<u32> {
        // Queue ids stay below the extra counts' and commit marks' keys in `COUNTERS`.
        u32::try_from(self.next_seq(Seq::Queue)?)
            .ok()
            .filter(|id| *id < EXTRA_COUNTS_BASE)
            .ok_or_else(|| Error::invalid("too many queues"))
    }

    /// Creates queue `name` and its dead-letter queue.
    pub(super) fn create_queue(
        &mut self,
        name: &str,
        options: QueueSettings,
        subscription: Option<Subscription>,
    ) -> Result<QueueRecord> {
        let id = self.new_queue_id()?;
        let dlq_id = self.new_queue_id()?;
        self.check_forwarding(name, &options)?;
        let mut rec = QueueRecord {
            temporary_owner: 0,
            id,
            kind: QueueKind::Normal,
            peer: dlq_id,
            options: options.clone(),
            subscription,
            journal: 0,
        };
        let dlq = QueueRecord {
            temporary_owner: 0,
            id: dlq_id,
            kind: QueueKind::DeadLetter,
            peer: id,
            options: dead_letter_options(&options),
            subscription: None,
            journal: 0,
        };
        if options.journal.is_some() {
            rec.journal = self.create_journal(QueueRef::new(id, name))?;
        }
        self.put_queue(name, &rec)?;
        self.put_queue(&dead_letter_name(name), &dlq)?;
        self.tables
            .counters()?
            .insert(id, QueueCounts::default().encode())?;
        self.tables
            .counters()?
            .insert(dlq_id, QueueCounts::default().encode())?;
        // Touched, so that the commit records its first activity (idle deletion counts from it).
        self.counters_mut(id)?;
        Ok(rec)
    }

    /// Creates the journal queue of queue `source`; returns its id.
    fn create_journal(&mut self, source: QueueRef<'_>) -> Result<u32> {
        let QueueRef { id: source, name } = source;
        let id = self.new_queue_id()?;
        let rec = QueueRecord {
            temporary_owner: 0,
            id,
            kind: QueueKind::Journal,
            peer: source,
            // Never spent, never expiring: a journal only keeps.
            options: QueueSettings {
                max_deliveries: u32::MAX,
                ..QueueSettings::default()
            },
            subscription: None,
            journal: 0,
        };
        self.put_queue(&journal_name(name), &rec)?;
        self.tables
            .counters()?
            .insert(id, QueueCounts::default().encode())?;
        Ok(id)
    }

    /// Checks the options of queue `name` that name other queues (`forward_to`,
    /// `forward_dead_letters_to`, `receipts_to`): each target exists and is a plain queue that
    /// is not temporary, and following `forward_to` from it neither loops back nor runs longer
    /// than [`MAX_FORWARD_HOPS`].
    pub(super) fn check_forwarding(&mut self, name: &str, o: &QueueSettings) -> Result<()> {
        for (option, target) in [
            ("forward_to", &o.forward_to),
            ("forward_dead_letters_to", &o.forward_dead_letters_to),
            ("receipts_to", &o.receipts_to),
        ] {
            let Some(target) = target else {
                continue;
            };
            let rec = self.queue_by_name(target)?.ok_or_else(|| {
                Error::invalid(format!(
                    "{option} of queue {name:?} names {target:?}: no such queue"
                ))
            })?;
            self.check_reference(&format!("{option} of queue {name:?}"), &rec, target)?;
        }
        let mut hop = o.forward_to.clone();
        let mut hops = 0;
        while let Some(next) = hop {
            if next == name {
                return Err(Error::invalid(format!(
                    "forward_to of queue {name:?} would make a loop"
                )));
            }
            hops += 1;
            if hops > MAX_FORWARD_HOPS {
                return Err(Error::invalid(format!(
                    "forward_to chains are at most {MAX_FORWARD_HOPS} queues long"
                )));
            }
            hop = self
                .queue_by_name(&next)?
                .and_then(|r| r.options.forward_to);
        }
        Ok(())
    }

    /// Where a send to queue `q` lands: `q` itself, or the end of its `forward_to` chain.
    pub(super) fn forward_target(&mut self, queue: QueueRef<'_>) -> Result<(u32, String)> {
        let mut at = (queue.id, queue.name.to_owned());
        for _ in 0..=MAX_FORWARD_HOPS {
            let rec = self.require_queue(QueueRef::new(at.0, &at.1))?;
            let Some(next) = rec.record.options.forward_to.clone() else {
                return Ok(at);
            };
            let target = self
                .queue_by_name(&next)?
                .filter(|r| r.kind == QueueKind::Normal)
                .ok_or_else(|| Error::QueueNotFound(next.clone()))?;
            at = (target.id, next);
        }
        Err(Error::invalid(format!(
            "forward_to chains are at most {MAX_FORWARD_HOPS} queues long"
        )))
    }

    /// Deletes a queue, its dead-letter queue and every message in either, as a caller asks
    /// (the name of a topic deletes it with its subscriptions, that of a collator the
    /// collator). Returns whether it existed.
    ///
    /// # Errors
    ///
    /// `QueueInUse` when something names the queue (see `in_use`); `InvalidArgument` for a
    /// dead-letter queue or a journal.
    pub fn delete_queue(&mut self, name: &str) -> Result<bool> {
        let Some(rec) = self.queue_by_name(name)? else {
            return Ok(false);
        };
        match rec.kind {
            QueueKind::Topic => return self.delete_topic(name, &rec),
            QueueKind::Collator => return self.delete_collator(name, &rec),
            QueueKind::Journal => {
                return Err(Error::invalid("a journal is deleted with its source queue"));
            }
            QueueKind::DeadLetter => {
                return Err(Error::invalid(
                    "a dead-letter queue is deleted with its source queue",
                ));
            }
            QueueKind::Normal => {}
        }
        self.refuse_if_in_use(
            QueueRef::new(rec.id, name),
            &[rec.id, rec.peer, rec.journal],
        )?;
        self.drop_queue(name, &rec)?;
        Ok(true)
    }

    /// Deletes plain queue `name` (record `rec`), its dead-letter queue, its journal and their
    /// messages, whether or not something names it: the callers decided (a caller's deletion
    /// checked `in_use`, idle deletion skips queues in use, a temporary queue goes with its
    /// process, and nothing may name one).
    pub(super) fn drop_queue(&mut self, name: &str, rec: &QueueRecord) -> Result<()> {
        // The dead-letter queue goes first: a piece of a job removed with the queue may end
        // its job, and a continuation that cannot be delivered must not be dead-lettered into
        // a queue about to be deleted (see `finish_if_done`).
        let mut parts = vec![(rec.peer, dead_letter_name(name))];
        if rec.journal != 0 {
            parts.push((rec.journal, journal_name(name)));
        }
        parts.push((rec.id, name.to_owned()));
        for (q, qname) in parts {
            self.purge(q)?;
            self.drop_sessions(q)?;
            self.tables.queues()?.remove(qname.as_str())?;
            self.tables.queue_ids()?.remove(q)?;
            self.tables.counters()?.remove(q)?;
            self.tables.counters()?.remove(EXTRA_COUNTS_BASE + q)?;
            self.counter_cache.remove(&q);
            self.queue_cache.remove(&q);
            self.deleted.insert(q);
            // Waiters on the queue (parked receives, processors) must learn that it is gone.
            self.woken.insert(q);
            let keys: Vec<String> = self
                .tables
                .dedup()?
                .range((q, "")..(q.saturating_add(1), ""))?
                .map(|e| e.map(|(k, _)| k.value().1.to_owned()))
                .collect::<std::result::Result<_, _>>()?;
            for key in keys {
                let removed = self
                    .tables
                    .dedup()?
                    .remove((q, key.as_str()))?
                    .map(|g| g.value());
                if let Some((_, forget_at)) = removed {
                    self.tables
                        .dedup_expiry()?
                        .remove((forget_at, q, key.as_str()))?;
                }
            }
        }
        Ok(())
    }

    /// Removes every message of queue `q` (receivable, scheduled, deferred and locked). Returns
    /// how many.
    pub fn purge(&mut self, q: u32) -> Result<u64> {
        let mut ids: Vec<u64> = Vec::new();
        for e in self
            .tables
            .ready()?
            .range((q, 0, 0)..=(q, u8::MAX, u64::MAX))?
        {
            ids.push(e?.0.value().2);
        }
        for e in self.tables.deferred()?.range((q, 0)..=(q, u64::MAX))? {
            ids.push(e?.0.value().1);
        }
        let mut others = index_ids(self.tables.scheduled()?)?;
        others.extend(index_ids(self.tables.lock_expiry()?)?);
        for id in others {
            if self.load_state(id)?.is_some_and(|st| st.queue == q) {
                ids.push(id);
            }
        }
        let n = ids.len() as u64;
        for id in ids {
            let st = self
                .load_state(id)?
                .ok_or_else(|| Error::corrupted("indexed message has no state"))?;
            self.remove_message(id, &st)?;
        }
        Ok(n)
    }
}

/// The longest queue name, in bytes of UTF-8: queues, topics, collators, and the whole
/// `<topic>/$subscriptions/<name>` of a subscription's queue.
pub const MAX_QUEUE_NAME_LEN: usize = 255;

/// Checks a queue name: 1–255 bytes of UTF-8 without control characters.
pub fn validate_queue_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_QUEUE_NAME_LEN {
        return Err(Error::invalid(format!(
            "queue names are 1 to {MAX_QUEUE_NAME_LEN} bytes long, got {} bytes",
            name.len()
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(format!(
            "queue names cannot contain control characters (found U+{:04X})",
            c as u32
        )));
    }
    Ok(())
}

/// The suffix that names a queue's journal after its source.
pub const JOURNAL_SUFFIX: &str = "/$journal";

/// The name of queue `source`'s journal.
pub fn journal_name(source: &str) -> String {
    format!("{source}{JOURNAL_SUFFIX}")
}

/// What separates a topic's name from a subscription's in the subscription queue's name
/// (`orders/$subscriptions/audit`); reserved in queue names.
pub const SUBSCRIPTIONS_INFIX: &str = "/$subscriptions/";

/// The queue name of subscription `sub` of topic `topic`.
pub fn subscription_name(topic: &str, sub: &str) -> String {
    format!("{topic}{SUBSCRIPTIONS_INFIX}{sub}")
}

/// The longest `forward_to` chain followed.
pub const MAX_FORWARD_HOPS: usize = 4;

/// The suffix that names a dead-letter queue after its source (as Azure Service Bus does).
pub const DEAD_LETTER_SUFFIX: &str = "/$deadletterqueue";

pub fn dead_letter_name(source: &str) -> String {
    format!("{source}{DEAD_LETTER_SUFFIX}")
}

/// A dead-letter queue keeps its source's lock duration and size limit; its messages never
/// expire or die again, and it has no quotas.
pub(super) fn dead_letter_options(source: &QueueSettings) -> QueueSettings {
    QueueSettings {
        lock_duration: source.lock_duration,
        max_deliveries: u32::MAX,
        max_message_size: source.max_message_size,
        ..QueueSettings::default()
    }
}
