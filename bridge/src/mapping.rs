//! How a postbox message and an AMQP message stand for each other.
//!
//! | postbox | AMQP |
//! | --- | --- |
//! | body | body |
//! | `message_key`, else `postbox-<queue>-<id>` | `message-id` (for deduplication downstream) |
//! | label | `type` |
//! | content type, correlation id, reply-to | the properties of the same names |
//! | priority (0–7) | `priority` |
//! | time left to live | `expiration` (milliseconds) |
//! | enqueued at | `timestamp` (seconds) |
//! | group, sequence | headers `postbox-group`, `postbox-sequence` |
//! | properties | headers: text as long strings, bytes as byte arrays |
//! | delivery count (incoming) | header `x-delivery-count`, set by quorum queues |
//!
//! AMQP short strings hold 255 bytes; a longer label, content type, correlation id or
//! reply-to travels in a `postbox-<name>` header instead, and comes back from it.

use std::time::{Duration, SystemTime};

use lapin::BasicProperties;
use lapin::types::{AMQPValue, ByteArray, FieldTable, LongString, ShortString};
use postbox::{Envelope, MAX_PRIORITY, Message, PropertyValue};

const GROUP: &str = "postbox-group";
const SEQUENCE: &str = "postbox-sequence";
const DELIVERY_COUNT: &str = "x-delivery-count";
const SHORT: usize = 255;

/// The `message-id` a local message is published with.
pub(crate) fn message_id(env: &Envelope) -> String {
    match env.message_key() {
        Some(k) if k.len() <= SHORT => k.to_owned(),
        _ => format!("postbox-{}-{}", env.queue(), env.id().get()),
    }
}

fn short_or_header(
    props: BasicProperties,
    headers: &mut FieldTable,
    name: &str,
    value: Option<&str>,
    set: fn(BasicProperties, ShortString) -> BasicProperties,
) -> BasicProperties {
    match value {
        Some(v) if v.len() <= SHORT => set(props, v.into()),
        Some(v) => {
            headers.insert(
                format!("postbox-{name}").into(),
                AMQPValue::LongString(v.into()),
            );
            props
        }
        None => props,
    }
}

/// The AMQP properties (and headers) for a local message, published persistent.
pub(crate) fn to_amqp(env: &Envelope, now: SystemTime) -> BasicProperties {
    let mut headers = FieldTable::default();
    let mut p = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id(message_id(env).into())
        .with_priority(env.priority());
    p = short_or_header(p, &mut headers, "label", env.label(), |p, v| p.with_type(v));
    p = short_or_header(
        p,
        &mut headers,
        "content-type",
        env.content_type(),
        |p, v| p.with_content_type(v),
    );
    p = short_or_header(
        p,
        &mut headers,
        "correlation-id",
        env.correlation_id(),
        |p, v| p.with_correlation_id(v),
    );
    p = short_or_header(p, &mut headers, "reply-to", env.reply_to(), |p, v| {
        p.with_reply_to(v)
    });
    if let Ok(d) = env.enqueued_at().duration_since(SystemTime::UNIX_EPOCH) {
        p = p.with_timestamp(d.as_secs());
    }
    if let Some(at) = env.expires_at() {
        // Already past: one millisecond, so the broker drops it (or dead-letters it) itself.
        let left = at
            .duration_since(now)
            .unwrap_or_default()
            .as_millis()
            .max(1);
        p = p.with_expiration(left.to_string().into());
    }
    if let Some(g) = env.group() {
        headers.insert(GROUP.into(), AMQPValue::LongString(g.into()));
    }
    if let Some(s) = env.sequence() {
        headers.insert(
            SEQUENCE.into(),
            AMQPValue::LongLongInt(i64::try_from(s).unwrap_or(i64::MAX)),
        );
    }
    for (k, v) in env.properties() {
        if k.len() > SHORT {
            continue;
        }
        let v = match v {
            PropertyValue::String(s) => AMQPValue::LongString(s.as_str().into()),
            PropertyValue::Bytes(b) => AMQPValue::ByteArray(ByteArray::from(b.clone())),
        };
        headers.insert(k.as_str().into(), v);
    }
    p.with_headers(headers)
}

fn text(v: &AMQPValue) -> Option<PropertyValue> {
    Some(match v {
        AMQPValue::LongString(s) => long_string(s),
        AMQPValue::ShortString(s) => PropertyValue::String(s.as_str().to_owned()),
        AMQPValue::ByteArray(b) => PropertyValue::Bytes(b.as_slice().to_vec()),
        AMQPValue::Boolean(b) => PropertyValue::String(b.to_string()),
        AMQPValue::ShortShortInt(n) => PropertyValue::String(n.to_string()),
        AMQPValue::ShortShortUInt(n) => PropertyValue::String(n.to_string()),
        AMQPValue::ShortInt(n) => PropertyValue::String(n.to_string()),
        AMQPValue::ShortUInt(n) => PropertyValue::String(n.to_string()),
        AMQPValue::LongInt(n) => PropertyValue::String(n.to_string()),
        AMQPValue::LongUInt(n) => PropertyValue::String(n.to_string()),
        AMQPValue::LongLongInt(n) => PropertyValue::String(n.to_string()),
        AMQPValue::Float(n) => PropertyValue::String(n.to_string()),
        AMQPValue::Double(n) => PropertyValue::String(n.to_string()),
        AMQPValue::Timestamp(n) => PropertyValue::String(n.to_string()),
        // Nested tables and arrays (the broker's `x-death` history) have no flat form.
        _ => return None,
    })
}

