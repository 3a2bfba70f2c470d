//! `postbox_session`: one group of a queue that requires sessions, received in order, one
//! message at a time, with a state that outlives the session lock; `postbox_buffer_free` for
//! the state buffers it hands out.

use std::ffi::{c_char, c_int};

use postbox::Session;
use postbox::binding::HeldMessage;

use crate::guard::{
    Failure, Out, Outcome, arg_opt_str, arg_ref, arg_slice, arg_str, guard, take_box,
};
use crate::handle::{Handle, live};
use crate::message::postbox_message;
use crate::queue::postbox_queue;
use crate::status::{POSTBOX_OK, POSTBOX_TIMEOUT};
use crate::tx::{postbox_tx, with_tx};
use crate::{StoreTag, postbox_bytes, timeout, unix_ms};

/// A session of a queue that requires sessions (`postbox_queue_options.requires_session`): the
/// messages of one `group`, delivered to this holder only, in send order, one at a time — the
/// next one becomes receivable when the previous one is completed, dead-lettered or deferred.
/// Other groups go to other holders in parallel.
///
/// The session lock expires like a message lock (the queue's `lock_duration`) unless renewed
/// with `postbox_session_renew_lock`; once lost (expired and accepted by another receiver, or
/// released), the handle's calls return `POSTBOX_LOCK_LOST`. The session's state, a small
/// bytes value, outlives locks: a receiver that takes the session over reads where the last one
/// left off.
///
/// Created by `postbox_session_accept`; ended by `postbox_session_release` (which reports
/// whether the release worked) or `postbox_session_free` (best effort); both free the handle.
/// Thread-safe. The session keeps its own reference to the queue: the queue handle may be freed
/// first.
pub struct postbox_session {
    session: Session,
    tag: StoreTag,
}

impl Handle for postbox_session {
    const ARG: &'static str = "session";

    fn tag(&self) -> StoreTag {
        self.tag
    }
}

/// The state argument of the setters: `None` with `clear`, else the caller's bytes.
fn state_arg<'a>(data: *const u8, len: usize, clear: bool) -> Outcome<Option<&'a [u8]>> {
    if clear {
        if len != 0 {
            return Err(Failure::invalid(
                "clear is set and the state has bytes: choose one",
            ));
        }
        return Ok(None);
    }
    arg_slice(data, len, "data").map(Some)
}

/// Accepts a session of `queue`, waiting up to `timeout_ms` milliseconds (0: do not wait;
/// negative: without limit). With `group` NULL, the next available session: a group whose
/// next message is receivable and that no other receiver holds. With `group` set
/// (NUL-terminated UTF-8, 1 to `POSTBOX_MAX_TEXT_PROPERTY_LEN` bytes), that session, waiting
/// while another receiver holds it; a session with no messages can be accepted too (to read or
/// set its state).
///
/// `session_out` receives a handle the caller ends with `postbox_session_release` or
/// `postbox_session_free`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TIMEOUT` (no session available in time: a normal outcome);
/// `POSTBOX_INVALID_ARGUMENT` (NULL `queue` or `session_out`, a bad `group`, a queue that does
/// not require sessions); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_accept(
    queue: *const postbox_queue,
    group: *const c_char,
    timeout_ms: i64,
    session_out: *mut *mut postbox_session,
) -> c_int {
    guard(|| {
        let q = live(queue)?;
        let group = arg_opt_str(group, "group")?;
        let out = Out::required(session_out, "session_out")?;
        let wait = timeout(timeout_ms);
        let got = match group {
            None => q.queue.accept_session(wait)?,
            Some(g) => q.queue.accept_named_session(g, wait)?,
        };
        let session = got.ok_or_else(|| {
            Failure::new(
                POSTBOX_TIMEOUT,
                match group {
                    None => format!(
                        "no session of queue {:?} became available within {timeout_ms} ms",
                        q.queue.name()
                    ),
                    Some(g) => format!(
                        "session {g:?} of queue {:?} stayed held by another receiver for {timeout_ms} ms",
                        q.queue.name()
                    ),
                },
            )
        })?;
        out.write(Box::into_raw(Box::new(postbox_session {
            session,
            tag: q.tag,
        })));
        Ok(POSTBOX_OK)
    })
}

