//! What a processor callback may do with the message it was given: ask for a dead letter,
//! see whether its lock was lost or its run cancelled, record checkpoints, renew the lock and
//! reply.

use std::ffi::{c_char, c_int};

use postbox::LockWatch;

use crate::guard::progress_keys;
use crate::guard::{Failure, Out, Outcome, arg_opt_str, arg_ref, arg_str, guard};
use crate::handle::{Handle, live};
use crate::message::postbox_message;
use crate::queue::{build_message, postbox_send_options};
use crate::status::POSTBOX_OK;
use crate::store::postbox_strings;
use crate::unix_ms;

/// Asks the processor to move the message of the running callback to the dead-letter queue
/// when the callback returns, whatever it returns. Only for the `message` passed to a
/// processor callback, during the call. `reason` is NUL-terminated UTF-8 of at most
/// `POSTBOX_MAX_REASON_LEN` bytes; `description` may be NULL, and is cut to
/// `POSTBOX_MAX_DESCRIPTION_LEN` bytes.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `message` or `reason`, invalid UTF-8, a
/// reason that is too long, a message that did not come from a processor callback, or a second
/// request for the same message).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_dead_letter(
    message: *const postbox_message,
    reason: *const c_char,
    description: *const c_char,
) -> c_int {
    guard(|| {
        let m = arg_ref(message, "message")?;
        let reason = arg_str(reason, "reason")?;
        let description = arg_opt_str(description, "description")?.unwrap_or("");
        m.live()?;
        m.held.request_dead_letter(reason, description)?;
        Ok(POSTBOX_OK)
    })
}

/// The lock state of the delivery behind a message lent to a running processor callback.
fn lent_delivery(message: *const postbox_message) -> Outcome<LockWatch> {
    let m = lent_message(message)?;
    m.held
        .lock_watch()
        .ok_or_else(|| Failure::invalid("message was not lent to a running processor callback"))
}

/// A message lent to a running processor callback.
fn lent_message<'a>(message: *const postbox_message) -> Outcome<&'a postbox_message> {
    let m = live(message)?;
    if !m.held.is_lent() {
        return Err(Failure::invalid(
            "message was not lent to a running processor callback",
        ));
    }
    Ok(m)
}

/// Whether the lock of the message a processor callback is handling was lost: a renewal was
/// refused (the message was taken over, purged, or deleted), or the lock expired (auto-renewal
/// disabled, or past `max_auto_renew_ms`). The processor will then not complete the message
/// whatever the callback returns (it is delivered again), so a long callback should poll this
/// and give up early. Only for the `message` passed to a processor
/// callback, during the call; `lost_out` receives 1 or 0 (untouched on error).
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `message` or `lost_out`, a message that did
/// not come from a running processor callback); `POSTBOX_FORKED`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_lock_lost(
    message: *const postbox_message,
    lost_out: *mut c_int,
) -> c_int {
    guard(|| {
        let out = Out::required(lost_out, "lost_out")?;
        let d = lent_delivery(message)?;
        out.write(c_int::from(d.lock_lost()));
        Ok(POSTBOX_OK)
    })
}

/// Whether the processor callback handling `message` should give up: its lock was lost (as
/// `postbox_processor_lock_lost`) or its `handler_timeout_ms` passed. Either way the message
/// will not be completed, whatever the callback returns. Same rules and errors as
/// `postbox_processor_lock_lost`; `cancelled_out` receives 1 or 0.
///
/// # Returns
/// As `postbox_processor_lock_lost`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_cancelled(
    message: *const postbox_message,
    cancelled_out: *mut c_int,
) -> c_int {
    guard(|| {
        let out = Out::required(cancelled_out, "cancelled_out")?;
        let d = lent_delivery(message)?;
        out.write(c_int::from(d.is_cancelled()));
        Ok(POSTBOX_OK)
    })
}

