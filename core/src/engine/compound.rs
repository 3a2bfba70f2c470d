//! Operations on several locks at once, written here once and called by name by the queue
//! handle, the transaction and the processor: complete all or none, abandon all, renew all,
//! and "do this, then that" in the same commit (a transaction's commit and the next receive, or
//! a settle and a session's next message: `then_receive`, `settle_then_session_next`), with the
//! one rule for what each part hears when one fails. A settle or a completion followed by a
//! receive is logged as one operation instead (`logical/calls.rs`).

use super::batch::{Batch, Locked, QueueRef, Settle};
use super::{Engine, HeldLock};
use crate::error::{Error, Result};

/// A session's next step (see `Batch::session_next`): its next message, and the session
/// lock's expiry (`None`: released).
pub type SessionNext = (Option<Locked>, Option<u64>);

impl Batch<'_> {
    /// Completes every lock, all or none: every lock is checked before the first completion.
    pub fn complete_all(&mut self, locks: &[HeldLock]) -> Result<()> {
        for l in locks {
            self.check_lock(*l)?;
        }
        for l in locks {
            self.settle(*l, &Settle::Complete)?;
        }
        Ok(())
    }

    /// Returns every message to its queue; locks already lost are skipped.
    pub fn abandon_all(&mut self, locks: &[HeldLock]) -> Result<()> {
        for l in locks {
            match self.settle(*l, &Settle::Abandon { delay_ms: 0 }) {
                Ok(_) | Err(Error::LockLost(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Completes every lock in one commit, all or none. On failure the messages are returned
    /// to their queues (their locks would otherwise wait for expiry).
    pub fn complete_all(&self, locks: Vec<HeldLock>) -> Result<()> {
        if locks.is_empty() {
            return Ok(());
        }
        let result = self.call({
            let locks = locks.clone();
            move |b| b.complete_all(&locks)
        });
        if result.is_err() {
            let _ = self.abandon_all(locks);
        }
        result
    }

    /// Returns every message to its queue in one commit, ignoring locks already lost.
    pub fn abandon_all(&self, locks: Vec<HeldLock>) -> Result<()> {
        if locks.is_empty() {
            return Ok(());
        }
        self.call(move |b| b.abandon_all(&locks))
    }

    /// Renews every lock in one commit; each gets its own result (its new expiry, or why
    /// not).
    pub fn renew_all(&self, locks: Vec<HeldLock>) -> Vec<Result<u64>> {
        let n = locks.len();
        let r = self.call(move |b| {
            let mut out = Vec::with_capacity(locks.len());
            for l in locks {
                out.push(b.attempt(|b| b.renew(l))?);
            }
            Ok(out)
        });
        match r {
            Ok(v) => v,
            Err(e) => (0..n).map(|_| Err(e.duplicate())).collect(),
        }
    }

    /// Runs `first`, then locks up to `want` messages of queue `q` for this process, in one
    /// commit: a consumer's settle (or a transaction's commit) and its next receive share the
    /// fsync. Either part may fail alone when it failed before writing; one that failed half
    /// way fails both.
    pub fn then_receive<A, F>(
        &self,
        first: F,
        queue: QueueRef<'_>,
        want: usize,
    ) -> (Result<A>, Result<Vec<Locked>>)
    where
        F: FnOnce(&mut Batch<'_>) -> Result<A> + Send + 'static,
        A: Send + 'static,
    {
        let QueueRef { id: q, name } = queue;
        let (owner, name) = (self.owner, name.to_owned());
        self.both(first, move |b| {
            if want == 0 {
                Ok(Vec::new())
            } else {
                b.receive(QueueRef::new(q, &name), owner, want)
            }
        })
    }

    /// Settles the message under `lock` as `how`, then, in the same commit, takes the next
    /// message of session `group` of queue `q`, held under the session token `session` (see
    /// `Batch::session_next`: the message, and the session lock's expiry, `None` once the
    /// session is released). A session worker pays one commit per message this way.
    pub fn settle_then_session_next(
        &self,
        lock: HeldLock,
        how: Settle,
        queue: QueueRef<'_>,
        group: &str,
        session: u64,
    ) -> (Result<Option<String>>, Result<SessionNext>) {
        let QueueRef { id: q, name } = queue;
        let (owner, name, group) = (self.owner, name.to_owned(), group.to_owned());
        self.both(
            move |b| b.settle(lock, &how),
            move |b| b.session_next(QueueRef::new(q, &name), &group, session, owner),
        )
    }

    /// Runs `first`, then `second`, in one commit. Either may fail alone when it failed before
    /// writing; one that failed half way fails both, and so does a commit that failed.
    pub fn both<A, B, F, G>(&self, first: F, second: G) -> (Result<A>, Result<B>)
    where
        F: FnOnce(&mut Batch<'_>) -> Result<A> + Send + 'static,
        G: FnOnce(&mut Batch<'_>) -> Result<B> + Send + 'static,
        A: Send + 'static,
        B: Send + 'static,
    {
        let r = self.call(move |b| {
            let done = b.attempt(first)?;
            let got = b.attempt(second)?;
            Ok((done, got))
        });
        match r {
            Ok(pair) => pair,
            Err(e) => {
                let again = e.duplicate();
                (Err(e), Err(again))
            }
        }
    }
}
