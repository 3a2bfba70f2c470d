//! Sending: `postbox_send_options`, user properties, `postbox_send` and `postbox_send_batch`.

use super::*;

/// One user property of a message to send.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_property {
    /// NUL-terminated UTF-8 key.
    pub key: *const c_char,
    /// `POSTBOX_PROPERTY_STRING` (the value must be UTF-8) or `POSTBOX_PROPERTY_BYTES`.
    pub kind: u32,
    /// The value's bytes (need not be NUL-terminated); may be NULL when `value_len` is 0.
    pub value: *const u8,
    /// Length of `value` in bytes.
    pub value_len: usize,
}

/// The properties of a message to send (`postbox_send`, `postbox_send_batch`). A zeroed struct
/// with `struct_size` set means "no properties, default priority, visible now, the queue's
/// default TTL"; `postbox_send_options_init` does exactly that. Strings are NUL-terminated UTF-8,
/// NULL for "not set". Everything is copied during the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_send_options {
    /// `sizeof(postbox_send_options)`.
    pub struct_size: u32,
    /// Priority 0 (lowest) to 7 (highest), used when `has_priority` is non-zero; otherwise the
    /// queue's `default_priority` (3 unless set).
    pub priority: u32,
    /// Non-zero: `priority` is set.
    pub has_priority: c_int,
    /// Non-zero: `sequence` is set.
    pub has_sequence: c_int,
    /// The sender's sequence number within its group.
    pub sequence: u64,
    /// A short description for people (MSMQ `Label`, Service Bus `Subject`).
    pub label: *const c_char,
    /// MIME type of the body, e.g. `application/json`.
    pub content_type: *const c_char,
    /// Ties a reply to its request.
    pub correlation_id: *const c_char,
    /// Name of the queue replies should go to.
    pub reply_to: *const c_char,
    /// Key for duplicate detection within the queue's dedup window.
    pub message_key: *const c_char,
    /// Ordered group (session) the message belongs to.
    pub group: *const c_char,
    /// Deliver no earlier than this many ms after the send commits; 0: at once.
    pub delay_ms: u64,
    /// Deliver no earlier than this time (ms since the Unix epoch); 0: not set. Setting both
    /// `delay_ms` and `visible_at_ms` is `POSTBOX_INVALID_ARGUMENT`.
    pub visible_at_ms: u64,
    /// Time to live in ms: not received by then, the message is dead-lettered (`TTLExpired`);
    /// 0: the queue's default.
    pub ttl_ms: u64,
    /// Absolute expiry (ms since the Unix epoch); 0: not set. Exclusive with `ttl_ms`.
    pub expires_at_ms: u64,
    /// User properties: an array of `property_count` entries (NULL when 0).
    pub properties: *const postbox_property,
    /// Number of entries in `properties`.
    pub property_count: usize,
    /// For a collator (`postbox_collate`): non-zero declares the length of the message's
    /// series, how many messages it has (any message of the series may declare it; several if
    /// they agree). 0: not declared. Kept with the message as the string user property
    /// `POSTBOX_SERIES_LENGTH_PROPERTY`, which released messages carry.
    pub series_length: u64,
    /// For a collator: non-zero marks this message as the last of its series (its `sequence`
    /// is the series' length). Kept as the user property `POSTBOX_SERIES_LAST_PROPERTY`.
    pub series_last: c_int,
    /// Reserved (keeps the struct free of padding); ignored.
    pub reserved: u32,
}

impl Default for postbox_send_options {
    fn default() -> Self {
        postbox_send_options {
            struct_size: 0,
            priority: 0,
            has_priority: 0,
            has_sequence: 0,
            sequence: 0,
            label: std::ptr::null(),
            content_type: std::ptr::null(),
            correlation_id: std::ptr::null(),
            reply_to: std::ptr::null(),
            message_key: std::ptr::null(),
            group: std::ptr::null(),
            delay_ms: 0,
            visible_at_ms: 0,
            ttl_ms: 0,
            expires_at_ms: 0,
            properties: std::ptr::null(),
            property_count: 0,
            series_length: 0,
            series_last: 0,
            reserved: 0,
        }
    }
}

/// The size of the struct before `series_length` was added: callers built against that header
/// pass it, and declare a collator series' length through the user property.
const SEND_OPTIONS_V1: usize = std::mem::offset_of!(postbox_send_options, series_length);
const SEND_OPTIONS_FULL: usize = size_of::<postbox_send_options>();

// The layout older headers compiled against, and no padding anywhere (a later field must not
// land in bytes an older caller left unset).
const _: () = {
    assert!(
        SEND_OPTIONS_V1
            == 4 * size_of::<u32>()
                + 5 * size_of::<u64>()
                + 7 * size_of::<*const c_char>()
                + size_of::<usize>()
    );
    assert!(SEND_OPTIONS_FULL == SEND_OPTIONS_V1 + size_of::<u64>() + 2 * size_of::<u32>());
};

