//! Sessions: on a queue that requires them, the messages of one `group` are delivered in send
//! order, one at a time, to the receiver holding the group's session lock; other groups go to
//! other receivers in parallel. A session also keeps a small state value across deliveries.

use std::ops::Bound;

use redb::ReadableTable;

use super::*;
use crate::engine::rules;

impl<'t> Batch<'t> {
    /// Whether queue `q` requires sessions (false for a deleted queue).
    pub(super) fn requires_session(&mut self, q: u32) -> Result<bool> {
        Ok(self
            .queue(q)?
            .is_some_and(|r| r.record.options.requires_session))
    }

    /// Indexes message `id` of session queue `q` under its group.
    pub(super) fn index_session_message(&mut self, q: u32, group: &str, id: u64) -> Result<()> {
        self.tables.session_msgs()?.insert((q, group, id), ())?;
        Ok(())
    }

    /// Removes message `id` of session queue `q` (with envelope properties `props`) from the
    /// session index.
    pub(super) fn unindex_session_message(
        &mut self,
        q: u32,
        props: &crate::message::Properties,
        id: u64,
    ) -> Result<()> {
        if let Some(g) = &props.group {
            self.tables.session_msgs()?.remove((q, g.as_str(), id))?;
            // The group's next message may be receivable now, or the group free to accept.
            self.woken.insert(q);
        }
        Ok(())
    }

    fn session(&mut self, q: u32, group: &str) -> Result<SessionRecord> {
        match self.tables.sessions()?.get((q, group))? {
            None => Ok(SessionRecord::default()),
            Some(g) => {
                SessionRecord::decode(q, group, g.value()).map_err(|e| corrupted("session", e))
            }
        }
    }

    fn put_session(&mut self, q: u32, group: &str, s: &SessionRecord) -> Result<()> {
        if s.token == 0 {
            // Released: whoever waits to accept it may.
            self.woken.insert(q);
        }
        if s.token == 0 && s.state.is_none() {
            self.tables.sessions()?.remove((q, group))?;
        } else {
            self.tables
                .sessions()?
                .insert((q, group), s.encode(q, group).as_slice())?;
        }
        Ok(())
    }

    fn session_queue(&mut self, queue: QueueRef<'_>) -> Result<Arc<QueueEntry>> {
        let (rec, name) = (self.require_queue(queue)?, queue.name);
        if !rec.record.options.requires_session {
            return Err(Error::invalid(format!(
                "queue {name:?} does not require sessions"
            )));
        }
        Ok(rec)
    }

    /// Accepts session `group` of queue `q` (or, with `None`, the first group in name order
    /// whose next message is receivable and whose session nobody holds) for `owner`. Returns
    /// the group and its record, or `None` when it is held by another receiver (or no group is
    /// available).
    pub fn accept_session(
        &mut self,
        queue: QueueRef<'_>,
        group: Option<&str>,
        owner: u64,
    ) -> Result<Option<(String, SessionRecord)>> {
        let q = queue.id;
        let rec = self.session_queue(queue)?;
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        let group = match group {
            Some(g) => {
                if self.session(q, g)?.is_held(self.now) {
                    return Ok(None);
                }
                g.to_owned()
            }
            None => match self.next_available_group(q)? {
                Some(g) => g,
                None => return Ok(None),
            },
        };
        let mut s = self.session(q, &group)?;
        s.owner = owner;
        s.token = self.next_seq(Seq::Token)?;
        s.locked_until = self.now.saturating_add(lock_ms);
        self.put_session(q, &group, &s)?;
        Ok(Some((group, s)))
    }

    /// The first group of `q` whose session is free and whose next message is receivable.
    fn next_available_group(&mut self, q: u32) -> Result<Option<String>> {
        let mut from = Bound::Included((q, String::new(), 0u64));
        loop {
            let next = {
                let t = self.tables.session_msgs()?;
                let lower = match &from {
                    Bound::Included((a, g, i)) => Bound::Included((*a, g.as_str(), *i)),
                    Bound::Excluded((a, g, i)) => Bound::Excluded((*a, g.as_str(), *i)),
                    Bound::Unbounded => Bound::Unbounded,
                };
                let upper = Bound::Excluded((q.saturating_add(1), "", 0u64));
                t.range::<(u32, &str, u64)>((lower, upper))?
                    .next()
                    .transpose()?
                    .map(|(k, _)| k.value().1.to_owned())
            };
            let Some(group) = next else {
                return Ok(None);
            };
            if !self.session(q, &group)?.is_held(self.now)
                && self.session_head(q, &group)?.is_some()
            {
                return Ok(Some(group));
            }
            from = Bound::Excluded((q, group, u64::MAX));
        }
    }

