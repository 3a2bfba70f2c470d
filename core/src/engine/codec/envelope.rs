//! Message envelopes (`DATA` values) and held messages: their encodings.

use super::*;

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

/// A message's visibility and expiry, each as a tag and milliseconds (a delay, or a time
/// since the epoch).
fn put_times(w: &mut Writer, m: &Message) {
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
}

/// Reads what [`put_times`] wrote.
fn read_times(r: &mut Reader<'_>) -> DecodeResult<(Visibility, Expiry)> {
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
    Ok((visibility, expiry))
}

/// Encodes a message a collator holds (it gets its id only when released, so that ids, and
/// with them delivery order, follow the series): priority, visibility, expiry, then the
/// envelope and body as [`encode_envelope`] writes them, bound to the series and number.
pub fn encode_held(series: &str, seq: u64, m: &Message) -> Vec<u8> {
    // A held message without a priority is held with the default one: the record has no way
    // to say "not set", and its format is fixed.
    let mut out = vec![m.priority.unwrap_or(crate::message::DEFAULT_PRIORITY)];
    let mut w = Writer(Vec::new());
    put_times(&mut w, m);
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
    let (visibility, expiry) = read_times(&mut r)?;
    let env = decode_envelope(held_key(series, seq), r.rest())?;
    Ok(Message {
        body: env.body,
        props: env.props,
        priority: Some(priority),
        visibility,
        expiry,
        tags: Default::default(),
    })
}

/// Encodes a message as a logical log record carries it (see `engine::logical`): everything
/// [`crate::engine::batch::Batch::send`] reads of it — priority (255: not set), visibility,
/// expiry, its job, the id reserved for it, its prior deliveries — then the envelope and body
/// as [`encode_envelope`] writes them, bound to the reserved id.
pub fn encode_logged_message(out: &mut Vec<u8>, m: &Message) {
    let mut w = Writer(std::mem::take(out));
    w.0.push(m.priority.unwrap_or(u8::MAX));
    put_times(&mut w, m);
    // 0: no job; otherwise the job's id plus one.
    w.varint(m.tags.job.map_or(0, |j| j.saturating_add(1)));
    let id = m.tags.reserved_id.unwrap_or(0);
    w.varint(id);
    w.varint(u64::from(m.tags.prior_deliveries));
    let env = encode_envelope(id, &m.props, None, &m.body);
    w.bytes(&env);
    *out = w.0;
}

/// Decodes one message [`encode_logged_message`] wrote at the start of `buf`; returns it and
/// the bytes after it.
pub fn decode_logged_message(buf: &[u8]) -> DecodeResult<(Message, &[u8])> {
    let mut r = Reader::new(buf);
    let priority = match r.byte()? {
        u8::MAX => None,
        p if p <= crate::message::MAX_PRIORITY => Some(p),
        p => return Err(format!("priority {p} out of range")),
    };
    let (visibility, expiry) = read_times(&mut r)?;
    let job = r.varint()?.checked_sub(1);
    let id = r.varint()?;
    let prior_deliveries =
        u32::try_from(r.varint()?).map_err(|_| "prior deliveries out of range".to_owned())?;
    let env = decode_envelope(id, r.bytes()?)?;
    let m = Message {
        body: env.body,
        props: env.props,
        priority,
        visibility,
        expiry,
        tags: crate::message::SendTags {
            job,
            reserved_id: (id != 0).then_some(id),
            prior_deliveries,
        },
    };
    Ok((m, r.rest()))
}