/// The session's group (UTF-8, not NUL-terminated); absent view for NULL. Valid until the
/// session handle is freed.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_group(session: *const postbox_session) -> postbox_bytes {
    guard(|| {
        Ok(postbox_bytes::of(
            arg_ref(session, "session")?.session.group().as_bytes(),
        ))
    })
}

/// When the session lock expires unless renewed (ms since the Unix epoch), as of the accept or
/// the last `postbox_session_renew_lock` through this handle; 0 for NULL.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_locked_until_ms(session: *const postbox_session) -> u64 {
    guard(|| Ok(unix_ms(arg_ref(session, "session")?.session.locked_until())))
}

/// Locks the session's next message, waiting up to `timeout_ms` milliseconds (0: do not wait;
/// negative: without limit) for it to be receivable: the previous one settled, or a new one
/// sent. `message_out` receives a handle the caller settles as any received message
/// (`postbox_message_complete`, ...) and frees with `postbox_message_free`; freeing it unsettled
/// abandons it, and the same message comes next again.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TIMEOUT` (nothing receivable in time: a normal outcome);
/// `POSTBOX_LOCK_LOST` (the session lock expired or was released); `POSTBOX_INVALID_ARGUMENT`
/// (NULL); `POSTBOX_QUEUE_NOT_FOUND` (the queue was deleted); `POSTBOX_CLOSED`;
/// `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_receive(
    session: *const postbox_session,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let s = live(session)?;
        let out = Out::required(message_out, "message_out")?;
        let r = s.session.receive(timeout(timeout_ms))?.ok_or_else(|| {
            Failure::new(
                POSTBOX_TIMEOUT,
                format!(
                    "no message of session {:?} became receivable within {timeout_ms} ms",
                    s.session.group()
                ),
            )
        })?;
        out.write(postbox_message::new(HeldMessage::received(r), s.tag).into_raw());
        Ok(POSTBOX_OK)
    })
}

/// Locks message `id` of the session's group, waiting up to `timeout_ms` milliseconds (0: do not
/// wait; negative: without limit) for it to be receivable through the session: a deferred
/// message of the group (`postbox_message_defer`) at any time, also while another message of the
/// group is in hand (as a Service Bus session receiver takes its deferred messages by sequence
/// number); any other message only when it is the group's next, as `postbox_session_receive`
/// would lock it (one at a time, in send order). On a queue that requires sessions this is the
/// one way to a message by id: `postbox_receive_by_id` is refused there. `message_out` receives
/// a handle as from `postbox_session_receive`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_TIMEOUT` (not receivable through the session in time: a normal outcome,
/// also for a message of another group or queue, or one already completed);
/// `POSTBOX_LOCK_LOST` (the session lock expired or was released); `POSTBOX_INVALID_ARGUMENT`
/// (NULL); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_receive_by_id(
    session: *const postbox_session,
    id: u64,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let s = live(session)?;
        let out = Out::required(message_out, "message_out")?;
        let r = s
            .session
            .receive_by_id(postbox::MessageId(id), timeout(timeout_ms))?
            .ok_or_else(|| {
                Failure::new(
                    POSTBOX_TIMEOUT,
                    format!(
                        "message {id} was not receivable through session {:?} within {timeout_ms} ms",
                        s.session.group()
                    ),
                )
            })?;
        out.write(postbox_message::new(HeldMessage::received(r), s.tag).into_raw());
        Ok(POSTBOX_OK)
    })
}

/// Locks the first message of the session's group, in send order, whose correlation id is
/// `correlation_id` (NUL-terminated UTF-8), among those receivable through the session (its
/// deferred messages and its next message, see `postbox_session_receive_by_id`), waiting up to
/// `timeout_ms` milliseconds for one. Unlike `postbox_receive_by_correlation_id` (refused on a
/// queue that requires sessions), deferred messages count: a session sets a message aside to
/// pick it up at a later step. `message_out` receives a handle as from `postbox_session_receive`.
///
/// # Returns
/// As `postbox_session_receive_by_id`; also `POSTBOX_INVALID_ARGUMENT` for a NULL or invalid
/// `correlation_id`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_receive_by_correlation_id(
    session: *const postbox_session,
    correlation_id: *const c_char,
    timeout_ms: i64,
    message_out: *mut *mut postbox_message,
) -> c_int {
    guard(|| {
        let s = live(session)?;
        let cid = arg_str(correlation_id, "correlation_id")?;
        let out = Out::required(message_out, "message_out")?;
        let r = s
            .session
            .receive_by_correlation_id(cid, timeout(timeout_ms))?
            .ok_or_else(|| {
                Failure::new(
                    POSTBOX_TIMEOUT,
                    format!(
                        "no message of session {:?} with correlation id {cid:?} became receivable within {timeout_ms} ms",
                        s.session.group()
                    ),
                )
            })?;
        out.write(postbox_message::new(HeldMessage::received(r), s.tag).into_raw());
        Ok(POSTBOX_OK)
    })
}

