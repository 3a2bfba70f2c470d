//! Time-driven work, applied lazily inside the batches that run anyway: expired locks, due
//! scheduled messages, expired messages and forgotten duplicate keys.

use redb::{ReadableTable, Table};

use super::super::logged::Logged;

use super::*;

/// At most this many entries are moved by one sweep of an index, so that a large backlog of
/// expired entries is worked off over several batches instead of stalling one.
const SWEEP_LIMIT: usize = 256;

/// A time index `(at, id) → ()`: `SCHEDULED`, `EXPIRING` or `LOCK_EXPIRY`.
type TimeIndex<'t> = Logged<'t, (u64, u64), ()>;

impl<'t> Batch<'t> {
    /// Moves due scheduled messages to their queues, releases expired locks and dead-letters
    /// expired messages: the lazy time-driven work, done inside transactions that run anyway.
    pub fn sweep(&mut self) -> Result<()> {
        let now = self.now;
        if self.hints.lock <= now {
            self.sweep_locks()?;
            self.hints.lock = next_at(self.tables.lock_expiry()?)?;
        }
        if self.hints.scheduled <= now {
            self.sweep_scheduled()?;
            self.hints.scheduled = next_at(self.tables.scheduled()?)?;
        }
        if self.hints.expiring <= now {
            self.sweep_expiring()?;
            self.hints.expiring = next_at(self.tables.expiring()?)?;
        }
        if self.hints.dedup <= now {
            self.sweep_dedup()?;
            let next = self
                .tables
                .dedup_expiry()?
                .first()?
                .map_or(u64::MAX, |(k, _)| k.value().0);
            self.hints.dedup = next;
        }
        Ok(())
    }

    /// [`Batch::sweep`] until nothing is due: every expired lock, due scheduled message and
    /// expired message is where it belongs, however large the backlog (for exact counts).
    pub fn sweep_all(&mut self) -> Result<()> {
        loop {
            self.sweep()?;
            let now = self.now;
            if self.hints.lock > now && self.hints.scheduled > now && self.hints.expiring > now {
                return Ok(());
            }
        }
    }

    /// The one sweep over a time index `(at, id)`: for each entry due at `now` (at most
    /// `SWEEP_LIMIT`), `act` on the message when its state still matches the entry (`owns`),
    /// else drop the stale entry.
    fn sweep_index(
        &mut self,
        index: for<'a> fn(&'a mut Slots<'t>) -> Result<&'a mut TimeIndex<'t>>,
        owns: fn(&State, u64) -> bool,
        act: fn(&mut Self, u64, State) -> Result<()>,
    ) -> Result<()> {
        let now = self.now;
        for _ in 0..SWEEP_LIMIT {
            let Some((at, id)) = first_due(index(&mut self.tables)?, now)? else {
                break;
            };
            match self.load_state(id)? {
                Some(st) if owns(&st, at) => act(self, id, st)?,
                _ => {
                    index(&mut self.tables)?.remove((at, id))?;
                }
            }
        }
        Ok(())
    }

    /// Expired locks: the message goes back to its queue (or, spent, to the dead letters).
    fn sweep_locks(&mut self) -> Result<()> {
        self.sweep_index(
            Slots::lock_expiry,
            |st, at| st.status == Status::Locked && st.locked_until == at,
            Self::requeue,
        )
    }

    /// Due scheduled messages become receivable (unless spent).
    fn sweep_scheduled(&mut self) -> Result<()> {
        self.sweep_index(
            Slots::scheduled,
            |st, at| st.status == Status::Scheduled && st.visible_at == at,
            Self::requeue,
        )
    }

    /// Messages whose time to live ran out go to the dead-letter queue.
    fn sweep_expiring(&mut self) -> Result<()> {
        self.sweep_index(
            Slots::expiring,
            |st, at| st.status != Status::Locked && st.expires_at == at,
            |b, id, st| b.move_to_dead_letter(id, st, REASON_TTL_EXPIRED, "time to live expired"),
        )
    }

    fn sweep_dedup(&mut self) -> Result<()> {
        let now = self.now;
        for _ in 0..SWEEP_LIMIT {
            let first = match self.tables.dedup_expiry()?.first()? {
                Some((k, _)) => {
                    let (at, q, key) = k.value();
                    (at <= now).then(|| (at, q, key.to_owned()))
                }
                None => None,
            };
            let Some((at, q, key)) = first else { break };
            self.tables.dedup_expiry()?.remove((at, q, key.as_str()))?;
            let stale = self
                .tables
                .dedup()?
                .get((q, key.as_str()))?
                .is_some_and(|g| g.value().1 == at);
            if stale {
                self.tables.dedup()?.remove((q, key.as_str()))?;
            }
        }
        Ok(())
    }
}

/// The message ids of a time index (`SCHEDULED` or `LOCK_EXPIRY`), soonest first.
pub(super) fn index_ids(table: &Table<'_, (u64, u64), ()>) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for e in table.iter()? {
        ids.push(e?.0.value().1);
    }
    Ok(ids)
}

/// The time of the first entry of a time index, or `u64::MAX` when it is empty.
pub(super) fn next_at(table: &Table<'_, (u64, u64), ()>) -> Result<u64> {
    Ok(table.first()?.map_or(u64::MAX, |(k, _)| k.value().0))
}

pub(super) fn first_due(table: &Table<'_, (u64, u64), ()>, now: u64) -> Result<Option<(u64, u64)>> {
    Ok(table
        .first()?
        .map(|(k, _)| k.value())
        .filter(|(at, _)| *at <= now))
}
