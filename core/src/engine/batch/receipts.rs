//! Work-complete receipts: a queue with `receipts_to` posts a small message to that queue in
//! the same commit as each completion or dead-lettering of one of its messages.

use super::*;
use crate::message::{
    RECEIPT_AT, RECEIPT_COMPLETED, RECEIPT_DEAD_LETTERED, RECEIPT_LABEL, RECEIPT_MESSAGE_ID,
    RECEIPT_OUTCOME, RECEIPT_QUEUE, RECEIPT_REASON,
};

/// How a message's processing ended, as a receipt reports it.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    Completed,
    DeadLettered(&'a str),
}

impl<'t> Batch<'t> {
    /// Posts the receipt for message `id` of queue `rec` if the queue asks for receipts.
    /// Receipts are not held to the receipt queue's quotas (refusing one would refuse the
    /// settle that caused it). Nothing deletes a receipt queue in use now; a store an older
    /// postbox wrote may lack it, and the receipt is then a dead letter of `rec`
    /// (`DestinationMissing`).
    pub(super) fn post_receipt(
        &mut self,
        rec: &QueueEntry,
        id: u64,
        outcome: Outcome<'_>,
    ) -> Result<()> {
        let Some(target) = rec.record.options.receipts_to.as_deref() else {
            return Ok(());
        };
        let to = self
            .queue_by_name(target)?
            .filter(|r| r.kind == QueueKind::Normal);
        let mut m = Message::new(Vec::new())
            .label(RECEIPT_LABEL)
            .correlation_id(id.to_string())
            .property(RECEIPT_MESSAGE_ID, id.to_string())
            .property(RECEIPT_QUEUE, rec.name.as_str())
            .property(RECEIPT_AT, self.now.to_string());
        m = match outcome {
            Outcome::Completed => m.property(RECEIPT_OUTCOME, RECEIPT_COMPLETED),
            Outcome::DeadLettered(reason) => m
                .property(RECEIPT_OUTCOME, RECEIPT_DEAD_LETTERED)
                .property(RECEIPT_REASON, reason),
        };
        match to {
            Some(to) => {
                self.insert_message(to.id, &to.options, m)?;
            }
            None => {
                let why = format!("the receipts_to queue {target:?} no longer exists");
                // Only a queue being deleted in this very batch has nowhere for its dead
                // letters, and its messages are removed, not settled; refuse rather than drop.
                if !self.dead_letter_undeliverable(rec, m, &why)? {
                    return Err(Error::QueueNotFound(target.to_owned()));
                }
            }
        }
        Ok(())
    }
}
