//! The versioned on-disk encodings of message envelopes and queue records.
//!
//! Every record starts with a format byte so that a later version can read what this one wrote;
//! a fixture store committed under `core/tests/fixtures` is read back by the tests to hold us to
//! that. Integers are little-endian; lengths are LEB128 varints.
//!
//! # Checksums
//!
//! redb checksums its pages, but verifies them only when asked to (`verify_on_open`): a plain
//! read trusts the page. So every record postbox writes carries its own checksum, verified on
//! every decode, and damage to a record is reported as `Corrupted` by the operation that reads
//! it whatever the open mode.
//!
//! Format 2 (`ENVELOPE_V2`, `QUEUE_V2`, written by every version since store format 2):
//!
//! ```text
//! [0]     format byte 0xFE
//! [1..5]  CRC32C (Castagnoli), little-endian, of byte 0 followed by bytes 5..
//! [5..]   the fields, exactly as in format 1 (for an envelope: the body last)
//! ```
//!
//! The CRC covers the whole record — format byte, header, properties and body — and detects
//! every error of up to three flipped bits anywhere in the record, the CRC included (CRC32C's
//! Hamming distance is at least 4 below 2^31 bits), and every burst of up to 32 bits within the
//! fields; other damage passes with a probability of 2^-32. It is checked before any field is
//! parsed, so a damaged length or tag never reaches the parser.
//!
//! Format 1 (`ENVELOPE_V1`, `QUEUE_V1`: a format byte of 1, then the fields, no checksum) is
//! still decoded, unchecked, so that stores written before format 2 stay readable: the upgrade
//! to store format 2 rewrites queue records but leaves envelopes (too large to rewrite) as they
//! are. The format byte is a tag, not a counter, and its value is chosen so that damage cannot
//! switch the check off: 0xFE and 1 differ in all eight bits, so no flip of fewer than eight
//! bits turns a checksummed record into an unchecked one (with 2, flipping the two low bits
//! would). Every flip of one to seven bits of 0xFE gives an unknown format, and every other
//! damage fails the CRC. A later format must likewise keep its tag far from 1.
//!
//! Message state rows (`tables::State`) are fixed-width and carry a CRC-16 instead; see there.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::filter::{CorrelationFilter, Filter};
use crate::message::{Expiry, Message, Properties, PropertyValue, Visibility};
use crate::options::QueueSettings;

/// Envelope without a checksum: read only, written by store format 1.
const ENVELOPE_V1: u8 = 1;
/// Envelope with a CRC32C (see the module documentation); eight bit flips from `ENVELOPE_V1`.
const ENVELOPE_V2: u8 = 0xFE;
/// Queue record without a checksum: read only (the upgrade to store format 2 rewrites them).
const QUEUE_V1: u8 = 1;
/// Queue record with a CRC32C; eight bit flips from `QUEUE_V1`.
const QUEUE_V2: u8 = 0xFE;

/// Length of the format byte and the CRC32C that open a format-2 record.
const V2_HEADER: usize = 5;

/// Dead-letter details stored in the envelope. The source is a queue id so that a rename-free
/// store never needs to rewrite it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub reason: String,
    pub description: String,
    pub source_queue: u32,
    pub at_ms: u64,
}

/// A decoded `DATA` value.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEnvelope {
    pub props: Properties,
    pub dead_letter: Option<DeadLetter>,
    pub body: Vec<u8>,
}

struct Writer(Vec<u8>);

impl Writer {
    /// Starts a format-2 record: the format byte and room for the checksum.
    fn v2(format: u8, capacity: usize) -> Writer {
        let mut buf = Vec::with_capacity(capacity + V2_HEADER);
        buf.push(format);
        buf.extend_from_slice(&[0; V2_HEADER - 1]);
        Writer(buf)
    }
    /// Fills in the checksum of a record started with `v2`, bound to the record's `key`.
    fn seal(mut self, key: &[u8]) -> Vec<u8> {
        let crc = v2_crc(&self.0, key).to_le_bytes();
        self.0[1..V2_HEADER].copy_from_slice(&crc);
        self.0
    }
    fn varint(&mut self, v: u64) {
        super::varint::put(&mut self.0, v);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn opt_str(&mut self, s: &Option<String>) {
        match s {
            None => self.0.push(0),
            Some(s) => {
                self.0.push(1);
                self.bytes(s.as_bytes());
            }
        }
    }
}

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

type DecodeResult<T> = Result<T, String>;

/// CRC32C of a format-2 record: the format byte, then everything after the checksum field.
/// The checksum of a v2 record: its format byte, the key it is stored under (so that a record
/// found under a damaged key is caught too: redb checksums no keys unless it verifies at open),
/// and everything after the checksum field.
fn v2_crc(buf: &[u8], key: &[u8]) -> u32 {
    let head = buf.get(..1).unwrap_or_default();
    let rest = buf.get(V2_HEADER..).unwrap_or_default();
    crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(head), key), rest)
}

/// Reads the format byte of a record; for `v2`, verifies the checksum. Returns a reader at the
/// first field. `what` names the record in errors.
fn open_record<'a>(
    buf: &'a [u8],
    key: &[u8],
    v1: u8,
    v2: u8,
    what: &str,
) -> DecodeResult<Reader<'a>> {
    let mut r = Reader::new(buf);
    let format = r.byte()?;
    if format == v2 {
        let stored = buf
            .get(1..V2_HEADER)
            .ok_or("record truncated")?
            .try_into()
            .map(u32::from_le_bytes)
            .map_err(|_| "record truncated")?;
        let computed = v2_crc(buf, key);
        if stored != computed {
            return Err(format!(
                "{what} checksum mismatch (stored {stored:08x}, computed {computed:08x})"
            ));
        }
        r.pos = V2_HEADER;
    } else if format != v1 {
        return Err(format!("unknown {what} format {format}"));
    }
    Ok(r)
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    fn byte(&mut self) -> DecodeResult<u8> {
        let b = *self.buf.get(self.pos).ok_or("record truncated")?;
        self.pos += 1;
        Ok(b)
    }
    fn varint(&mut self) -> DecodeResult<u64> {
        let mut rest = self.rest();
        let before = rest.len();
        let v = super::varint::take(&mut rest);
        self.pos += before - rest.len();
        v.map_err(|bad| match bad {
            super::varint::Bad::Truncated => "record truncated".into(),
            super::varint::Bad::TooLong => "varint too long".into(),
        })
    }
    fn bytes(&mut self) -> DecodeResult<&'a [u8]> {
        let len = usize::try_from(self.varint()?).map_err(|_| "length overflow")?;
        let end = self.pos.checked_add(len).ok_or("length overflow")?;
        let s = self.buf.get(self.pos..end).ok_or("record truncated")?;
        self.pos = end;
        Ok(s)
    }
    fn string(&mut self) -> DecodeResult<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "invalid UTF-8 in record".into())
    }
    fn opt_str(&mut self) -> DecodeResult<Option<String>> {
        match self.byte()? {
            0 => Ok(None),
            1 => Ok(Some(self.string()?)),
            t => Err(format!("bad option tag {t}")),
        }
    }
    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }
}

mod envelope;
mod queue;
#[cfg(test)]
mod tests;

pub use envelope::*;
pub use queue::*;
