//! `postbox_message`: a received (locked), transactionally received, peeked or browsed message;
//! its property accessors and the calls that settle it.

use std::ffi::{c_char, c_int};
use std::time::Duration;

use std::time::SystemTime;

use postbox::binding::HeldMessage;
use postbox::{Envelope, MessageState, PropertyValue, Queue, Received, SettleError};

use crate::guard::{Failure, Out, Outcome, arg_opt_str, arg_ref, arg_str, guard, take_box};
use crate::handle::Handle;
use crate::status::{POSTBOX_NOT_FOUND, POSTBOX_OK};
use crate::{StoreTag, postbox_bytes, unix_ms};

/// Kind of a user property value: UTF-8 text.
pub const POSTBOX_PROPERTY_STRING: u32 = 0;
/// Kind of a user property value: arbitrary bytes.
pub const POSTBOX_PROPERTY_BYTES: u32 = 1;

/// The longest text property of a message to send (`label`, `content_type`, `correlation_id`,
/// `reply_to`, `message_key`, `group`), in bytes of UTF-8; a longer one is refused with
/// `POSTBOX_INVALID_ARGUMENT`.
pub const POSTBOX_MAX_TEXT_PROPERTY_LEN: usize = 1024;
/// The longest user property key, in bytes of UTF-8 (keys are 1 to this many bytes); a longer
/// or empty one is refused with `POSTBOX_INVALID_ARGUMENT`.
pub const POSTBOX_MAX_PROPERTY_KEY_LEN: usize = 256;
/// The longest dead-letter reason, in bytes; a longer one is refused with
/// `POSTBOX_INVALID_ARGUMENT`.
pub const POSTBOX_MAX_REASON_LEN: usize = 256;
/// The longest dead-letter description, in bytes; a longer one is cut to this length (at a
/// UTF-8 character boundary).
pub const POSTBOX_MAX_DESCRIPTION_LEN: usize = 4096;

// The string macros of the header (`POSTBOX_REASON_*`, `POSTBOX_DEAD_LETTER_SUFFIX`,
// `POSTBOX_SERIES_*_PROPERTY`) live in ffi/cbindgen.toml, since cbindgen emits no string
// constants; a test below pins them to the engine's values.

// The header spells these as literals (cbindgen cannot follow a path into the engine crate);
// the build fails if they ever differ from the engine's.
const _: () = {
    assert!(POSTBOX_MAX_TEXT_PROPERTY_LEN == postbox::MAX_TEXT_PROPERTY_LEN);
    assert!(POSTBOX_MAX_PROPERTY_KEY_LEN == postbox::MAX_PROPERTY_KEY_LEN);
    assert!(POSTBOX_MAX_REASON_LEN == postbox::MAX_REASON_LEN);
    assert!(POSTBOX_MAX_DESCRIPTION_LEN == postbox::MAX_DESCRIPTION_LEN);
};

/// A message: its body and properties, and — when it came from a peek-lock receive — its lock.
///
/// Obtained from `postbox_receive`, `postbox_receive_batch`, `postbox_peek`, `postbox_get` or
/// `postbox_browse_next`; the caller owns it and frees it with `postbox_message_free`. Processor
/// callbacks get a borrowed `const postbox_message *` that must not be freed or kept.
///
/// Thread-safe: the accessors only read; settling is serialised inside the handle. The body,
/// properties and every `postbox_bytes` view stay valid and unchanged until the handle is freed,
/// even after the message has been settled.
pub struct postbox_message {
    /// The message and its lock state, as every binding keeps them. C reaches a transaction's
    /// messages through the transaction handle, so the link is empty.
    pub(crate) held: HeldMessage<()>,
    pub(crate) tag: StoreTag,
}

impl Handle for postbox_message {
    const ARG: &'static str = "message";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

impl postbox_message {
    pub(crate) fn new(held: HeldMessage<()>, tag: StoreTag) -> postbox_message {
        postbox_message { held, tag }
    }

