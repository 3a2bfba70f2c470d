//! Topics: a topic record with no messages of its own, subscriptions that are queues linked
//! back to it with a filter, and the publish that fans a message out to every matching
//! subscription in one commit.

use redb::ReadableTable;

use super::*;
use crate::filter::Filter;

/// A topic's counts: published messages, and those that matched no subscription.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicCounts {
    pub published: u64,
    pub unmatched: u64,
}

impl TopicCounts {
    fn encode(&self) -> [u8; COUNTERS_LEN] {
        let mut b = [0u8; COUNTERS_LEN];
        b[0..8].copy_from_slice(&self.published.to_le_bytes());
        b[8..16].copy_from_slice(&self.unmatched.to_le_bytes());
        b
    }

    fn decode(b: &[u8; COUNTERS_LEN]) -> TopicCounts {
        let at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        TopicCounts {
            published: at(0),
            unmatched: at(8),
        }
    }
}

impl<'t> Batch<'t> {
    /// Opens topic `name`, creating it if missing.
    pub fn open_topic(&mut self, name: &str) -> Result<QueueRecord> {
        if let Some(rec) = self.queue_by_name(name)? {
            return match rec.kind {
                QueueKind::Topic => Ok(rec),
                kind => Err(Error::invalid(format!(
                    "{name:?} is {}, not a topic",
                    kind.described()
                ))),
            };
        }
        if name.ends_with(DEAD_LETTER_SUFFIX) || name.contains(SUBSCRIPTIONS_INFIX) {
            return Err(Error::invalid(format!(
                "topic names may not contain {SUBSCRIPTIONS_INFIX:?} or end in {DEAD_LETTER_SUFFIX:?}"
            )));
        }
        let rec = QueueRecord {
            temporary_owner: 0,
            id: self.new_queue_id()?,
            kind: QueueKind::Topic,
            peer: 0,
            options: QueueSettings::default(),
            subscription: None,
            journal: 0,
        };
        self.put_queue(name, &rec)?;
        self.tables
            .counters()?
            .insert(rec.id, TopicCounts::default().encode())?;
        Ok(rec)
    }

    /// The record of `topic`, failing when it was deleted or is not a topic.
    fn require_topic(&mut self, topic: QueueRef<'_>) -> Result<QueueRecord> {
        let (rec, name) = (self.require_queue(topic)?, topic.name);
        if rec.record.kind != QueueKind::Topic {
            return Err(Error::invalid(format!(
                "{name:?} is {}, not a topic",
                rec.record.kind.described()
            )));
        }
        Ok(rec.record.clone())
    }

    /// Opens subscription `sub` of topic `topic` with `filter`, creating its queue (and
    /// dead-letter queue) if missing. An existing subscription takes the new filter and the
    /// options `options` mentions; its messages are kept.
    pub fn subscribe(
        &mut self,
        topic: QueueRef<'_>,
        sub: &str,
        filter: &Filter,
        options: Option<&QueueOptions>,
    ) -> Result<QueueEntry> {
        self.require_topic(topic)?;
        let QueueRef {
            id: topic,
            name: topic_name,
        } = topic;
        filter.validate()?;
        if sub.is_empty() || sub.contains('/') {
            return Err(Error::invalid(format!(
                "a subscription name is not empty and has no '/': {sub:?}"
            )));
        }
        let name = subscription_name(topic_name, sub);
        // The subscription's queue is a queue like any other: its whole name is bounded, or
        // it could be neither listed, opened nor deleted by name.
        validate_queue_name(&name).map_err(|e| match e {
            Error::InvalidArgument(why) => Error::invalid(format!(
                "the queue of a subscription is named \"<topic>{SUBSCRIPTIONS_INFIX}<name>\", so the subscription names of topic {topic_name:?} are at most {} bytes: {why}",
                MAX_QUEUE_NAME_LEN.saturating_sub(topic_name.len() + SUBSCRIPTIONS_INFIX.len())
            )),
            other => other,
        })?;
        let link = Subscription {
            topic,
            filter: filter.clone(),
        };
        if let Some(mut rec) = self.queue_by_name(&name)? {
            if rec.subscription.as_ref() != Some(&link) {
                rec.subscription = Some(link);
                self.put_queue(&name, &rec)?;
            }
            let rec = self.open_queue(&name, options)?;
            return Ok(QueueEntry { name, record: rec });
        }
        let settings = options.map_or_else(QueueSettings::default, |o| {
            o.apply_to(&QueueSettings::default())
        });
        settings.validate()?;
        let rec = self.create_queue(&name, settings, Some(link))?;
        Ok(QueueEntry { name, record: rec })
    }