/// Extends the session lock by the queue's lock duration from now. `locked_until_ms_out` may be
/// NULL; on success it receives the new expiry (ms since the Unix epoch), which
/// `postbox_session_locked_until_ms` reports from then on. (Locks of the messages received
/// through the session are renewed separately, with `postbox_message_renew_lock`.)
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (already lost); `POSTBOX_INVALID_ARGUMENT` (NULL);
/// `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_renew_lock(
    session: *const postbox_session,
    locked_until_ms_out: *mut u64,
) -> c_int {
    guard(|| {
        let s = live(session)?;
        let out = Out::optional(locked_until_ms_out);
        out.write(unix_ms(s.session.renew_lock()?));
        Ok(POSTBOX_OK)
    })
}

/// Header of a buffer handed out by postbox: its length, just before the bytes, so that
/// `postbox_buffer_free` needs only the pointer.
const BUFFER_HEADER: usize = size_of::<usize>();

/// A copy of `bytes` on the heap for C, freed with `postbox_buffer_free`. Never NULL, also for
/// no bytes (a present but empty value).
pub(crate) fn buffer_of(bytes: &[u8]) -> *mut u8 {
    let mut v = Vec::with_capacity(BUFFER_HEADER + bytes.len());
    v.extend_from_slice(&bytes.len().to_ne_bytes());
    v.extend_from_slice(bytes);
    let whole = Box::into_raw(v.into_boxed_slice()).cast::<u8>();
    // SAFETY: the allocation holds BUFFER_HEADER + len bytes; the offset stays inside it.
    unsafe { whole.add(BUFFER_HEADER) }
}

/// Reads the session's state: `data_out` receives a copy the caller frees with
/// `postbox_buffer_free` (not `free()`), `len_out` its length. With no state (never set, or
/// cleared) `*data_out` is NULL and `*len_out` 0; an empty state has a non-NULL `*data_out`.
/// `has_state_out` may be NULL; on success it receives whether there is a state. The state can
/// be read whether or not the session lock is still held.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL `session`, `data_out` or `len_out`);
/// `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`; storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_state(
    session: *const postbox_session,
    data_out: *mut *mut u8,
    len_out: *mut usize,
    has_state_out: *mut bool,
) -> c_int {
    guard(|| {
        let s = live(session)?;
        let data = Out::required(data_out, "data_out")?;
        let len = Out::required(len_out, "len_out")?;
        let has = Out::optional(has_state_out);
        let state = s.session.state()?;
        len.write(state.as_ref().map_or(0, Vec::len));
        has.write(state.is_some());
        data.write(state.map_or(std::ptr::null_mut(), |b| buffer_of(&b)));
        Ok(POSTBOX_OK)
    })
}

/// Takes back a buffer made by `buffer_of`.
///
/// The header states that a buffer is freed once, with `postbox_buffer_free`; that is the
/// caller's half of the contract this relies on.
fn drop_buffer(data: *mut u8) {
    if data.is_null() {
        return;
    }
    // SAFETY: non-NULL and, per the header, made by `buffer_of` and not yet freed: the length
    // sits just before it, in the same allocation, a boxed slice of exactly BUFFER_HEADER + len
    // bytes.
    unsafe {
        let whole = data.sub(BUFFER_HEADER);
        let len = whole.cast::<usize>().read_unaligned();
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            whole,
            BUFFER_HEADER + len,
        )));
    }
}

/// Frees a buffer returned by postbox (`postbox_session_state`, `postbox_table_get`). NULL is a
/// no-op.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_buffer_free(data: *mut u8) {
    guard(|| {
        drop_buffer(data);
        Ok(())
    })
}

