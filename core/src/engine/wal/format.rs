//! The bytes of a write-ahead log: its header and its records, and reading a chain of records
//! back (`docs/design.md` § Write-ahead log).
//!
//! Header page (4 KiB; the header itself is the first 60 bytes, inside one disk sector):
//!
//! ```text
//! magic "postbox-wal\0" | version u32 = 2 | store id u64 | cycle u64 | prev u64 | prev_end u64
//!   | capacity u64 | crc32c u32 (of everything before it)
//! ```
//!
//! Records, 8-byte aligned from the end of the header page:
//!
//! ```text
//! magic u32 | body length u32 | seq u64 | crc32c u32 | 0 u32 | body | zeros to 8 bytes
//! ```
//!
//! A record's CRC starts from the *salt* of its store and cycle (the CRC32C of the store id and
//! the cycle's first sequence number) and covers length, sequence number and body: a record is
//! valid only for the store and cycle it was written in, so the records a file holds from other
//! stores or earlier cycles read as damage, never as work to replay. Log format 1 (stores of
//! format 5) had a 20-byte header (magic, version 1, crc) and salt 0.

use std::ops::Range;

use crate::error::{Error, Result};

/// Bytes of the header page; records start after it.
pub const HEADER: u64 = 4096;
const MAGIC: &[u8; 12] = b"postbox-wal\0";
const LEGACY_VERSION: u32 = 1;
const VERSION: u32 = 2;
const LEGACY_LEN: usize = 20;
const HEADER_LEN: usize = 60;
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"PBXR");
pub const RECORD_HEAD: usize = 24;

/// What a log's header says (format 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The identity of the store the log belongs to.
    pub store: u64,
    /// The cycle the log's records belong to: the sequence number of its first record, one
    /// past what the store held durably when the cycle began.
    pub cycle: u64,
    /// The cycle before it, whose records still fill the slots while the checkpoint that ends
    /// it has not committed (0: none).
    pub prev: u64,
    /// The last record of `prev`: a crash before that checkpoint's commit must find it.
    pub prev_end: u64,
    /// The file's length when the header was written: zeros were written up to it.
    pub capacity: u64,
}

/// A header as found at the start of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Zeros, or a file too short to hold one: nothing was ever written to this log.
    Absent,
    /// A log of format 1 (store format 5): no identity, salt 0.
    Legacy,
    Current(Header),
    /// Bytes that are not a header of any known version with a good checksum.
    Damaged,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[..12].copy_from_slice(MAGIC);
        h[12..16].copy_from_slice(&VERSION.to_le_bytes());
        for (i, v) in [
            self.store,
            self.cycle,
            self.prev,
            self.prev_end,
            self.capacity,
        ]
        .into_iter()
        .enumerate()
        {
            h[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&h[..HEADER_LEN - 4]);
        h[HEADER_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// The header page: the header, then zeros.
    pub fn page(&self) -> Vec<u8> {
        let mut page = vec![0u8; HEADER as usize];
        page[..HEADER_LEN].copy_from_slice(&self.encode());
        page
    }

    /// Reads the header at the start of `data`.
    pub fn parse(data: &[u8]) -> Parsed {
        let head = &data[..data.len().min(HEADER_LEN)];
        if head.len() < LEGACY_LEN || head.iter().all(|b| *b == 0) {
            return Parsed::Absent;
        }
        if &head[..12] != MAGIC {
            return Parsed::Damaged;
        }
        match read_u32(head, 12) {
            LEGACY_VERSION if head[..LEGACY_LEN] == legacy_header() => Parsed::Legacy,
            VERSION if head.len() == HEADER_LEN => {
                let crc = read_u32(head, HEADER_LEN - 4);
                if crc32c::crc32c(&head[..HEADER_LEN - 4]) != crc {
                    return Parsed::Damaged;
                }
                let field = |i: usize| read_u64(head, 16 + 8 * i);
                Parsed::Current(Header {
                    store: field(0),
                    cycle: field(1),
                    prev: field(2),
                    prev_end: field(3),
                    capacity: field(4),
                })
            }
            _ => Parsed::Damaged,
        }
    }
}

/// The header of log format 1.
fn legacy_header() -> [u8; LEGACY_LEN] {
    let mut h = [0u8; LEGACY_LEN];
    h[..12].copy_from_slice(MAGIC);
    h[12..16].copy_from_slice(&LEGACY_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..16]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The CRC seed of the records of `store`'s cycle `cycle`.
pub fn salt(store: u64, cycle: u64) -> u32 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&store.to_le_bytes());
    b[8..].copy_from_slice(&cycle.to_le_bytes());
    crc32c::crc32c(&b)
}

/// The salt of log format 1.
pub const LEGACY_SALT: u32 = 0;

/// Appends the framed record (`seq`, `body`) to `buf`, unpadded.
pub fn frame(buf: &mut Vec<u8>, salt: u32, seq: u64, body: &[u8]) {
    let head = buf.len();
    buf.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&seq.to_le_bytes());
    buf.extend_from_slice(&[0u8; 8]);
    buf.extend_from_slice(body);
    let crc = crc32c::crc32c_append(crc32c::crc32c_append(salt, &buf[head + 4..head + 16]), body);
    buf[head + 16..head + 20].copy_from_slice(&crc.to_le_bytes());
}

fn read_u32(data: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[at..at + 4]);
    u32::from_le_bytes(b)
}

fn read_u64(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[at..at + 8]);
    u64::from_le_bytes(b)
}

enum Slot {
    Record {
        seq: u64,
        body: Range<usize>,
        next: usize,
    },
    /// Zeros: nothing was written here in this cycle.
    Empty,
    /// Something that is not a whole record of this cycle with a good checksum.
    Bad,
}

