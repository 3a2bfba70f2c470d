//! Queues in use: a queue that another queue's `forward_to`, `forward_dead_letters_to` or
//! `receipts_to` names, that a collator releases into, or that holds the continuation of a job
//! that is not done, is not deleted while that use lasts. Explicit deletion is refused with
//! `Error::QueueInUse` naming the user; idle deletion skips the queue. So a message that a
//! commit promises to send (a forward, a receipt, a collator's release, a continuation) always
//! finds its queue (docs/design.md § Queues in use).
//!
//! The scans are written once, generic over the table type, so that the write path (a batch)
//! and the janitor's read (`read::idle_due`) apply the same rule.

use std::collections::HashMap;

use redb::ReadableTable;

use super::*;

/// What names queue `target` among the queue records, as a phrase for an
/// error ("the forward_to of queue \"orders\""), or `None`. Records whose id is in `except`
/// (queues deleted together with the target) do not count.
pub fn option_user<T>(queues: &T, target: QueueRef<'_>, except: &[u32]) -> Result<Option<String>>
where
    T: ReadableTable<&'static str, &'static [u8]>,
{
    let QueueRef {
        id: target_id,
        name: target,
    } = target;
    for e in queues.iter()? {
        let (k, v) = e?;
        let name = k.value();
        let rec = codec::decode_queue(name, v.value()).map_err(|e| corrupted("queue record", e))?;
        if except.contains(&rec.id) {
            continue;
        }
        match rec.kind {
            QueueKind::Collator if rec.peer == target_id => {
                return Ok(Some(format!("the destination of collator {name:?}")));
            }
            QueueKind::Normal => {
                let o = &rec.options;
                for (option, value) in [
                    ("forward_to", &o.forward_to),
                    ("forward_dead_letters_to", &o.forward_dead_letters_to),
                    ("receipts_to", &o.receipts_to),
                ] {
                    if value.as_deref() == Some(target) {
                        return Ok(Some(format!("the {option} of queue {name:?}")));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(None)
}

/// The job, not done yet, whose continuation goes to queue `target_id`, as a phrase, or
/// `None`. `fresh` holds job records written by the current batch but not yet flushed; they
/// take the place of the stored ones.
pub fn continuation_user<T>(
    jobs: &T,
    fresh: &HashMap<u64, JobRecord>,
    target_id: u32,
) -> Result<Option<String>>
where
    T: ReadableTable<u64, &'static [u8]>,
{
    let waits_for = |rec: &JobRecord| {
        !rec.is_done()
            && rec
                .continuation
                .as_ref()
                .is_some_and(|(q, _)| *q == target_id)
    };
    let phrase = |job: u64| format!("the queue of job {job}'s continuation (the job is not done)");
    if let Some((job, _)) = fresh.iter().find(|(_, r)| waits_for(r)) {
        return Ok(Some(phrase(*job)));
    }
    for e in jobs.iter()? {
        let (k, v) = e?;
        let job = k.value();
        if fresh.contains_key(&job) {
            continue;
        }
        let rec = JobRecord::decode(job, v.value()).map_err(|e| corrupted("job record", e))?;
        if waits_for(&rec) {
            return Ok(Some(phrase(job)));
        }
    }
    Ok(None)
}

impl<'t> Batch<'t> {
    /// What keeps queue `queue` from being deleted, or `None`; queues in `except` go with it
    /// and do not count.
    pub(super) fn queue_user(
        &mut self,
        queue: QueueRef<'_>,
        except: &[u32],
    ) -> Result<Option<String>> {
        let q = queue.id;
        if let Some(by) = option_user(&**self.tables.queues()?, queue, except)? {
            return Ok(Some(by));
        }
        let fresh = std::mem::take(&mut self.job_cache);
        let found = self
            .tables
            .jobs()
            .and_then(|t| continuation_user(&**t, &fresh, q));
        self.job_cache = fresh;
        found
    }

    /// Fails with `QueueInUse` when something names queue `queue`.
    pub(super) fn refuse_if_in_use(&mut self, queue: QueueRef<'_>, except: &[u32]) -> Result<()> {
        match self.queue_user(queue, except)? {
            Some(by) => Err(Error::QueueInUse {
                queue: queue.name.to_owned(),
                by,
            }),
            None => Ok(()),
        }
    }

    /// Checks that `target`, named by `what` (an option of queue `user`, a collator, a job),
    /// may be used so: a plain queue that outlives its users. A temporary queue does not: it
    /// goes with its process, whatever names it.
    pub(super) fn check_reference(
        &mut self,
        what: &str,
        target: &QueueRecord,
        name: &str,
    ) -> Result<()> {
        if target.kind != QueueKind::Normal {
            return Err(Error::invalid(format!(
                "{what} can only name a plain queue, not {name:?}"
            )));
        }
        if target.temporary_owner != 0 {
            return Err(Error::invalid(format!(
                "{what} cannot name temporary queue {name:?}: it goes with its process, and {what} outlives it"
            )));
        }
        Ok(())
    }
}