fn long_string(s: &LongString) -> PropertyValue {
    match std::str::from_utf8(s.as_bytes()) {
        Ok(t) => PropertyValue::String(t.to_owned()),
        Err(_) => PropertyValue::Bytes(s.as_bytes().to_vec()),
    }
}

fn number(v: &AMQPValue) -> Option<u64> {
    match v {
        AMQPValue::ShortShortInt(n) => u64::try_from(*n).ok(),
        AMQPValue::ShortShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::ShortInt(n) => u64::try_from(*n).ok(),
        AMQPValue::ShortUInt(n) => Some(u64::from(*n)),
        AMQPValue::LongInt(n) => u64::try_from(*n).ok(),
        AMQPValue::LongUInt(n) => Some(u64::from(*n)),
        AMQPValue::LongLongInt(n) => u64::try_from(*n).ok(),
        AMQPValue::Timestamp(n) => Some(*n),
        _ => None,
    }
}

fn header_text(headers: Option<&FieldTable>, name: &str) -> Option<String> {
    match headers?.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// The local message for a delivery: the reverse of [`to_amqp`]. Other headers become
/// properties (numbers and booleans as text; nested tables are left out).
pub(crate) fn from_amqp(data: Vec<u8>, p: &BasicProperties) -> Message {
    let headers = p.headers().as_ref();
    let mut m = Message::new(data);
    let pick = |prop: &Option<ShortString>, name: &str| {
        prop.as_ref()
            .map(|s| s.as_str().to_owned())
            .or_else(|| header_text(headers, &format!("postbox-{name}")))
    };
    if let Some(v) = pick(p.kind(), "label") {
        m = m.label(v);
    }
    if let Some(v) = pick(p.content_type(), "content-type") {
        m = m.content_type(v);
    }
    if let Some(v) = pick(p.correlation_id(), "correlation-id") {
        m = m.correlation_id(v);
    }
    if let Some(v) = pick(p.reply_to(), "reply-to") {
        m = m.reply_to(v);
    }
    if let Some(id) = p.message_id() {
        m = m.message_key(id.as_str());
    }
    if let Some(pr) = p.priority() {
        m = m.priority((*pr).min(MAX_PRIORITY));
    }
    if let Some(ms) = p
        .expiration()
        .as_ref()
        .and_then(|e| e.as_str().parse().ok())
    {
        m = m.ttl(Duration::from_millis(ms));
    }
    if let Some(h) = headers {
        for (k, v) in h.inner() {
            let k = k.as_str();
            match k {
                GROUP => {
                    if let Some(PropertyValue::String(g)) = text(v) {
                        m = m.group(g);
                    }
                }
                SEQUENCE => {
                    if let Some(n) = number(v) {
                        m = m.sequence(n);
                    }
                }
                DELIVERY_COUNT => {
                    if let Some(n) = number(v) {
                        m = m.prior_deliveries(u32::try_from(n).unwrap_or(u32::MAX));
                    }
                }
                "postbox-label"
                | "postbox-content-type"
                | "postbox-correlation-id"
                | "postbox-reply-to" => {}
                _ => {
                    if let Some(v) = text(v) {
                        m = m.property(k, v);
                    }
                }
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_come_back_as_they_went() {
        let mut h = FieldTable::default();
        h.insert(GROUP.into(), AMQPValue::LongString("g1".into()));
        h.insert(SEQUENCE.into(), AMQPValue::LongLongInt(7));
        h.insert(DELIVERY_COUNT.into(), AMQPValue::LongInt(2));
        h.insert(
            "postbox-label".into(),
            AMQPValue::LongString("x".repeat(300).into()),
        );
        h.insert("tenant".into(), AMQPValue::LongString("acme".into()));
        h.insert("raw".into(), AMQPValue::ByteArray(vec![0xff, 0].into()));
        h.insert("n".into(), AMQPValue::LongLongInt(-3));
        h.insert("x-death".into(), AMQPValue::FieldArray(Default::default()));
        let p = BasicProperties::default()
            .with_message_id("k1".into())
            .with_priority(9)
            .with_expiration("1500".into())
            .with_headers(h);
        let dir = tempfile::tempdir().unwrap();
        let store = postbox::Store::open(dir.path().join("s")).unwrap();
        let q = store.queue("q").unwrap();
        q.send(from_amqp(b"body".to_vec(), &p)).unwrap();
        let e = q.peek().unwrap().unwrap();
        assert_eq!(e.body(), b"body");
        assert_eq!(e.group(), Some("g1"));
        assert_eq!(e.sequence(), Some(7));
        assert_eq!(e.delivery_count(), 2);
        assert_eq!(e.label().map(str::len), Some(300));
        assert_eq!(e.message_key(), Some("k1"));
        assert_eq!(e.priority(), MAX_PRIORITY);
        assert!(e.expires_at().is_some());
        assert_eq!(e.property("tenant"), Some(&PropertyValue::from("acme")));
        assert_eq!(
            e.property("raw"),
            Some(&PropertyValue::Bytes(vec![0xff, 0]))
        );
        assert_eq!(e.property("n"), Some(&PropertyValue::from("-3")));
        assert!(e.property("x-death").is_none());

        // And out again: what is short goes in properties, the long label in a header.
        let back = to_amqp(&e, SystemTime::now());
        assert_eq!(back.message_id().as_ref().map(|s| s.as_str()), Some("k1"));
        assert!(back.kind().is_none());
        let h = back.headers().as_ref().unwrap().inner();
        assert!(h.contains_key("postbox-label"));
        assert_eq!(h.get(GROUP), Some(&AMQPValue::LongString("g1".into())));
        assert_eq!(back.delivery_mode(), &Some(2));
    }
}