/// One message of `postbox_send_batch`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct postbox_send_item {
    /// The body (may be NULL when `body_len` is 0).
    pub body: *const u8,
    /// Length of the body in bytes.
    pub body_len: usize,
    /// Properties, or NULL for none.
    pub options: *const postbox_send_options,
}

/// Fills `options` with the defaults (no properties, priority 3) and sets its `struct_size`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` if `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_send_options_init(options: *mut postbox_send_options) -> c_int {
    guard(|| {
        Out::required(options, "options")?.write(postbox_send_options {
            struct_size: SEND_OPTIONS_FULL as u32,
            ..Default::default()
        });
        Ok(POSTBOX_OK)
    })
}

/// Reads a C array of user properties (`postbox_send_options.properties`,
/// `postbox_filter.properties`): keys NUL-terminated UTF-8, each at most once, string values
/// UTF-8. `what` names the array in error messages.
pub(crate) fn user_properties<'a>(
    properties: *const postbox_property,
    count: usize,
    what: &str,
) -> Outcome<Vec<(&'a str, PropertyValue)>> {
    let props = arg_slice(properties, count, what)?;
    let mut keys = std::collections::HashSet::with_capacity(props.len());
    let mut out = Vec::with_capacity(props.len());
    for (i, p) in props.iter().enumerate() {
        let key = arg_str(p.key, "key")
            .map_err(|f| Failure::invalid(format!("{what}[{i}]: {}", f.message)))?;
        // A map would keep the last value silently; a C array with a key twice is a bug.
        if !keys.insert(key) {
            return Err(Failure::invalid(format!(
                "{what}[{i}]: key {key:?} is listed twice"
            )));
        }
        let value = arg_slice(p.value, p.value_len, "value")
            .map_err(|f| Failure::invalid(format!("{what}[{i}]: {}", f.message)))?;
        let value = match p.kind {
            POSTBOX_PROPERTY_STRING => {
                let s = std::str::from_utf8(value).map_err(|_| {
                    Failure::invalid(format!("{what}[{i}] is a string but not valid UTF-8"))
                })?;
                PropertyValue::String(s.to_owned())
            }
            POSTBOX_PROPERTY_BYTES => PropertyValue::Bytes(value.to_vec()),
            other => {
                return Err(Failure::invalid(format!(
                    "{what}[{i}].kind must be POSTBOX_PROPERTY_STRING or POSTBOX_PROPERTY_BYTES, got {other}"
                )));
            }
        };
        out.push((key, value));
    }
    Ok(out)
}

pub(crate) fn build_message(
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    what: &str,
) -> Outcome<Message> {
    let body = arg_slice(body, body_len, what)?;
    let mut m = Message::new(body.to_vec());
    let Some(o) = read_versioned(options, SEND_OPTIONS_V1, "options")? else {
        return Ok(m);
    };
    if o.has_sequence != 0 {
        m = m.sequence(o.sequence);
    }
    if let Some(s) = arg_opt_str(o.label, "options.label")? {
        m = m.label(s);
    }
    if let Some(s) = arg_opt_str(o.content_type, "options.content_type")? {
        m = m.content_type(s);
    }
    if let Some(s) = arg_opt_str(o.correlation_id, "options.correlation_id")? {
        m = m.correlation_id(s);
    }
    if let Some(s) = arg_opt_str(o.reply_to, "options.reply_to")? {
        m = m.reply_to(s);
    }
    if let Some(s) = arg_opt_str(o.message_key, "options.message_key")? {
        m = m.message_key(s);
    }
    if let Some(s) = arg_opt_str(o.group, "options.group")? {
        m = m.group(s);
    }
    let ms = |v: u64| (v != 0).then(|| Duration::from_millis(v));
    let at = |v: u64| (v != 0).then(|| from_unix_ms(v));
    let times = FlatSend {
        priority: (o.has_priority != 0).then_some(i128::from(o.priority)),
        delay: ms(o.delay_ms),
        visible_at: at(o.visible_at_ms),
        ttl: ms(o.ttl_ms),
        expires_at: at(o.expires_at_ms),
    };
    m = times.apply(m).map_err(|e| {
        Failure::invalid(match e {
            FlatSendError::Priority(p) => format!("options.priority must be 0 to 7, got {p}"),
            FlatSendError::DelayAndVisibleAt => {
                "options.delay_ms and options.visible_at_ms are exclusive".to_owned()
            }
            FlatSendError::TtlAndExpiresAt => {
                "options.ttl_ms and options.expires_at_ms are exclusive".to_owned()
            }
        })
    })?;
    let mut declared_by_property = false;
    for (key, value) in user_properties(o.properties, o.property_count, "options.properties")? {
        declared_by_property |=
            key == postbox::SERIES_LENGTH_PROPERTY || key == postbox::SERIES_LAST_PROPERTY;
        m = m.property(key, value);
    }
    if o.series_length != 0 || o.series_last != 0 {
        if declared_by_property {
            return Err(Failure::invalid(
                "options.series_length / series_last and the (deprecated) series properties \
                 say the same thing: set the fields only",
            ));
        }
        if o.series_length != 0 {
            m = m.series_length(o.series_length);
        }
        if o.series_last != 0 {
            m = m.last_in_series();
        }
    }
    Ok(m)
}

