//! Replies to requests: the receive that takes a request's reply from its store handle's reply
//! queue, dropping on its way the replies nobody waits for any more (docs/design.md § Requests
//! and late replies).

use std::collections::HashSet;

use redb::ReadableTable;

use super::*;
use crate::engine::rules;

impl<'t> Batch<'t> {
    /// Locks the first reply with `correlation_id` in reply queue `q` for `owner`, as a
    /// receive by correlation id does, and removes every reply it passes whose correlation id
    /// is not in `awaited` (the requests of the queue's handle that are waiting now): it came
    /// after its request stopped waiting, or for no request at all, and nobody will take it.
    /// Late replies therefore never pile up in front of the next request's reply.
    pub fn receive_reply(
        &mut self,
        queue: QueueRef<'_>,
        owner: u64,
        correlation_id: &str,
        awaited: &HashSet<String>,
    ) -> Result<Option<Locked>> {
        let QueueRef { id: q, name } = queue;
        let rec = self.require_queue(queue)?;
        let lock_ms = crate::clock::duration_ms(rec.record.options.lock_duration).max(1);
        let max_deliveries = rec.record.options.max_deliveries;
        let ids: Vec<u64> = self
            .tables
            .ready()?
            .range((q, 0, 0)..=(q, u8::MAX, u64::MAX))?
            .map(|e| e.map(|(k, _)| k.value().2))
            .collect::<std::result::Result<_, _>>()?;
        let mut dropped = 0usize;
        let mut found = None;
        for id in ids {
            let env = self.load_envelope(id)?;
            let cid = env.props.correlation_id.as_deref();
            let st = self
                .load_state(id)?
                .ok_or_else(|| Error::corrupted(format!("ready message {id} has no state")))?;
            if cid == Some(correlation_id) {
                if let Some(why) = rules::spent(&st, max_deliveries, self.now) {
                    self.move_to_dead_letter(id, st, why.reason(), &why.description())?;
                    continue;
                }
                found = Some(self.lock_ready_for(id, st, owner, lock_ms)?);
                break;
            }
            if !cid.is_some_and(|c| awaited.contains(c)) {
                self.remove_message(id, &st)?;
                dropped += 1;
            }
        }
        if dropped > 0 {
            tracing::debug!(
                queue = name,
                dropped,
                "dropped replies no request waits for"
            );
        }
        Ok(found)
    }
}
