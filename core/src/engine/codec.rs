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
    fn varint(&mut self, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return;
            }
            self.0.push(byte | 0x80);
        }
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
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
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

/// Encodes an envelope and body into one `DATA` value for message `id`, in format 2
/// (checksummed, the checksum bound to `id`).
pub fn encode_envelope(
    id: u64,
    props: &Properties,
    dead_letter: Option<&DeadLetter>,
    body: &[u8],
) -> Vec<u8> {
    let mut w = Writer::v2(ENVELOPE_V2, body.len() + 16);
    w.opt_str(&props.label);
    w.opt_str(&props.content_type);
    w.opt_str(&props.correlation_id);
    w.opt_str(&props.reply_to);
    w.opt_str(&props.message_key);
    w.opt_str(&props.group);
    match props.sequence {
        None => w.0.push(0),
        Some(s) => {
            w.0.push(1);
            w.varint(s);
        }
    }
    w.varint(props.user.len() as u64);
    for (k, v) in &props.user {
        w.bytes(k.as_bytes());
        match v {
            PropertyValue::String(s) => {
                w.0.push(0);
                w.bytes(s.as_bytes());
            }
            PropertyValue::Bytes(b) => {
                w.0.push(1);
                w.bytes(b);
            }
        }
    }
    match dead_letter {
        None => w.0.push(0),
        Some(d) => {
            w.0.push(1);
            w.bytes(d.reason.as_bytes());
            w.bytes(d.description.as_bytes());
            w.0.extend_from_slice(&d.source_queue.to_le_bytes());
            w.0.extend_from_slice(&d.at_ms.to_le_bytes());
        }
    }
    w.0.extend_from_slice(body);
    w.seal(&id.to_le_bytes())
}

/// Decodes a `DATA` value (format 2, checksum verified, or format 1). Errors describe the
/// damage; callers turn them into `Corrupted`.
pub fn decode_envelope(id: u64, buf: &[u8]) -> DecodeResult<StoredEnvelope> {
    let mut r = open_record(buf, &id.to_le_bytes(), ENVELOPE_V1, ENVELOPE_V2, "envelope")?;
    let mut props = Properties {
        label: r.opt_str()?,
        content_type: r.opt_str()?,
        correlation_id: r.opt_str()?,
        reply_to: r.opt_str()?,
        message_key: r.opt_str()?,
        group: r.opt_str()?,
        sequence: match r.byte()? {
            0 => None,
            1 => Some(r.varint()?),
            t => return Err(format!("bad option tag {t}")),
        },
        user: BTreeMap::new(),
    };
    let n = r.varint()?;
    for _ in 0..n {
        let k = r.string()?;
        let v = match r.byte()? {
            0 => PropertyValue::String(r.string()?),
            1 => PropertyValue::Bytes(r.bytes()?.to_vec()),
            t => return Err(format!("bad property tag {t}")),
        };
        props.user.insert(k, v);
    }
    let dead_letter = match r.byte()? {
        0 => None,
        1 => {
            let reason = r.string()?;
            let description = r.string()?;
            let mut q = [0u8; 4];
            for b in &mut q {
                *b = r.byte()?;
            }
            let mut at = [0u8; 8];
            for b in &mut at {
                *b = r.byte()?;
            }
            Some(DeadLetter {
                reason,
                description,
                source_queue: u32::from_le_bytes(q),
                at_ms: u64::from_le_bytes(at),
            })
        }
        t => return Err(format!("bad dead-letter tag {t}")),
    };
    Ok(StoredEnvelope {
        props,
        dead_letter,
        body: r.rest().to_vec(),
    })
}

/// Encodes a message a collator holds (it gets its id only when released, so that ids, and
/// with them delivery order, follow the series): priority, visibility, expiry, then the
/// envelope and body as [`encode_envelope`] writes them, bound to the series and number.
pub fn encode_held(series: &str, seq: u64, m: &Message) -> Vec<u8> {
    let mut out = vec![m.priority];
    let mut w = Writer(Vec::new());
    let (tag, ms) = match m.visibility {
        Visibility::Now => (0, 0),
        Visibility::After(d) => (1, crate::clock::duration_ms(d)),
        Visibility::At(t) => (2, crate::clock::from_system_time(t)),
    };
    w.0.push(tag);
    w.varint(ms);
    let (tag, ms) = match m.expiry {
        Expiry::QueueDefault => (0, 0),
        Expiry::After(d) => (1, crate::clock::duration_ms(d)),
        Expiry::At(t) => (2, crate::clock::from_system_time(t)),
    };
    w.0.push(tag);
    w.varint(ms);
    out.extend_from_slice(&w.0);
    out.extend_from_slice(&encode_envelope(
        held_key(series, seq),
        &m.props,
        None,
        &m.body,
    ));
    out
}

