//! The user's handler, in the two shapes a processor runs: peek-lock and transactional.

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