    /// The subscriptions of topic `topic`: (queue id, queue name, filter), in name order.
    pub fn subscriptions(&mut self, topic: QueueRef<'_>) -> Result<Vec<(u32, String, Filter)>> {
        self.require_topic(topic)?;
        let QueueRef {
            id: topic,
            name: topic_name,
        } = topic;
        let from = format!("{topic_name}{SUBSCRIPTIONS_INFIX}");
        // The first name after every name with the prefix: the prefix's last byte, '/', + 1.
        let to = format!(
            "{topic_name}{}0",
            &SUBSCRIPTIONS_INFIX[..SUBSCRIPTIONS_INFIX.len() - 1]
        );
        let raw: Vec<(String, Vec<u8>)> = self
            .tables
            .queues()?
            .range(from.as_str()..to.as_str())?
            .map(|e| e.map(|(k, v)| (k.value().to_owned(), v.value().to_vec())))
            .collect::<std::result::Result<_, _>>()?;
        let mut out = Vec::new();
        for (name, raw) in raw {
            let rec = codec::decode_queue(&name, &raw).map_err(|e| corrupted("queue record", e))?;
            if let Some(link) = rec.subscription
                && link.topic == topic
            {
                out.push((rec.id, name, link.filter));
            }
        }
        Ok(out)
    }

    /// Publishes `msgs` to topic `topic`: each goes, as a message of its own, to every
    /// subscription whose filter it passes, all in this batch (all or nothing: a full
    /// subscription refuses the whole publish). A subscription whose messages land in a queue
    /// that requires sessions (its own, or where it forwards) takes only messages with a
    /// group: an ungrouped message skips it, as one its filter refuses, instead of failing
    /// the publish for every subscription. Returns, per message, how many subscriptions took
    /// it; a message that none took is counted as unmatched.
    pub fn publish(&mut self, topic: QueueRef<'_>, msgs: Vec<Message>) -> Result<Vec<usize>> {
        let subs = self.subscriptions(topic)?;
        let topic = topic.id;
        let mut needs_group = Vec::with_capacity(subs.len());
        for (q, sub, _) in &subs {
            let (end, end_name) = self.forward_target(QueueRef::new(*q, sub))?;
            needs_group.push(
                self.require_queue(QueueRef::new(end, &end_name))?
                    .record
                    .options
                    .requires_session,
            );
        }
        let mut groups: Vec<(u32, String, Vec<Message>)> = subs
            .iter()
            .map(|(q, n, _)| (*q, n.clone(), Vec::new()))
            .collect();
        let mut reached = Vec::with_capacity(msgs.len());
        for m in msgs {
            let mut n = 0;
            for (((_, _, filter), group), needs) in
                subs.iter().zip(groups.iter_mut()).zip(&needs_group)
            {
                if (!needs || m.props.group.is_some()) && filter.matches(&m) {
                    group.2.push(m.clone());
                    n += 1;
                }
            }
            reached.push(n);
        }
        groups.retain(|g| !g.2.is_empty());
        self.send_many(groups)?;
        let mut c = self.topic_counts(topic)?;
        c.published += reached.len() as u64;
        c.unmatched += reached.iter().filter(|n| **n == 0).count() as u64;
        self.tables.counters()?.insert(topic, c.encode())?;
        Ok(reached)
    }

    /// The counts of topic `topic`.
    pub fn topic_counts(&mut self, topic: u32) -> Result<TopicCounts> {
        Ok(self
            .tables
            .counters()?
            .get(topic)?
            .map(|g| TopicCounts::decode(&g.value()))
            .unwrap_or_default())
    }

    /// Deletes topic `name` and every subscription of it (their messages included), unless a
    /// subscription is in use (see `in_use`).
    pub(super) fn delete_topic(&mut self, name: &str, rec: &QueueRecord) -> Result<bool> {
        let mut subs = Vec::new();
        for (_, sub, _) in self.subscriptions(QueueRef::new(rec.id, name))? {
            let sub_rec = self
                .queue_by_name(&sub)?
                .ok_or_else(|| Error::QueueNotFound(sub.clone()))?;
            subs.push((sub, sub_rec));
        }
        // Subscriptions naming each other go together.
        let going: Vec<u32> = subs
            .iter()
            .flat_map(|(_, r)| [r.id, r.peer, r.journal])
            .collect();
        for (sub, sub_rec) in &subs {
            self.refuse_if_in_use(QueueRef::new(sub_rec.id, sub), &going)?;
        }
        for (sub, sub_rec) in &subs {
            self.drop_queue(sub, sub_rec)?;
        }
        self.tables.queues()?.remove(name)?;
        self.tables.queue_ids()?.remove(rec.id)?;
        self.tables.counters()?.remove(rec.id)?;
        self.queue_cache.remove(&rec.id);
        self.deleted.insert(rec.id);
        Ok(true)
    }
}