/// The number a held message's envelope checksum is bound to.
fn held_key(series: &str, seq: u64) -> u64 {
    u64::from(crc32c::crc32c(series.as_bytes())) << 32 ^ seq
}

/// Decodes what [`encode_held`] wrote.
pub fn decode_held(series: &str, seq: u64, buf: &[u8]) -> DecodeResult<Message> {
    let mut r = Reader::new(buf);
    let priority = r.byte()?;
    if priority > crate::message::MAX_PRIORITY {
        return Err(format!("priority {priority} out of range"));
    }
    let visibility = match (r.byte()?, r.varint()?) {
        (0, _) => Visibility::Now,
        (1, ms) => Visibility::After(Duration::from_millis(ms)),
        (2, ms) => Visibility::At(crate::clock::to_system_time(ms)),
        (t, _) => return Err(format!("unknown visibility {t}")),
    };
    let expiry = match (r.byte()?, r.varint()?) {
        (0, _) => Expiry::QueueDefault,
        (1, ms) => Expiry::After(Duration::from_millis(ms)),
        (2, ms) => Expiry::At(crate::clock::to_system_time(ms)),
        (t, _) => return Err(format!("unknown expiry {t}")),
    };
    let env = decode_envelope(held_key(series, seq), r.rest())?;
    Ok(Message {
        body: env.body,
        props: env.props,
        priority,
        visibility,
        expiry,
        tags: Default::default(),
    })
}

/// What kind of queue a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// A user queue; `peer` is its dead-letter queue.
    Normal,
    /// A dead-letter queue; `peer` is its source queue.
    DeadLetter,
    /// A topic: it holds no messages; a publish fans out to its subscriptions, which are
    /// `Normal` queues whose record links back to it. `peer` is 0.
    Topic,
    /// A collator: it holds messages of incomplete series; `peer` is its destination queue.
    Collator,
    /// A queue's journal: completed messages of its source (`peer`), kept for browsing.
    Journal,
}

impl QueueKind {
    /// What a name of this kind is, for errors that refuse a name of the wrong kind
    /// ("\"c\" is a collator, not a topic").
    pub fn described(self) -> &'static str {
        match self {
            QueueKind::Normal => "a queue",
            QueueKind::DeadLetter => "a dead-letter queue",
            QueueKind::Topic => "a topic",
            QueueKind::Collator => "a collator",
            QueueKind::Journal => "a journal",
        }
    }
}

/// A topic subscription: the topic it belongs to and which published messages it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub topic: u32,
    pub filter: Filter,
}

/// A `QUEUES` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRecord {
    pub id: u32,
    pub kind: QueueKind,
    pub peer: u32,
    pub options: QueueSettings,
    /// For a topic subscription: its topic and filter (an extension field).
    pub subscription: Option<Subscription>,
    /// The queue's journal queue, once journaling was turned on (0: none).
    pub journal: u32,
    /// The owner (process registration) a temporary queue belongs to (0: not temporary).
    pub temporary_owner: u64,
}

/// Extension fields of a queue record: after the fixed fields, each is `tag, length, payload`,
/// so a reader skips tags it does not know and a record without them reads as before.
const EXT_SUBSCRIPTION: u64 = 1;
/// Tag 2: the queue requires sessions (no payload).
const EXT_REQUIRES_SESSION: u64 = 2;
/// Tag 3: `forward_to` (the target queue's name).
const EXT_FORWARD_TO: u64 = 3;
/// Tag 4: `forward_dead_letters_to` (the target queue's name).
const EXT_FORWARD_DEAD_LETTERS_TO: u64 = 4;
/// Tag 5: `journal` (varint: the journal's quota).
const EXT_JOURNAL: u64 = 5;
/// Tag 6: the id of the queue's journal queue (varint).
const EXT_JOURNAL_QUEUE: u64 = 6;
/// Tag 7: a temporary queue's owner (varint): it goes when that owner closes or dies.
const EXT_TEMPORARY_OWNER: u64 = 7;
/// Tag 8: `auto_delete_on_idle` (varint ms).
const EXT_AUTO_DELETE: u64 = 8;
/// Tag 9: `receipts_to` (the receipt queue's name).
const EXT_RECEIPTS_TO: u64 = 9;

