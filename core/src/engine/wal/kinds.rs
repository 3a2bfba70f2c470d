//! What a record's body is: row changes (`rows`), a logical record (operations replay runs
//! again, see `engine::logical`), a void (a logical record whose batch failed after the
//! record was written: replay skips it), or a replacement (a logical record whose run drew
//! something replay could not draw again: replay applies the batch's rows instead). The first
//! byte tells: row changes start with a change kind (1 or 2), the others with their own kind
//! byte. Part of the log format.

use std::collections::HashSet;

use redb::WriteTransaction;

use super::rows;
use crate::error::{Error, Result};

/// First byte of a logical record's body.
pub const LOGICAL: u8 = 3;
/// First byte of a void record's body, followed by the voided record's sequence number (u64,
/// little-endian).
pub const VOID: u8 = 4;

/// First byte of a replacement's body, followed by the replaced record's sequence number (u64,
/// little-endian) and the batch's row changes.
pub const REPLACE: u8 = 5;

/// Runs a series of logical record bodies, in order, in `txn` (`engine::logical::replay`:
/// the log knows what a logical record is only by its kind byte).
pub type LogicalReplay = fn(&WriteTransaction, &[&[u8]]) -> Result<()>;

/// The body of a void record for record `seq`.
pub fn void(seq: u64) -> [u8; 9] {
    let mut b = [0u8; 9];
    b[0] = VOID;
    b[1..].copy_from_slice(&seq.to_le_bytes());
    b
}

/// Appends to `out` the body of a replacement for record `seq` holding the row changes `rows`.
pub fn replacement(out: &mut Vec<u8>, seq: u64, rows: &[u8]) {
    out.clear();
    out.reserve(9 + rows.len());
    out.push(REPLACE);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(rows);
}

/// The record a void or a replacement cancels.
fn voided(body: &[u8]) -> Option<u64> {
    match body {
        [VOID | REPLACE, rest @ ..] => rest
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes),
        _ => None,
    }
}

/// Replays record bodies (with their sequence numbers, in log order) into `txn`: consecutive
/// row-change bodies as their net effect (`rows::Applier::apply_all`), consecutive logical
/// bodies through `logical`, skipping every voided or replaced record and the voids
/// themselves; a replacement's rows are applied where it stands. A run of
/// one kind ends where the other begins, so each sees the state the records before it made.
///
/// # Errors
///
/// `Corrupted` for a body that does not decode; what replaying it returns.
pub fn replay(
    txn: &WriteTransaction,
    bodies: &[(u64, &[u8])],
    logical: LogicalReplay,
) -> Result<()> {
    let voids: HashSet<u64> = bodies.iter().filter_map(|(_, b)| voided(b)).collect();
    // What stays: records nothing cancels, and a replacement's rows in its own place.
    let live: Vec<&[u8]> = bodies
        .iter()
        .filter(|(seq, b)| !voids.contains(seq) && b.first() != Some(&VOID))
        .map(|(_, b)| match b.first() {
            Some(&REPLACE) => b.get(9..).unwrap_or_default(),
            _ => *b,
        })
        .collect();
    let is_logical = |b: &[u8]| b.first() == Some(&LOGICAL);
    let mut rest = &live[..];
    while let Some(first) = rest.first() {
        let kind = is_logical(first);
        let n = rest.iter().take_while(|b| is_logical(b) == kind).count();
        let (run, after) = rest.split_at(n);
        if kind {
            logical(txn, run)?;
        } else {
            rows::Applier::new(txn).apply_all(run.iter().copied())?;
        }
        rest = after;
    }
    Ok(())
}

/// `Corrupted` for a logical body replay cannot read.
pub fn bad_logical(what: &str) -> Error {
    Error::corrupted(format!("write-ahead log: logical record: {what}"))
}