/// Records progress keys on the message of the running processor callback (work items done,
/// e.g. "recipient 17 notified") under the processor's lock, as `postbox_message_mark_done`
/// does on a message a handle holds: the keys and a renewal of the lock are written at once, in
/// one commit, and the processor goes on renewing the same lock. A redelivery — after the
/// callback failed, the lock was lost, or the process died — reads them with
/// `postbox_processor_done_keys` and skips that work; the completion removes them with the
/// message. In a transactional callback too the keys are written at once, not with `tx`: they
/// record work done outside the transaction, which its abort cannot take back.
///
/// `keys` is an array of `count` NUL-terminated UTF-8 strings, each 1 to 1024 bytes (recording
/// a key twice is harmless); `count` may be 0 (only the lock is renewed). `locked_until_ms_out`
/// may be NULL; on success it receives the new lock expiry (ms since the Unix epoch). Only for
/// the `message` passed to a processor callback, during the call.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (nothing recorded; the processor will not complete the
/// message, and `postbox_processor_lock_lost` reports 1); `POSTBOX_INVALID_ARGUMENT` (NULL
/// message, NULL `keys` with a count, a NULL, empty, over-long or non-UTF-8 key, a message that
/// did not come from a running processor callback); `POSTBOX_QUEUE_NOT_FOUND` (the queue was
/// deleted); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_mark_done(
    message: *const postbox_message,
    keys: *const *const c_char,
    count: usize,
    locked_until_ms_out: *mut u64,
) -> c_int {
    guard(|| {
        let out = Out::optional(locked_until_ms_out);
        let keys = progress_keys(keys, count)?;
        let until = lent_message(message)?.held.mark_done(keys)?;
        out.write(unix_ms(until));
        Ok(POSTBOX_OK)
    })
}

/// The progress keys recorded on the message of the running processor callback (by
/// `postbox_processor_mark_done` or `postbox_message_mark_done`, in this delivery or earlier
/// ones), read in one lookup. `keys_out` receives a list, sorted bytewise, that the caller reads
/// with `postbox_strings_count` / `postbox_strings_get` and frees with `postbox_strings_free`.
/// Only for the `message` passed to a processor callback, during the call.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, a message that did not come from a running
/// processor callback); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_done_keys(
    message: *const postbox_message,
    keys_out: *mut *mut postbox_strings,
) -> c_int {
    guard(|| {
        let out = Out::required(keys_out, "keys_out")?;
        let keys = lent_message(message)?.held.done_keys()?;
        out.write(postbox_strings::boxed(keys.into_iter().collect())?);
        Ok(POSTBOX_OK)
    })
}

/// Extends the processor's lock on the message of the running callback by the queue's lock
/// duration, from now. The processor renews it anyway while the callback runs (up to
/// `max_auto_renew_ms` after the receive, unless `disable_auto_renew`): this is for a callback
/// that runs longer. `locked_until_ms_out` may be NULL; on success it receives the new expiry
/// (ms since the Unix epoch), which `postbox_message_locked_until_ms` also reports. Only for the
/// `message` passed to a processor callback, during the call.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock is gone: the processor will not complete the
/// message); `POSTBOX_INVALID_ARGUMENT` (NULL, a message that did not come from a running
/// processor callback); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage
/// errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_renew_lock(
    message: *const postbox_message,
    locked_until_ms_out: *mut u64,
) -> c_int {
    guard(|| {
        let out = Out::optional(locked_until_ms_out);
        let until = lent_message(message)?.held.renew_lock()?;
        out.write(unix_ms(until));
        Ok(POSTBOX_OK)
    })
}

/// Answers the message of the running processor callback: the reply `body[0..body_len]` with
/// `options` (NULL for none; as `postbox_send`) goes to the queue named by the message's
/// `reply_to`, with its correlation id set to the message's correlation id, or to the message's
/// id in decimal if it has none (a correlation id in `options` is replaced) — what
/// `postbox_request` waits for — in the commit that completes the message when the callback
/// returns `POSTBOX_OK` (in a transactional callback: with `tx`, as one of its sends). Nothing is
/// sent if the callback fails, asks for a dead letter, passes its time limit or loses the lock:
/// the message is retried and answered by its next delivery. One reply per delivery.
/// `reply_id_out` (may be NULL) receives the id the reply will have. Only for the `message`
/// passed to a processor callback, during the call.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL message, a message without `reply_to`, bad
/// body or options, a second reply, a message that did not come from a running processor
/// callback); `POSTBOX_QUEUE_NOT_FOUND` (the reply queue does not exist, e.g. a requester's
/// temporary queue that went with it); `POSTBOX_TOO_LARGE` (the reply queue's
/// `max_message_size`); `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors. A reply queue that
/// is deleted or full by the time of the completion fails that commit instead: the message goes
/// back to its queue and is delivered again.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_processor_reply(
    message: *const postbox_message,
    body: *const u8,
    body_len: usize,
    options: *const postbox_send_options,
    reply_id_out: *mut u64,
) -> c_int {
    guard(|| {
        let out = Out::optional(reply_id_out);
        let reply = build_message(body, body_len, options, "body")?;
        let id = lent_message(message)?.held.reply("replied", reply)?;
        out.write(id.get());
        Ok(POSTBOX_OK)
    })
}
