//! The store's calls that run as logical operations: what the queue handle, a received
//! message and the processor call to send, settle, renew, and settle then receive the next.
//! Each builds its [`LogicalOp`] and turns the [`LogicalOut`] back into its own answer.

use super::{First, LogicalOp, LogicalOut};
use crate::engine::Engine;
use crate::engine::batch::{HeldLock, Locked, QueueRef, Settle};
use crate::error::{Error, Result};
use crate::message::{Message, Sent};

/// An answer of the wrong shape: a bug, reported rather than panicking.
fn mismatch() -> Error {
    Error::Panic("a logical operation gave another operation's answer".into())
}

impl Engine {
    fn call_logical(&self, op: LogicalOp) -> Result<LogicalOut> {
        self.check_open()?;
        self.pipeline
            .call_logical(op)
            .map_err(|e| self.pipeline_error(e))
    }

    /// Sends `msgs` to queue `q` (`Batch::send_one` when `one`, else `Batch::send_detailed`):
    /// one result per message.
    pub fn send_logged(&self, q: QueueRef<'_>, msgs: Vec<Message>, one: bool) -> Result<Vec<Sent>> {
        let op = LogicalOp::Send {
            queue: q.id,
            name: q.name.to_owned(),
            msgs,
            one,
        };
        match self.call_logical(op)? {
            LogicalOut::Sent(s) => Ok(s),
            _ => Err(mismatch()),
        }
    }

    /// Settles the message under `lock` as `how` (`Batch::settle`): the dead-letter reason
    /// when it went there.
    pub fn settle_logged(&self, lock: HeldLock, how: Settle) -> Result<Option<String>> {
        match self.call_logical(LogicalOp::Settle { lock, how })? {
            LogicalOut::Settled(r) => Ok(r),
            _ => Err(mismatch()),
        }
    }

    /// Renews the lock `lock` (`Batch::renew`): its new expiry.
    pub fn renew_logged(&self, lock: HeldLock) -> Result<u64> {
        match self.call_logical(LogicalOp::Renew { lock })? {
            LogicalOut::Renewed(until) => Ok(until),
            _ => Err(mismatch()),
        }
    }

    /// Completes every lock (all or none), then locks up to `want` messages of `queue` for
    /// this process, in one commit; each part fails alone when it failed before writing, one
    /// that failed half way fails both (as `Engine::then_receive`).
    pub fn complete_then_receive(
        &self,
        locks: Vec<HeldLock>,
        queue: QueueRef<'_>,
        want: usize,
    ) -> (Result<()>, Result<Vec<Locked>>) {
        let (done, got) = self.first_then_receive(First::CompleteAll(locks), queue, want);
        (done.map(drop), got)
    }

    /// Settles the message under `lock` as `how`, then locks up to `want` messages of
    /// `queue`, in one commit (see [`Engine::complete_then_receive`]): a processor worker's
    /// settle and its next receive. The settle's answer is the dead-letter reason when the
    /// message went there.
    pub fn settle_then_receive(
        &self,
        lock: HeldLock,
        how: Settle,
        queue: QueueRef<'_>,
        want: usize,
    ) -> (Result<Option<String>>, Result<Vec<Locked>>) {
        self.first_then_receive(First::Settle(lock, how), queue, want)
    }

    fn first_then_receive(
        &self,
        first: First,
        queue: QueueRef<'_>,
        want: usize,
    ) -> (Result<Option<String>>, Result<Vec<Locked>>) {
        let op = LogicalOp::ThenReceive {
            first,
            queue: queue.id,
            name: queue.name.to_owned(),
            owner: self.owner,
            want,
        };
        match self.call_logical(op) {
            Ok(LogicalOut::Received(done, got)) => (done, got),
            Ok(_) => (Err(mismatch()), Err(mismatch())),
            Err(e) => {
                let again = e.duplicate();
                (Err(e), Err(again))
            }
        }
    }
}
