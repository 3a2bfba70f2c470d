//! Checkpoints inside a message: progress keys a receiver records on the message it holds,
//! so that a redelivery skips the work already done. Kept in `CHECKPOINTS` under the message
//! id (state flag `0x08`) and removed with the message.

use redb::ReadableTable;

use super::*;

/// The longest progress key, in bytes.
pub const MAX_CHECKPOINT_KEY_LEN: usize = 1024;

impl<'t> Batch<'t> {
    /// Records `keys` as done on the message held by `lock` and renews the lock, in one write.
    /// Returns the new lock expiry (ms).
    pub fn mark_done(&mut self, lock: HeldLock, keys: &[String]) -> Result<u64> {
        let id = lock.id;
        let mut st = self.check_lock(lock)?;
        if let Some(k) = keys
            .iter()
            .find(|k| k.is_empty() || k.len() > MAX_CHECKPOINT_KEY_LEN)
        {
            return Err(Error::invalid(format!(
                "progress keys are 1 to {MAX_CHECKPOINT_KEY_LEN} bytes long, got {} bytes",
                k.len()
            )));
        }
        let rec = self.require_queue_id(st.queue)?;
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        self.detach(id, &st)?;
        {
            let t = self.tables.checkpoints()?;
            for k in keys {
                t.insert((id, k.as_str()), ())?;
            }
        }
        st.checkpointed = true;
        st.locked_until = self.now.saturating_add(lock_ms);
        self.attach(id, &mut st, Status::Locked)?;
        Ok(st.locked_until)
    }

    pub(super) fn clear_checkpoints(&mut self, id: u64) -> Result<()> {
        let t = self.tables.checkpoints()?;
        let keys: Vec<String> = t
            .range((id, "")..(id.saturating_add(1), ""))?
            .map(|e| e.map(|(k, _)| k.value().1.to_owned()))
            .collect::<std::result::Result<_, _>>()?;
        for k in keys {
            t.remove((id, k.as_str()))?;
        }
        Ok(())
    }
}
