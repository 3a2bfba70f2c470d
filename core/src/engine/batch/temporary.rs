//! Queues that go away on their own: temporary queues, which belong to the process that
//! created them and are deleted when it closes the store or dies, and queues with
//! `auto_delete_on_idle`, deleted after a period without activity unless it is in use (see
//! `in_use`).

use redb::ReadableTable;

use super::*;

/// Temporary queues are named `$temporary/<owner>/<queue id>`; the prefix is reserved.
pub const TEMPORARY_PREFIX: &str = "$temporary/";

impl<'t> Batch<'t> {
    /// Creates a temporary queue for `owner` with `options`; returns its name and record.
    pub fn create_temporary_queue(
        &mut self,
        owner: u64,
        options: Option<&QueueOptions>,
    ) -> Result<QueueEntry> {
        let settings = options.map_or_else(QueueSettings::default, |o| {
            o.apply_to(&QueueSettings::default())
        });
        settings.validate()?;
        if settings.requires_session || settings.journal.is_some() {
            return Err(Error::invalid(
                "a temporary queue cannot require sessions or keep a journal",
            ));
        }
        // The name carries a fresh number so that names are never reused, even across runs.
        let n = self.next_seq(Seq::Message)?;
        let name = format!("{TEMPORARY_PREFIX}{owner}/{n}");
        let mut rec = self.create_queue(&name, settings, None)?;
        rec.temporary_owner = owner;
        self.put_queue(&name, &rec)?;
        Ok(QueueEntry { name, record: rec })
    }

    /// Deletes the temporary queues of `owner`, or of everyone (`None`). Returns how many.
    pub fn delete_temporary_queues(&mut self, owner: Option<u64>) -> Result<usize> {
        let end = format!("{}\u{10FFFF}", TEMPORARY_PREFIX);
        let names: Vec<(String, Vec<u8>)> = self
            .tables
            .queues()?
            .range(TEMPORARY_PREFIX..end.as_str())?
            .map(|e| e.map(|(k, v)| (k.value().to_owned(), v.value().to_vec())))
            .collect::<std::result::Result<_, _>>()?;
        let mut n = 0;
        for (name, raw) in names {
            let rec = codec::decode_queue(&name, &raw).map_err(|e| corrupted("queue record", e))?;
            if rec.kind == QueueKind::Normal
                && rec.temporary_owner != 0
                && owner.is_none_or(|o| o == rec.temporary_owner)
            {
                // Nothing may name a temporary queue (`check_reference`), so nothing is left
                // without its queue.
                self.drop_queue(&name, &rec)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Deletes every queue with `auto_delete_on_idle` whose last activity is older than its
    /// idle period, that holds no locked message and that is not in use. Returns the names
    /// deleted.
    pub fn delete_idle_queues(&mut self) -> Result<Vec<String>> {
        let records: Vec<(String, Vec<u8>)> = self
            .tables
            .queues()?
            .iter()?
            .map(|e| e.map(|(k, v)| (k.value().to_owned(), v.value().to_vec())))
            .collect::<std::result::Result<_, _>>()?;
        let mut deleted = Vec::new();
        for (name, raw) in records {
            let rec = codec::decode_queue(&name, &raw).map_err(|e| corrupted("queue record", e))?;
            let Some(idle) = rec.options.auto_delete_on_idle else {
                continue;
            };
            if rec.kind != QueueKind::Normal {
                continue;
            }
            let c = self.counters(rec.id)?;
            if c.locked == 0
                && idle_expired(c.last_activity, idle, self.now)
                && self
                    .queue_user(
                        QueueRef::new(rec.id, &name),
                        &[rec.id, rec.peer, rec.journal],
                    )?
                    .is_none()
            {
                self.drop_queue(&name, &rec)?;
                deleted.push(name);
            }
        }
        Ok(deleted)
    }
}

/// When a queue last active at `last_activity` (ms, as recorded: less than
/// [`ACTIVITY_RESOLUTION_MS`] behind the true last activity) becomes idle for `idle`: `idle`
/// plus that resolution after the recorded activity, so never before `idle` has passed since
/// the true last activity — a busy queue whose idle period is shorter than the recording
/// interval is never deleted. `None` for a queue with no recorded activity.
pub fn idle_due_at(last_activity: u64, idle: std::time::Duration) -> Option<u64> {
    (last_activity != 0).then(|| {
        last_activity
            .saturating_add(crate::clock::duration_ms(idle))
            .saturating_add(ACTIVITY_RESOLUTION_MS)
    })
}

/// Whether a queue last active at `last_activity` has been idle for `idle` at `now` (see
/// [`idle_due_at`]).
fn idle_expired(last_activity: u64, idle: std::time::Duration, now: u64) -> bool {
    idle_due_at(last_activity, idle).is_some_and(|at| now >= at)
}