fn encode_filter(w: &mut Writer, f: &Filter) {
    match f {
        Filter::All => w.0.push(0),
        Filter::Correlation(c) => {
            w.0.push(1);
            for s in [
                &c.label,
                &c.correlation_id,
                &c.content_type,
                &c.reply_to,
                &c.group,
            ] {
                w.opt_str(s);
            }
            w.varint(c.properties.len() as u64);
            for (k, v) in &c.properties {
                w.bytes(k.as_bytes());
                encode_value(w, v);
            }
        }
    }
}

fn encode_value(w: &mut Writer, v: &PropertyValue) {
    match v {
        PropertyValue::String(s) => {
            w.0.push(0);
            w.bytes(s.as_bytes());
        }
        PropertyValue::Bytes(b) => {
            w.0.push(1);
            w.bytes(b);
        }
    }
}

fn decode_filter(r: &mut Reader<'_>) -> DecodeResult<Filter> {
    match r.byte()? {
        0 => Ok(Filter::All),
        1 => {
            let mut c = CorrelationFilter {
                label: r.opt_str()?,
                correlation_id: r.opt_str()?,
                content_type: r.opt_str()?,
                reply_to: r.opt_str()?,
                group: r.opt_str()?,
                ..CorrelationFilter::default()
            };
            let n = r.varint()?;
            for _ in 0..n {
                let k = r.string()?;
                let v = match r.byte()? {
                    0 => PropertyValue::String(r.string()?),
                    1 => PropertyValue::Bytes(r.bytes()?.to_vec()),
                    t => return Err(format!("unknown property kind {t}")),
                };
                c.properties.insert(k, v);
            }
            Ok(Filter::Correlation(c))
        }
        k => Err(format!("unknown filter kind {k}")),
    }
}

fn ms(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
    })
}

fn from_ms(v: u64) -> Option<Duration> {
    (v != 0).then(|| Duration::from_millis(v))
}

/// Encodes the `QUEUES` value of queue `name`, in format 2 (checksummed, bound to `name`).
pub fn encode_queue(name: &str, rec: &QueueRecord) -> Vec<u8> {
    let o = &rec.options;
    let mut w = Writer::v2(QUEUE_V2, 64);
    w.varint(u64::from(rec.id));
    w.0.push(match rec.kind {
        QueueKind::Normal => 0,
        QueueKind::DeadLetter => 1,
        QueueKind::Topic => 2,
        QueueKind::Collator => 3,
        QueueKind::Journal => 4,
    });
    w.varint(u64::from(rec.peer));
    w.varint(ms(Some(o.lock_duration)));
    w.varint(u64::from(o.max_deliveries));
    w.varint(ms(o.default_ttl));
    w.varint(o.max_message_size as u64);
    w.varint(o.max_messages.map_or(0, |v| v.saturating_add(1)));
    w.varint(o.max_bytes.map_or(0, |v| v.saturating_add(1)));
    w.varint(ms(o.dedup_window));
    if o.requires_session {
        w.varint(EXT_REQUIRES_SESSION);
        w.bytes(&[]);
    }
    for (tag, name) in [
        (EXT_FORWARD_TO, &o.forward_to),
        (EXT_FORWARD_DEAD_LETTERS_TO, &o.forward_dead_letters_to),
        (EXT_RECEIPTS_TO, &o.receipts_to),
    ] {
        if let Some(name) = name {
            w.varint(tag);
            w.bytes(name.as_bytes());
        }
    }
    for (tag, v) in [
        (EXT_JOURNAL, o.journal),
        (
            EXT_JOURNAL_QUEUE,
            (rec.journal != 0).then_some(u64::from(rec.journal)),
        ),
        (
            EXT_TEMPORARY_OWNER,
            (rec.temporary_owner != 0).then_some(rec.temporary_owner),
        ),
        (EXT_AUTO_DELETE, o.auto_delete_on_idle.map(|d| ms(Some(d)))),
    ] {
        if let Some(v) = v {
            let mut e = Writer(Vec::new());
            e.varint(v);
            w.varint(tag);
            w.bytes(&e.0);
        }
    }
    if let Some(sub) = &rec.subscription {
        let mut ext = Writer(Vec::new());
        ext.varint(u64::from(sub.topic));
        encode_filter(&mut ext, &sub.filter);
        w.varint(EXT_SUBSCRIPTION);
        w.bytes(&ext.0);
    }
    w.seal(name.as_bytes())
}

