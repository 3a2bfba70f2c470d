//! One redb write transaction shared by every operation of a group commit.
//!
//! Each operation first validates (reads only), then mutates. `mutations` counts writes, so the
//! pipeline can tell an operation that failed cleanly (its error goes to its caller alone) from
//! one that failed half way (the whole batch is aborted).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use redb::{ReadableTable, Table, WriteTransaction};

use super::codec::{self, DeadLetter, QueueKind, QueueRecord};
use super::tables::*;
use crate::error::{Error, Result};
use crate::message::{
    Envelope, Expiry, Message, MessageId, REASON_MAX_DELIVERIES, REASON_TTL_EXPIRED, Visibility,
};
use crate::options::{QueueOptions, QueueSettings};

/// At most this many entries are moved by one sweep of an index, so that a large backlog of
/// expired entries is worked off over several batches instead of stalling one.
const SWEEP_LIMIT: usize = 256;

/// The message a receive locked, with its lock.
#[derive(Debug)]
pub struct Locked {
    pub envelope: Envelope,
    pub token: u64,
    pub locked_until: u64,
}

/// How a settle call ends a lock.
#[derive(Debug, Clone)]
pub enum Settle {
    Complete,
    Abandon { delay_ms: u64 },
    DeadLetter { reason: String, description: String },
    Resubmit,
}

/// The earliest time at which each time index may hold due work; 0 means "unknown: look".
///
/// Valid only while this process is the store's one writer (single-process mode): every insert
/// into an index lowers its hint, so a sweep can skip indexes with nothing due without opening
/// them. Multi-process stores always look, since other processes insert too.
#[derive(Debug, Clone, Copy, Default)]
pub struct DueHints {
    lock: u64,
    scheduled: u64,
    expiring: u64,
    dedup: u64,
}

/// (queue id, message_key) → (message id, forget at ms).
type DedupTable<'t> = Table<'t, (u32, &'static str), (u64, u64)>;

impl DueHints {
    /// When the earliest scheduled message or lock expiry may fall due (ms; 0 = unknown).
    pub fn next_receivable(&self) -> u64 {
        self.lock.min(self.scheduled)
    }
}

pub struct Batch<'t> {
    txn: &'t WriteTransaction,
    /// Carried from batch to batch by the pipeline; see [`DueHints`].
    pub hints: DueHints,
    pub now: u64,
    pub mutations: u64,
    /// Queues that gained receivable messages; their waiters are woken after the commit.
    pub woken: HashSet<u32>,
    queues: Option<Table<'t, &'static str, &'static [u8]>>,
    queue_ids: Option<Table<'t, u32, &'static str>>,
    counters: Option<Table<'t, u32, [u8; COUNTERS_LEN]>>,
    state: Option<Table<'t, u64, [u8; STATE_LEN]>>,
    data: Option<Table<'t, u64, &'static [u8]>>,
    ready: Option<Table<'t, (u32, u8, u64), ()>>,
    scheduled: Option<Table<'t, (u64, u64), ()>>,
    expiring: Option<Table<'t, (u64, u64), ()>>,
    lock_expiry: Option<Table<'t, (u64, u64), ()>>,
    owners: Option<Table<'t, u64, (u32, u64)>>,
    owner_scopes: Option<Table<'t, u64, u64>>,
    dedup: Option<DedupTable<'t>>,
    dedup_expiry: Option<Table<'t, (u64, u32, &'static str), ()>>,
    /// The sequences, once read in this batch; written back by `flush`.
    seqs: Option<[u64; 4]>,
    counter_cache: HashMap<u32, Counters>,
    /// Queues deleted in this batch.
    deleted: HashSet<u32>,
    queue_cache: HashMap<u32, Option<Arc<(String, QueueRecord)>>>,
}

fn lazy<'a, 't, K: redb::Key + 'static, V: redb::Value + 'static>(
    txn: &'t WriteTransaction,
    slot: &'a mut Option<Table<'t, K, V>>,
    def: redb::TableDefinition<K, V>,
) -> Result<&'a mut Table<'t, K, V>> {
    if slot.is_none() {
        *slot = Some(txn.open_table(def)?);
    }
    slot.as_mut()
        .ok_or_else(|| Error::corrupted("table could not be opened"))
}

fn corrupted(what: &str, e: String) -> Error {
    Error::Corrupted(format!("{what}: {e}"))
}

