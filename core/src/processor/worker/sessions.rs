//! Session mode: a worker holds one session (group) at a time, takes its messages one by one
//! and lets it go when nothing of it is receivable.

use super::Worker;
use crate::engine::{HeldLock, QueueRef, Settle};
use crate::error::Result;

impl Worker<'_> {
    /// Session mode: settles the run's message and, in the same commit, takes the session's
    /// next message into the buffer (renewing the session lock when due) or releases the
    /// session when nothing of it is receivable — one commit per message, as plain workers
    /// pay. A stopping worker only settles.
    pub(super) fn settle_in_session(
        &mut self,
        lock: HeldLock,
        how: Settle,
    ) -> Result<Option<String>> {
        let held = self.session.clone().filter(|_| !self.sh.is_stopping());
        let Some((group, stoken, _)) = held else {
            return self.settle(lock, how);
        };
        let q = &self.sh.queue;
        let (settled, next) =
            q.engine
                .settle_then_session_next(lock, how, q.queue_ref(), &group, stoken);
        match next {
            Ok((Some(l), Some(until))) => {
                self.session = Some((group, stoken, until));
                self.accept(vec![l]);
            }
            Ok((_, _)) => self.session = None,
            Err(e) if e.is_lock_lost() => self.session = None,
            // Anything else: `session_step` tries again with the session still held.
            Err(_) => {}
        }
        settled
    }

    /// Session mode: locks the next message of the held session into the buffer, accepting a
    /// session first if none is held; a session with nothing receivable is released and the
    /// next one tried. Returns whether a message was buffered.
    pub(super) fn session_step(&mut self) -> Result<bool> {
        let q = &self.sh.queue;
        let (qid, name, owner) = (q.id, q.name.to_string(), q.engine.owner);
        loop {
            if self.sh.is_stopping() {
                return Ok(false);
            }
            let Some((group, token, until)) = self.session.clone() else {
                let n = name.clone();
                let got = q
                    .engine
                    .call(move |b| b.accept_session(QueueRef::new(qid, &n), None, owner))?;
                match got {
                    Some((group, s)) => {
                        self.session = Some((group, s.token, s.locked_until));
                        continue;
                    }
                    None => return Ok(false),
                }
            };
            // Keep the session while working through it: renew once half its lock has passed.
            let lock_ms = crate::clock::duration_ms(q.options()?.lock_duration);
            let now = self.sh.clock.now_ms();
            let (n, g) = (name.clone(), group.clone());
            let step = if until.saturating_sub(now) < lock_ms / 2 {
                q.engine
                    .call(move |b| {
                        let until = b.renew_session(QueueRef::new(qid, &n), &g, token)?;
                        Ok((
                            until,
                            b.session_receive(QueueRef::new(qid, &n), &g, token, owner)?,
                        ))
                    })
                    .map(|(until, got)| {
                        self.session = Some((group.clone(), token, until));
                        got
                    })
            } else {
                q.engine
                    .call(move |b| b.session_receive(QueueRef::new(qid, &n), &g, token, owner))
            };
            match step {
                Ok(Some(l)) => {
                    self.accept(vec![l]);
                    return Ok(true);
                }
                Ok(None) => self.release_session(),
                Err(e) if e.is_lock_lost() => self.session = None,
                Err(e) => return Err(e),
            }
        }
    }

    /// Lets go of the session this worker holds, if any (best effort: it expires anyway).
    pub(super) fn release_session(&mut self) {
        if self.sh.is_forked() {
            return;
        }
        if let Some((group, token, _)) = self.session.take() {
            let q = &self.sh.queue;
            let (qid, name) = (q.id, q.name.to_string());
            let _ = q
                .engine
                .call(move |b| b.release_session(QueueRef::new(qid, &name), &group, token));
        }
    }
}