    pub(crate) fn into_raw(self) -> *mut postbox_message {
        Box::into_raw(Box::new(self))
    }

    pub(crate) fn envelope(&self) -> &Envelope {
        self.held.envelope()
    }

    /// Takes the lock out of the handle to hand it on (a transaction); the handle is settled
    /// afterwards.
    pub(crate) fn take_received(&self) -> Outcome<Received> {
        self.live()?;
        Ok(self.held.take("enlisted")?)
    }

    /// Runs one settle call on the held message (see `HeldMessage::settle`: only success and
    /// a lost lock end the hold).
    fn settle(
        &self,
        after: &'static str,
        f: impl FnOnce(Received) -> Result<(), SettleError>,
    ) -> Outcome<()> {
        self.live()?;
        Ok(self.held.settle(after, f)?)
    }
}

impl crate::guard::FfiReturn for *mut postbox_message {
    fn on_failure(_: c_int) -> *mut postbox_message {
        std::ptr::null_mut()
    }
}

fn msg<'a>(m: *const postbox_message) -> Outcome<&'a postbox_message> {
    arg_ref(m, "message")
}

/// Frees a message handle. A message still held (received with peek-lock and not settled) is
/// abandoned: it returns to its queue at once for another delivery. NULL is a no-op.
/// Never free a message passed to a processor callback.
///
/// In a forked child (see "Processes and fork()") it only frees the memory: the message stays
/// locked by the parent.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_free(message: *mut postbox_message) {
    guard(|| {
        drop(take_box(message));
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Settling

/// Completes a received message: it is removed for good and never reappears. The handle stays
/// readable and must still be freed.
///
/// Only `POSTBOX_OK` and `POSTBOX_LOCK_LOST` end the handle's hold on the message. After any
/// other status nothing changed and the handle still holds the lock: retry the call (e.g. after
/// freeing disk space), settle it another way, or free the handle to abandon it.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock expired, was taken over, or the message was
/// purged: nothing changed, and the handle no longer holds it); `POSTBOX_INVALID_ARGUMENT`
/// (NULL, or a message this handle does not hold: peeked, received in a transaction, or already
/// settled); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors (`POSTBOX_OUTCOME_UNKNOWN`: the settle may or may not have
/// been applied; a retry then reports `POSTBOX_LOCK_LOST` if it was).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_complete(message: *mut postbox_message) -> c_int {
    guard(|| {
        msg(message)?.settle("completed", Received::complete)?;
        Ok(POSTBOX_OK)
    })
}

/// Abandons a received message: it returns to its queue for another delivery, receivable again
/// after `delay_ms` milliseconds (0: at once), or moves to the dead-letter queue if it has used
/// up the queue's `max_deliveries`. The handle stays readable and must still be freed.
///
/// # Returns
/// As `postbox_message_complete` (a failure other than `POSTBOX_LOCK_LOST` leaves the lock with
/// the handle).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_abandon(message: *mut postbox_message, delay_ms: u64) -> c_int {
    guard(|| {
        msg(message)?.settle("abandoned", |r| {
            if delay_ms == 0 {
                r.abandon()
            } else {
                r.abandon_after(Duration::from_millis(delay_ms))
            }
        })?;
        Ok(POSTBOX_OK)
    })
}

/// Moves a received message to its queue's dead-letter queue (named `<queue>` +
/// `POSTBOX_DEAD_LETTER_SUFFIX`, opened with `postbox_queue_dead_letters`) with a
/// machine-readable `reason` (at most `POSTBOX_MAX_REASON_LEN` bytes) and a human-readable
/// `description` (cut to `POSTBOX_MAX_DESCRIPTION_LEN` bytes at a character boundary). Both are
/// NUL-terminated UTF-8; `description` may be NULL for none. The handle stays readable and must
/// still be freed.
///
/// # Returns
/// As `postbox_message_complete`; also `POSTBOX_INVALID_ARGUMENT` for a NULL `reason`, invalid
/// UTF-8, a reason longer than `POSTBOX_MAX_REASON_LEN`, or a message that is already in a
/// dead-letter queue. Refusals leave the lock with the handle.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_dead_letter(
    message: *mut postbox_message,
    reason: *const c_char,
    description: *const c_char,
) -> c_int {
    guard(|| {
        let m = msg(message)?;
        let reason = arg_str(reason, "reason")?;
        let description = arg_opt_str(description, "description")?.unwrap_or("");
        m.settle("dead-lettered", |r| r.dead_letter(reason, description))?;
        Ok(POSTBOX_OK)
    })
}