impl<'t> Batch<'t> {
    pub fn open(txn: &'t WriteTransaction, now: u64, hints: DueHints) -> Result<Batch<'t>> {
        Ok(Batch {
            txn,
            hints,
            now,
            mutations: 0,
            woken: HashSet::new(),
            queues: None,
            queue_ids: None,
            counters: None,
            state: None,
            data: None,
            ready: None,
            scheduled: None,
            expiring: None,
            lock_expiry: None,
            owners: None,
            owner_scopes: None,
            dedup: None,
            dedup_expiry: None,
            seqs: None,
            counter_cache: HashMap::new(),
            deleted: HashSet::new(),
            queue_cache: HashMap::new(),
        })
    }

    // Tables are opened on first use: opening one costs a lookup and a type check in redb,
    // and most operations touch only a few of them.
    fn t_queues(&mut self) -> Result<&mut Table<'t, &'static str, &'static [u8]>> {
        lazy(self.txn, &mut self.queues, QUEUES)
    }

    fn t_queue_ids(&mut self) -> Result<&mut Table<'t, u32, &'static str>> {
        lazy(self.txn, &mut self.queue_ids, QUEUE_IDS)
    }

    fn t_counters(&mut self) -> Result<&mut Table<'t, u32, [u8; COUNTERS_LEN]>> {
        lazy(self.txn, &mut self.counters, COUNTERS)
    }

    fn t_state(&mut self) -> Result<&mut Table<'t, u64, [u8; STATE_LEN]>> {
        lazy(self.txn, &mut self.state, STATE)
    }

    fn t_data(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        lazy(self.txn, &mut self.data, DATA)
    }

    fn t_ready(&mut self) -> Result<&mut Table<'t, (u32, u8, u64), ()>> {
        lazy(self.txn, &mut self.ready, READY)
    }

    fn t_scheduled(&mut self) -> Result<&mut Table<'t, (u64, u64), ()>> {
        lazy(self.txn, &mut self.scheduled, SCHEDULED)
    }

    fn t_expiring(&mut self) -> Result<&mut Table<'t, (u64, u64), ()>> {
        lazy(self.txn, &mut self.expiring, EXPIRING)
    }

    fn t_lock_expiry(&mut self) -> Result<&mut Table<'t, (u64, u64), ()>> {
        lazy(self.txn, &mut self.lock_expiry, LOCK_EXPIRY)
    }

    fn t_owner_scopes(&mut self) -> Result<&mut Table<'t, u64, u64>> {
        lazy(self.txn, &mut self.owner_scopes, OWNER_SCOPES)
    }

    fn t_owners(&mut self) -> Result<&mut Table<'t, u64, (u32, u64)>> {
        lazy(self.txn, &mut self.owners, OWNERS)
    }

    fn t_dedup(&mut self) -> Result<&mut DedupTable<'t>> {
        lazy(self.txn, &mut self.dedup, DEDUP)
    }

    fn t_dedup_expiry(&mut self) -> Result<&mut Table<'t, (u64, u32, &'static str), ()>> {
        lazy(self.txn, &mut self.dedup_expiry, DEDUP_EXPIRY)
    }

    /// Writes the cached sequences and counters. Called once, before the commit.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(seqs) = self.seqs.take() {
            self.t_counters()?
                .insert(SEQUENCES_KEY, encode_sequences(&seqs))?;
        }
        for (q, c) in std::mem::take(&mut self.counter_cache) {
            // A queue deleted in this batch lost its counters; do not resurrect them.
            if !self.deleted.contains(&q) {
                self.t_counters()?.insert(q, c.encode())?;
            }
        }
        Ok(())
    }

    fn next_seq(&mut self, seq: Seq) -> Result<u64> {
        let mut seqs = match self.seqs {
            Some(s) => s,
            None => match self.t_counters()?.get(SEQUENCES_KEY)? {
                Some(g) => decode_sequences(&g.value()),
                None => return Err(Error::corrupted("the id sequences are missing")),
            },
        };
        let slot = &mut seqs[seq as usize];
        let current = (*slot).max(1);
        *slot = current + 1;
        self.seqs = Some(seqs);
        Ok(current)
    }

    fn counters_mut(&mut self, q: u32) -> Result<&mut Counters> {
        if !self.counter_cache.contains_key(&q) {
            let c = self
                .t_counters()?
                .get(q)?
                .map(|g| Counters::decode(&g.value()))
                .unwrap_or_default();
            self.counter_cache.insert(q, c);
        }
        self.mutations += 1;
        Ok(self.counter_cache.entry(q).or_default())
    }

    pub fn counters(&mut self, q: u32) -> Result<Counters> {
        if let Some(c) = self.counter_cache.get(&q) {
            return Ok(*c);
        }
        Ok(self
            .t_counters()?
            .get(q)?
            .map(|g| Counters::decode(&g.value()))
            .unwrap_or_default())
    }

    // ---- queues -------------------------------------------------------------------------

    /// The record of queue `q`, or `None` if it was deleted.
    pub fn queue(&mut self, q: u32) -> Result<Option<Arc<(String, QueueRecord)>>> {
        if let Some(r) = self.queue_cache.get(&q) {
            return Ok(r.clone());
        }
        let name = self.t_queue_ids()?.get(q)?.map(|g| g.value().to_owned());
        let rec = match name {
            None => None,
            Some(name) => {
                let raw = self
                    .t_queues()?
                    .get(name.as_str())?
                    .ok_or_else(|| {
                        Error::corrupted(format!("queue {name:?} has an id but no record"))
                    })?
                    .value()
                    .to_vec();
                let rec =
                    codec::decode_queue(&name, &raw).map_err(|e| corrupted("queue record", e))?;
                Some(Arc::new((name, rec)))
            }
        };
        self.queue_cache.insert(q, rec.clone());
        Ok(rec)
    }

    fn require_queue(&mut self, q: u32, name: &str) -> Result<Arc<(String, QueueRecord)>> {
        self.queue(q)?
            .ok_or_else(|| Error::QueueNotFound(name.to_owned()))
    }

    fn queue_by_name(&mut self, name: &str) -> Result<Option<QueueRecord>> {
        match self.t_queues()?.get(name)? {
            None => Ok(None),
            Some(g) => Ok(Some(
                codec::decode_queue(name, g.value()).map_err(|e| corrupted("queue record", e))?,
            )),
        }
    }

    fn put_queue(&mut self, name: &str, rec: &QueueRecord) -> Result<()> {
        self.mutations += 1;
        self.t_queues()?
            .insert(name, codec::encode_queue(name, rec).as_slice())?;
        self.t_queue_ids()?.insert(rec.id, name)?;
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
            if let Some(o) = options {
                if rec.kind == QueueKind::DeadLetter {
                    return Err(Error::invalid(
                        "the options of a dead-letter queue follow its source queue",
                    ));
                }
                let merged = o.apply_to(&rec.options);
                merged.validate()?;
                if rec.options != merged {
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
        let options = options.map_or_else(QueueSettings::default, |o| {
            o.apply_to(&QueueSettings::default())
        });
        options.validate()?;
        // Queue ids stay below the commit marks' keys in `COUNTERS`.
        let queue_id = |v: u64| {
            u32::try_from(v)
                .ok()
                .filter(|id| *id < super::db::FIRST_MARK_KEY)
                .ok_or_else(|| Error::invalid("too many queues"))
        };
        let id = queue_id(self.next_seq(Seq::Queue)?)?;
        let dlq_id = queue_id(self.next_seq(Seq::Queue)?)?;
        let rec = QueueRecord {
            id,
            kind: QueueKind::Normal,
            peer: dlq_id,
            options: options.clone(),
        };
        let dlq = QueueRecord {
            id: dlq_id,
            kind: QueueKind::DeadLetter,
            peer: id,
            options: dead_letter_options(&options),
        };
        self.put_queue(name, &rec)?;
        self.put_queue(&dead_letter_name(name), &dlq)?;
        self.t_counters()?
            .insert(id, Counters::default().encode())?;
        self.t_counters()?
            .insert(dlq_id, Counters::default().encode())?;
        Ok(rec)
    }

    /// Deletes a queue, its dead-letter queue and every message in either. Returns whether it
    /// existed.
    pub fn delete_queue(&mut self, name: &str) -> Result<bool> {
        let Some(rec) = self.queue_by_name(name)? else {
            return Ok(false);
        };
        if rec.kind == QueueKind::DeadLetter {
            return Err(Error::invalid(
                "a dead-letter queue is deleted with its source queue",
            ));
        }
        for (q, qname) in [
            (rec.id, name.to_owned()),
            (rec.peer, dead_letter_name(name)),
        ] {
            self.purge(q)?;
            self.mutations += 1;
            self.t_queues()?.remove(qname.as_str())?;
            self.t_queue_ids()?.remove(q)?;
            self.t_counters()?.remove(q)?;
            self.counter_cache.remove(&q);
            self.queue_cache.remove(&q);
            self.deleted.insert(q);
            // Waiters on the queue (parked receives, processors) must learn that it is gone.
            self.woken.insert(q);
            let keys: Vec<String> = self
                .t_dedup()?
                .range((q, "")..(q.saturating_add(1), ""))?
                .map(|e| e.map(|(k, _)| k.value().1.to_owned()))
                .collect::<std::result::Result<_, _>>()?;
            for key in keys {
                let removed = self
                    .t_dedup()?
                    .remove((q, key.as_str()))?
                    .map(|g| g.value());
                if let Some((_, forget_at)) = removed {
                    self.t_dedup_expiry()?
                        .remove((forget_at, q, key.as_str()))?;
                }
            }
        }
        Ok(true)
    }

    /// Removes every message of queue `q` (receivable, scheduled and locked). Returns how many.
    pub fn purge(&mut self, q: u32) -> Result<u64> {
        let mut ids: Vec<u64> = Vec::new();
        for e in self.t_ready()?.range((q, 0, 0)..=(q, u8::MAX, u64::MAX))? {
            ids.push(e?.0.value().2);
        }
        let mut others = index_ids(self.t_scheduled()?)?;
        others.extend(index_ids(self.t_lock_expiry()?)?);
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

    // ---- message state ------------------------------------------------------------------

    fn load_state(&mut self, id: u64) -> Result<Option<State>> {
        match self.t_state()?.get(id)? {
            None => Ok(None),
            Some(g) => Ok(Some(
                State::decode(id, &g.value()).map_err(|e| corrupted("message state", e))?,
            )),
        }
    }

    /// Removes the index entries of the message's current status and its count.
    fn detach(&mut self, id: u64, st: &State) -> Result<()> {
        self.mutations += 1;
        match st.status {
            Status::Ready => {
                self.t_ready()?.remove(st.ready_key(id))?;
            }
            Status::Scheduled => {
                self.t_scheduled()?.remove((st.visible_at, id))?;
            }
            Status::Locked => {
                self.t_lock_expiry()?.remove((st.locked_until, id))?;
            }
        }
        if st.status != Status::Locked && st.expires_at != 0 {
            self.t_expiring()?.remove((st.expires_at, id))?;
        }
        let c = self.counters_mut(st.queue)?;
        let slot = c.slot(st.status);
        *slot = slot.saturating_sub(1);
        Ok(())
    }

    /// Puts the message in `status`: index entries, count, stored state.
    fn attach(&mut self, id: u64, st: &mut State, status: Status) -> Result<()> {
        self.mutations += 1;
        st.status = status;
        if status != Status::Locked {
            st.lock_owner = 0;
            st.lock_token = 0;
            st.locked_until = 0;
        }
        match status {
            Status::Ready => {
                self.t_ready()?.insert(st.ready_key(id), ())?;
                self.woken.insert(st.queue);
            }
            Status::Scheduled => {
                self.t_scheduled()?.insert((st.visible_at, id), ())?;
                self.hints.scheduled = self.hints.scheduled.min(st.visible_at);
            }
            Status::Locked => {
                self.t_lock_expiry()?.insert((st.locked_until, id), ())?;
                self.hints.lock = self.hints.lock.min(st.locked_until);
            }
        }
        if status != Status::Locked && st.expires_at != 0 {
            self.t_expiring()?.insert((st.expires_at, id), ())?;
            self.hints.expiring = self.hints.expiring.min(st.expires_at);
        }
        *self.counters_mut(st.queue)?.slot(status) += 1;
        self.t_state()?.insert(id, st.encode(id))?;
        Ok(())
    }

    fn remove_message(&mut self, id: u64, st: &State) -> Result<()> {
        self.detach(id, st)?;
        let c = self.counters_mut(st.queue)?;
        c.bytes = c.bytes.saturating_sub(u64::from(st.size));
        self.t_state()?.remove(id)?;
        self.t_data()?.remove(id)?;
        Ok(())
    }

    /// Returns an unlocked message to its queue, unless it has used up its deliveries or its
    /// time to live, in which case it goes to the dead-letter queue.
    fn requeue(&mut self, id: u64, mut st: State) -> Result<()> {
        let rec = self.require_queue(st.queue, "")?;
        if st.delivery_count >= rec.1.options.max_deliveries {
            let desc = format!(
                "delivered {} times without being completed",
                st.delivery_count
            );
            return self.move_to_dead_letter(id, st, REASON_MAX_DELIVERIES, &desc);
        }
        if st.expires_at != 0 && st.expires_at <= self.now {
            return self.move_to_dead_letter(id, st, REASON_TTL_EXPIRED, "time to live expired");
        }
        self.detach(id, &st)?;
        self.attach(id, &mut st, Status::Ready)
    }

    /// Moves a message (in any status) to its queue's dead-letter queue.
    fn move_to_dead_letter(
        &mut self,
        id: u64,
        mut st: State,
        reason: &str,
        description: &str,
    ) -> Result<()> {
        let rec = self.require_queue(st.queue, "")?;
        if rec.1.kind == QueueKind::DeadLetter {
            // Dead letters never die twice: they stay until someone deals with them.
            self.detach(id, &st)?;
            st.expires_at = 0;
            return self.attach(id, &mut st, Status::Ready);
        }
        let raw = self
            .t_data()?
            .get(id)?
            .ok_or_else(|| Error::corrupted(format!("message {id} has state but no data")))?
            .value()
            .to_vec();
        let env = codec::decode_envelope(id, &raw).map_err(|e| corrupted("envelope", e))?;
        let dl = DeadLetter {
            reason: reason.to_owned(),
            description: crate::message::truncate_description(description).to_owned(),
            source_queue: st.queue,
            at_ms: self.now,
        };
        self.detach(id, &st)?;
        let size = u64::from(st.size);
        let c = self.counters_mut(st.queue)?;
        c.bytes = c.bytes.saturating_sub(size);
        self.t_data()?.insert(
            id,
            codec::encode_envelope(id, &env.props, Some(&dl), &env.body).as_slice(),
        )?;
        st.queue = rec.1.peer;
        st.expires_at = 0;
        self.attach(id, &mut st, Status::Ready)?;
        self.counters_mut(st.queue)?.bytes += size;
        Ok(())
    }

    // ---- maintenance --------------------------------------------------------------------

    /// Moves due scheduled messages to their queues, releases expired locks and dead-letters
    /// expired messages: the lazy time-driven work, done inside transactions that run anyway.
    pub fn sweep(&mut self) -> Result<()> {
        let now = self.now;
        if self.hints.lock <= now {
            self.sweep_locks()?;
            self.hints.lock = next_at(self.t_lock_expiry()?)?;
        }
        if self.hints.scheduled <= now {
            self.sweep_scheduled()?;
            self.hints.scheduled = next_at(self.t_scheduled()?)?;
        }
        if self.hints.expiring <= now {
            self.sweep_expiring()?;
            self.hints.expiring = next_at(self.t_expiring()?)?;
        }
        if self.hints.dedup <= now {
            self.sweep_dedup()?;
            let next = self
                .t_dedup_expiry()?
                .first()?
                .map_or(u64::MAX, |(k, _)| k.value().0);
            self.hints.dedup = next;
        }
        Ok(())
    }

    fn sweep_locks(&mut self) -> Result<()> {
        let now = self.now;
        for _ in 0..SWEEP_LIMIT {
            let Some((until, id)) = first_due(self.t_lock_expiry()?, now)? else {
                break;
            };
            match self.load_state(id)? {
                Some(st) if st.status == Status::Locked && st.locked_until == until => {
                    self.requeue(id, st)?
                }
                _ => {
                    self.mutations += 1;
                    self.t_lock_expiry()?.remove((until, id))?;
                }
            }
        }
        Ok(())
    }

    fn sweep_scheduled(&mut self) -> Result<()> {
        let now = self.now;
        for _ in 0..SWEEP_LIMIT {
            let Some((at, id)) = first_due(self.t_scheduled()?, now)? else {
                break;
            };
            match self.load_state(id)? {
                Some(st) if st.status == Status::Scheduled && st.visible_at == at => {
                    self.requeue(id, st)?
                }
                _ => {
                    self.mutations += 1;
                    self.t_scheduled()?.remove((at, id))?;
                }
            }
        }
        Ok(())
    }

    fn sweep_expiring(&mut self) -> Result<()> {
        let now = self.now;
        for _ in 0..SWEEP_LIMIT {
            let Some((at, id)) = first_due(self.t_expiring()?, now)? else {
                break;
            };
            match self.load_state(id)? {
                Some(st) if st.status != Status::Locked && st.expires_at == at => {
                    self.move_to_dead_letter(id, st, REASON_TTL_EXPIRED, "time to live expired")?;
                }
                _ => {
                    self.mutations += 1;
                    self.t_expiring()?.remove((at, id))?;
                }
            }
        }
        Ok(())
    }

    fn sweep_dedup(&mut self) -> Result<()> {
        let now = self.now;
        for _ in 0..SWEEP_LIMIT {
            let first = match self.t_dedup_expiry()?.first()? {
                Some((k, _)) => {
                    let (at, q, key) = k.value();
                    (at <= now).then(|| (at, q, key.to_owned()))
                }
                None => None,
            };
            let Some((at, q, key)) = first else { break };
            self.mutations += 1;
            self.t_dedup_expiry()?.remove((at, q, key.as_str()))?;
            let stale = self
                .t_dedup()?
                .get((q, key.as_str()))?
                .is_some_and(|g| g.value().1 == at);
            if stale {
                self.t_dedup()?.remove((q, key.as_str()))?;
            }
        }
        Ok(())
    }

    /// Releases every lock held by `owner` (all owners when `None`), keeping delivery counts.
    pub fn release_locks_of(&mut self, owner: Option<u64>) -> Result<u64> {
        let mut victims = Vec::new();
        for id in index_ids(self.t_lock_expiry()?)? {
            if let Some(st) = self.load_state(id)?
                && owner.is_none_or(|o| st.lock_owner == o)
            {
                victims.push((id, st));
            }
        }
        let n = victims.len() as u64;
        for (id, st) in victims {
            self.requeue(id, st)?;
        }
        Ok(n)
    }

    /// Registers a process that opened the store; returns its owner id.
    pub fn register_owner(&mut self, pid: u32, start: u64, scope: u64) -> Result<u64> {
        let id = self.next_seq(Seq::Owner)?;
        self.mutations += 1;
        self.t_owners()?.insert(id, (pid, start))?;
        self.t_owner_scopes()?.insert(id, scope)?;
        Ok(id)
    }

    pub fn unregister_owner(&mut self, owner: u64) -> Result<()> {
        self.mutations += 1;
        self.t_owners()?.remove(owner)?;
        self.t_owner_scopes()?.remove(owner)?;
        self.t_counters()?.remove(super::db::mark_key(owner))?;
        Ok(())
    }

    pub fn clear_owners(&mut self) -> Result<()> {
        self.mutations += 1;
        self.t_owners()?.retain(|_, _| false)?;
        self.t_owner_scopes()?.retain(|_, _| false)?;
        self.t_counters()?
            .retain(|k, _| k < super::db::FIRST_MARK_KEY)?;
        Ok(())
    }

    /// Records that `owner` committed batch `batch` (see `db::mark_key`). Not a mutation of its
    /// own: the pipeline writes it only into batches that change something.
    pub fn write_mark(&mut self, owner: u64, batch: u64) -> Result<()> {
        self.t_counters()?
            .insert(super::db::mark_key(owner), super::db::encode_mark(batch))?;
        Ok(())
    }

    /// Releases the locks of registered processes that are no longer alive (as judged from
    /// `my_scope`; see [`super::owners::owner_alive`]).
    pub fn reap_dead_owners(&mut self, me: u64, my_scope: u64) -> Result<()> {
        let mut registered = Vec::new();
        for e in self.t_owners()?.iter()? {
            let (k, v) = e?;
            registered.push((k.value(), v.value()));
        }
        let mut dead = Vec::new();
        for (owner, (pid, start)) in registered {
            let scope = self.t_owner_scopes()?.get(owner)?.map_or(0, |g| g.value());
            if owner != me && !super::owners::owner_alive(pid, start, scope, my_scope) {
                dead.push(owner);
            }
        }
        for owner in dead {
            self.release_locks_of(Some(owner))?;
            self.unregister_owner(owner)?;
        }
        Ok(())
    }

    // ---- operations ---------------------------------------------------------------------

    /// Sends messages to queue `q` atomically: all are stored or none.
    pub fn send(&mut self, q: u32, name: &str, msgs: Vec<Message>) -> Result<Vec<MessageId>> {
        let mut ids = self.send_many(vec![(q, name.to_owned(), msgs)])?;
        Ok(ids.pop().unwrap_or_default())
    }

    /// Sends to several queues atomically: every message of every group is validated (size,
    /// priority, quota, duplicates) before the first is written.
    pub fn send_many(
        &mut self,
        groups: Vec<(u32, String, Vec<Message>)>,
    ) -> Result<Vec<Vec<MessageId>>> {
        let mut plans = Vec::with_capacity(groups.len());
        // Quotas are checked against what earlier groups of this call add to the same queue.
        let mut added: HashMap<u32, (u64, u64)> = HashMap::new();
        for (q, name, msgs) in &groups {
            let rec = self.require_queue(*q, name)?;
            let plan = self.plan_send(*q, &rec, msgs, added.get(q).copied().unwrap_or_default())?;
            let e = added.entry(*q).or_default();
            e.0 += plan.new_count;
            e.1 += plan.new_bytes;
            plans.push((rec, plan));
        }
        let mut out = Vec::with_capacity(groups.len());
        for ((q, _, msgs), (rec, plan)) in groups.into_iter().zip(plans) {
            let mut ids: Vec<u64> = Vec::with_capacity(msgs.len());
            for (m, step) in msgs.into_iter().zip(plan.steps) {
                let id = match step {
                    SendStep::Existing(id) => id,
                    SendStep::SameAs(j) => ids[j],
                    SendStep::New => self.insert_message(q, &rec.1.options, m)?,
                };
                ids.push(id);
            }
            out.push(ids.into_iter().map(MessageId).collect());
        }
        Ok(out)
    }

    fn plan_send(
        &mut self,
        q: u32,
        rec: &(String, QueueRecord),
        msgs: &[Message],
        already: (u64, u64),
    ) -> Result<SendPlan> {
        let (qname, rec) = (&rec.0, &rec.1);
        if rec.kind == QueueKind::DeadLetter {
            return Err(Error::invalid(
                "messages cannot be sent to a dead-letter queue",
            ));
        }
        let o = &rec.options;
        let mut steps = Vec::with_capacity(msgs.len());
        let mut keys_here: HashMap<&str, usize> = HashMap::new();
        let (mut new_count, mut new_bytes) = (0u64, 0u64);
        for (i, m) in msgs.iter().enumerate() {
            validate_message(m, o.max_message_size)?;
            let key = m
                .props
                .message_key
                .as_deref()
                .filter(|_| o.dedup_window.is_some());
            if let Some(key) = key {
                let now = self.now;
                if let Some((id, forget_at)) = self.t_dedup()?.get((q, key))?.map(|g| g.value())
                    && forget_at > now
                {
                    steps.push(SendStep::Existing(id));
                    continue;
                }
                if let Some(&j) = keys_here.get(key) {
                    steps.push(SendStep::SameAs(j));
                    continue;
                }
                keys_here.insert(key, i);
            }
            steps.push(SendStep::New);
            new_count += 1;
            new_bytes += m.size();
        }
        let c = self.counters(q)?;
        if let Some(max) = o.max_messages
            && c.total() + already.0 + new_count > max
        {
            return Err(Error::QueueFull {
                queue: qname.clone(),
                limit: format!("max_messages = {max}"),
            });
        }
        if let Some(max) = o.max_bytes
            && c.bytes + already.1 + new_bytes > max
        {
            return Err(Error::QueueFull {
                queue: qname.clone(),
                limit: format!("max_bytes = {max}"),
            });
        }
        Ok(SendPlan {
            steps,
            new_count,
            new_bytes,
        })
    }

    fn insert_message(&mut self, q: u32, o: &QueueSettings, m: Message) -> Result<u64> {
        let now = self.now;
        let id = self.next_seq(Seq::Message)?;
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
            queue: q,
            priority: m.priority,
            status: Status::Ready,
            delivery_count: 0,
            size,
            enqueued_at: now,
            visible_at,
            expires_at,
            lock_owner: 0,
            lock_token: 0,
            locked_until: 0,
        };
        self.mutations += 1;
        self.t_data()?.insert(
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
        if let (Some(key), Some(window)) = (m.props.message_key.as_deref(), o.dedup_window) {
            let forget_at = now.saturating_add(crate::clock::duration_ms(window));
            let old = self
                .t_dedup()?
                .insert((q, key), (id, forget_at))?
                .map(|g| g.value());
            if let Some((_, old_at)) = old {
                self.t_dedup_expiry()?.remove((old_at, q, key))?;
            }
            self.t_dedup_expiry()?.insert((forget_at, q, key), ())?;
            self.hints.dedup = self.hints.dedup.min(forget_at);
        }
        Ok(id)
    }

    /// Locks up to `max` messages from the head of queue `q` for `owner`.
    pub fn receive(&mut self, q: u32, name: &str, owner: u64, max: usize) -> Result<Vec<Locked>> {
        let rec = self.require_queue(q, name)?;
        let lock_ms = crate::clock::duration_ms(rec.1.options.lock_duration).max(1);
        let max_deliveries = rec.1.options.max_deliveries;
        let mut out = Vec::new();
        while out.len() < max {
            let head = self
                .t_ready()?
                .range((q, 0, 0)..=(q, u8::MAX, u64::MAX))?
                .next()
                .transpose()?
                .map(|(k, _)| k.value());
            let Some(key) = head else { break };
            let id = key.2;
            let mut st = self
                .load_state(id)?
                .ok_or_else(|| Error::corrupted(format!("ready message {id} has no state")))?;
            // A state that disagrees with its index entry would not remove that entry below,
            // and this loop would find the same head forever (seen on damaged files).
            if st.status != Status::Ready || st.ready_key(id) != key {
                return Err(Error::corrupted(format!(
                    "ready message {id} has an inconsistent state"
                )));
            }
            if st.expires_at != 0 && st.expires_at <= self.now {
                self.move_to_dead_letter(id, st, REASON_TTL_EXPIRED, "time to live expired")?;
                continue;
            }
            if st.delivery_count >= max_deliveries {
                let desc = format!(
                    "delivered {} times without being completed",
                    st.delivery_count
                );
                self.move_to_dead_letter(id, st, REASON_MAX_DELIVERIES, &desc)?;
                continue;
            }
            self.detach(id, &st)?;
            st.delivery_count += 1;
            st.lock_owner = owner;
            st.lock_token = self.next_seq(Seq::Token)?;
            st.locked_until = self.now.saturating_add(lock_ms);
            self.attach(id, &mut st, Status::Locked)?;
            let envelope = self.envelope(id, &st)?;
            out.push(Locked {
                envelope,
                token: st.lock_token,
                locked_until: st.locked_until,
            });
        }
        Ok(out)
    }

    /// Checks that `token` still holds the lock on message `id`.
    pub fn check_lock(&mut self, id: u64, token: u64) -> Result<State> {
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

    /// Ends the lock `token` on message `id`.
    pub fn settle(&mut self, id: u64, token: u64, how: &Settle) -> Result<()> {
        let mut st = self.check_lock(id, token)?;
        match how {
            Settle::Complete => self.remove_message(id, &st),
            Settle::Abandon { delay_ms: 0 } => self.requeue(id, st),
            Settle::Abandon { delay_ms } => {
                let rec = self.require_queue(st.queue, "")?;
                if st.delivery_count >= rec.1.options.max_deliveries {
                    return self.requeue(id, st);
                }
                self.detach(id, &st)?;
                st.visible_at = self.now.saturating_add(*delay_ms);
                self.attach(id, &mut st, Status::Scheduled)
            }
            Settle::DeadLetter {
                reason,
                description,
            } => {
                let rec = self.require_queue(st.queue, "")?;
                if rec.1.kind == QueueKind::DeadLetter {
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
                self.move_to_dead_letter(id, st, reason, description)
            }
            Settle::Resubmit => {
                let rec = self.require_queue(st.queue, "")?;
                if rec.1.kind != QueueKind::DeadLetter {
                    return Err(Error::invalid(
                        "only a message received from a dead-letter queue can be resubmitted",
                    ));
                }
                let source = rec.1.peer;
                let raw = self
                    .t_data()?
                    .get(id)?
                    .ok_or_else(|| Error::corrupted(format!("message {id} has state but no data")))?
                    .value()
                    .to_vec();
                let env = codec::decode_envelope(id, &raw).map_err(|e| corrupted("envelope", e))?;
                self.detach(id, &st)?;
                let size = u64::from(st.size);
                let c = self.counters_mut(st.queue)?;
                c.bytes = c.bytes.saturating_sub(size);
                self.t_data()?.insert(
                    id,
                    codec::encode_envelope(id, &env.props, None, &env.body).as_slice(),
                )?;
                st.queue = source;
                st.delivery_count = 0;
                self.attach(id, &mut st, Status::Ready)?;
                self.counters_mut(source)?.bytes += size;
                Ok(())
            }
        }
    }

    /// Extends the lock; returns the new expiry.
    pub fn renew(&mut self, id: u64, token: u64) -> Result<u64> {
        let mut st = self.check_lock(id, token)?;
        let rec = self.require_queue(st.queue, "")?;
        let lock_ms = crate::clock::duration_ms(rec.1.options.lock_duration).max(1);
        self.detach(id, &st)?;
        st.locked_until = self.now.saturating_add(lock_ms);
        self.attach(id, &mut st, Status::Locked)?;
        Ok(st.locked_until)
    }

    fn envelope(&mut self, id: u64, st: &State) -> Result<Envelope> {
        let raw = self
            .t_data()?
            .get(id)?
            .ok_or_else(|| Error::corrupted(format!("message {id} has state but no data")))?
            .value()
            .to_vec();
        let env = codec::decode_envelope(id, &raw).map_err(|e| corrupted("envelope", e))?;
        let queue_name = self
            .queue(st.queue)?
            .map(|r| r.0.clone())
            .unwrap_or_default();
        let source = match &env.dead_letter {
            Some(d) => Some(
                self.queue(d.source_queue)?
                    .map(|r| r.0.clone())
                    .unwrap_or_default(),
            ),
            None => None,
        };
        Ok(super::read::build_envelope(id, st, queue_name, env, source))
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

/// The message ids of a time index (`SCHEDULED` or `LOCK_EXPIRY`), soonest first.
fn index_ids(table: &Table<'_, (u64, u64), ()>) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for e in table.iter()? {
        ids.push(e?.0.value().1);
    }
    Ok(ids)
}

/// The time of the first entry of a time index, or `u64::MAX` when it is empty.
fn next_at(table: &Table<'_, (u64, u64), ()>) -> Result<u64> {
    Ok(table.first()?.map_or(u64::MAX, |(k, _)| k.value().0))
}

fn first_due(table: &Table<'_, (u64, u64), ()>, now: u64) -> Result<Option<(u64, u64)>> {
    Ok(table
        .first()?
        .map(|(k, _)| k.value())
        .filter(|(at, _)| *at <= now))
}

/// The suffix that names a dead-letter queue after its source (as Azure Service Bus does).
pub const DEAD_LETTER_SUFFIX: &str = "/$deadletterqueue";

pub fn dead_letter_name(source: &str) -> String {
    format!("{source}{DEAD_LETTER_SUFFIX}")
}

/// A dead-letter queue keeps its source's lock duration and size limit; its messages never
/// expire or die again, and it has no quotas.
fn dead_letter_options(source: &QueueSettings) -> QueueSettings {
    QueueSettings {
        lock_duration: source.lock_duration,
        max_deliveries: u32::MAX,
        max_message_size: source.max_message_size,
        ..QueueSettings::default()
    }
}