/// Sets the session's state now, in a commit of its own: `data[0..len]` (copied; NULL allowed
/// when `len` is 0, which sets an empty state), at most 64 KiB; with `clear` true the state is
/// removed (`len` must then be 0). To set it in the same commit as settles and sends, use
/// `postbox_tx_set_session_state`.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the session lock was lost: nothing changed);
/// `POSTBOX_INVALID_ARGUMENT` (NULL session, NULL `data` with a length, a state over 64 KiB,
/// `clear` with a length); `POSTBOX_QUEUE_NOT_FOUND`; `POSTBOX_CLOSED`; `POSTBOX_FORKED`;
/// storage errors.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_set_state(
    session: *const postbox_session,
    data: *const u8,
    len: usize,
    clear: bool,
) -> c_int {
    guard(|| {
        let s = live(session)?;
        let state = state_arg(data, len, clear)?;
        s.session.set_state(state)?;
        Ok(POSTBOX_OK)
    })
}

/// Sets the session's state when `tx` commits, atomically with the transaction's settles and
/// sends (an abort leaves the state as it was): `data[0..len]` as in
/// `postbox_session_set_state`, or removed with `clear`. A later call for the same session in
/// the same transaction replaces this one. The bytes are copied now.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_INVALID_ARGUMENT` (NULL, NULL `data` with a length, a state over
/// 64 KiB, `clear` with a length, a transaction of another store or already finished);
/// `POSTBOX_CLOSED`; `POSTBOX_FORKED`. A session lock lost by then fails the commit with
/// `POSTBOX_LOCK_LOST`.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_tx_set_session_state(
    tx: *mut postbox_tx,
    session: *const postbox_session,
    data: *const u8,
    len: usize,
    clear: bool,
) -> c_int {
    guard(|| {
        let s = live(session)?;
        let state = state_arg(data, len, clear)?;
        with_tx(tx, s.tag, |t| Ok(t.set_session_state(&s.session, state)?))?;
        Ok(POSTBOX_OK)
    })
}

/// Lets go of the session lock now (its state and messages stay); another receiver may accept
/// the session. Always frees `session`, whatever the outcome.
///
/// # Returns
/// `POSTBOX_OK`; `POSTBOX_LOCK_LOST` (the lock was already lost); `POSTBOX_INVALID_ARGUMENT`
/// (NULL); `POSTBOX_CLOSED`; `POSTBOX_FORKED` (the handle is freed; nothing is written, the
/// parent keeps its lock); storage errors (the lock expires by itself).
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_release(session: *mut postbox_session) -> c_int {
    guard(|| {
        let process = arg_ref(session.cast_const(), "session")?.live().map(|_| ());
        if let Some(s) = take_box(session) {
            // In a forked child the drop writes nothing (the engine refuses it).
            process?;
            s.session.release()?;
        }
        Ok(POSTBOX_OK)
    })
}

/// Frees a session handle, releasing its lock if it still holds it (best effort: failures are
/// ignored, and the lock expires anyway). NULL is a no-op. In a forked child it only frees the
/// memory: the parent keeps the session.
#[unsafe(no_mangle)]
pub extern "C" fn postbox_session_free(session: *mut postbox_session) {
    guard(|| {
        drop(take_box(session));
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_round_trip_and_accept_null() {
        for bytes in [&b""[..], b"x", &[7u8; 1000][..]] {
            let p = buffer_of(bytes);
            assert!(!p.is_null());
            // SAFETY: `p` holds `bytes.len()` bytes.
            assert_eq!(unsafe { std::slice::from_raw_parts(p, bytes.len()) }, bytes);
            postbox_buffer_free(p);
        }
        postbox_buffer_free(std::ptr::null_mut());
    }

    #[test]
    fn clear_with_bytes_is_refused() {
        assert!(state_arg(b"x".as_ptr(), 1, true).is_err());
        assert_eq!(state_arg(std::ptr::null(), 0, true).unwrap(), None);
        assert_eq!(
            state_arg(std::ptr::null(), 0, false).unwrap(),
            Some(&b""[..])
        );
        assert!(state_arg(std::ptr::null(), 3, false).is_err());
    }
}