/// Moves a message received from a dead-letter queue back to its source queue, with its
/// delivery count reset and its dead-letter details cleared. The handle stays readable and must
/// still be freed.
///
/// # Returns
/// As `postbox_message_complete`; also `POSTBOX_INVALID_ARGUMENT` if the message was not
/// received from a dead-letter queue (the refusal leaves the lock with the handle), and
/// `POSTBOX_QUEUE_NOT_FOUND` if its source queue was deleted.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_resubmit(message: *mut postbox_message) -> c_int {
    guard(|| {
        msg(message)?.settle("resubmitted", Received::resubmit)?;
        Ok(POSTBOX_OK)
    })
}

/// Defers a received message: it stays in its queue, set aside. No `postbox_receive`,
/// `postbox_peek` or browse returns it again; only `postbox_receive_by_id` does (keep its id,
/// `postbox_message_id`). It keeps its time to live and delivery count (expiry and
/// `max_deliveries` dead-letter it as any message) and counts as `deferred` in
/// `postbox_queue_counts_get`. A later lock on it that ends unsettled (abandoned, freed unsettled,
/// expired) leaves it deferred again. The handle stays readable and must still be freed.
///
/// Only `POSTBOX_OK` and `POSTBOX_LOCK_LOST` end the handle's hold on the message. After any
/// other status nothing changed and the handle still holds the lock.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock expired, was taken over, or the message was
/// purged: nothing changed, and the handle no longer holds it); `POSTBOX_INVALID_ARGUMENT`
/// (NULL, or a message this handle does not hold: peeked, received in a transaction, or already
/// settled); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors (`POSTBOX_OUTCOME_UNKNOWN`: the settle may or may not have
/// been applied; a retry then reports `POSTBOX_LOCK_LOST` if it was).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_defer(message: *mut postbox_message) -> c_int {
    guard(|| {
        msg(message)?.settle("deferred", Received::defer)?;
        Ok(POSTBOX_OK)
    })
}

/// Extends the lock of a received message by its queue's lock duration, from now.
/// `locked_until_ms_out` may be NULL; on success it receives the new expiry (ms since the Unix
/// epoch), which `postbox_message_locked_until_ms` also reports from then on.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock is already gone; the handle no longer holds
/// it); `POSTBOX_INVALID_ARGUMENT` (NULL, or not held); `POSTBOX_QUEUE_NOT_FOUND` (the queue
/// was deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. After a failure other than
/// `POSTBOX_LOCK_LOST` the handle still holds the lock, with its previous expiry.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_renew_lock(
    message: *mut postbox_message,
    locked_until_ms_out: *mut u64,
) -> c_int {
    guard(|| {
        let m = msg(message)?;
        let out = Out::optional(locked_until_ms_out);
        m.live()?;
        let ms = unix_ms(m.held.renew_lock()?);
        out.write(ms);
        Ok(POSTBOX_OK)
    })
}

// ---------------------------------------------------------------------------------------------
// Accessors. They never fail on a valid handle; on NULL they return 0 / an absent view.

/// The message's store-wide id (ids increase in commit order and are never reused); 0 for NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_id(message: *const postbox_message) -> u64 {
    guard(|| Ok(msg(message)?.envelope().id().get()))
}

