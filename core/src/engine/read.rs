//! Read-only queries on a snapshot: peek, browse, lookup, listing, and the cheap "is anything
//! receivable?" check that cross-process waiters poll instead of taking the write lock.

use redb::{ReadTransaction, ReadableTable};

use super::batch::QueueRef;
use super::codec::{self, QueueEntry, QueueKind, QueueRecord, StoredEnvelope};
use super::rules;
use super::tables::*;
use crate::clock::to_system_time;
use crate::error::{Error, Result};
use crate::message::{DeadLetterInfo, Envelope, MAX_PRIORITY, MessageId, MessageState};

pub fn build_envelope(
    id: u64,
    st: &State,
    queue: String,
    env: StoredEnvelope,
    source: Option<String>,
) -> Envelope {
    Envelope {
        id: MessageId(id),
        queue,
        body: env.body,
        props: env.props,
        priority: st.priority,
        enqueued_at: to_system_time(st.enqueued_at),
        visible_at: (st.visible_at != 0).then(|| to_system_time(st.visible_at)),
        expires_at: (st.expires_at != 0).then(|| to_system_time(st.expires_at)),
        delivery_count: st.delivery_count,
        dead_letter: env.dead_letter.map(|d| DeadLetterInfo {
            reason: d.reason,
            description: d.description,
            source_queue: source.unwrap_or_default(),
            at: to_system_time(d.at_ms),
        }),
    }
}

fn corrupted(what: &str, e: String) -> Error {
    Error::Corrupted(format!("{what}: {e}"))
}

pub fn queue_by_name(txn: &ReadTransaction, name: &str) -> Result<Option<QueueRecord>> {
    let t = txn.open_table(QUEUES)?;
    match t.get(name)? {
        None => Ok(None),
        Some(g) => Ok(Some(
            codec::decode_queue(name, g.value()).map_err(|e| corrupted("queue record", e))?,
        )),
    }
}

/// The record of queue id `q`, if it exists.
pub fn queue_by_id(txn: &ReadTransaction, q: u32) -> Result<Option<QueueRecord>> {
    match queue_name(txn, q)? {
        Some(name) => queue_by_name(txn, &name),
        None => Ok(None),
    }
}

fn queue_name(txn: &ReadTransaction, q: u32) -> Result<Option<String>> {
    Ok(txn
        .open_table(QUEUE_IDS)?
        .get(q)?
        .map(|g| g.value().to_owned()))
}

/// The names of all user queues (dead-letter queues are reached through their source).
pub fn list_queues(txn: &ReadTransaction) -> Result<Vec<String>> {
    list_kind(txn, QueueKind::Normal)
}

/// The names of every topic.
pub fn list_topics(txn: &ReadTransaction) -> Result<Vec<String>> {
    list_kind(txn, QueueKind::Topic)
}

fn list_kind(txn: &ReadTransaction, kind: QueueKind) -> Result<Vec<String>> {
    let t = txn.open_table(QUEUES)?;
    let mut out = Vec::new();
    for e in t.iter()? {
        let (k, v) = e?;
        let rec =
            codec::decode_queue(k.value(), v.value()).map_err(|e| corrupted("queue record", e))?;
        if rec.kind == kind {
            out.push(k.value().to_owned());
        }
    }
    Ok(out)
}

