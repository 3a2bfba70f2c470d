//! The versioned on-disk encodings of message envelopes and queue records.
//!
//! Every record starts with a format byte so that a later version can read what this one wrote;
//! a fixture store committed under `core/tests/fixtures` is read back by the tests to hold us to
//! that. Integers are little-endian; lengths are LEB128 varints.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::message::{Properties, PropertyValue};
use crate::queue::QueueOptions;

const ENVELOPE_V1: u8 = 1;
const QUEUE_V1: u8 = 1;

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
        &self.buf[self.pos..]
    }
}

/// Encodes an envelope and body into one `DATA` value.
pub fn encode_envelope(
    props: &Properties,
    dead_letter: Option<&DeadLetter>,
    body: &[u8],
) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(body.len() + 16));
    w.0.push(ENVELOPE_V1);
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
    w.0
}

/// Decodes a `DATA` value. Errors describe the damage; callers turn them into `Corrupted`.
pub fn decode_envelope(buf: &[u8]) -> DecodeResult<StoredEnvelope> {
    let mut r = Reader::new(buf);
    let version = r.byte()?;
    if version != ENVELOPE_V1 {
        return Err(format!("unknown envelope format {version}"));
    }
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

/// What kind of queue a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// A user queue; `peer` is its dead-letter queue.
    Normal,
    /// A dead-letter queue; `peer` is its source queue.
    DeadLetter,
}

/// A `QUEUES` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRecord {
    pub id: u32,
    pub kind: QueueKind,
    pub peer: u32,
    pub options: QueueOptions,
}

fn ms(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
    })
}

fn from_ms(v: u64) -> Option<Duration> {
    (v != 0).then(|| Duration::from_millis(v))
}

pub fn encode_queue(rec: &QueueRecord) -> Vec<u8> {
    let o = &rec.options;
    let mut w = Writer(Vec::with_capacity(64));
    w.0.push(QUEUE_V1);
    w.varint(u64::from(rec.id));
    w.0.push(match rec.kind {
        QueueKind::Normal => 0,
        QueueKind::DeadLetter => 1,
    });
    w.varint(u64::from(rec.peer));
    w.varint(ms(Some(o.lock_duration)));
    w.varint(u64::from(o.max_deliveries));
    w.varint(ms(o.default_ttl));
    w.varint(o.max_message_size as u64);
    w.varint(o.max_messages.map_or(0, |v| v.saturating_add(1)));
    w.varint(o.max_bytes.map_or(0, |v| v.saturating_add(1)));
    w.varint(ms(o.dedup_window));
    w.0
}

pub fn decode_queue(buf: &[u8]) -> DecodeResult<QueueRecord> {
    let mut r = Reader::new(buf);
    let version = r.byte()?;
    if version != QUEUE_V1 {
        return Err(format!("unknown queue record format {version}"));
    }
    let id = u32::try_from(r.varint()?).map_err(|_| "queue id out of range")?;
    let kind = match r.byte()? {
        0 => QueueKind::Normal,
        1 => QueueKind::DeadLetter,
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
    Ok(QueueRecord {
        id,
        kind,
        peer,
        options: QueueOptions {
            lock_duration,
            max_deliveries,
            default_ttl,
            max_message_size,
            max_messages,
            max_bytes,
            dedup_window,
            mentioned: 0,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let buf = encode_envelope(&props, Some(&dl), b"body");
        let back = decode_envelope(&buf).unwrap();
        assert_eq!(back.props, props);
        assert_eq!(back.dead_letter, Some(dl));
        assert_eq!(back.body, b"body");
    }

    #[test]
    fn truncated_envelopes_are_errors_not_panics() {
        let buf = encode_envelope(
            &Properties {
                label: Some("label".into()),
                ..Properties::default()
            },
            None,
            b"",
        );
        for len in 0..buf.len() - 1 {
            assert!(decode_envelope(&buf[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn queue_record_round_trips() {
        let rec = QueueRecord {
            id: 3,
            kind: QueueKind::DeadLetter,
            peer: 2,
            options: QueueOptions {
                max_messages: Some(0),
                max_bytes: Some(10),
                default_ttl: Some(Duration::from_secs(5)),
                dedup_window: Some(Duration::from_secs(60)),
                ..QueueOptions::default()
            },
        };
        assert_eq!(decode_queue(&encode_queue(&rec)).unwrap(), rec);
    }
}