/// Decodes a `QUEUES` value (format 2, checksum verified, or format 1).
pub fn decode_queue(name: &str, buf: &[u8]) -> DecodeResult<QueueRecord> {
    let mut r = open_record(buf, name.as_bytes(), QUEUE_V1, QUEUE_V2, "queue record")?;
    let id = u32::try_from(r.varint()?).map_err(|_| "queue id out of range")?;
    let kind = match r.byte()? {
        0 => QueueKind::Normal,
        1 => QueueKind::DeadLetter,
        2 => QueueKind::Topic,
        3 => QueueKind::Collator,
        4 => QueueKind::Journal,
        k => return Err(format!("unknown queue kind {k}")),
    };
    let peer = u32::try_from(r.varint()?).map_err(|_| "queue id out of range")?;
    let lock_duration = from_ms(r.varint()?).unwrap_or(Duration::from_millis(1));
    let max_deliveries = u32::try_from(r.varint()?).map_err(|_| "max_deliveries out of range")?;
    let default_ttl = from_ms(r.varint()?);
    let max_message_size = usize::try_from(r.varint()?).map_err(|_| "size out of range")?;
    let max_messages = r.varint()?.checked_sub(1);
    let max_bytes = r.varint()?.checked_sub(1);
    let dedup_window = from_ms(r.varint()?);
    let mut subscription = None;
    let mut requires_session = false;
    let (mut forward_to, mut forward_dead_letters_to) = (None, None);
    let (mut journal, mut journal_queue) = (None, 0u32);
    let (mut temporary_owner, mut auto_delete_on_idle, mut receipts_to) = (0u64, None, None);
    let text = |p: &[u8]| {
        String::from_utf8(p.to_vec()).map_err(|_| "invalid UTF-8 in queue record".to_string())
    };
    while !r.rest().is_empty() {
        let tag = r.varint()?;
        let payload = r.bytes()?;
        if tag == EXT_REQUIRES_SESSION {
            requires_session = true;
        } else if tag == EXT_FORWARD_TO {
            forward_to = Some(text(payload)?);
        } else if tag == EXT_FORWARD_DEAD_LETTERS_TO {
            forward_dead_letters_to = Some(text(payload)?);
        } else if tag == EXT_JOURNAL {
            journal = Some(Reader::new(payload).varint()?);
        } else if tag == EXT_JOURNAL_QUEUE {
            journal_queue = u32::try_from(Reader::new(payload).varint()?)
                .map_err(|_| "journal id out of range")?;
        } else if tag == EXT_TEMPORARY_OWNER {
            temporary_owner = Reader::new(payload).varint()?;
        } else if tag == EXT_AUTO_DELETE {
            auto_delete_on_idle = from_ms(Reader::new(payload).varint()?);
        } else if tag == EXT_RECEIPTS_TO {
            receipts_to = Some(text(payload)?);
        } else if tag == EXT_SUBSCRIPTION {
            let mut e = Reader::new(payload);
            let topic = u32::try_from(e.varint()?).map_err(|_| "topic id out of range")?;
            let filter = decode_filter(&mut e)?;
            subscription = Some(Subscription { topic, filter });
        }
    }
    Ok(QueueRecord {
        id,
        kind,
        peer,
        subscription,
        journal: journal_queue,
        temporary_owner,
        options: QueueSettings {
            lock_duration,
            max_deliveries,
            default_ttl,
            max_message_size,
            max_messages,
            max_bytes,
            dedup_window,
            requires_session,
            forward_to,
            forward_dead_letters_to,
            journal,
            auto_delete_on_idle,
            receipts_to,
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_record_read_under_another_key_is_refused() {
        let env = encode_envelope(7, &Properties::default(), None, b"body");
        assert!(decode_envelope(7, &env).is_ok());
        assert!(decode_envelope(6, &env).is_err());
        let rec = QueueRecord {
            temporary_owner: 0,
            id: 1,
            kind: QueueKind::Normal,
            peer: 2,
            options: QueueSettings::default(),
            subscription: None,
            journal: 0,
        };
        let q = encode_queue("q", &rec);
        assert!(decode_queue("q", &q).is_ok());
        assert!(decode_queue("p", &q).is_err());
        let st = crate::engine::tables::State {
            queue: 1,
            priority: 3,
            status: crate::engine::tables::Status::Ready,
            deferred: false,
            session: false,
            tracked: false,
            checkpointed: false,
            delivery_count: 0,
            size: 4,
            enqueued_at: 1,
            visible_at: 0,
            expires_at: 0,
            lock_owner: 0,
            lock_token: 0,
            locked_until: 0,
        };
        let row = st.encode(7);
        assert!(crate::engine::tables::State::decode(7, &row).is_ok());
        assert!(crate::engine::tables::State::decode(6, &row).is_err());
    }

    use super::*;

    /// The format-1 encoding of a record encoded in format 2: format byte 1, no checksum.
    fn as_v1(v2: &[u8]) -> Vec<u8> {
        let mut v1 = vec![1];
        v1.extend_from_slice(&v2[V2_HEADER..]);
        v1
    }

    fn full_props() -> Properties {
        let mut props = Properties {
            label: Some("label".into()),
            content_type: Some("application/json".into()),
            correlation_id: Some("corr".into()),
            reply_to: Some("replies".into()),
            message_key: Some("key".into()),
            group: Some("g".into()),
            sequence: Some(300),
            ..Properties::default()
        };
        props
            .user
            .insert("a".into(), PropertyValue::Bytes(vec![0, 1, 255]));
        props
            .user
            .insert("b".into(), PropertyValue::String("é".into()));
        props
    }

    fn sample_queue() -> QueueRecord {
        QueueRecord {
            temporary_owner: 0,
            id: 3,
            kind: QueueKind::DeadLetter,
            peer: 2,
            options: QueueSettings {
                max_messages: Some(0),
                max_bytes: Some(10),
                default_ttl: Some(Duration::from_secs(5)),
                dedup_window: Some(Duration::from_secs(60)),
                ..QueueSettings::default()
            },
            subscription: None,
            journal: 0,
        }
    }

    #[test]
    fn envelope_round_trips() {
        let mut props = Properties {
            label: Some("l".into()),
            group: Some("g".into()),
            sequence: Some(300),
            ..Properties::default()
        };
        props
            .user
            .insert("a".into(), PropertyValue::Bytes(vec![0, 1, 255]));
        props
            .user
            .insert("b".into(), PropertyValue::String("é".into()));
        let dl = DeadLetter {
            reason: "r".into(),
            description: "d".into(),
            source_queue: 7,
            at_ms: 12345,
        };
        let buf = encode_envelope(7, &props, Some(&dl), b"body");
        let back = decode_envelope(7, &buf).unwrap();
        assert_eq!(back.props, props);
        assert_eq!(back.dead_letter, Some(dl));
        assert_eq!(back.body, b"body");
    }

    #[test]
    fn truncated_envelopes_are_errors_not_panics() {
        let buf = encode_envelope(
            7,
            &Properties {
                label: Some("label".into()),
                ..Properties::default()
            },
            None,
            b"",
        );
        for len in 0..buf.len() - 1 {
            assert!(decode_envelope(7, &buf[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn queue_record_round_trips() {
        let rec = sample_queue();
        assert_eq!(decode_queue("q", &encode_queue("q", &rec)).unwrap(), rec);
        for filter in [
            crate::filter::Filter::All,
            crate::filter::Filter::correlation()
                .label("l")
                .correlation_id("c")
                .content_type("t")
                .reply_to("r")
                .group("g")
                .property("s", "v")
                .property("b", vec![0u8, 255]),
        ] {
            let sub = QueueRecord {
                kind: QueueKind::Normal,
                subscription: Some(Subscription { topic: 9, filter }),
                journal: 12,
                ..sample_queue()
            };
            assert_eq!(decode_queue("q", &encode_queue("q", &sub)).unwrap(), sub);
        }
    }

    #[test]
    fn unknown_extension_fields_are_skipped() {
        let rec = sample_queue();
        let mut raw = encode_queue("q", &rec);
        // A field a later version might add: tag 77, two bytes of payload, then re-sealed.
        raw.extend_from_slice(&[77, 2, 0xAB, 0xCD]);
        let resealed = {
            let mut w = Writer(raw);
            w.0[1..V2_HEADER].fill(0);
            w.seal(b"q")
        };
        assert_eq!(decode_queue("q", &resealed).unwrap(), rec);
    }

    #[test]
    fn new_records_are_format_2() {
        let env = encode_envelope(7, &full_props(), None, b"body");
        assert_eq!(env[0], ENVELOPE_V2);
        assert_eq!(encode_queue("q", &sample_queue())[0], QUEUE_V2);
    }

    #[test]
    fn format_1_records_still_decode() {
        let props = full_props();
        let dl = DeadLetter {
            reason: "r".into(),
            description: "d".into(),
            source_queue: 7,
            at_ms: 12345,
        };
        let v1 = as_v1(&encode_envelope(7, &props, Some(&dl), b"old body"));
        let back = decode_envelope(7, &v1).unwrap();
        assert_eq!(back.props, props);
        assert_eq!(back.dead_letter, Some(dl));
        assert_eq!(back.body, b"old body");
        let rec = sample_queue();
        assert_eq!(
            decode_queue("q", &as_v1(&encode_queue("q", &rec))).unwrap(),
            rec
        );
    }

    #[test]
    fn only_flipping_all_eight_bits_turns_a_v2_format_byte_into_v1() {
        assert_eq!((ENVELOPE_V2 ^ ENVELOPE_V1).count_ones(), 8);
        assert_eq!((QUEUE_V2 ^ QUEUE_V1).count_ones(), 8);
    }

    /// Flips every bit of `buf` in turn; `decode` must reject each damaged copy.
    fn assert_every_flip_detected(buf: &mut [u8], decode: impl Fn(&[u8]) -> bool) {
        for bit in 0..buf.len() * 8 {
            buf[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !decode(buf),
                "flip of bit {bit} of {} went unnoticed",
                buf.len()
            );
            buf[bit / 8] ^= 1 << (bit % 8);
        }
        assert!(decode(buf), "the undamaged record decodes");
    }

    #[test]
    fn every_single_bit_flip_of_a_v2_envelope_is_detected() {
        let dl = DeadLetter {
            reason: "MaxDeliveriesExceeded".into(),
            description: "tried 10 times".into(),
            source_queue: 7,
            at_ms: 1_700_000_000_000,
        };
        let body: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
        for (props, dl, body) in [
            (Properties::default(), None, &[][..]),
            (full_props(), Some(&dl), &b"short"[..]),
            (full_props(), None, &body[..]),
        ] {
            let mut buf = encode_envelope(7, &props, dl, body);
            assert_every_flip_detected(&mut buf, |b| decode_envelope(7, b).is_ok());
        }
    }

    #[test]
    fn every_single_bit_flip_of_a_v2_queue_record_is_detected() {
        for rec in [
            sample_queue(),
            QueueRecord {
                temporary_owner: 0,
                id: 1,
                kind: QueueKind::Normal,
                peer: 2,
                options: QueueSettings::default(),
                subscription: None,
                journal: 0,
            },
        ] {
            let mut buf = encode_queue("q", &rec);
            assert_every_flip_detected(&mut buf, |b| decode_queue("q", b).is_ok());
        }
    }

    #[test]
    fn every_double_bit_flip_of_a_v2_queue_record_is_detected() {
        let buf = encode_queue("q", &sample_queue());
        let bits = buf.len() * 8;
        for i in 0..bits {
            for j in i + 1..bits {
                let mut d = buf.clone();
                d[i / 8] ^= 1 << (i % 8);
                d[j / 8] ^= 1 << (j % 8);
                assert!(
                    decode_queue("q", &d).is_err(),
                    "flip of bits {i}, {j} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn truncated_v1_envelopes_are_errors_not_panics() {
        let buf = as_v1(&encode_envelope(7, &full_props(), None, b""));
        for len in 0..buf.len() - 1 {
            assert!(decode_envelope(7, &buf[..len]).is_err(), "len {len}");
        }
    }
}
