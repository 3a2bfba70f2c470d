//! Logical log records: the operations a producer and a consumer issue most — send, settle,
//! renew, and "settle, then receive the next" — logged as the operation and everything it
//! decided up front (the batch's time, each sent message's id, the receiving owner) instead of
//! as the rows it changed. Such a record can be written before the batch runs, its transfer to
//! the device going on meanwhile (`pipeline/run.rs`); replay runs the operations again on the
//! state the records before them made, which gives the same rows.
//!
//! A body is `LOGICAL | now (u64 LE) | operation count | operations`, each operation a kind
//! byte and its fields (see `encode_op`): numbers as varints, strings and messages
//! length-prefixed, messages as `codec::encode_logged_message` writes them. Part of the log
//! format.
//!
//! What replay cannot decide again the same way is kept out: a sent message with a
//! `message_key` (a duplicate takes no id), and any message id the run draws from the sequence
//! (a receipt, a dead letter forwarded, a job's continuation), which depends on what
//! transactions reserved meanwhile. The pipeline sees the latter only after the run
//! (`Batch::drew_ids`) and then replaces the record with the batch's rows.

use std::collections::HashMap;
use std::sync::Arc;

use redb::WriteTransaction;

use super::batch::{Batch, DueHints, HeldLock, Locked, QueueRef, Settle};
use super::codec;
use super::logged::{Changes, LoggedTxn};
use super::varint::put as put_varint;
use super::wal::kinds::{LOGICAL, bad_logical};
use crate::error::Result;
use crate::message::{Message, Sent};

const SEND_ONE: u8 = 1;
const SEND_MANY: u8 = 2;
const SETTLE: u8 = 3;
const RENEW: u8 = 4;
const THEN_RECEIVE: u8 = 5;

/// One operation a logical record can carry.
#[derive(Debug, Clone, PartialEq)]
pub enum LogicalOp {
    /// `Batch::send_one` (`one`) or `Batch::send_detailed` of `msgs` to a queue.
    Send {
        queue: u32,
        name: String,
        msgs: Vec<Message>,
        one: bool,
    },
    /// `Batch::settle`.
    Settle { lock: HeldLock, how: Settle },
    /// `Batch::renew`.
    Renew { lock: HeldLock },
    /// `first`, then `Batch::receive` of up to `want` messages of a queue for `owner`, each
    /// part failing alone when it failed before writing (`Engine::then_receive`).
    ThenReceive {
        first: First,
        queue: u32,
        name: String,
        owner: u64,
        want: usize,
    },
}

/// What [`LogicalOp::ThenReceive`] does first.
#[derive(Debug, Clone, PartialEq)]
pub enum First {
    /// `Batch::complete_all`: every lock or none.
    CompleteAll(Vec<HeldLock>),
    /// `Batch::settle`.
    Settle(HeldLock, Settle),
}

/// What a [`LogicalOp`] gives its caller.
#[derive(Debug)]
pub enum LogicalOut {
    Sent(Vec<Sent>),
    /// A settle's answer: the dead-letter reason when the message went there.
    Settled(Option<String>),
    /// A renewed lock's new expiry (ms).
    Renewed(u64),
    /// `ThenReceive`'s two parts.
    Received(Result<Option<String>>, Result<Vec<Locked>>),
}

impl LogicalOp {
    /// Whether the operation can be logged as itself. A message with a `message_key` may turn
    /// out to be a duplicate, which takes no id: deciding its id before the batch runs would
    /// use up one that the next message gets today, so such sends are logged as rows.
    pub fn loggable(&self) -> bool {
        match self {
            LogicalOp::Send { msgs, .. } => msgs.iter().all(|m| m.props.message_key.is_none()),
            _ => true,
        }
    }

    /// Decides what replay must not decide again — each message's id, from `reserve` — and
    /// appends the operation to `body`.
    ///
    /// # Errors
    ///
    /// `reserve`'s errors (the id sequence's: `Corrupted` when it is missing).
    pub fn prepare(
        &mut self,
        reserve: &mut dyn FnMut() -> Result<u64>,
        body: &mut Vec<u8>,
    ) -> Result<()> {
        if let LogicalOp::Send { msgs, .. } = self {
            for m in msgs.iter_mut() {
                if m.tags.reserved_id.is_none() {
                    m.tags.reserved_id = Some(reserve()?);
                }
            }
        }
        encode_op(body, self);
        Ok(())
    }

