//! The JSON form of a message: what `--json`, `export` and `import` read and write.
//!
//! One object per message. Text bodies are kept as `body`, anything that is not UTF-8 as
//! `body_base64`, so a body round-trips byte for byte. User properties map to a string, or to
//! `{"base64": "…"}` for a bytes value. Times are RFC 3339 in UTC with milliseconds, the
//! precision postbox stores them with.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use postbox::{Envelope, Message, PropertyValue};
use serde::{Deserialize, Serialize};

use crate::fail::{Failure, Outcome};

/// A user property's value: text, or bytes written in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JsonValue {
    Text(String),
    Bytes { base64: String },
}

/// Why and from where a dead letter was dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonDeadLetter {
    pub reason: String,
    pub description: String,
    pub source_queue: String,
    pub at: String,
}

/// One message as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, JsonValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<JsonDeadLetter>,
    /// The state the message was in when exported (`active`, `locked`, `scheduled`,
    /// `deferred`); import sends every message anew, so it is information only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// RFC 3339 in UTC with milliseconds.
pub fn time(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Reads an RFC 3339 time given for `field`.
pub fn parse_time(field: &str, s: &str) -> Outcome<SystemTime> {
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| Failure::usage(format!("{field}: {s:?} is not an RFC 3339 time: {e}")))
}

impl Record {
    /// The record of a stored message.
    pub fn from_envelope(env: &Envelope) -> Record {
        let (body, body_base64) = match std::str::from_utf8(env.body()) {
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => (None, Some(B64.encode(env.body()))),
        };
        Record {
            id: Some(env.id().get()),
            queue: Some(env.queue().to_owned()),
            body,
            body_base64,
            priority: Some(env.priority()),
            label: env.label().map(str::to_owned),
            content_type: env.content_type().map(str::to_owned),
            correlation_id: env.correlation_id().map(str::to_owned),
            reply_to: env.reply_to().map(str::to_owned),
            message_key: env.message_key().map(str::to_owned),
            group: env.group().map(str::to_owned),
            sequence: env.sequence(),
            properties: env
                .properties()
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        PropertyValue::String(s) => JsonValue::Text(s.clone()),
                        PropertyValue::Bytes(b) => JsonValue::Bytes {
                            base64: B64.encode(b),
                        },
                    };
                    (k.clone(), v)
                })
                .collect(),
            enqueued_at: Some(time(env.enqueued_at())),
            visible_at: env.visible_at().map(time),
            expires_at: env.expires_at().map(time),
            delivery_count: Some(env.delivery_count()),
            dead_letter: env.dead_letter_info().map(|d| JsonDeadLetter {
                reason: d.reason.clone(),
                description: d.description.clone(),
                source_queue: d.source_queue.clone(),
                at: time(d.at),
            }),
            state: None,
        }
    }

    /// The body: `body` as UTF-8, or `body_base64` decoded.
    pub fn body_bytes(&self) -> Outcome<Vec<u8>> {
        match (&self.body, &self.body_base64) {
            (Some(_), Some(_)) => Err(Failure::usage("give body or body_base64, not both")),
            (Some(text), None) => Ok(text.as_bytes().to_vec()),
            (None, Some(b)) => B64
                .decode(b)
                .map_err(|e| Failure::usage(format!("body_base64 is not base64: {e}"))),
            (None, None) => Ok(Vec::new()),
        }
    }

    /// The message to send for this record. Its id, queue, enqueue time, delivery count and
    /// dead-letter details describe where it was and cannot be sent; a `visible_at` still in
    /// the future schedules it again.
    pub fn to_message(&self, now: SystemTime) -> Outcome<Message> {
        let mut m = Message::new(self.body_bytes()?);
        if let Some(p) = self.priority {
            m = m.priority(p);
        }
        if let Some(v) = &self.label {
            m = m.label(v.clone());
        }
        if let Some(v) = &self.content_type {
            m = m.content_type(v.clone());
        }
        if let Some(v) = &self.correlation_id {
            m = m.correlation_id(v.clone());
        }
        if let Some(v) = &self.reply_to {
            m = m.reply_to(v.clone());
        }
        if let Some(v) = &self.message_key {
            m = m.message_key(v.clone());
        }
        if let Some(v) = &self.group {
            m = m.group(v.clone());
        }
        if let Some(v) = self.sequence {
            m = m.sequence(v);
        }
        for (k, v) in &self.properties {
            m = match v {
                JsonValue::Text(s) => m.property(k.clone(), s.clone()),
                JsonValue::Bytes { base64 } => {
                    let b = B64.decode(base64).map_err(|e| {
                        Failure::usage(format!("property {k:?} is not base64: {e}"))
                    })?;
                    m.property(k.clone(), b)
                }
            };
        }
        if let Some(at) = &self.visible_at {
            let at = parse_time("visible_at", at)?;
            if at > now {
                m = m.visible_at(at);
            }
        }
        if let Some(at) = &self.expires_at {
            m = m.expires_at(parse_time("expires_at", at)?);
        }
        Ok(m)
    }
}

/// "3s", "4m", "2h", "5d": how long ago, for people.
pub fn age(now: SystemTime, then: SystemTime) -> String {
    let d = now.duration_since(then).unwrap_or(Duration::ZERO);
    short_duration(d)
}

/// A duration in one unit, rounded down: "250ms", "42s", "7m", "3h", "2d".
pub fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s < 1 {
        format!("{}ms", d.as_millis())
    } else if s < 120 {
        format!("{s}s")
    } else if s < 7200 {
        format!("{}m", s / 60)
    } else if s < 2 * 86400 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86400)
    }
}

/// A body in one short line: its text, or its size when it is not text.
pub fn preview(body: &[u8], width: usize) -> String {
    match std::str::from_utf8(body) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t') =>
        {
            let flat: String = text
                .chars()
                .map(|c| if c.is_whitespace() { ' ' } else { c })
                .collect();
            if flat.chars().count() > width {
                let cut: String = flat.chars().take(width.saturating_sub(1)).collect();
                format!("{cut}…")
            } else {
                flat
            }
        }
        _ => format!("<{} bytes>", body.len()),
    }
}

/// "1 message", "2 messages".
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}
