//! Queue records: kind, peer, options and extension fields.

use super::*;

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

/// A queue record with the name it is stored under (the record itself does not hold it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    pub name: String,
    pub record: QueueRecord,
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
/// Tag 10: `default_priority` (varint), written only when not `DEFAULT_PRIORITY`, so that the
/// records of queues that leave it alone are as before.
const EXT_DEFAULT_PRIORITY: u64 = 10;

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
        (
            EXT_DEFAULT_PRIORITY,
            (o.default_priority != crate::message::DEFAULT_PRIORITY)
                .then_some(u64::from(o.default_priority)),
        ),
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
    let mut default_priority = crate::message::DEFAULT_PRIORITY;
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
        } else if tag == EXT_DEFAULT_PRIORITY {
            default_priority = u8::try_from(Reader::new(payload).varint()?)
                .ok()
                .filter(|p| *p <= crate::message::MAX_PRIORITY)
                .ok_or("default_priority out of range")?;
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
            default_priority,
        },
    })
}
