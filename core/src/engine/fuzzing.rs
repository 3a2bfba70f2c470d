//! Entry points for the fuzz targets under `fuzz/` (feature `fuzzing`, off by default; not part
//! of the API). Each takes untrusted bytes the way the engine meets them on disk and must
//! return, never panic. Where a decode succeeds, re-encoding and decoding again must give the
//! same value: a record the engine wrote back would otherwise read differently the next time.

use super::batch::JobRecord;
use super::codec;
use super::tables::{STATE_LEN, SessionRecord, State};
use super::wal;

/// The format byte of a checksummed record (envelope or queue record).
const SEALED: u8 = 0xFE;

/// Seals `fields` as a format-2 record bound to `key`, so that a fuzz input reaches the field
/// parser behind the checksum (see `codec`'s module documentation for the layout).
pub fn seal_record(key: &[u8], fields: &[u8]) -> Vec<u8> {
    let crc = crc32c::crc32c_append(
        crc32c::crc32c_append(crc32c::crc32c(&[SEALED]), key),
        fields,
    );
    let mut out = Vec::with_capacity(fields.len() + 5);
    out.push(SEALED);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(fields);
    out
}

/// Decodes a `DATA` value of message `id`; on success checks that it round-trips.
pub fn envelope(id: u64, buf: &[u8]) -> bool {
    let Ok(env) = codec::decode_envelope(id, buf) else {
        return false;
    };
    let again = codec::encode_envelope(id, &env.props, env.dead_letter.as_ref(), &env.body);
    assert_eq!(codec::decode_envelope(id, &again).as_ref(), Ok(&env));
    true
}

/// Decodes a message a collator holds; on success checks that it round-trips.
pub fn held(series: &str, seq: u64, buf: &[u8]) -> bool {
    let Ok(m) = codec::decode_held(series, seq, buf) else {
        return false;
    };
    let again = codec::encode_held(series, seq, &m);
    assert_eq!(codec::decode_held(series, seq, &again).as_ref(), Ok(&m));
    true
}

/// Decodes a `QUEUES` value of queue `name`; on success checks that it round-trips.
pub fn queue_record(name: &str, buf: &[u8]) -> bool {
    let Ok(rec) = codec::decode_queue(name, buf) else {
        return false;
    };
    let again = codec::encode_queue(name, &rec);
    assert_eq!(codec::decode_queue(name, &again).as_ref(), Ok(&rec));
    true
}

/// Decodes a message state row (checksummed, and as format 1); each success must round-trip.
pub fn state_row(id: u64, buf: &[u8; STATE_LEN]) -> bool {
    let mut ok = false;
    for st in [State::decode(id, buf), State::decode_format1(buf)]
        .into_iter()
        .flatten()
    {
        assert_eq!(State::decode(id, &st.encode(id)), Ok(st));
        ok = true;
    }
    ok
}

/// Decodes a session row of `group` in queue `q`; on success checks that it round-trips.
pub fn session_row(q: u32, group: &str, buf: &[u8]) -> bool {
    let Ok(rec) = SessionRecord::decode(q, group, buf) else {
        return false;
    };
    assert_eq!(
        SessionRecord::decode(q, group, &rec.encode(q, group)),
        Ok(rec)
    );
    true
}

/// Decodes a job record; on success checks that it round-trips.
pub fn job_row(job: u64, buf: &[u8]) -> bool {
    let Ok(rec) = JobRecord::decode(job, buf) else {
        return false;
    };
    let again = JobRecord::decode(job, &rec.encode(job));
    assert_eq!(again.as_ref(), Ok(&rec));
    true
}

/// Reads a whole write-ahead log file as recovery reads its chain (under the header's own
/// store and cycle, or as a log of format 1), then decodes every record it found past
/// `applied`. Returns the number of changes decoded, or `None` when the log is refused.
pub fn log_file(data: &[u8], applied: u64) -> Option<usize> {
    use wal::format::{self, Header, Parsed};
    let chain = match Header::parse(data) {
        Parsed::Current(h) => {
            format::chain(data, format::salt(h.store, h.cycle), Some(h.cycle)).ok()?
        }
        Parsed::Legacy => format::legacy_chain(data, applied).ok()?,
        Parsed::Absent | Parsed::Damaged => return None,
    };
    let mut changes = 0;
    for f in chain.past(applied) {
        changes += wal::rows::decode(data.get(f.body.clone())?).ok()?.len();
    }
    Some(changes)
}

/// The store and cycle a log file's header names (`None` for a header of format 1 or none).
pub fn log_ids(data: &[u8]) -> Option<(u64, u64)> {
    match wal::format::Header::parse(data) {
        wal::format::Parsed::Current(h) => Some((h.store, h.cycle)),
        _ => None,
    }
}

/// Decodes one write-ahead log record body; on success checks that it re-encodes to the same
/// bytes (the encoding of a change is unique).
pub fn log_body(body: &[u8]) -> bool {
    let Ok(changes) = wal::rows::decode(body) else {
        return false;
    };
    let mut again = Vec::new();
    for c in &changes {
        match *c {
            wal::rows::Change::Put { table, key, value } => {
                wal::rows::encode_put(&mut again, table, key, value)
            }
            wal::rows::Change::Remove { table, key } => {
                wal::rows::encode_remove(&mut again, table, key)
            }
        }
    }
    // LEB128 admits padded lengths (0x80 0x00 for 0), so compare what they decode to.
    assert_eq!(wal::rows::decode(&again).ok().as_ref(), Some(&changes));
    true
}

/// The first bytes of a write-ahead log file of store `store` in cycle `cycle`, `capacity`
/// bytes long: its header, then zeros up to the first record.
pub fn log_header(store: u64, cycle: u64, capacity: u64) -> Vec<u8> {
    wal::fuzz_header(store, cycle, capacity)
}

/// A whole log record (head, checksum, body, padding) numbered `seq`, as an append writes it in
/// store `store`'s cycle `cycle`.
pub fn log_record(store: u64, cycle: u64, seq: u64, body: &[u8]) -> Vec<u8> {
    wal::fuzz_record(store, cycle, seq, body)
}

/// Encodes a put of `key` → `value` into table number `table` (a log record's body).
pub fn log_put(buf: &mut Vec<u8>, table: u8, key: &[u8], value: &[u8]) {
    wal::rows::encode_put(buf, table, key, value);
}

/// Encodes a removal of `key` from table number `table` (a log record's body).
pub fn log_remove(buf: &mut Vec<u8>, table: u8, key: &[u8]) {
    wal::rows::encode_remove(buf, table, key);
}

/// Decodes a typed-queue body (bincode) as `T`: an error or a value, never a huge allocation.
pub fn typed_queue_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
    crate::body_codec::decode(body).ok()
}