/// The body. The view is valid until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_body(message: *const postbox_message) -> postbox_bytes {
    guard(|| Ok(postbox_bytes::of(msg(message)?.envelope().body())))
}

/// The name of the queue the message is in. Valid until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_queue(message: *const postbox_message) -> postbox_bytes {
    guard(|| {
        Ok(postbox_bytes::of(
            msg(message)?.envelope().queue().as_bytes(),
        ))
    })
}

/// The label (MSMQ `Label`, Service Bus `Subject`); absent view (`data == NULL`) if unset.
/// Valid until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_label(message: *const postbox_message) -> postbox_bytes {
    guard(|| Ok(postbox_bytes::of_opt(msg(message)?.envelope().label())))
}

/// The content type (e.g. `application/json`); absent view if unset. Valid until the message is
/// freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_content_type(message: *const postbox_message) -> postbox_bytes {
    guard(|| {
        Ok(postbox_bytes::of_opt(
            msg(message)?.envelope().content_type(),
        ))
    })
}

/// The correlation id; absent view if unset. Valid until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_correlation_id(message: *const postbox_message) -> postbox_bytes {
    guard(|| {
        Ok(postbox_bytes::of_opt(
            msg(message)?.envelope().correlation_id(),
        ))
    })
}

/// The reply-to queue name; absent view if unset. Valid until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_reply_to(message: *const postbox_message) -> postbox_bytes {
    guard(|| Ok(postbox_bytes::of_opt(msg(message)?.envelope().reply_to())))
}

/// The duplicate-detection key; absent view if unset. Valid until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_message_key(message: *const postbox_message) -> postbox_bytes {
    guard(|| {
        Ok(postbox_bytes::of_opt(
            msg(message)?.envelope().message_key(),
        ))
    })
}

/// The ordered group (session); absent view if unset. Valid until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_group(message: *const postbox_message) -> postbox_bytes {
    guard(|| Ok(postbox_bytes::of_opt(msg(message)?.envelope().group())))
}

/// The sender's sequence number within its group, written to `sequence_out` if it was set.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no sequence was set); `POSTBOX_INVALID_ARGUMENT` (NULL).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_sequence(
    message: *const postbox_message,
    sequence_out: *mut u64,
) -> c_int {
    guard(|| {
        let m = msg(message)?;
        let out = Out::required(sequence_out, "sequence_out")?;
        let seq = m
            .envelope()
            .sequence()
            .ok_or_else(|| Failure::new(POSTBOX_NOT_FOUND, "the message has no sequence"))?;
        out.write(seq);
        Ok(POSTBOX_OK)
    })
}

/// Priority 0–7 (higher is delivered first); 0 for NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_priority(message: *const postbox_message) -> u8 {
    guard(|| Ok(msg(message)?.envelope().priority()))
}

/// How many times the message has been handed to a receiver, this delivery included; 0 for NULL
/// and for a message that was never received.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_delivery_count(message: *const postbox_message) -> u32 {
    guard(|| Ok(msg(message)?.envelope().delivery_count()))
}

/// When the send committed, in ms since the Unix epoch; 0 for NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_enqueued_at_ms(message: *const postbox_message) -> u64 {
    guard(|| Ok(unix_ms(msg(message)?.envelope().enqueued_at())))
}

/// When a scheduled message became (or becomes) receivable, in ms since the Unix epoch; 0 if it
/// was not scheduled.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_visible_at_ms(message: *const postbox_message) -> u64 {
    guard(|| Ok(msg(message)?.envelope().visible_at().map_or(0, unix_ms)))
}

/// When the message expires, in ms since the Unix epoch; 0 if it never expires.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_expires_at_ms(message: *const postbox_message) -> u64 {
    guard(|| Ok(msg(message)?.envelope().expires_at().map_or(0, unix_ms)))
}

