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
    /// Posts the receipt for message `id` of queue `rec` if the queue asks for receipts. A
    /// receipt queue deleted since the option was set gets nothing; receipts are not held to
    /// the receipt queue's quotas (refusing one would refuse the settle that caused it).
    pub(super) fn post_receipt(
        &mut self,
        rec: &(String, QueueRecord),
        id: u64,
        outcome: Outcome<'_>,
    ) -> Result<()> {
        let Some(target) = rec.1.options.receipts_to.as_deref() else {
            return Ok(());
        };
        let Some(to) = self
            .queue_by_name(target)?
            .filter(|r| r.kind == QueueKind::Normal)
        else {
            return Ok(());
        };
        let mut m = Message::new(Vec::new())
            .label(RECEIPT_LABEL)
            .correlation_id(id.to_string())
            .property(RECEIPT_MESSAGE_ID, id.to_string())
            .property(RECEIPT_QUEUE, rec.0.as_str())
            .property(RECEIPT_AT, self.now.to_string());
        m = match outcome {
            Outcome::Completed => m.property(RECEIPT_OUTCOME, RECEIPT_COMPLETED),
            Outcome::DeadLettered(reason) => m
                .property(RECEIPT_OUTCOME, RECEIPT_DEAD_LETTERED)
                .property(RECEIPT_REASON, reason),
        };
        self.insert_message(to.id, &to.options, m)?;
        Ok(())
    }
}