/// Sends one message with body `body[0..body_len]` (copied; NULL allowed when `body_len` is 0)
/// and the properties in `options` (NULL for none).
///
/// With `tx` NULL the send commits on its own: when it returns `POSTBOX_OK` the message is
/// durable (under the default durability) and `id_out` (may be NULL) receives its id. With a
/// transaction the message is stored when `tx` commits; `id_out` then receives the id it will
/// have (reserved now, so it can go into an application row or another message of the same
/// transaction; never used if the transaction aborts). `tx` must come from the same store as
/// `queue`. A duplicate (its `message_key` within the queue's dedup window) stores nothing and
/// gets the original's id; `postbox_send_checked` also says so.
///
/// The message's size — body, text properties, user property keys and values — counts against
/// the queue's `max_message_size` and `max_bytes`. Text properties (`label` … `group`) are at
/// most `POSTBOX_MAX_TEXT_PROPERTY_LEN` bytes each, property keys 1 to
/// `POSTBOX_MAX_PROPERTY_KEY_LEN` bytes, each key at most once.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TOO_LARGE` (the message is above the queue's `max_message_size`,
/// checked at once, also with a transaction); `POSTBOX_QUEUE_FULL` (quota; with a
/// transaction, reported by the commit); `POSTBOX_INVALID_ARGUMENT` (NULL queue, NULL body with
/// a length, bad options, priority above 7, invalid UTF-8, a text property or property key out
/// of bounds, a property key listed twice, a dead-letter queue, a transaction of another store,
/// a finished transaction); `POSTBOX_QUEUE_NOT_FOUND` (queue deleted; at once with a
/// transaction too); `POSTBOX_CLOSED` (at once with a transaction too); `POSTBOX_FORKED`;
/// `POSTBOX_STORAGE_FULL` (the disk is full: nothing was stored); `POSTBOX_OUTCOME_UNKNOWN`
/// (the commit failed after it may have reached the disk); other storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_send(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    id_out: *mut u64,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let out = Out::optional(id_out);
        let m = build_message(body, body_len, options, "body")?;
        let id = if tx.is_null() {
            q.queue.send(m)?
        } else {
            with_tx(tx, q.tag, |t| Ok(t.send(&q.queue, m)?))?
        };
        out.write(id.get());
        Ok(POSTBOX_OK)
    })
}

/// Sends `count` messages atomically: all are stored in one commit, or none. `ids_out` may be
/// NULL, or an array of `count` elements that receives the ids in order (with a transaction,
/// the ids reserved for them, as in `postbox_send`). `count` may be 0.
///
/// # Returns
/// As `postbox_send`; on any error no message of the batch was stored, and the error names the
/// offending item (with a transaction, none of the batch joined it: the transaction stays as it
/// was and may still be committed).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_send_batch(
    queue: *mut postbox_queue,
    tx: *mut postbox_tx,
    items: *const postbox_send_item,
    count: usize,
    ids_out: *mut u64,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let items = arg_slice(items, count, "items")?;
        let ids = if ids_out.is_null() {
            None
        } else {
            Some(arg_slice_mut(ids_out, count, "ids_out")?)
        };
        let msgs = items
            .iter()
            .enumerate()
            .map(|(i, it)| {
                build_message(it.body, it.body_len, it.options, "body")
                    .map_err(|f| Failure::new(f.code, format!("items[{i}]: {}", f.message)))
            })
            .collect::<Outcome<Vec<_>>>()?;
        if tx.is_null() {
            let got = q.queue.send_batch(msgs)?;
            if let Some(ids) = ids {
                for (slot, id) in ids.iter_mut().zip(got) {
                    *slot = id.get();
                }
            }
        } else {
            let got = with_tx(tx, q.tag, |t| Ok(t.send_batch_checked(&q.queue, msgs)?))?;
            if let Some(ids) = ids {
                for (slot, s) in ids.iter_mut().zip(got) {
                    *slot = s.id.get();
                }
            }
        }
        Ok(POSTBOX_OK)
    })
}
