//! Collators: a series of messages that arrive out of order (from several producers) is held
//! and released to a destination queue in sequence order, each message as soon as every one
//! before it has arrived. Holding and releasing happen in the sending commit, so a crash
//! loses or duplicates nothing.

use redb::ReadableTable;

use super::*;
use crate::message::{SERIES_LAST_PROPERTY, SERIES_LENGTH_PROPERTY};

/// What a collator did with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collated {
    /// The ids, in order, of the messages this send released to the destination (its own
    /// first when it was next in line; none while a gap remains before it).
    pub released: Vec<u64>,
    /// The series already had a message with this sequence number: nothing was stored.
    pub duplicate: bool,
}

impl<'t> Batch<'t> {
    /// Opens collator `name` releasing into queue `dest`, creating it if missing. A collator
    /// whose destination no longer exists (deleted by an older postbox, which allowed it)
    /// takes `dest` as its destination and releases there what is ready.
    pub fn open_collator(&mut self, name: &str, dest: QueueRef<'_>) -> Result<QueueRecord> {
        let target = self.require_queue(dest)?;
        let QueueRef {
            id: dest,
            name: dest_name,
        } = dest;
        self.check_reference(&format!("collator {name:?}"), &target.record, dest_name)?;
        if let Some(mut rec) = self.queue_by_name(name)? {
            if rec.kind != QueueKind::Collator {
                return Err(Error::invalid(format!(
                    "{name:?} is {}, not a collator",
                    rec.kind.described()
                )));
            }
            if rec.peer == dest {
                return Ok(rec);
            }
            if let Some(current) = self.queue(rec.peer)? {
                return Err(Error::invalid(format!(
                    "collator {name:?} releases into queue {:?}, not {dest_name:?}",
                    current.name
                )));
            }
            rec.peer = dest;
            self.put_queue(name, &rec)?;
            self.release_all(rec.id, &target)?;
            return Ok(rec);
        }
        if name.ends_with(DEAD_LETTER_SUFFIX) || name.contains(SUBSCRIPTIONS_INFIX) {
            return Err(Error::invalid(format!("{name:?} is a reserved name")));
        }
        let rec = QueueRecord {
            temporary_owner: 0,
            id: self.new_queue_id()?,
            kind: QueueKind::Collator,
            peer: dest,
            options: QueueSettings::default(),
            subscription: None,
            journal: 0,
        };
        self.put_queue(name, &rec)?;
        self.tables
            .counters()?
            .insert(rec.id, QueueCounts::default().encode())?;
        Ok(rec)
    }

    /// The record of collator `q`, failing when it was deleted or is not a collator.
    pub fn require_collator(&mut self, queue: QueueRef<'_>) -> Result<QueueRecord> {
        let name = queue.name;
        let rec = self.require_queue(queue)?;
        if rec.record.kind != QueueKind::Collator {
            return Err(Error::invalid(format!(
                "{name:?} is {}, not a collator",
                rec.record.kind.described()
            )));
        }
        Ok(rec.record.clone())
    }

