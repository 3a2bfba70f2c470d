//! The bridge between a processor delivery and a handler written in another language: the
//! handler gets a [`HeldMessage`] lent for one call, and what it asked for is applied here.

use std::time::Duration;

use super::held::HeldMessage;
use crate::Transaction;
use crate::processor::{Delivery, RetryPolicy};

/// Ends the loan of `message` after its handler returned `handler`: a dead letter the handler
/// asked for is handed to the processor whatever the handler returned (as
/// [`Delivery::dead_letter`] promises), then the handler's own result is passed on.
///
/// # Errors
///
/// The handler's failure text, or the text of a dead-letter request the processor refused.
pub fn finish_lent<T>(
    delivery: &Delivery,
    message: &HeldMessage<T>,
    handler: Result<(), String>,
) -> Result<(), String> {
    if let Some(request) = message.end_loan() {
        delivery
            .dead_letter(&request.reason, &request.description)
            .map_err(|e| e.to_string())?;
    }
    handler
}

/// The retry policy of flat processor options, where each absent field takes the default's
/// value; `None` when no field was given (the processor's default applies).
pub fn retry_policy(
    initial: Option<Duration>,
    multiplier: Option<u32>,
    max: Option<Duration>,
) -> Option<RetryPolicy> {
    if initial.is_none() && multiplier.is_none() && max.is_none() {
        return None;
    }
    let d = RetryPolicy::default();
    let mut p = RetryPolicy::exponential(initial.unwrap_or(d.initial), max.unwrap_or(d.max));
    if let Some(m) = multiplier {
        p.multiplier = m;
    }
    Some(p)
}

/// Takes a transactional processor's transaction out of `tx` to lend it to a foreign handler,
/// leaving an empty transaction of the same store in its place (dropping that does nothing:
/// no locks, no sends). Put the lent one back with `*tx = lent` when the handler returns.
pub fn take_transaction(tx: &mut Transaction) -> Transaction {
    let empty = tx.empty_like();
    std::mem::replace(tx, empty)
}