/// Reads message `id` as an envelope, if it exists (in any queue), with its state at `now`
/// (see [`current_state`]: the rule `browse_all_next` applies).
pub fn get(txn: &ReadTransaction, id: u64, now: u64) -> Result<Option<(Envelope, MessageState)>> {
    let states = txn.open_table(STATE)?;
    let Some(g) = states.get(id)? else {
        return Ok(None);
    };
    let st = State::decode(id, &g.value()).map_err(|e| corrupted("message state", e))?;
    let max_deliveries = queue_by_id(txn, st.queue)?.map_or(u32::MAX, |r| r.options.max_deliveries);
    let state = current_state(&st, max_deliveries, now);
    let data = txn.open_table(DATA)?;
    let raw = data
        .get(id)?
        .ok_or_else(|| Error::corrupted(format!("message {id} has state but no data")))?;
    let env = codec::decode_envelope(id, raw.value()).map_err(|e| corrupted("envelope", e))?;
    let qname = queue_name(txn, st.queue)?.unwrap_or_default();
    let source = match &env.dead_letter {
        Some(d) => Some(queue_name(txn, d.source_queue)?.unwrap_or_default()),
        None => None,
    };
    Ok(Some((build_envelope(id, &st, qname, env, source), state)))
}

/// Where a browse stopped: `(7 - priority, message id)` of the last message returned.
pub type BrowsePosition = (u8, u64);

/// The next message of queue `q` that a receive would take at `now`, after position `after`,
/// in delivery order — or `None` at the end. "Would take" includes the time-driven work a
/// write transaction applies first (expired locks and due scheduled messages return to the
/// queue unless spent; expired messages leave it), so peek and browse agree with receive even
/// when nothing has written since that work fell due.
///
/// # Errors
///
/// `QueueNotFound` (named `name`) when the queue does not exist.
pub fn browse_next(
    txn: &ReadTransaction,
    queue: QueueRef<'_>,
    after: Option<BrowsePosition>,
    now: u64,
) -> Result<Option<(Envelope, BrowsePosition)>> {
    let QueueRef { id: q, name } = queue;
    let Some(rec) = queue_by_id(txn, q)? else {
        return Err(Error::QueueNotFound(name.to_owned()));
    };
    let max_deliveries = rec.options.max_deliveries;
    let states = txn.open_table(STATE)?;
    let load = |id: u64| -> Result<Option<State>> {
        match states.get(id)? {
            Some(g) => Ok(Some(
                State::decode(id, &g.value()).map_err(|e| corrupted("message state", e))?,
            )),
            None => Ok(None),
        }
    };
    let live = |st: &State| !rules::expired(st, now);
    let past = |pos: BrowsePosition| after.is_none_or(|a| pos > a);

    // The first ready message past `after` that has not expired.
    let ready = txn.open_table(READY)?;
    let range = match after {
        None => ready.range((q, 0, 0)..=(q, u8::MAX, u64::MAX))?,
        Some((p, id)) => match id.checked_add(1) {
            Some(next) => ready.range((q, p, next)..=(q, u8::MAX, u64::MAX))?,
            None => ready.range((q, p.saturating_add(1), 0)..=(q, u8::MAX, u64::MAX))?,
        },
    };
    let mut best: Option<(BrowsePosition, State)> = None;
    for e in range {
        let (k, _) = e?;
        let (_, p, id) = k.value();
        if let Some(st) = load(id)?
            && live(&st)
        {
            best = Some(((p, id), st));
            break;
        }
    }
    // Messages that the next write would return to the queue: expired locks and due
    // scheduled messages, unless they used up their deliveries or their time to live.
    for (def, status) in [
        (LOCK_EXPIRY, Status::Locked),
        (SCHEDULED, Status::Scheduled),
    ] {
        let t = txn.open_table(def)?;
        for e in t.range((0, 0)..=(now, u64::MAX))? {
            let (k, _) = e?;
            let (at, id) = k.value();
            let Some(st) = load(id)? else { continue };
            let at_matches = match status {
                Status::Locked => st.locked_until == at,
                _ => st.visible_at == at,
            };
            let pos = (MAX_PRIORITY - st.priority, id);
            // A deferred message's lock ends in the deferred state, not in the queue.
            if st.queue == q
                && st.status == status
                && !st.deferred
                && at_matches
                && rules::spent(&st, max_deliveries, now).is_none()
                && past(pos)
                && best.as_ref().is_none_or(|(b, _)| pos < *b)
            {
                best = Some((pos, st));
            }
        }
    }
    let Some((pos, st)) = best else {
        return Ok(None);
    };
    let data = txn.open_table(DATA)?;
    let raw = data
        .get(pos.1)?
        .ok_or_else(|| Error::corrupted(format!("message {} has state but no data", pos.1)))?;
    let env = codec::decode_envelope(pos.1, raw.value()).map_err(|e| corrupted("envelope", e))?;
    let source = match &env.dead_letter {
        Some(d) => Some(queue_name(txn, d.source_queue)?.unwrap_or_default()),
        None => None,
    };
    Ok(Some((
        build_envelope(pos.1, &st, name.to_owned(), env, source),
        pos,
    )))
}