    /// Sends `msgs` through collator `q`, which releases into queue `dest_name` (as its
    /// handle knows it): each is held, then everything contiguous from its series' next number
    /// on is released to the destination, in order.
    pub fn collate(
        &mut self,
        queue: QueueRef<'_>,
        dest_name: &str,
        msgs: Vec<Message>,
    ) -> Result<Vec<Collated>> {
        let q = queue.id;
        let rec = self.require_collator(queue)?;
        // Missing only in a store an older postbox wrote (nothing deletes a queue a collator
        // names now): the sends are refused, naming the queue, and what is held stays held
        // until the collator is opened with a destination again.
        let dest = self.require_queue(QueueRef::new(rec.peer, dest_name))?;
        let mut out = Vec::with_capacity(msgs.len());
        for m in msgs {
            validate_message(&m, dest.record.options.max_message_size)?;
            let (Some(series), Some(seq)) = (m.props.group.clone(), m.props.sequence) else {
                return Err(Error::invalid(
                    "a collated message needs a group (its series) and a sequence number",
                ));
            };
            if seq == 0 {
                return Err(Error::invalid("sequence numbers of a series start at 1"));
            }
            let declared = series_length(&m)?;
            let mut s = self.series(q, &series)?;
            let held = self
                .tables
                .held()?
                .get((q, series.as_str(), seq))?
                .is_some();
            // A declared length is checked before the duplicate test: a resend that contradicts
            // the series is not the same message, and is refused rather than ignored.
            if let Some(n) = declared {
                let highest_held = self
                    .tables
                    .held()?
                    .range((q, series.as_str(), 0)..=(q, series.as_str(), u64::MAX))?
                    .next_back()
                    .transpose()?
                    .map_or(0, |(k, _)| k.value().2);
                let highest = s.next.saturating_sub(1).max(seq).max(highest_held);
                if s.length != 0 && s.length != n {
                    return Err(Error::invalid(format!(
                        "series {series:?} was declared {} long; message {seq} says {n}",
                        s.length
                    )));
                }
                if n < highest {
                    return Err(Error::invalid(format!(
                        "series {series:?} cannot be {n} long: it has message {highest}"
                    )));
                }
            }
            if seq < s.next || held {
                out.push(Collated {
                    released: Vec::new(),
                    duplicate: true,
                });
                continue;
            }
            if s.length != 0 && seq > s.length {
                return Err(Error::invalid(format!(
                    "series {series:?} has {} messages; {seq} is beyond its end",
                    s.length
                )));
            }
            if let Some(n) = declared {
                s.length = n;
            }
            let held = codec::encode_held(&series, seq, &m);
            self.tables
                .held()?
                .insert((q, series.as_str(), seq), held.as_slice())?;
            let c = self.counters_mut(q)?;
            c.held += 1;
            c.bytes += m.size();
            s.held += 1;
            let released = self.release(q, &dest, &series, &mut s)?;
            self.tables
                .series()?
                .insert((q, series.as_str()), s.encode())?;
            out.push(Collated {
                released,
                duplicate: false,
            });
        }
        Ok(out)
    }

    /// Releases, from every series of collator `q`, what is contiguous from its next number on
    /// into `dest`: what a collator whose destination was gone held back.
    fn release_all(&mut self, q: u32, dest: &QueueEntry) -> Result<()> {
        let rows: Vec<(String, SeriesState)> = self
            .tables
            .series()?
            .range((q, "")..(q.saturating_add(1), ""))?
            .map(|e| e.map(|(k, v)| (k.value().1.to_owned(), SeriesState::decode(&v.value()))))
            .collect::<std::result::Result<_, _>>()?;
        for (series, mut s) in rows {
            if s.held == 0 {
                continue;
            }
            if !self.release(q, dest, &series, &mut s)?.is_empty() {
                self.tables
                    .series()?
                    .insert((q, series.as_str()), s.encode())?;
            }
        }
        Ok(())
    }

    /// Series `series` of collator `q` as stored (a new one starts at 1).
    fn series(&mut self, q: u32, series: &str) -> Result<SeriesState> {
        Ok(self.tables.series()?.get((q, series))?.map_or(
            SeriesState {
                next: 1,
                ..SeriesState::default()
            },
            |g| SeriesState::decode(&g.value()),
        ))
    }

    /// Releases the held messages of `series` that are contiguous from `s.next` to the
    /// destination `dest`, each becoming a message there now; returns their ids.
    fn release(
        &mut self,
        q: u32,
        dest: &QueueEntry,
        series: &str,
        s: &mut SeriesState,
    ) -> Result<Vec<u64>> {
        let mut ids = Vec::new();
        loop {
            let removed = self.tables.held()?.remove((q, series, s.next))?;
            let Some(raw) = removed.map(|g| g.value().to_vec()) else {
                break;
            };
            let m = codec::decode_held(series, s.next, &raw)
                .map_err(|e| corrupted("held message", e))?;
            let c = self.counters_mut(q)?;
            c.held = c.held.saturating_sub(1);
            c.bytes = c.bytes.saturating_sub(m.size());
            ids.push(self.insert_message(dest.record.id, &dest.record.options, m)?);
            s.next += 1;
            s.held = s.held.saturating_sub(1);
        }
        Ok(ids)
    }