    /// Runs the operation in `batch`: the same call whether the pipeline runs it the first
    /// time or replay runs it again.
    ///
    /// # Errors
    ///
    /// The operation's own errors.
    pub fn apply(self, batch: &mut Batch<'_>) -> Result<LogicalOut> {
        Ok(match self {
            LogicalOp::Send {
                queue,
                name,
                msgs,
                one,
            } => {
                let q = QueueRef::new(queue, &name);
                LogicalOut::Sent(if one && let [_] = msgs.as_slice() {
                    let m = msgs
                        .into_iter()
                        .next()
                        .ok_or_else(|| bad_logical("empty"))?;
                    vec![batch.send_one(q, m)?]
                } else {
                    batch.send_detailed(q, msgs)?
                })
            }
            LogicalOp::Settle { lock, how } => LogicalOut::Settled(batch.settle(lock, &how)?),
            LogicalOp::Renew { lock } => LogicalOut::Renewed(batch.renew(lock)?),
            LogicalOp::ThenReceive {
                first,
                queue,
                name,
                owner,
                want,
            } => {
                let done = batch.attempt(|b| match &first {
                    First::CompleteAll(locks) => b.complete_all(locks).map(|()| None),
                    First::Settle(lock, how) => b.settle(*lock, how),
                })?;
                let got = batch.attempt(|b| {
                    if want == 0 {
                        Ok(Vec::new())
                    } else {
                        b.receive(QueueRef::new(queue, &name), owner, want)
                    }
                })?;
                LogicalOut::Received(done, got)
            }
        })
    }
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    put_varint(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

fn put_lock(buf: &mut Vec<u8>, l: &HeldLock) {
    put_varint(buf, l.id);
    put_varint(buf, l.token);
}

fn put_settle(buf: &mut Vec<u8>, how: &Settle) {
    match how {
        Settle::Complete => buf.push(0),
        Settle::Abandon { delay_ms } => {
            buf.push(1);
            put_varint(buf, *delay_ms);
        }
        Settle::Fail {
            delay_ms,
            description,
        } => {
            buf.push(2);
            put_varint(buf, *delay_ms);
            put_str(buf, description);
        }
        Settle::DeadLetter {
            reason,
            description,
        } => {
            buf.push(3);
            put_str(buf, reason);
            put_str(buf, description);
        }
        Settle::Resubmit => buf.push(4),
        Settle::Defer => buf.push(5),
    }
}

/// Appends `op` to a record's body.
fn encode_op(body: &mut Vec<u8>, op: &LogicalOp) {
    match op {
        LogicalOp::Send {
            queue,
            name,
            msgs,
            one,
        } => {
            body.push(if *one { SEND_ONE } else { SEND_MANY });
            put_varint(body, u64::from(*queue));
            put_str(body, name);
            put_varint(body, msgs.len() as u64);
            for m in msgs {
                codec::encode_logged_message(body, m);
            }
        }
        LogicalOp::Settle { lock, how } => {
            body.push(SETTLE);
            put_lock(body, lock);
            put_settle(body, how);
        }
        LogicalOp::Renew { lock } => {
            body.push(RENEW);
            put_lock(body, lock);
        }
        LogicalOp::ThenReceive {
            first,
            queue,
            name,
            owner,
            want,
        } => {
            body.push(THEN_RECEIVE);
            match first {
                First::CompleteAll(locks) => {
                    body.push(0);
                    put_varint(body, locks.len() as u64);
                    for l in locks {
                        put_lock(body, l);
                    }
                }
                First::Settle(lock, how) => {
                    body.push(1);
                    put_lock(body, lock);
                    put_settle(body, how);
                }
            }
            put_varint(body, u64::from(*queue));
            put_str(body, name);
            put_varint(body, *owner);
            put_varint(body, *want as u64);
        }
    }
}

/// Starts a logical record's body for a batch at `now`, holding `ops` operations.
pub fn begin(body: &mut Vec<u8>, now: u64, ops: usize) {
    body.clear();
    body.push(LOGICAL);
    body.extend_from_slice(&now.to_le_bytes());
    put_varint(body, ops as u64);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.0.len() {
            return Err(bad_logical("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn varint(&mut self) -> Result<u64> {
        super::varint::take(&mut self.0).map_err(|bad| match bad {
            super::varint::Bad::Truncated => bad_logical("truncated"),
            super::varint::Bad::TooLong => bad_logical("varint too long"),
        })
    }
    fn len(&mut self) -> Result<usize> {
        usize::try_from(self.varint()?).map_err(|_| bad_logical("length overflows"))
    }
}

impl<'a> Reader<'a> {
    fn string(&mut self) -> Result<String> {
        let len = self.len()?;
        Ok(std::str::from_utf8(self.take(len)?)
            .map_err(|_| bad_logical("a string is not UTF-8"))?
            .to_owned())
    }
    fn u32(&mut self) -> Result<u32> {
        u32::try_from(self.varint()?).map_err(|_| bad_logical("a queue id out of range"))
    }
    fn lock(&mut self) -> Result<HeldLock> {
        Ok(HeldLock {
            id: self.varint()?,
            token: self.varint()?,
        })
    }
    /// A count of items that each take at least one byte: larger than what is left is damage.
    fn count(&mut self) -> Result<usize> {
        let n = self.len()?;
        if n > self.0.len() {
            return Err(bad_logical("a count runs past the record"));
        }
        Ok(n)
    }
    fn settle(&mut self) -> Result<Settle> {
        Ok(match self.byte()? {
            0 => Settle::Complete,
            1 => Settle::Abandon {
                delay_ms: self.varint()?,
            },
            2 => Settle::Fail {
                delay_ms: self.varint()?,
                description: self.string()?,
            },
            3 => Settle::DeadLetter {
                reason: self.string()?,
                description: self.string()?,
            },
            4 => Settle::Resubmit,
            5 => Settle::Defer,
            t => return Err(bad_logical(&format!("unknown settle {t}"))),
        })
    }
    fn op(&mut self) -> Result<LogicalOp> {
        Ok(match self.byte()? {
            kind @ (SEND_ONE | SEND_MANY) => {
                let queue = self.u32()?;
                let name = self.string()?;
                let count = self.count()?;
                let mut msgs = Vec::with_capacity(count);
                for _ in 0..count {
                    let (m, rest) =
                        codec::decode_logged_message(self.0).map_err(|e| bad_logical(&e))?;
                    self.0 = rest;
                    msgs.push(m);
                }
                LogicalOp::Send {
                    queue,
                    name,
                    msgs,
                    one: kind == SEND_ONE,
                }
            }
            SETTLE => LogicalOp::Settle {
                lock: self.lock()?,
                how: self.settle()?,
            },
            RENEW => LogicalOp::Renew { lock: self.lock()? },
            THEN_RECEIVE => {
                let first = match self.byte()? {
                    0 => {
                        let n = self.count()?;
                        let mut locks = Vec::with_capacity(n);
                        for _ in 0..n {
                            locks.push(self.lock()?);
                        }
                        First::CompleteAll(locks)
                    }
                    1 => First::Settle(self.lock()?, self.settle()?),
                    t => return Err(bad_logical(&format!("unknown first part {t}"))),
                };
                LogicalOp::ThenReceive {
                    first,
                    queue: self.u32()?,
                    name: self.string()?,
                    owner: self.varint()?,
                    want: self.len()?,
                }
            }
            kind => return Err(bad_logical(&format!("unknown operation {kind}"))),
        })
    }
}

/// Decodes a logical record's body: the batch's time and its operations.
///
/// # Errors
///
/// `Corrupted` for a body that does not decode.
pub fn decode(body: &[u8]) -> Result<(u64, Vec<LogicalOp>)> {
    let mut r = Reader(body);
    if r.byte()? != LOGICAL {
        return Err(bad_logical("not a logical record"));
    }
    let now = u64::from_le_bytes(
        r.take(8)?
            .try_into()
            .map_err(|_| bad_logical("truncated"))?,
    );
    let n = r.count()?;
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        ops.push(r.op()?);
    }
    if !r.0.is_empty() {
        return Err(bad_logical("bytes after the last operation"));
    }
    Ok((now, ops))
}

/// Replays consecutive logical records in `txn`, in one batch: each record's operations run
/// at the record's time, as the pipeline ran them. An operation that fails cleanly failed the
/// same way when it first ran (its caller heard the error); one that fails after writing
/// could not have committed, and a batch that did not commit has a void record, so replay
/// refuses the log instead of guessing.
///
/// # Errors
///
/// `Corrupted` for a body that does not decode or an operation that fails after writing;
/// redb's errors.
pub fn replay(txn: &WriteTransaction, bodies: &[&[u8]]) -> Result<()> {
    let changes = Changes::off();
    let ltxn = LoggedTxn {
        txn,
        changes: &changes,
    };
    let mut batch = Batch::open(ltxn, 0, DueHints::default())?;
    batch.track_activity(Arc::new(crate::sync::Mutex::new(HashMap::new())));
    for body in bodies {
        let (now, ops) = decode(body)?;
        batch.now = now;
        for op in ops {
            if let Err(e) = batch.attempt(|b| op.apply(b)) {
                return Err(bad_logical(&format!(
                    "an operation failed after writing when replayed: {e}"
                )));
            }
        }
    }
    batch.flush()
}

mod calls;
#[cfg(test)]
mod tests;