/// The message of queue `q` with the lowest id above `after` (from the first when `None`),
/// whatever its state, with its state at `now` (see [`current_state`]) — or `None` at the end.
///
/// No index orders a queue's messages by id across their states (`READY` is by priority, the
/// time indexes by time and hold every queue), so this walks `STATE`, which is keyed by id,
/// from `after` and skips other queues' messages: a whole browse reads each id once.
///
/// # Errors
///
/// `QueueNotFound` (named `name`) when the queue does not exist; `Corrupted` for a damaged
/// state row, envelope, or a state row without its data.
pub fn browse_all_next(
    txn: &ReadTransaction,
    queue: QueueRef<'_>,
    after: Option<u64>,
    now: u64,
) -> Result<Option<(Envelope, MessageState)>> {
    let QueueRef { id: q, name } = queue;
    let Some(rec) = queue_by_id(txn, q)? else {
        return Err(Error::QueueNotFound(name.to_owned()));
    };
    let start = match after {
        None => 0,
        Some(id) => match id.checked_add(1) {
            Some(next) => next,
            None => return Ok(None),
        },
    };
    let states = txn.open_table(STATE)?;
    for e in states.range(start..)? {
        let (k, v) = e?;
        let id = k.value();
        let st = State::decode(id, &v.value()).map_err(|e| corrupted("message state", e))?;
        if st.queue != q {
            continue;
        }
        let data = txn.open_table(DATA)?;
        let raw = data
            .get(id)?
            .ok_or_else(|| Error::corrupted(format!("message {id} has state but no data")))?;
        let env = codec::decode_envelope(id, raw.value()).map_err(|e| corrupted("envelope", e))?;
        let source = match &env.dead_letter {
            Some(d) => Some(queue_name(txn, d.source_queue)?.unwrap_or_default()),
            None => None,
        };
        let state = current_state(&st, rec.options.max_deliveries, now);
        return Ok(Some((
            build_envelope(id, &st, name.to_owned(), env, source),
            state,
        )));
    }
    Ok(None)
}

/// The state message `st` is in at `now`: the one the next write leaves it in (an expired
/// lock or a due scheduled message goes back to its queue, as `Batch::requeue` does, deferred
/// if it was), which is what `Queue::stats` counts. A message that write moves to the
/// dead-letter queue instead (deliveries or time to live used up, `rules::spent`) keeps its
/// stored state: it is still in this queue until then.
fn current_state(st: &State, max_deliveries: u32, now: u64) -> MessageState {
    let stored = match st.status {
        Status::Ready => MessageState::Active,
        Status::Locked => MessageState::Locked,
        Status::Scheduled => MessageState::Scheduled,
        Status::Deferred => MessageState::Deferred,
    };
    let due = match st.status {
        Status::Locked => st.locked_until <= now,
        Status::Scheduled => st.visible_at <= now,
        Status::Ready | Status::Deferred => false,
    };
    if !due || rules::spent(st, max_deliveries, now).is_some() {
        stored
    } else if st.deferred {
        MessageState::Deferred
    } else {
        MessageState::Active
    }
}

