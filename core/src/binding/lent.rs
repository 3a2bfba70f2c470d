//! The bridge between a processor delivery and a handler written in another language: the
//! handler gets a [`HeldMessage`](super::HeldMessage) lent for one call, whose processor calls go to the
//! delivery's [`LentDelivery`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::Transaction;
use crate::error::Result;
use crate::message::{Message, MessageId};
use crate::processor::{Delivery, Lease, LockWatch, RetryPolicy};

/// The processor's lock on a delivery, as a foreign handler's message handle reaches it: the
/// calls of [`Delivery`] (checkpoints, renewal, reply, dead-letter request), shared with the
/// processor, which keeps renewing the same lock. Owned (the handle may outlive the handler
/// call, e.g. kept by Python code); every call fails with `InvalidArgument` once the handler
/// has returned.
#[derive(Clone)]
pub struct LentDelivery(Arc<Lease>);

impl std::fmt::Debug for LentDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LentDelivery")
            .field("id", &self.0.envelope().id())
            .field("returned", &self.0.is_closed())
            .finish_non_exhaustive()
    }
}

impl LentDelivery {
    /// The lock of `delivery`.
    pub fn of(delivery: &Delivery) -> LentDelivery {
        LentDelivery(delivery.lease().clone())
    }

    /// As [`Delivery::mark_done`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::mark_done`].
    pub fn mark_done(&self, keys: Vec<String>) -> Result<SystemTime> {
        self.0.mark_done(keys)
    }

    /// As [`Delivery::done_keys`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::done_keys`].
    pub fn done_keys(&self) -> Result<BTreeSet<String>> {
        self.0.done_keys()
    }

    /// As [`Delivery::renew_lock`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::renew_lock`].
    pub fn renew_lock(&self) -> Result<SystemTime> {
        self.0.renew_lock()
    }

    /// As [`Delivery::reply`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::reply`].
    pub fn reply(&self, reply: Message) -> Result<MessageId> {
        self.0.reply(reply)
    }

    /// As [`Delivery::dead_letter`].
    ///
    /// # Errors
    ///
    /// As [`Delivery::dead_letter`].
    pub fn dead_letter(&self, reason: &str, description: &str) -> Result<()> {
        self.0.dead_letter(reason, description)
    }

    /// As [`Delivery::lock_watch`].
    pub fn lock_watch(&self) -> LockWatch {
        self.0.lock_watch()
    }

    /// As [`Delivery::locked_until`].
    pub fn locked_until(&self) -> SystemTime {
        self.0.locked_until()
    }

    /// Whether the handler has returned (the processor settles the message).
    pub fn has_returned(&self) -> bool {
        self.0.is_closed()
    }
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