/// When this handle's lock expires unless renewed, in ms since the Unix epoch (a time in the
/// past once it has expired); 0 when the handle holds no lock (peeked, received in a
/// transaction, settled, or the lock was reported lost). In a processor callback: when the
/// processor's lock on the message expired at the time of the call (the processor renews it).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_locked_until_ms(message: *const postbox_message) -> u64 {
    guard(|| Ok(msg(message)?.held.locked_until().map_or(0, unix_ms)))
}

/// The lock token of this delivery (unique in the store); 0 when the message was not received
/// with peek-lock.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_lock_token(message: *const postbox_message) -> u64 {
    guard(|| Ok(msg(message)?.held.lock_token().unwrap_or(0)))
}

/// Whether this handle currently holds the message's lock: received with peek-lock, not yet
/// settled, and its lock not expired (`postbox_message_locked_until_ms` is still in the future;
/// once it has passed, another receiver may take the message and a settle reports
/// `POSTBOX_LOCK_LOST`). False for NULL and in a forked child.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_is_held(message: *const postbox_message) -> bool {
    guard(|| {
        let m = msg(message)?;
        if m.tag.is_forked() {
            return Ok(false);
        }
        // Only a peek-lock receive has a token; its expiry is forgotten once the handle stops
        // holding the lock (settled, lost).
        let until = m.held.locked_until().map_or(0, unix_ms);
        Ok(m.held.lock_token().is_some() && until > unix_ms(SystemTime::now()))
    })
}

fn property_view(value: &PropertyValue) -> (u32, postbox_bytes) {
    match value {
        PropertyValue::String(s) => (POSTBOX_PROPERTY_STRING, postbox_bytes::of(s.as_bytes())),
        PropertyValue::Bytes(b) => (POSTBOX_PROPERTY_BYTES, postbox_bytes::of(b)),
        // A kind added later is exposed as bytes rather than hidden.
        #[allow(unreachable_patterns)]
        _ => (POSTBOX_PROPERTY_BYTES, postbox_bytes::ABSENT),
    }
}

/// The number of user properties; 0 for NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_property_count(message: *const postbox_message) -> usize {
    guard(|| Ok(msg(message)?.envelope().properties().len()))
}

/// The user property at `index` (properties are sorted by key, index from 0 to
/// `postbox_message_property_count() - 1`). Each out-pointer may be NULL if not wanted: `key_out`
/// receives the key (UTF-8), `kind_out` `POSTBOX_PROPERTY_STRING` or `POSTBOX_PROPERTY_BYTES`,
/// `value_out` the value. The views are valid until the message is freed.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (`index` out of range); `POSTBOX_INVALID_ARGUMENT` (NULL
/// message).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_property_at(
    message: *const postbox_message,
    index: usize,
    key_out: *mut postbox_bytes,
    kind_out: *mut u32,
    value_out: *mut postbox_bytes,
) -> c_int {
    guard(|| {
        let m = msg(message)?;
        let (key, value) = m.envelope().properties().iter().nth(index).ok_or_else(|| {
            Failure::new(
                POSTBOX_NOT_FOUND,
                format!("the message has no property at index {index}"),
            )
        })?;
        let (kind, view) = property_view(value);
        Out::optional(key_out).write(postbox_bytes::of(key.as_bytes()));
        Out::optional(kind_out).write(kind);
        Out::optional(value_out).write(view);
        Ok(POSTBOX_OK)
    })
}

/// Looks up the user property `key` (NUL-terminated UTF-8). `kind_out` (may be NULL) receives
/// its kind, `value_out` (may be NULL) its value, valid until the message is freed.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (no such property); `POSTBOX_INVALID_ARGUMENT` (NULL
/// message or key, key not UTF-8).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_property(
    message: *const postbox_message,
    key: *const c_char,
    kind_out: *mut u32,
    value_out: *mut postbox_bytes,
) -> c_int {
    guard(|| {
        let m = msg(message)?;
        let key = arg_str(key, "key")?;
        let value = m.envelope().property(key).ok_or_else(|| {
            Failure::new(
                POSTBOX_NOT_FOUND,
                format!("the message has no property {key:?}"),
            )
        })?;
        let (kind, view) = property_view(value);
        Out::optional(kind_out).write(kind);
        Out::optional(value_out).write(view);
        Ok(POSTBOX_OK)
    })
}