/// Whether a receive on queue `q` could find something now: a ready message, or due time-driven
/// work (a scheduled message or an expired lock) that the next write transaction would apply.
pub fn has_candidate(txn: &ReadTransaction, q: u32, now: u64) -> Result<bool> {
    let ready = txn.open_table(READY)?;
    if ready
        .range((q, 0, 0)..=(q, u8::MAX, u64::MAX))?
        .next()
        .is_some()
    {
        return Ok(true);
    }
    for def in [SCHEDULED, LOCK_EXPIRY] {
        let t = txn.open_table(def)?;
        if t.first()?.is_some_and(|(k, _)| k.value().0 <= now) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether a process other than `me` registered in the store has died: its locks can be
/// released by the next write transaction.
pub fn has_dead_owner(txn: &ReadTransaction, me: u64, my_scope: u64) -> Result<bool> {
    let owners = txn.open_table(OWNERS)?;
    // Absent in stores written before scopes were recorded: every owner is then local.
    let scopes = match txn.open_table(OWNER_SCOPES) {
        Ok(t) => Some(t),
        Err(redb::TableError::TableDoesNotExist(_)) => None,
        Err(e) => return Err(e.into()),
    };
    for e in owners.iter()? {
        let (k, v) = e?;
        let (pid, start) = v.value();
        let scope = match &scopes {
            Some(t) => t.get(k.value())?.map_or(0, |g| g.value()),
            None => 0,
        };
        if k.value() != me && !super::owners::owner_alive(pid, start, scope, my_scope) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The earliest time at which time-driven work that can make a message receivable becomes due
/// (a scheduled message, a lock expiry), so a waiter can sleep exactly until then.
pub fn next_due(txn: &ReadTransaction) -> Result<Option<u64>> {
    let mut best: Option<u64> = None;
    // Message expiry is left out: it only removes messages, so no receiver waits for it.
    for def in [SCHEDULED, LOCK_EXPIRY] {
        let t = txn.open_table(def)?;
        if let Some((k, _)) = t.first()? {
            let at = k.value().0;
            best = Some(best.map_or(at, |b| b.min(at)));
        }
    }
    Ok(best)
}

/// Format version and sanity check of a freshly opened file.
pub fn format_version(txn: &ReadTransaction) -> Result<Option<u64>> {
    let meta = match txn.open_table(META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(version) = meta.get(KEY_FORMAT)?.map(|g| g.value()) else {
        return Ok(None);
    };
    match meta.get(KEY_FORMAT_CHECK)?.map(|g| g.value()) {
        Some(check) if check != format_check(version) => Err(Error::corrupted(format!(
            "the format version ({version}) does not match its checksum"
        ))),
        // Every version newer than this one writes the check, so a newer version without it
        // is a damaged number (or a damaged check key beside it), not a newer store.
        None if version > FORMAT_VERSION => Err(Error::corrupted(format!(
            "the format version ({version}) has no checksum beside it"
        ))),
        _ => Ok(Some(version)),
    }
}

/// A queue's counts as stored (its counts row and extra counts row).
pub fn counts(txn: &ReadTransaction, q: u32) -> Result<QueueCounts> {
    let t = txn.open_table(COUNTERS)?;
    let mut c = t
        .get(q)?
        .map(|g| QueueCounts::decode(&g.value()))
        .unwrap_or_default();
    if let Some(extra) = t.get(EXTRA_COUNTS_BASE + q)? {
        c.set_extra(&extra.value());
    }
    Ok(c)
}

/// Every ordinary queue's name and record, in name order.
pub fn queue_records(txn: &ReadTransaction) -> Result<Vec<QueueEntry>> {
    let t = txn.open_table(QUEUES)?;
    let mut out = Vec::new();
    for e in t.iter()? {
        let (k, v) = e?;
        let rec =
            codec::decode_queue(k.value(), v.value()).map_err(|e| corrupted("queue record", e))?;
        if rec.kind == QueueKind::Normal {
            out.push(QueueEntry {
                name: k.value().to_owned(),
                record: rec,
            });
        }
    }
    Ok(out)
}

/// Whether any queue asks for idle deletion, and when the first of them falls due.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdleSchedule {
    pub any: bool,
    /// When (ms) the first queue without locked messages is due (`idle_due_at`); none while
    /// every such queue holds locked messages.
    pub next: Option<u64>,
}

/// The idle-deletion schedule as stored now (the writer checks again before deleting). A
/// queue in use (see `batch::in_use`) is never due, so the janitor does not ask the writer for
/// it every second.
pub fn idle_schedule(txn: &ReadTransaction) -> Result<IdleSchedule> {
    let mut s = IdleSchedule::default();
    for QueueEntry { name, record: rec } in queue_records(txn)? {
        let Some(idle) = rec.options.auto_delete_on_idle else {
            continue;
        };
        s.any = true;
        let c = counts(txn, rec.id)?;
        if c.locked != 0 || in_use(txn, &name, &rec)? {
            continue;
        }
        if let Some(at) = super::batch::idle_due_at(c.last_activity, idle) {
            s.next = Some(s.next.map_or(at, |n| n.min(at)));
        }
    }
    Ok(s)
}

/// Whether something names queue `name` (record `rec`): the rule `Batch::queue_user` applies.
fn in_use(txn: &ReadTransaction, name: &str, rec: &QueueRecord) -> Result<bool> {
    let except = [rec.id, rec.peer, rec.journal];
    let queues = txn.open_table(QUEUES)?;
    if super::batch::option_user(&queues, QueueRef::new(rec.id, name), &except)?.is_some() {
        return Ok(true);
    }
    let jobs = txn.open_table(JOBS)?;
    Ok(super::batch::continuation_user(&jobs, &Default::default(), rec.id)?.is_some())
}

/// A job's record, if it exists.
pub fn job(txn: &ReadTransaction, job: u64) -> Result<Option<super::batch::JobRecord>> {
    let t = txn.open_table(JOBS)?;
    match t.get(job)? {
        None => Ok(None),
        Some(g) => super::batch::JobRecord::decode(job, g.value())
            .map(Some)
            .map_err(|e| corrupted("job record", e)),
    }
}

/// Every job's id and record, in id order: one walk of `JOBS`.
pub fn jobs(txn: &ReadTransaction) -> Result<Vec<(u64, super::batch::JobRecord)>> {
    let t = txn.open_table(JOBS)?;
    let mut out = Vec::new();
    for e in t.iter()? {
        let (k, v) = e?;
        let id = k.value();
        let rec = super::batch::JobRecord::decode(id, v.value())
            .map_err(|e| corrupted("job record", e))?;
        out.push((id, rec));
    }
    Ok(out)
}

/// One group of a queue that requires sessions, as [`sessions`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub group: String,
    /// The group's messages in the queue (`SESSION_MSGS`), whatever their state.
    pub messages: u64,
    /// The session lock's expiry (ms) while a receiver holds it at `now`.
    pub locked_until: Option<u64>,
    /// Whether the session record holds a state.
    pub has_state: bool,
}

/// The groups of queue `q` that have messages or a session record, in name order, with their
/// message counts (a walk of the queue's range of `SESSION_MSGS`) and how their session stands
/// at `now` (its range of `SESSIONS`; a lock counts while `SessionRecord::is_held`). Empty for
/// a queue that does not require sessions.
///
/// # Errors
///
/// `QueueNotFound` (named `name`) when the queue does not exist; `Corrupted` for a damaged
/// session row.
pub fn sessions(txn: &ReadTransaction, queue: QueueRef<'_>, now: u64) -> Result<Vec<SessionRow>> {
    let QueueRef { id: q, name } = queue;
    let Some(rec) = queue_by_id(txn, q)? else {
        return Err(Error::QueueNotFound(name.to_owned()));
    };
    if !rec.options.requires_session {
        return Ok(Vec::new());
    }
    let row = |group: &str| SessionRow {
        group: group.to_owned(),
        messages: 0,
        locked_until: None,
        has_state: false,
    };
    // Keys come in group order (the group is the key's second part): count each run.
    let mut counted: Vec<SessionRow> = Vec::new();
    let msgs = txn.open_table(SESSION_MSGS)?;
    for e in msgs.range((q, "", 0)..(q.saturating_add(1), "", 0))? {
        let (k, _) = e?;
        let group = k.value().1;
        match counted.last_mut() {
            Some(last) if last.group == group => last.messages += 1,
            _ => counted.push(SessionRow {
                messages: 1,
                ..row(group)
            }),
        }
    }
    let mut groups: std::collections::BTreeMap<String, SessionRow> =
        counted.into_iter().map(|r| (r.group.clone(), r)).collect();
    let sessions = txn.open_table(SESSIONS)?;
    for e in sessions.range((q, "")..(q.saturating_add(1), ""))? {
        let (k, v) = e?;
        let group = k.value().1;
        let s = SessionRecord::decode(q, group, v.value()).map_err(|e| corrupted("session", e))?;
        let r = groups.entry(group.to_owned()).or_insert_with(|| row(group));
        r.locked_until = s.is_held(now).then_some(s.locked_until);
        r.has_state = s.state.is_some();
    }
    Ok(groups.into_values().collect())
}

/// A job's pieces in id order: (message id, outcome (0 pending, 1 completed, 2 dead-lettered),
/// when it ended (ms)). With `pending_only`, the pending ones.
pub fn job_pieces(
    txn: &ReadTransaction,
    job: u64,
    pending_only: bool,
) -> Result<Vec<(u64, u8, u64)>> {
    let t = txn.open_table(JOB_PIECES)?;
    let mut out = Vec::new();
    for e in t.range((job, 0)..=(job, u64::MAX))? {
        let (k, v) = e?;
        let (outcome, at) = super::batch::decode_piece(&v.value());
        if !pending_only || outcome == 0 {
            out.push((k.value().1, outcome, at));
        }
    }
    Ok(out)
}

/// The progress keys recorded on message `id`, in key order.
pub fn checkpoints(txn: &ReadTransaction, id: u64) -> Result<Vec<String>> {
    let t = txn.open_table(CHECKPOINTS)?;
    let mut out = Vec::new();
    for e in t.range((id, "")..(id.saturating_add(1), ""))? {
        out.push(e?.0.value().1.to_owned());
    }
    Ok(out)
}

/// The value of `key` in application table `table`.
pub fn app_get(txn: &ReadTransaction, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
    let t = txn.open_table(APP_ROWS)?;
    Ok(t.get((table, key))?.map(|g| g.value().to_vec()))
}

/// Rows of application table `table` with `start <= key < end` (`end` `None`: to the end), in
/// key order, at most `limit`.
pub fn app_range(
    txn: &ReadTransaction,
    table: &str,
    start: &[u8],
    end: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let t = txn.open_table(APP_ROWS)?;
    let mut out = Vec::new();
    for e in t.range((table, start)..)? {
        if out.len() >= limit {
            break;
        }
        let (k, v) = e?;
        let (tb, key) = k.value();
        if tb != table || end.is_some_and(|end| key >= end) {
            break;
        }
        out.push((key.to_vec(), v.value().to_vec()));
    }
    Ok(out)
}

/// The id a live dedup entry of `key` in queue `q` points to, if any.
pub fn dedup_lookup(txn: &ReadTransaction, q: u32, key: &str, now: u64) -> Result<Option<u64>> {
    let t = txn.open_table(DEDUP)?;
    Ok(t.get((q, key))?
        .map(|g| g.value())
        .filter(|(_, forget_at)| *forget_at > now)
        .map(|(id, _)| id))
}
