//! The processes that have the store open: registration, the commit marks, and releasing
//! the locks of processes that closed or died.

use redb::ReadableTable;

use super::sweep::index_ids;
use super::*;

impl<'t> Batch<'t> {
    /// Releases every lock held by `owner` (all owners when `None`), keeping delivery counts:
    /// its message locks and its session locks. Returns how many message locks.
    pub fn release_locks_of(&mut self, owner: Option<u64>) -> Result<u64> {
        self.release_sessions_of(owner)?;
        let mut victims = Vec::new();
        for id in index_ids(self.tables.lock_expiry()?)? {
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
        self.tables.owners()?.insert(id, (pid, start))?;
        self.tables.owner_scopes()?.insert(id, scope)?;
        Ok(id)
    }

    pub fn unregister_owner(&mut self, owner: u64) -> Result<()> {
        // Temporary queues go with their owner (a clean close, or a reaped dead process).
        self.delete_temporary_queues(Some(owner))?;
        self.tables.owners()?.remove(owner)?;
        self.tables.owner_scopes()?.remove(owner)?;
        self.tables
            .counters()?
            .remove(crate::engine::db::mark_key(owner))?;
        Ok(())
    }

    pub fn clear_owners(&mut self) -> Result<()> {
        // Every owner is gone, so are their temporary queues.
        self.delete_temporary_queues(None)?;
        self.tables.owners()?.retain(|_, _| false)?;
        self.tables.owner_scopes()?.retain(|_, _| false)?;
        self.tables
            .counters()?
            .retain(|k, _| k < crate::engine::db::FIRST_MARK_KEY)?;
        Ok(())
    }

    /// Records that `owner` committed batch `batch` (see `db::mark_key`). Not a change of its
    /// own: the pipeline writes it only into batches that changed something, after asking
    /// (`Batch::changed`).
    pub fn write_mark(&mut self, owner: u64, batch: u64) -> Result<()> {
        self.tables.counters()?.insert(
            crate::engine::db::mark_key(owner),
            crate::engine::db::encode_mark(batch),
        )?;
        Ok(())
    }

    /// Releases the locks of registered processes that are no longer alive (as judged from
    /// `my_scope`; see [`crate::engine::owners::owner_alive`]).
    pub fn reap_dead_owners(&mut self, me: u64, my_scope: u64) -> Result<()> {
        let mut registered = Vec::new();
        for e in self.tables.owners()?.iter()? {
            let (k, v) = e?;
            registered.push((k.value(), v.value()));
        }
        let mut dead = Vec::new();
        for (owner, (pid, start)) in registered {
            let scope = self
                .tables
                .owner_scopes()?
                .get(owner)?
                .map_or(0, |g| g.value());
            if owner != me && !crate::engine::owners::owner_alive(pid, start, scope, my_scope) {
                dead.push(owner);
            }
        }
        for owner in dead {
            self.release_locks_of(Some(owner))?;
            self.unregister_owner(owner)?;
        }
        Ok(())
    }
}
