//! Logical log records: the operations a simple producer issues, logged as the operation and
//! everything it decided up front (the batch's time, each message's id) instead of as the
//! rows it changed. Such a record can be written and synced before the batch runs, so the
//! B-tree work overlaps the sync (`pipeline/run.rs`); replay runs the operations again on the
//! state the records before them made, which gives the same rows.
//!
//! A body is `LOGICAL | now (u64 LE) | operation count | operations`; an operation is
//! `kind | queue id (u32 LE) | queue name | message count | messages`, each message as
//! `codec::encode_logged_message` writes it, lengths as varints. Part of the log format.

use std::collections::HashMap;
use std::sync::Arc;

use redb::WriteTransaction;

use super::batch::{Batch, DueHints, QueueRef};
use super::codec;
use super::logged::{Changes, LoggedTxn};
use super::wal::kinds::{LOGICAL, bad_logical};
use crate::error::Result;
use crate::message::{Message, Sent};

const SEND_ONE: u8 = 1;
const SEND_MANY: u8 = 2;

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
}

impl LogicalOp {
    /// Whether the operation can be logged as itself. A message with a `message_key` may turn
    /// out to be a duplicate, which takes no id: deciding its id before the batch runs would
    /// use up one that the next message gets today, so such sends are logged as rows.
    pub fn loggable(&self) -> bool {
        match self {
            LogicalOp::Send { msgs, .. } => msgs.iter().all(|m| m.props.message_key.is_none()),
        }
    }

    /// Decides what replay must not decide again — each message's id — and appends the
    /// operation to `body`.
    ///
    /// # Errors
    ///
    /// The id sequence's errors (`Corrupted` when it is missing).
    pub fn prepare(&mut self, batch: &mut Batch<'_>, body: &mut Vec<u8>) -> Result<()> {
        match self {
            LogicalOp::Send {
                queue,
                name,
                msgs,
                one,
            } => {
                for m in msgs.iter_mut() {
                    if m.tags.reserved_id.is_none() {
                        m.tags.reserved_id = Some(batch.reserve_id()?);
                    }
                }
                body.push(if *one { SEND_ONE } else { SEND_MANY });
                body.extend_from_slice(&queue.to_le_bytes());
                put_varint(body, name.len() as u64);
                body.extend_from_slice(name.as_bytes());
                put_varint(body, msgs.len() as u64);
                for m in msgs.iter() {
                    codec::encode_logged_message(body, m);
                }
                Ok(())
            }
        }
    }

    /// Runs the operation in `batch`: the same call whether the pipeline runs it the first
    /// time or replay runs it again.
    ///
    /// # Errors
    ///
    /// The operation's own errors.
    pub fn apply(self, batch: &mut Batch<'_>) -> Result<Vec<Sent>> {
        match self {
            LogicalOp::Send {
                queue,
                name,
                msgs,
                one,
            } => {
                let q = QueueRef::new(queue, &name);
                if one && let [_] = msgs.as_slice() {
                    let m = msgs
                        .into_iter()
                        .next()
                        .ok_or_else(|| bad_logical("empty"))?;
                    Ok(vec![batch.send_one(q, m)?])
                } else {
                    batch.send_detailed(q, msgs)
                }
            }
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

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
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
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad_logical("varint too long"))
    }
    fn len(&mut self) -> Result<usize> {
        usize::try_from(self.varint()?).map_err(|_| bad_logical("length overflows"))
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
    let n = r.len()?;
    // Each operation takes at least six bytes: a count this large is damage, not work.
    if n > body.len() {
        return Err(bad_logical("operation count past the record"));
    }
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = r.byte()?;
        if kind != SEND_ONE && kind != SEND_MANY {
            return Err(bad_logical(&format!("unknown operation {kind}")));
        }
        let queue = u32::from_le_bytes(
            r.take(4)?
                .try_into()
                .map_err(|_| bad_logical("truncated"))?,
        );
        let len = r.len()?;
        let name = std::str::from_utf8(r.take(len)?)
            .map_err(|_| bad_logical("queue name is not UTF-8"))?
            .to_owned();
        let count = r.len()?;
        if count > body.len() {
            return Err(bad_logical("message count past the record"));
        }
        let mut msgs = Vec::with_capacity(count);
        for _ in 0..count {
            let (m, rest) = codec::decode_logged_message(r.0).map_err(|e| bad_logical(&e))?;
            r.0 = rest;
            msgs.push(m);
        }
        ops.push(LogicalOp::Send {
            queue,
            name,
            msgs,
            one: kind == SEND_ONE,
        });
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

#[cfg(test)]
mod tests;