/// State of a message in its queue (`postbox_message_queue_state`): receivable.
pub const POSTBOX_MESSAGE_ACTIVE: u32 = 0;
/// State of a message in its queue: locked by a receiver or a transaction.
pub const POSTBOX_MESSAGE_LOCKED: u32 = 1;
/// State of a message in its queue: scheduled for later (a delay, or abandoned with one).
pub const POSTBOX_MESSAGE_SCHEDULED: u32 = 2;
/// State of a message in its queue: deferred (receivable by id only).
pub const POSTBOX_MESSAGE_DEFERRED: u32 = 3;

/// The C code of each state (a test checks that every state has its own).
fn state_code(state: MessageState) -> u32 {
    match state {
        MessageState::Active => POSTBOX_MESSAGE_ACTIVE,
        MessageState::Locked => POSTBOX_MESSAGE_LOCKED,
        MessageState::Scheduled => POSTBOX_MESSAGE_SCHEDULED,
        MessageState::Deferred => POSTBOX_MESSAGE_DEFERRED,
        // `MessageState` is non-exhaustive: a state added later reads as locked (not
        // receivable) until it gets a code.
        _ => POSTBOX_MESSAGE_LOCKED,
    }
}

/// The message's state in its queue when this handle read it, one of `POSTBOX_MESSAGE_*`, the
/// `postbox_queue_counts` count it was in (the rule `postbox_queue_stats` counts by: an expired
/// lock or a due scheduled message is already active): `postbox_get` reports whatever it found
/// (`POSTBOX_MESSAGE_LOCKED` for a message another receiver holds, `POSTBOX_MESSAGE_DEFERRED`,
/// ...); `postbox_peek`, `postbox_peek_wait` and `postbox_browse_next` read active messages;
/// receives (and processor callbacks) locked ones. A dead letter is in its dead-letter queue:
/// active there, or locked while held. Read once, at that moment: settling the handle does not
/// change it.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_NOT_FOUND` (a message not read from a queue: the reply
/// `postbox_request` hands out, completed already); `POSTBOX_INVALID_ARGUMENT` (NULL).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_queue_state(
    message: *const postbox_message,
    state_out: *mut u32,
) -> c_int {
    guard(|| {
        let m = msg(message)?;
        let out = Out::required(state_out, "state_out")?;
        let state = m.held.read_state().ok_or_else(|| {
            Failure::new(
                POSTBOX_NOT_FOUND,
                "the message was not read from a queue (a request's reply, completed already)",
            )
        })?;
        out.write(state_code(state));
        Ok(POSTBOX_OK)
    })
}

/// Whether the message is in a dead-letter queue (and so carries the dead-letter details below);
/// false for NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_is_dead_lettered(message: *const postbox_message) -> bool {
    guard(|| Ok(msg(message)?.envelope().dead_letter_info().is_some()))
}

/// Why the message was dead-lettered (`POSTBOX_REASON_TTL_EXPIRED`,
/// `POSTBOX_REASON_MAX_DELIVERIES`, or the reason given to `postbox_message_dead_letter` /
/// `postbox_processor_dead_letter`); absent view if it was not. Valid until the message is
/// freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_dead_letter_reason(
    message: *const postbox_message,
) -> postbox_bytes {
    guard(|| {
        let info = msg(message)?.envelope().dead_letter_info();
        Ok(postbox_bytes::of_opt(info.map(|i| i.reason.as_str())))
    })
}

