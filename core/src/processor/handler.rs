//! The user's handler, in the two shapes a processor runs: peek-lock and transactional; and
//! the text of a panic caught from the user's code (a handler or a callback).

use super::Delivery;
use crate::tx::Transaction;

/// Why a handler did not succeed.
pub(super) enum Failure {
    Handler(String),
    Decode(String),
}

pub(super) type PeekLockFn = dyn Fn(&Delivery) -> std::result::Result<(), Failure> + Send + Sync;
pub(super) type TransactionalFn =
    dyn Fn(&Delivery, &mut Transaction) -> std::result::Result<(), Failure> + Send + Sync;

pub(super) enum Handler {
    PeekLock(Box<PeekLockFn>),
    Transactional(Box<TransactionalFn>),
}

/// What a caught panic says, for the log and the failure it becomes.
pub(super) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