fn slot(data: &[u8], at: usize, salt: u32) -> Slot {
    if at + RECORD_HEAD > data.len() {
        return Slot::Empty;
    }
    if read_u32(data, at) != RECORD_MAGIC {
        return if data[at..at + RECORD_HEAD].iter().all(|b| *b == 0) {
            Slot::Empty
        } else {
            Slot::Bad
        };
    }
    let len = read_u32(data, at + 4) as usize;
    let seq = read_u64(data, at + 8);
    let crc = read_u32(data, at + 16);
    let body = at + RECORD_HEAD..at + RECORD_HEAD + len;
    if body.end > data.len() {
        return Slot::Bad;
    }
    let want = crc32c::crc32c_append(
        crc32c::crc32c_append(salt, &data[at + 4..at + 16]),
        &data[body.clone()],
    );
    if want != crc {
        return Slot::Bad;
    }
    let next = (RECORD_HEAD + len).next_multiple_of(8) + at;
    Slot::Record { seq, body, next }
}

/// A record of a chain.
#[derive(Debug, Clone)]
pub struct Found {
    pub seq: u64,
    pub body: Range<usize>,
}

/// The chain of consecutive valid records from the first slot of a file.
#[derive(Debug, Default)]
pub struct Chain {
    pub records: Vec<Found>,
    /// Where the chain ends: the offset the next record would go to.
    pub end: usize,
    /// Set when a damaged slot ends the chain and a valid record of the same cycle lies past
    /// it: work that was acknowledged cannot be reached (the text says where).
    pub hidden: Option<String>,
}

impl Chain {
    /// The sequence number of the last record (None for an empty chain).
    pub fn last(&self) -> Option<u64> {
        self.records.last().map(|f| f.seq)
    }

    /// The records past `applied`.
    pub fn past(&self, applied: u64) -> impl Iterator<Item = &Found> {
        self.records.iter().filter(move |f| f.seq > applied)
    }
}

/// Reads the chain of records valid under `salt` from the first slot of `data` (the whole
/// file). The chain ends at the first slot that does not hold the next record: zeros, a torn
/// or foreign record, or a record that does not continue the sequence. `first`, when given,
/// is the sequence number the chain must start with.
///
/// # Errors
///
/// `Corrupted` when the first record is not `first`.
pub fn chain(data: &[u8], salt: u32, first: Option<u64>) -> Result<Chain> {
    let mut out = Chain {
        end: HEADER as usize,
        ..Chain::default()
    };
    let mut at = HEADER as usize;
    while let Slot::Record { seq, body, next } = slot(data, at, salt) {
        match (out.last(), first) {
            (None, Some(f)) if seq != f => {
                return Err(Error::corrupted(format!(
                    "write-ahead log: its cycle starts at record {f}, but its first record is {seq}"
                )));
            }
            (Some(l), _) if seq != l + 1 => break,
            _ => {}
        }
        out.records.push(Found { seq, body });
        at = next;
        out.end = next;
    }
    // Only a damaged record can hide later ones: look for a valid record of this cycle past
    // the end that continues the sequence.
    let expected = out.last().map(|l| l + 1).or(first);
    let mut p = at + 8;
    while p + RECORD_HEAD <= data.len() {
        if read_u32(data, p) == RECORD_MAGIC
            && let Slot::Record { seq, .. } = slot(data, p, salt)
            && expected.is_none_or(|e| seq > e)
            && out.last().is_none_or(|l| seq > l)
        {
            out.hidden = Some(format!(
                "the record at offset {at} is damaged and record {seq} follows it at offset {p}"
            ));
            break;
        }
        p += 8;
    }
    Ok(out)
}

/// Reads a log of format 1 past `applied` the way that format was read: records at or below
/// `applied` are skipped, the rest must be consecutive, a damaged record followed by a valid
/// later one is `Corrupted`.
///
/// # Errors
///
/// `Corrupted` for a gap or hidden records.
pub fn legacy_chain(data: &[u8], applied: u64) -> Result<Chain> {
    let mut out = Chain {
        end: HEADER as usize,
        ..Chain::default()
    };
    let mut at = HEADER as usize;
    let mut last: Option<u64> = None;
    while let Slot::Record { seq, body, next } = slot(data, at, LEGACY_SALT) {
        match last {
            Some(l) if seq <= l => break, // an earlier cycle's record
            Some(l) if seq != l + 1 => {
                return Err(Error::corrupted(format!(
                    "write-ahead log: record {seq} follows record {l}"
                )));
            }
            None if seq > applied + 1 => {
                return Err(Error::corrupted(format!(
                    "write-ahead log starts at record {seq}, but the store holds only up to {applied}"
                )));
            }
            _ => {}
        }
        out.records.push(Found { seq, body });
        last = Some(seq);
        at = next;
        out.end = next;
    }
    let expected = last.map_or(applied, |l| l.max(applied)) + 1;
    let mut p = at + 8;
    while p + RECORD_HEAD <= data.len() {
        if read_u32(data, p) == RECORD_MAGIC
            && let Slot::Record { seq, .. } = slot(data, p, LEGACY_SALT)
            && seq > expected
        {
            return Err(Error::corrupted(format!(
                "write-ahead log: the record at offset {at} is damaged and record {seq} follows it"
            )));
        }
        p += 8;
    }
    Ok(out)
}

/// The header of log format 1, for tests of the upgrade path.
#[cfg(test)]
pub fn legacy_page() -> Vec<u8> {
    let mut page = vec![0u8; HEADER as usize];
    page[..LEGACY_LEN].copy_from_slice(&legacy_header());
    page
}