    /// The next message of session `group` if it is receivable now: the group's first message
    /// in send order that is not deferred, when it is ready (a locked or scheduled one ahead of
    /// the rest keeps them waiting: one at a time, in order).
    fn session_head(&mut self, q: u32, group: &str) -> Result<Option<(u64, State)>> {
        let ids: Vec<u64> = self
            .tables
            .session_msgs()?
            .range((q, group, 0)..=(q, group, u64::MAX))?
            .map(|e| e.map(|(k, _)| k.value().2))
            .collect::<std::result::Result<_, _>>()?;
        for id in ids {
            let st = self
                .load_state(id)?
                .ok_or_else(|| Error::corrupted(format!("session message {id} has no state")))?;
            // A deferred message is outside the order, also while its holder has it locked
            // (received by id): it keeps nothing waiting.
            if st.deferred {
                continue;
            }
            match st.status {
                Status::Deferred => continue,
                Status::Ready => return Ok(Some((id, st))),
                Status::Locked | Status::Scheduled => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The message of session `group` that `select` picks among those its holder may take
    /// now: the group's next message ([`Batch::session_head`]) and its deferred messages that
    /// nobody holds (set aside, so outside the order: Service Bus lets a session receiver take
    /// its deferred messages by sequence number while another is in hand). By id: that
    /// message, if it is one of them; by correlation id: the first of them in send order whose
    /// correlation id matches.
    fn session_select(
        &mut self,
        q: u32,
        group: &str,
        select: &Select,
    ) -> Result<Option<(u64, State)>> {
        let head = self.session_head(q, group)?.map(|(id, _)| id);
        let takeable = |id: u64, st: &State| st.status == Status::Deferred || Some(id) == head;
        match select {
            Select::Id(id) => {
                if self.tables.session_msgs()?.get((q, group, *id))?.is_none() {
                    return Ok(None);
                }
                Ok(self
                    .load_state(*id)?
                    .filter(|st| st.queue == q && takeable(*id, st))
                    .map(|st| (*id, st)))
            }
            Select::CorrelationId(wanted) => {
                let ids: Vec<u64> = self
                    .tables
                    .session_msgs()?
                    .range((q, group, 0)..=(q, group, u64::MAX))?
                    .map(|e| e.map(|(k, _)| k.value().2))
                    .collect::<std::result::Result<_, _>>()?;
                for id in ids {
                    let st = self.load_state(id)?.ok_or_else(|| {
                        Error::corrupted(format!("session message {id} has no state"))
                    })?;
                    if !takeable(id, &st) {
                        continue;
                    }
                    let env = self.load_envelope(id)?;
                    if env.props.correlation_id.as_deref() == Some(wanted.as_str()) {
                        return Ok(Some((id, st)));
                    }
                }
                Ok(None)
            }
        }
    }

    /// Checks that `token` holds session `group` of `q` now.
    fn check_session(&mut self, q: u32, group: &str, token: u64) -> Result<SessionRecord> {
        let s = self.session(q, group)?;
        if s.token == token && s.is_held(self.now) {
            Ok(s)
        } else {
            Err(Error::SessionLockLost(group.to_owned()))
        }
    }

    /// Locks the next message of session `group` for its holder (`token`), if it is
    /// receivable now.
    pub fn session_receive(
        &mut self,
        queue: QueueRef<'_>,
        group: &str,
        token: u64,
        owner: u64,
    ) -> Result<Option<Locked>> {
        let q = queue.id;
        let rec = self.session_queue(queue)?;
        self.check_session(q, group, token)?;
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        loop {
            let Some((id, st)) = self.session_head(q, group)? else {
                return Ok(None);
            };
            if let Some(why) = rules::spent(&st, rec.record.options.max_deliveries, self.now) {
                self.move_to_dead_letter(id, st, why.reason(), &why.description())?;
                continue;
            }
            return self.lock_ready_for(id, st, owner, lock_ms).map(Some);
        }
    }

    /// Locks the message of session `group` that `select` picks (see
    /// [`Batch::session_select`]) for its holder (`token`), if there is one now. A pick that is
    /// spent goes to the dead-letter queue instead, as in [`Batch::receive`].
    pub fn session_receive_selected(
        &mut self,
        queue: QueueRef<'_>,
        group: &str,
        token: u64,
        owner: u64,
        select: &Select,
    ) -> Result<Option<Locked>> {
        let q = queue.id;
        let rec = self.session_queue(queue)?;
        self.check_session(q, group, token)?;
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        loop {
            let Some((id, st)) = self.session_select(q, group, select)? else {
                return Ok(None);
            };
            if let Some(why) = rules::spent(&st, rec.record.options.max_deliveries, self.now) {
                self.move_to_dead_letter(id, st, why.reason(), &why.description())?;
                continue;
            }
            return self.lock_ready_for(id, st, owner, lock_ms).map(Some);
        }
    }

    /// A session worker's next step after settling a message, for the same commit: renews the
    /// session lock once half of it has passed, then locks the session's next message, or
    /// releases the session when it has nothing receivable now. Returns the next message and
    /// the session lock's expiry (`None`: released).
    pub fn session_next(
        &mut self,
        queue: QueueRef<'_>,
        group: &str,
        token: u64,
        owner: u64,
    ) -> Result<(Option<Locked>, Option<u64>)> {
        let q = queue.id;
        let rec = self.session_queue(queue)?;
        let s = self.check_session(q, group, token)?;
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        let mut until = s.locked_until;
        if until.saturating_sub(self.now) < lock_ms / 2 {
            until = self.renew_session(queue, group, token)?;
        }
        match self.session_receive(queue, group, token, owner)? {
            Some(l) => Ok((Some(l), Some(until))),
            None => {
                self.release_session(queue, group, token)?;
                Ok((None, None))
            }
        }
    }

    /// Extends the session lock; returns the new expiry.
    pub fn renew_session(&mut self, queue: QueueRef<'_>, group: &str, token: u64) -> Result<u64> {
        let q = queue.id;
        let rec = self.session_queue(queue)?;
        let mut s = self.check_session(q, group, token)?;
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        s.locked_until = self.now.saturating_add(lock_ms);
        self.put_session(q, group, &s)?;
        Ok(s.locked_until)
    }

    /// Lets go of the session lock (its state is kept).
    pub fn release_session(&mut self, queue: QueueRef<'_>, group: &str, token: u64) -> Result<()> {
        let q = queue.id;
        self.session_queue(queue)?;
        let mut s = self.check_session(q, group, token)?;
        s.owner = 0;
        s.token = 0;
        s.locked_until = 0;
        self.put_session(q, group, &s)
    }

    /// Sets the session's state (`None` clears it); only its holder may.
    pub fn set_session_state(
        &mut self,
        queue: QueueRef<'_>,
        group: &str,
        token: u64,
        state: Option<Vec<u8>>,
    ) -> Result<()> {
        let q = queue.id;
        self.session_queue(queue)?;
        let mut s = self.check_session(q, group, token)?;
        if state.as_ref().is_some_and(|v| v.len() > MAX_SESSION_STATE) {
            return Err(Error::invalid(format!(
                "a session state is at most {MAX_SESSION_STATE} bytes"
            )));
        }
        s.state = state;
        self.put_session(q, group, &s)
    }

    /// The session's state.
    pub fn session_state(&mut self, queue: QueueRef<'_>, group: &str) -> Result<Option<Vec<u8>>> {
        let q = queue.id;
        self.session_queue(queue)?;
        Ok(self.session(q, group)?.state)
    }

    /// Releases the session locks held by `owner` (every owner's with `None`), keeping each
    /// session's state: what a process that closed or died leaves must be free at once, as its
    /// message locks are (`release_locks_of`). Returns how many.
    pub(super) fn release_sessions_of(&mut self, owner: Option<u64>) -> Result<u64> {
        let mut held = Vec::new();
        for e in self.tables.sessions()?.iter()? {
            let (k, v) = e?;
            let (q, group) = k.value();
            let s =
                SessionRecord::decode(q, group, v.value()).map_err(|e| corrupted("session", e))?;
            if s.token != 0 && owner.is_none_or(|o| s.owner == o) {
                held.push((q, group.to_owned(), s));
            }
        }
        let n = held.len() as u64;
        for (q, group, mut s) in held {
            s.owner = 0;
            s.token = 0;
            s.locked_until = 0;
            self.put_session(q, &group, &s)?;
            // Receivers waiting for this session (or any free one) may go now.
            self.woken.insert(q);
        }
        Ok(n)
    }

    /// Forgets every session of queue `q` (it is being deleted).
    pub(super) fn drop_sessions(&mut self, q: u32) -> Result<()> {
        let groups: Vec<String> = self
            .tables
            .sessions()?
            .range((q, "")..(q.saturating_add(1), ""))?
            .map(|e| e.map(|(k, _)| k.value().1.to_owned()))
            .collect::<std::result::Result<_, _>>()?;
        for g in groups {
            self.tables.sessions()?.remove((q, g.as_str()))?;
        }
        Ok(())
    }
}

/// The largest session state, in bytes.
pub const MAX_SESSION_STATE: usize = 64 * 1024;