    /// The series of collator `q` that are not complete: name, progress, and the sequence
    /// numbers held (beyond the gap).
    pub fn incomplete_series(
        &mut self,
        queue: QueueRef<'_>,
    ) -> Result<Vec<(String, SeriesState, Vec<u64>)>> {
        let q = queue.id;
        self.require_collator(queue)?;
        let rows: Vec<(String, SeriesState)> = self
            .tables
            .series()?
            .range((q, "")..(q.saturating_add(1), ""))?
            .map(|e| e.map(|(k, v)| (k.value().1.to_owned(), SeriesState::decode(&v.value()))))
            .collect::<std::result::Result<_, _>>()?;
        let mut out = Vec::new();
        for (series, s) in rows {
            if s.length != 0 && s.next > s.length {
                continue;
            }
            let held = self
                .tables
                .held()?
                .range((q, series.as_str(), 0)..=(q, series.as_str(), u64::MAX))?
                .map(|e| e.map(|(k, _)| k.value().2))
                .collect::<std::result::Result<_, _>>()?;
            out.push((series, s, held));
        }
        Ok(out)
    }

    /// Forgets series `series` of collator `q`: its progress goes, so that its name starts a
    /// new series from 1. Returns whether there was one. Refused while the collator holds
    /// messages of it (they wait for a gap to close; forgetting would lose them).
    pub fn forget_series(&mut self, queue: QueueRef<'_>, series: &str) -> Result<bool> {
        let q = queue.id;
        self.require_collator(queue)?;
        let Some(s) = self
            .tables
            .series()?
            .get((q, series))?
            .map(|g| SeriesState::decode(&g.value()))
        else {
            return Ok(false);
        };
        if s.held != 0 {
            return Err(Error::invalid(format!(
                "series {series:?} holds {} messages waiting for number {}: send the missing \
                 ones (or delete the collator, with everything it holds) before forgetting it",
                s.held, s.next
            )));
        }
        self.tables.series()?.remove((q, series))?;
        Ok(true)
    }

    /// Deletes collator `name` with the messages it holds and its series' progress.
    pub(super) fn delete_collator(&mut self, name: &str, rec: &QueueRecord) -> Result<bool> {
        let q = rec.id;
        let held: Vec<(String, u64)> = self
            .tables
            .held()?
            .range((q, "", 0)..(q.saturating_add(1), "", 0))?
            .map(|e| e.map(|(k, _)| (k.value().1.to_owned(), k.value().2)))
            .collect::<std::result::Result<_, _>>()?;
        for (series, seq) in held {
            self.tables.held()?.remove((q, series.as_str(), seq))?;
        }
        let series: Vec<String> = self
            .tables
            .series()?
            .range((q, "")..(q.saturating_add(1), ""))?
            .map(|e| e.map(|(k, _)| k.value().1.to_owned()))
            .collect::<std::result::Result<_, _>>()?;
        for s in series {
            self.tables.series()?.remove((q, s.as_str()))?;
        }
        self.tables.queues()?.remove(name)?;
        self.tables.queue_ids()?.remove(q)?;
        self.tables.counters()?.remove(q)?;
        self.tables.counters()?.remove(EXTRA_COUNTS_BASE + q)?;
        self.counter_cache.remove(&q);
        self.queue_cache.remove(&q);
        self.deleted.insert(q);
        Ok(true)
    }
}

/// The series length a message declares, if it does: its `postbox.series_length` property,
/// or its own sequence number when `postbox.series_last` is set.
fn series_length(m: &Message) -> Result<Option<u64>> {
    let text = |key: &str| match m.props.user.get(key) {
        None => Ok(None),
        Some(PropertyValue::String(s)) => Ok(Some(s.clone())),
        Some(PropertyValue::Bytes(_)) => Err(Error::invalid(format!("{key} must be text"))),
    };
    if let Some(n) = text(SERIES_LENGTH_PROPERTY)? {
        let n: u64 =
            n.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                Error::invalid(format!("{SERIES_LENGTH_PROPERTY} must be a count"))
            })?;
        return Ok(Some(n));
    }
    if text(SERIES_LAST_PROPERTY)?.is_some() {
        return Ok(m.props.sequence);
    }
    Ok(None)
}