/// The dead-letter description (at most `POSTBOX_MAX_DESCRIPTION_LEN` bytes); absent view if
/// the message was not dead-lettered. Valid until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_dead_letter_description(
    message: *const postbox_message,
) -> postbox_bytes {
    guard(|| {
        let info = msg(message)?.envelope().dead_letter_info();
        Ok(postbox_bytes::of_opt(info.map(|i| i.description.as_str())))
    })
}

/// The queue a dead-lettered message came from; absent view if it was not dead-lettered. Valid
/// until the message is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_dead_letter_source(
    message: *const postbox_message,
) -> postbox_bytes {
    guard(|| {
        let info = msg(message)?.envelope().dead_letter_info();
        Ok(postbox_bytes::of_opt(info.map(|i| i.source_queue.as_str())))
    })
}

/// When the message was dead-lettered, in ms since the Unix epoch; 0 if it was not.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_message_dead_lettered_at_ms(message: *const postbox_message) -> u64 {
    guard(|| {
        let info = msg(message)?.envelope().dead_letter_info();
        Ok(info.map_or(0, |i| unix_ms(i.at)))
    })
}

/// Settles several received messages in one commit; used by `postbox_complete_batch`.
pub(crate) fn complete_batch(
    queue: &Queue,
    tag: StoreTag,
    messages: &[*mut postbox_message],
) -> Outcome<()> {
    queue.complete_batch(take_batch(queue, tag, messages)?)?;
    Ok(())
}

/// Checks every handle (non-NULL, of this store and this queue, held, listed once), then takes
/// their locks: all or none, so a refused batch leaves every handle as it was.
pub(crate) fn take_batch(
    queue: &Queue,
    tag: StoreTag,
    messages: &[*mut postbox_message],
) -> Outcome<Vec<Received>> {
    tag.check_process()?;
    let mut handles = Vec::with_capacity(messages.len());
    for (i, &p) in messages.iter().enumerate() {
        let m = arg_ref(p.cast_const(), "messages[i]")
            .map_err(|_| Failure::invalid(format!("messages[{i}] is NULL")))?;
        if m.tag != tag {
            return Err(Failure::invalid(format!(
                "messages[{i}] belongs to another store than the queue"
            )));
        }
        handles.push(&m.held);
    }
    Ok(HeldMessage::take_all(&handles, queue.name(), "completed")?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_message_state_has_a_code_of_its_own() {
        let mut codes: Vec<u32> = postbox::MessageState::ALL
            .iter()
            .map(|s| super::state_code(*s))
            .collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), postbox::MessageState::ALL.len());
    }

    #[test]
    fn header_string_macros_match_the_engine() {
        let config = include_str!("../cbindgen.toml");
        for (name, value) in [
            ("POSTBOX_REASON_TTL_EXPIRED", postbox::REASON_TTL_EXPIRED),
            (
                "POSTBOX_REASON_MAX_DELIVERIES",
                postbox::REASON_MAX_DELIVERIES,
            ),
            (
                "POSTBOX_REASON_DECODE_FAILED",
                postbox::REASON_DECODE_FAILED,
            ),
            (
                "POSTBOX_REASON_DESTINATION_MISSING",
                postbox::REASON_DESTINATION_MISSING,
            ),
            // The engine keeps its suffix private; the C suite checks a dead-letter queue's
            // name against the macro.
            ("POSTBOX_DEAD_LETTER_SUFFIX", "/$deadletterqueue"),
            (
                "POSTBOX_SERIES_LENGTH_PROPERTY",
                postbox::SERIES_LENGTH_PROPERTY,
            ),
            (
                "POSTBOX_SERIES_LAST_PROPERTY",
                postbox::SERIES_LAST_PROPERTY,
            ),
        ] {
            let line = format!("#define {name} \"{value}\"");
            assert!(config.contains(&line), "ffi/cbindgen.toml lacks {line}");
        }
    }
}
